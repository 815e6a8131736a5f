//! Small helpers shared across modules: time stamps, ids, UTF-8-safe truncation,
//! removing folder trees.

pub(crate) mod fault;
pub use picogent_sandbox::tree::{remove_tree, RemoveTreeError};

/// The log target of warnings that are also reported as events of a run (a retry, a
/// failed run): a front door that shows the events itself can mute it.
pub const REPORTED: &str = "picogent::reported";

/// Locks a mutex whose holder may have panicked: the data is still there, and a
/// panic elsewhere must not take every later user down with it.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) use picogent_protocol::text::now_millis;

/// RFC 3339 UTC with milliseconds, as pi writes its session time stamps.
pub fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Whether an error's words say a disk had no room for a write (`ENOSPC`, or a quota
/// reached: `EDQUOT`), as the system words it (picogent's own errors) or git does
/// (it runs with `LC_ALL=C`).
pub(crate) fn says_no_room(message: &str) -> bool {
    message.contains("No space left on device") || message.contains("Disk quota exceeded")
}

/// Whether a write failed for lack of room on its disk.
pub(crate) fn no_room(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) || says_no_room(&e.to_string())
}

/// Whether any process this one can see has `path` open (a scan of `/proc`): a git
/// lock nobody has open was left by a git that was killed. Files are compared by
/// device and inode, so a path spelled another way (a symlink, `//`) still matches.
pub(crate) fn open_by_anyone(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = std::fs::metadata(path).map(|m| (m.dev(), m.ino())) else {
        return false;
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs
        .flatten()
        .filter(|p| {
            p.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|p| std::fs::read_dir(p.path().join("fd")).ok())
        .flat_map(|fds| fds.flatten())
        .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == want))
}

/// A file's identity (device, inode, change time): the same lock seen twice is one
/// nobody replaced meanwhile.
pub(crate) fn file_id(path: &std::path::Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// `n` random lowercase hex characters.
pub fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect()
}

/// A new session id: sortable by creation time, unique enough for one machine.
pub fn new_session_id() -> String {
    format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        random_hex(8)
    )
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub(crate) fn truncate_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest suffix of `s` of at most `max` bytes that starts on a char boundary.
pub(crate) fn tail_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// One line, at most `max` characters, for logs and summaries.
pub use picogent_protocol::text::one_line;

pub(crate) use picogent_protocol::text::lenient;

/// Appends `value` as one JSON line.
pub(crate) fn push_json_line<T: serde::Serialize>(
    buf: &mut Vec<u8>,
    value: &T,
) -> std::io::Result<()> {
    serde_json::to_writer(&mut *buf, value).map_err(std::io::Error::other)?;
    buf.push(b'\n');
    Ok(())
}

/// Replaces a log's content atomically and durably: a synced temporary file renamed
/// over it, then the folder synced, so a crash leaves the old or the new file whole.
/// Returns the new file's append handle, the log from the moment of the rename: no
/// reopen by path that could fail after it and leave the writer on the old, unlinked
/// file. On an error before the rename the old file is untouched (and no temporary
/// file is left to hold the disk's last free blocks). The new file is its owner's
/// alone (0600), as the logs are made.
pub(crate) fn rewrite_log(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()?;
            Ok(f)
        })
        .and_then(|f| std::fs::rename(&tmp, path).map(|()| f));
    let file = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    if let Some(dir) = path.parent() {
        // The rename is done: a failed folder sync only means it may not survive a
        // power loss, and the new file is the log either way.
        if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
            tracing::warn!("cannot sync {}: {e}", dir.display());
        }
    }
    Ok(file)
}

/// Appends to a log file opened for appending. A write that fails part-way is cut off
/// again, so the next record does not start in the middle of a torn line (which a
/// reader would skip together with it).
pub(crate) fn append_whole(file: &std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let before = file.metadata()?.len();
    let mut f = file;
    f.write_all(bytes).inspect_err(|_| {
        let _ = file.set_len(before);
    })
}

/// Removes a tree on a blocking thread, off the async runtime's workers (a large
/// tree takes long), and logs what could not be removed: `what` says whose tree.
pub(crate) async fn remove_tree_blocking(path: std::path::PathBuf, what: &'static str) {
    let removed = tokio::task::spawn_blocking(move || remove_tree(&path)).await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("{what}: {e}"),
        Err(e) => tracing::warn!("{what}: the removal did not finish: {e}"),
    }
}

/// The bytes the files under `path` take (symbolic links are not followed); what
/// cannot be read counts nothing.
pub(crate) fn tree_size(path: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

/// Compares secrets in time that depends only on their length.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer <token>` header value.
pub(crate) fn bearer(value: Option<&str>) -> Option<&str> {
    let v = value?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "aé€b";
        assert_eq!(truncate_bytes(s, 2), "a");
        assert_eq!(truncate_bytes(s, 3), "aé");
        assert_eq!(tail_bytes(s, 2), "b");
        assert_eq!(tail_bytes(s, 4), "€b");
    }

    #[test]
    fn bearer_tokens_compare_exactly() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
