//! Chat mode's checkpoints, settled at start: on when git is there and the folder is
//! writable. Asked for explicitly, missing git is an error instead; a git picogent
//! does not support is an error either way (checkpoints off by choice aside).

use crate::sandbox::git_program::{self, GitError};

/// Checkpoints were asked for (or git is too old) and git cannot serve them.
#[derive(Debug, thiserror::Error)]
#[error("checkpoints (rollback) need git: {0}")]
pub struct NeedsGit(#[from] GitError);

impl super::Config {
    /// Decides `checkpoints` for chat mode. Blocking (asks git its version): call off
    /// the runtime.
    pub fn settle_chat_checkpoints(&mut self) -> Result<(), NeedsGit> {
        if self.checkpoints == Some(false) {
            return Ok(());
        }
        git_program::announce();
        let allowed = self.policy.real_allowed_paths();
        match git_program::usable(&allowed) {
            Ok(_) => {
                let writable =
                    std::fs::metadata(&self.work_dir).is_ok_and(|m| !m.permissions().readonly());
                self.checkpoints.get_or_insert(writable);
            }
            Err(GitError::Missing(_)) if self.checkpoints.is_none() => {
                tracing::warn!("git not found: checkpoints and rollback are off");
                self.checkpoints = Some(false);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}
