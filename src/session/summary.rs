//! What a sessions list shows of a session file, read without loading the session:
//! its first prompt (the title) and its newest name. Lines that cannot hold either are
//! passed over before they are parsed, and a file that grew is read from where the
//! last read stopped (session files are only appended to).

use std::io::{BufRead, Read, Seek};
use std::path::Path;

use super::{Body, Known};
use crate::message::{blocks_text, Message};

/// A session's first prompt and newest name, and how far the file was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// The first user message's text, as typed (at most [`MAX_PROMPT`] bytes).
    pub prompt: Option<String>,
    /// The newest `session_info` name (pi's `/name`, or a rename).
    pub name: Option<String>,
    /// Bytes read: the end of the last whole line.
    pub read_to: u64,
}

/// How much of a first prompt is kept for the list and its search.
pub const MAX_PROMPT: usize = 1024;
/// A line longer than this is passed over (a prompt that long is titled by the id).
const MAX_LINE: u64 = 4 << 20;

/// `path`'s summary, going on from `from` (a summary of the file's first bytes, or the
/// default to read it all). Only a regular file is read: not a pipe, not a device,
/// not through a symlink.
pub fn summary(path: &Path, from: Summary) -> std::io::Result<Summary> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = from;
    file.seek(std::io::SeekFrom::Start(out.read_to))?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            if n as u64 == MAX_LINE {
                // Too long to be looked at: passed over to its end.
                let skipped = skip_line(&mut reader)?;
                out.read_to += n as u64 + skipped;
                continue;
            }
            // The end, or a line still being written: read again next time.
            return Ok(out);
        }
        out.read_to += n as u64;
        note(&mut out, &String::from_utf8_lossy(&line));
    }
}

/// Reads past the rest of a line; how many bytes.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut n = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(n);
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(n + i as u64 + 1);
            }
            None => {
                let len = buf.len();
                reader.consume(len);
                n += len as u64;
            }
        }
    }
}

/// What one line says: the first prompt, or a name.
fn note(out: &mut Summary, line: &str) {
    let may_be_prompt = out.prompt.is_none() && line.contains("\"user\"");
    if !may_be_prompt && !line.contains("session_info") {
        return;
    }
    let Some(entry) = super::file::parse_entry(line.trim_end()) else {
        return;
    };
    match entry.body {
        Body::Known(Known::Message {
            message: Message::User(u),
        }) if out.prompt.is_none() => {
            out.prompt =
                Some(crate::util::truncate_bytes(&blocks_text(&u.content), MAX_PROMPT).to_string());
        }
        Body::Known(Known::SessionInfo { name }) => out.name = name,
        _ => {}
    }
}
