//! The helper program (`picogent sandbox-exec`) every confined command starts through.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The picogent binary that serves as the helper, held open from the moment the
/// sandbox is built: every command starts it through this descriptor, never by a
/// path, so a binary lying inside an allowed folder (a checkout built in place) that
/// a command replaces is never what confines the next command.
#[derive(Debug, Clone)]
pub struct Helper {
    fd: Arc<OwnedFd>,
    /// Where it was opened, for messages.
    shown: PathBuf,
}

impl Helper {
    /// Opens `path` (`/proc/self/exe` for picogent itself). The running binary's file
    /// cannot be rewritten in place while it runs, and a file put at its path later is
    /// another file: the descriptor keeps the one opened here.
    pub fn open(path: &Path) -> std::io::Result<Helper> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.mode() & 0o111 == 0 {
            return Err(std::io::Error::other(format!(
                "{} is not an executable file",
                path.display()
            )));
        }
        let shown = std::fs::read_link(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Helper {
            fd: Arc::new(OwnedFd::from(file)),
            shown,
        })
    }

    /// What to execute: the descriptor through `/proc`, resolved by the kernel to the
    /// file opened at start (in the forked child, which inherits it until `exec`).
    pub fn program(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    pub fn shown(&self) -> &Path {
        &self.shown
    }
}
