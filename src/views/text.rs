//! Tables for the terminal (pure): columns as wide as their widest cell,
//! the last column unpadded, no trailing spaces.

use std::fmt::Write as _;

// What users typed, escaped: from the bottom floor, where the workload
// model and the gateway escape too.
pub use crate::escape::{escaped, hidden, safe};

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
