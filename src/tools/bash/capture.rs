//! A command's output as it arrives: a bounded tail in memory, and once the output is
//! too long to return, the full output saved to a file — within limits.
//!
//! The saved file lives in picogent's state, beside the session journals and the
//! tracker outbox. A command printing without end would otherwise fill that disk, and a
//! full disk loses journal lines and reports. So a file stops growing at
//! `max_saved_output_mb`, and saving stops (or never starts) when the disk's free space
//! would fall under [`reserve`], kept for the journal and the outbox. The command keeps
//! running either way; the result says where and why the saved output was cut.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;

use super::super::{MAX_BYTES, MAX_LINES};

/// Free space is checked again after this much was saved since the last check.
const CHECK_EVERY: u64 = 1 << 20;

/// The least space kept free on the state disk, whatever its size.
const RESERVE_MIN: u64 = 64 << 20;

/// The most kept free: journal lines and reports are small, and 5% of a large disk
/// (12 GiB of 250) would stop saving outputs, and warn, on a disk with room to spare.
const RESERVE_MAX: u64 = 1 << 30;

/// The space kept free on a state disk of `total` bytes for the session journal and the
/// tracker outbox: 5% of the disk, at least 64 MiB and at most 1 GiB. A saved output
/// never takes it.
pub(crate) fn reserve(total: u64) -> u64 {
    (total / 20).clamp(RESERVE_MIN, RESERVE_MAX)
}

/// Whether a disk with `free` of `total` bytes is too full to save more output on: the
/// next check may be [`CHECK_EVERY`] away, so that much must fit above the reserve. The
/// health check warns by the same rule.
pub(crate) fn too_full_to_save(free: u64, total: u64) -> bool {
    free < reserve(total) + CHECK_EVERY
}

/// Why a saved output is shorter than the output.
#[derive(Debug, Clone, PartialEq)]
enum Cut {
    /// `max_saved_output_mb` reached (the limit, in bytes).
    Limit(u64),
    /// The state disk's free space reached the reserve.
    Disk {
        reserve: u64,
    },
    /// `max_saved_output_mb` is 0.
    Disabled,
    Failed(String),
}

enum Saved {
    /// The output is still short enough to return whole.
    NotYet,
    Saving {
        path: PathBuf,
        file: tokio::fs::File,
        written: u64,
        /// Free space is checked again once `written` reaches this.
        next_check: u64,
    },
    Stopped {
        path: Option<PathBuf>,
        written: u64,
        why: Cut,
    },
}

/// Collects output: a bounded tail in memory, and a saved copy once it is large.
pub(super) struct Capture {
    pub(super) tail: Vec<u8>,
    pub(super) total_bytes: usize,
    newlines: usize,
    last_byte: Option<u8>,
    saved: Saved,
    dir: PathBuf,
    /// The most a saved output may hold, in bytes.
    limit: u64,
}

impl Capture {
    pub(super) fn new(dir: PathBuf, limit: u64) -> Capture {
        Capture {
            tail: Vec::new(),
            total_bytes: 0,
            newlines: 0,
            last_byte: None,
            saved: Saved::NotYet,
            dir,
            limit,
        }
    }

    pub(super) async fn push(&mut self, chunk: &[u8]) {
        self.total_bytes += chunk.len();
        self.newlines += chunk.iter().filter(|b| **b == b'\n').count();
        self.last_byte = chunk.last().copied().or(self.last_byte);
        self.tail.extend_from_slice(chunk);
        match self.saved {
            Saved::Saving { .. } => self.save(chunk).await,
            Saved::NotYet if self.total_bytes > MAX_BYTES || self.newlines > MAX_LINES => {
                self.start().await;
                // Nothing was dropped from the tail yet, so it still holds everything.
                let all = std::mem::take(&mut self.tail);
                self.save(&all).await;
                self.tail = all;
            }
            _ => {}
        }
        if self.tail.len() > 4 * MAX_BYTES {
            let cut = self.tail.len() - 2 * MAX_BYTES;
            self.tail.drain(..cut);
        }
    }

