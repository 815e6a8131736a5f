//! What a sessions list shows of a session file, read without loading the session:
//! its first prompt (the title) and its newest name. Lines that cannot hold either are
//! skipped before they are parsed, so a long session costs one read of its bytes.

use std::io::BufRead;
use std::path::Path;

use super::{Body, Known};
use crate::message::{blocks_text, Message};

/// A session's first prompt and newest name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// The first user message's text, as typed (at most [`MAX_PROMPT`] bytes).
    pub prompt: Option<String>,
    /// The newest `session_info` name (pi's `/name`, or a rename).
    pub name: Option<String>,
}

/// How much of a first prompt is kept for the list and its search.
pub const MAX_PROMPT: usize = 1024;

/// Reads `path`'s summary; a line that is no entry is passed over.
pub fn summary(path: &Path) -> std::io::Result<Summary> {
    let file = std::fs::File::open(path)?;
    let mut out = Summary::default();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let may_be_prompt = out.prompt.is_none() && line.contains("\"user\"");
        if !may_be_prompt && !line.contains("session_info") {
            continue;
        }
        let Some(entry) = super::file::parse_entry(&line) else {
            continue;
        };
        match entry.body {
            Body::Known(Known::Message {
                message: Message::User(u),
            }) if out.prompt.is_none() => {
                out.prompt = Some(
                    crate::util::truncate_bytes(&blocks_text(&u.content), MAX_PROMPT).to_string(),
                );
            }
            Body::Known(Known::SessionInfo { name }) => out.name = name,
            _ => {}
        }
    }
    Ok(out)
}
