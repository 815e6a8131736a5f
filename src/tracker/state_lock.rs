//! One daemon per agent directory: an exclusive lock on `state/daemon.lock`, held for
//! the daemon's life (the kernel drops it when the process dies, kill -9 included).
//! Two daemons on one state would both register, both accept every event and both
//! report it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub(crate) struct StateLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another picogent (pid {pid}) is already running on this agent directory ({path}); stop it first, or give this one an agent directory of its own")]
    Held { pid: String, path: String },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// How long a lock held by someone else is waited for before it counts as held.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the lock, waiting up to `LOCK_WAIT` for it: a child forked by the process
/// that held it (a daemon just stopped, or another run in the same process) holds a
/// copy of the descriptor until its `exec` closes it, and with it the lock. A second
/// daemon holds it for good, and is still refused.
fn lock_soon(file: &File) -> Result<(), std::fs::TryLockError> {
    let until = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                // Blocking by design: the lock is taken off the runtime (`Core::open`).
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

impl StateLock {
    /// Takes the lock on `state_dir`, or says which process holds it.
    pub(crate) fn take(state_dir: &Path) -> Result<StateLock, LockError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = state_dir.join("daemon.lock");
        let io = |source| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io)?;
        if let Err(err) = lock_soon(&file) {
            if let std::fs::TryLockError::Error(err) = err {
                return Err(io(err));
            }
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(LockError::Held {
                pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                path: state_dir.display().to_string(),
            });
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(StateLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::take(dir.path()).unwrap();
        let second = StateLock::take(dir.path()).unwrap_err().to_string();
        assert!(
            second.contains(&format!("pid {}", std::process::id())),
            "{second}"
        );
        drop(first);
        assert!(StateLock::take(dir.path()).is_ok());
    }
}