    /// Opens the file to save into, unless saving is off or the disk is short of room.
    async fn start(&mut self) {
        if self.limit == 0 {
            return self.stop(Cut::Disabled);
        }
        let dir = self.dir.clone();
        let space = tokio::task::spawn_blocking(move || {
            super::private_dir(&dir)?;
            disk_space(&dir)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match space {
            Ok((free, total)) if too_full_to_save(free, total) => {
                return self.stop(Cut::Disk {
                    reserve: reserve(total),
                })
            }
            Ok(_) => {}
            Err(e) => return self.stop(Cut::Failed(format!("{}: {e}", self.dir.display()))),
        }
        match open_file(&self.dir).await {
            Ok((path, file)) => {
                self.saved = Saved::Saving {
                    path,
                    file,
                    written: 0,
                    // Just checked, with room for this much.
                    next_check: CHECK_EVERY,
                }
            }
            Err(e) => self.stop(Cut::Failed(e)),
        }
    }

    /// Appends to the saved file, up to the limit and while the disk has room.
    async fn save(&mut self, bytes: &[u8]) {
        let limit = self.limit;
        let Saved::Saving {
            file,
            written,
            next_check,
            ..
        } = &mut self.saved
        else {
            return;
        };
        let room = limit.saturating_sub(*written);
        let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if *written + take as u64 >= *next_check {
            *next_check = *written + CHECK_EVERY;
            match fd_space(file) {
                Ok((free, total)) if too_full_to_save(free, total) => {
                    return self.stop(Cut::Disk {
                        reserve: reserve(total),
                    })
                }
                Ok(_) => {}
                Err(e) => return self.stop(Cut::Failed(e.to_string())),
            }
        }
        if let Err(e) = file.write_all(&bytes[..take]).await {
            return self.stop(Cut::Failed(e.to_string()));
        }
        *written += take as u64;
        if take < bytes.len() {
            self.stop(Cut::Limit(limit));
        }
    }

    fn stop(&mut self, why: Cut) {
        let (path, written) = match std::mem::replace(&mut self.saved, Saved::NotYet) {
            Saved::Saving { path, written, .. } => (Some(path), written),
            Saved::Stopped { path, written, .. } => (path, written),
            Saved::NotYet => (None, 0),
        };
        self.saved = Saved::Stopped { path, written, why };
    }

    /// Flushes the saved file; returns its path and, if it is not the whole output,
    /// the sentence that says so.
    pub(super) async fn finish(&mut self) -> (Option<PathBuf>, Option<String>) {
        match &mut self.saved {
            Saved::NotYet => (None, None),
            Saved::Saving { path, file, .. } => {
                let _ = file.flush().await;
                (Some(path.clone()), None)
            }
            Saved::Stopped { path, written, why } => (path.clone(), Some(explain(why, *written))),
        }
    }

    pub(super) fn total_lines(&self) -> usize {
        self.newlines + usize::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }
}

/// What the result says about a saved output that is not the whole output.
fn explain(why: &Cut, written: u64) -> String {
    match why {
        Cut::Limit(limit) => format!(
            "The saved output was cut at {} (max_saved_output_mb); the lines shown above \
             are the output's end.",
            mib(*limit)
        ),
        Cut::Disk { reserve } if written == 0 => format!(
            "The full output was not saved: picogent's state disk is down to the {} kept \
             free for session journals and tracker reports.",
            mib(*reserve)
        ),
        Cut::Disk { reserve } => format!(
            "The saved output was cut at {}: picogent's state disk is down to the {} \
             kept free for session journals and tracker reports.",
            mib(written),
            mib(*reserve)
        ),
        Cut::Disabled => "The full output was not saved (max_saved_output_mb is 0).".into(),
        Cut::Failed(e) if written == 0 => format!("The full output could not be saved: {e}."),
        Cut::Failed(e) => format!("The saved output was cut at {}: {e}.", mib(written)),
    }
}

/// A size for people: whole MiB when it is one, else MiB with one decimal.
fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MB", bytes >> 20)
    } else {
        format!("{:.1} MB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// A new file only picogent's user can read, never through a link.
async fn open_file(dir: &Path) -> Result<(PathBuf, tokio::fs::File), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(format!(
        "bash-{}-{}.log",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        crate::util::random_hex(6)
    ));
    let p = path.clone();
    let f = tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, tokio::fs::File::from_std(f)))
}

/// Free bytes (for an unprivileged user) and total bytes of the disk holding `dir`.
pub(crate) fn disk_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    crate::sandbox::sys::disk_space(dir)
}

/// As [`disk_space`], for the disk an open file is on.
fn fd_space(file: &tokio::fs::File) -> std::io::Result<(u64, u64)> {
    crate::sandbox::sys::file_disk_space(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_five_percent_at_least_64_mib_and_at_most_1_gib() {
        assert_eq!(reserve(64 << 20), 64 << 20);
        assert_eq!(reserve(10 << 30), 512 << 20);
        assert_eq!(reserve(252 << 30), 1 << 30);
    }

    #[test]
    fn notes_name_the_size_and_the_reason() {
        assert_eq!(
            explain(&Cut::Limit(1 << 20), 1 << 20),
            "The saved output was cut at 1 MB (max_saved_output_mb); the lines shown above \
             are the output's end."
        );
        assert!(explain(&Cut::Disk { reserve: 64 << 20 }, 0).contains("not saved"));
        assert!(explain(&Cut::Disk { reserve: 64 << 20 }, 3 << 19).contains("cut at 1.5 MB"));
    }
}
