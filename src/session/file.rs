//! A session file made whole (its header written before its name appears) and read
//! back: opened (to append, for a writer), migrated to version 3, its torn last line
//! repaired, and its lines parsed into entries, pi's own entry kinds included (a
//! `bashExecution` or `custom_message` becomes the user text the model saw).

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{migrate, Body, Entry, Header, Known, SessionError};

/// The file opened (to append, for a writer) and its bytes: migrated to version 3
/// (rewritten, for a writer), and without a torn last line. A last line without its
/// newline was being written when the process died (or, for a reader, is being
/// written right now): a writer completes it when it parses, else cuts it off; a
/// reader leaves it out. Also the file's length once repaired.
pub(super) fn read_repaired(
    path: &Path,
    writer: bool,
) -> Result<(File, Vec<u8>, u64), SessionError> {
    let io = |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    let bytes = match bytes.get(..whole).and_then(migrate::migrate) {
        Some(migrated) => {
            if writer {
                rewrite(path, &migrated).map_err(io)?;
            }
            migrated
        }
        None => bytes,
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
    if !writer {
        let file = File::open(path).map_err(io)?;
        let bytes = bytes
            .get(..complete)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let size = bytes.len() as u64;
        return Ok((file, bytes, size));
    }
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    let mut size = bytes.len() as u64;
    let torn = bytes.get(complete..).unwrap_or_default();
    if !torn.is_empty() {
        if serde_json::from_slice::<Value>(torn).is_ok() {
            file.write_all(b"\n").map_err(io)?;
            size += 1;
        } else {
            tracing::warn!(
                "session file {}: dropping a torn last line ({} bytes)",
                path.display(),
                torn.len()
            );
            file.set_len(complete as u64).map_err(io)?;
            size = complete as u64;
        }
    }
    Ok((file, bytes, size))
}

/// Makes the file at `path` holding `header`, synced, or nothing at all: the header is
/// written to a temporary file beside it that is then linked to its name, so a disk
/// without room (or a crash) never leaves an empty session that cannot be loaded.
/// The file opened to read and append; `None` when `path` exists already.
pub(super) fn create_whole(path: &Path, header: &[u8]) -> std::io::Result<Option<File>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // Not a `.jsonl` name: never listed as a session.
    let tmp = dir.join(format!(".{name}.{}.new", crate::util::random_hex(8)));
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(header)?;
        f.sync_data()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        // A file system without links: made in place, and removed again when the
        // header does not fit.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
            return create_in_place(path, header).map(Some)
        }
        Err(e) => return Err(e),
    }
    // Readable too: evicted entries are read back from it.
    OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map(Some)
}

fn create_in_place(path: &Path, header: &[u8]) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .read(true)
        .append(true)
        .open(path)?;
    if let Err(e) = file.write_all(header) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(file)
}

/// Whether a session file holds not even its header (its making was cut short), so
/// no entries either.
pub(super) fn blank(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => true,
        Ok(m) if m.is_file() && m.len() < 64 * 1024 => std::fs::read(path)
            .is_ok_and(|b| !b.contains(&b'\n') && serde_json::from_slice::<Header>(&b).is_err()),
        _ => false,
    }
}

/// Where a line is in the file: its offset and length.
pub(super) type Span = (u64, usize);

/// The entries of a session file's lines, and where each line is; the first line must
/// be the header, lines that are no entry are skipped (and logged).
pub(super) fn parse_lines(
    path: &Path,
    bytes: &[u8],
) -> Result<(Vec<Entry>, Vec<Span>), SessionError> {
    let mut lines = lines_with_offsets(bytes).enumerate();
    match lines.next() {
        Some((_, (_, first)))
            if serde_json::from_str::<Header>(&first).is_ok_and(|h| h.kind == "session") => {}
        _ => {
            return Err(SessionError::Corrupt {
                path: path.to_path_buf(),
                message: "line 1 is not a session header".into(),
            })
        }
    }
    let mut entries = Vec::new();
    let mut spans = Vec::new();
    for (n, (span, line)) in lines {
        if line.trim().is_empty() {
            continue;
        }
        match parse_entry(&line) {
            Some(e) => {
                entries.push(e);
                spans.push(span);
            }
            None => tracing::warn!(
                "session file {}: line {} is not an entry, skipped",
                path.display(),
                n + 1
            ),
        }
    }
    Ok((entries, spans))
}

pub(super) fn parse_entry(line: &str) -> Option<Entry> {
    let v: Value = serde_json::from_str(line).ok()?;
    let id = v.get("id")?.as_str()?.to_string();
    let parent_id = v
        .get("parentId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let timestamp = v
        .get("timestamp")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = v.get("type")?.as_str()?.to_string();
    let body = match pi_user_text(&kind, &v) {
        Some(text) => Body::UserText(kind, text),
        None => match serde_json::from_value::<Known>(v) {
            Ok(k) => Body::Known(k),
            Err(_) => {
                tracing::debug!(entry = %id, kind, "session entry kept but not sent to the model");
                Body::Other(kind)
            }
        },
    };
    Some(Entry {
        id,
        parent_id,
        timestamp,
        body,
    })
}

/// What pi sends the model for its own entries that are not plain messages: the output
/// of a `!command` (`bashExecution`), an extension's `custom` message or
/// `custom_message` entry. `None` for anything else.
fn pi_user_text(kind: &str, v: &Value) -> Option<String> {
    let content_text = |c: &Value| match c {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    };
    match kind {
        "custom_message" => content_text(v.get("content")?),
        "message" => {
            let m = v.get("message")?;
            match m.get("role")?.as_str()? {
                "custom" => content_text(m.get("content")?),
                "bashExecution" if m.get("excludeFromContext") != Some(&Value::Bool(true)) => {
                    Some(bash_execution_text(m))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// pi's rendering of a `!command` and its output for the model.
fn bash_execution_text(m: &Value) -> String {
    let command = m.get("command").and_then(Value::as_str).unwrap_or_default();
    let mut text = format!("Ran `{command}`\n");
    match m.get("output").and_then(Value::as_str) {
        Some(out) if !out.is_empty() => text.push_str(&format!("```\n{out}\n```")),
        _ => text.push_str("(no output)"),
    }
    if m.get("cancelled") == Some(&Value::Bool(true)) {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m
        .get("exitCode")
        .and_then(Value::as_i64)
        .filter(|c| *c != 0)
    {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if m.get("truncated") == Some(&Value::Bool(true)) {
        if let Some(p) = m.get("fullOutputPath").and_then(Value::as_str) {
            text.push_str(&format!("\n\n[Output truncated. Full output: {p}]"));
        }
    }
    text
}

/// Replaces a file's content at once (a migrated session, as pi rewrites it).
/// The new content goes to a fresh name made here (never through a link someone put
/// where a fixed name would be: a session file may sit in a folder the agent writes).
fn rewrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".migrating-{}", crate::util::random_hex(8)));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
}

/// The file's non-empty lines (without `\n` / `\r\n`), each with where it is in
/// the file: byte offset and length.
fn lines_with_offsets(bytes: &[u8]) -> impl Iterator<Item = ((u64, usize), Cow<'_, str>)> {
    let mut offset = 0u64;
    bytes
        .split(|b| *b == b'\n')
        .map(move |l| {
            let at = offset;
            offset += l.len() as u64 + 1;
            let text = l.strip_suffix(b"\r").unwrap_or(l);
            ((at, l.len()), String::from_utf8_lossy(text))
        })
        .filter(|(_, l)| !l.is_empty())
}
