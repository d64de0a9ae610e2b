//! What a user typed, made safe to show (pure): every character a terminal
//! would act on or hide shown as its escape instead. The bottom floor: the
//! workload model's messages, the gateway's answers and audit lines, and
//! the views' tables all escape through here; it names no other room.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_user_typed_is_shown_never_acted_on() {
        assert_eq!(safe("a\nb\u{1b}[2J"), "a\nb\\u{1b}[2J");
        assert_eq!(safe("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(escaped("a\nb", false), "a\\u{a}b");
        assert!(matches!(escaped("plain", false), std::borrow::Cow::Borrowed("plain")));
    }
}
