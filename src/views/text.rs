//! Tables for the terminal (pure): columns as wide as their widest cell,
//! the last column unpadded, no trailing spaces.

use std::fmt::Write as _;

/// Characters a terminal would act on or hide rather than show: C0 and C1
/// controls (ESC starts OSC 52 clipboard writes and title changes), DEL,
/// bidirectional overrides and isolates (which reorder what follows), and
/// zero-width characters (which make two different ids look alike), and
/// the line and paragraph separators (U+2028, U+2029: a line break to
/// JavaScript and to Python's `splitlines`).
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{061C}'
                | '\u{FEFF}'
        )
}

/// `s` with every [`hidden`] character shown as its escape (`\u{1b}`),
/// keeping newlines when `keep_newlines` (a whole output, not a cell).
pub fn escaped(s: &str, keep_newlines: bool) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| hidden(c) && !(keep_newlines && c == '\n')) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) && !(keep_newlines && c == '\n') {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What users typed, safe to print: see [`escaped`].
pub fn safe(s: &str) -> String {
    escaped(s, true).into_owned()
}

pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    // Every cell may hold what a user typed: shown, never acted on.
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| escaped(c, false).into_owned()).collect()).collect();
    let rows = &rows[..];
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                let pad = w[i].saturating_sub(c.chars().count());
                let _ = write!(out, "{c}{}  ", " ".repeat(pad));
            }
        }
        let trimmed = out.trim_end_matches(' ').len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(head);
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&cells);
    }
    out
}

/// A unified diff, coloured for a terminal: additions green, removals red,
/// hunk headers cyan.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_user_typed_is_shown_never_acted_on() {
        let id = "job\u{1b}]52;c;ZXZpbA==\u{7}\u{202e}gnp.exe\u{200b}";
        let t = table(&["ID", "TEAM"], &[vec![id.to_string(), "red".into()]]);
        assert!(!t.chars().any(|c| hidden(c) && c != '\n'), "{t:?}");
        assert_eq!(t.lines().nth(1).unwrap(), "job\\u{1b}]52;c;ZXZpbA==\\u{7}\\u{202e}gnp.exe\\u{200b}  red");
        assert_eq!(safe("a\nb\u{1b}[2J"), "a\nb\\u{1b}[2J");
        assert_eq!(safe("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
    }
}

pub fn colored_diff(unified: &str) -> String {
    use owo_colors::OwoColorize as _;
    let mut out = String::new();
    for line in unified.lines() {
        let line = match line.chars().next() {
            Some('+') if !line.starts_with("+++") => line.green().to_string(),
            Some('-') if !line.starts_with("---") => line.red().to_string(),
            Some('@') => line.cyan().to_string(),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
