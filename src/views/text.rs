//! Tables for the terminal (pure): columns as wide as their widest cell,
//! the last column unpadded, no trailing spaces.

use std::fmt::Write as _;

pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
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
