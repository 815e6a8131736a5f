//! Output bounds: what the model receives is at most `MAX_LINES` lines and `MAX_BYTES`
//! bytes, cut on UTF-8 boundaries, keeping the head (file reads) or the tail (command
//! output, where errors usually are).

use super::{MAX_BYTES, MAX_LINES, MAX_LINE_CHARS};

/// Cuts one line to `MAX_LINE_CHARS` characters, saying how much was dropped.
pub(crate) fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => line.to_string(),
        Some((idx, _)) => format!(
            "{} [… {} more characters]",
            &line[..idx],
            line[idx..].chars().count()
        ),
    }
}

/// The last lines of `text` within the caps. Returns the kept text and how many lines
/// it has, and the total line count.
pub(crate) fn tail(text: &str) -> (String, usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let mut kept: Vec<String> = Vec::new();
    let mut bytes = 0usize;
    for line in lines.iter().rev() {
        if kept.len() >= MAX_LINES {
            break;
        }
        let line = cut_line(line);
        if bytes + line.len() + 1 > MAX_BYTES {
            if kept.is_empty() {
                kept.push(crate::util::tail_bytes(&line, MAX_BYTES).to_string());
            }
            break;
        }
        bytes += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    let n = kept.len();
    (kept.join("\n"), n, total)
}

/// Bounds text of unknown shape (grep, find, ls outputs are already line-capped by
/// their `limit`; this is the byte cap behind it).
pub(crate) fn head_bytes(text: String) -> (String, bool) {
    if text.len() <= MAX_BYTES {
        return (text, false);
    }
    let cut = crate::util::truncate_bytes(&text, MAX_BYTES);
    let cut = match cut.rfind('\n') {
        Some(i) => &cut[..i],
        None => cut,
    };
    (cut.to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_with_a_note() {
        let line = "x".repeat(MAX_LINE_CHARS + 7);
        assert_eq!(
            cut_line(&line),
            format!("{} [… 7 more characters]", "x".repeat(MAX_LINE_CHARS))
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let text: String = (1..=MAX_LINES + 10).map(|i| format!("{i}\n")).collect();
        let (kept, n, total) = tail(&text);
        assert_eq!(total, MAX_LINES + 10);
        assert_eq!(n, MAX_LINES);
        assert!(kept.starts_with("11\n"));
        assert!(kept.ends_with(&format!("{}", MAX_LINES + 10)));
    }
}
