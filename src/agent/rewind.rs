//! Going back to a checkpoint: the restore both live rollback (a paused run, `live`)
//! and rollback between runs share, and the latter itself (`Agent::rewind`), with its
//! preview (`Agent::rollback_preview`: which files a rollback would put back).
//!
//! Between runs the session lock decides: a rewind takes it without waiting, so a
//! session with an active run is refused (that run takes rollbacks itself, paused).
//! The folder restored is the one the checkpoint snapshotted, whatever the agent's
//! working folder is now.

use std::path::{Path, PathBuf};

use super::checkpoint::{CheckpointError, Checkpoints, Preview};
use super::Agent;
use crate::session::records::{self, Record};
use crate::session::{Session, SessionError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum RewindError {
    #[error("this agent's engine ({0}) runs its own loop and keeps no checkpoints, so nothing can be rolled back")]
    Unsupported(&'static str),
    #[error("a run is active in session {0}: pause it and send the rollback or branch to that run, or wait for it to end")]
    Busy(String),
    #[error("no checkpoint {step} in session {session}; nothing was rolled back")]
    NoCheckpoint { session: String, step: u64 },
    #[error("the checkpoint's folder {0} is refused: {1}")]
    Folder(String, String),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the rollback's worker failed: {0}")]
    Worker(String),
}

/// Runs blocking work (git, reading a session file) off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RewindError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RewindError::Worker(e.to_string()))
}

/// Restores checkpoint `step` with `repo`: the files (what the session's steps changed
/// since), then the conversation's leaf to the checkpoint's entry, persisted by a
/// `rollback` entry as its child, and, for a branch, the `branch` entry that names the
/// new path. `None` (nothing changed) when the session has no such checkpoint;
/// otherwise the checkpoint's entry id.
pub(super) async fn restore(
    repo: &Checkpoints,
    session: &mut Session,
    step: u64,
    branch: Option<String>,
) -> Result<Option<String>, RewindError> {
    let Some((entry_id, data)) = session.checkpoint(step) else {
        return Ok(None);
    };
    let (entry_id, commit) = (entry_id.to_string(), data.commit);
    let (repo, c) = (repo.clone(), commit.clone());
    blocking(move || repo.restore(&c)).await??;
    let from = session.leaf().map(str::to_string);
    session.branch_from(Some(&entry_id))?;
    session.append_record(&Record::Rollback(records::Rollback { step, commit, from }))?;
    if let Some(name) = branch {
        session.append_record(&Record::Branch(records::BranchStart {
            name,
            step,
            time: crate::util::now_iso(),
        }))?;
    }
    Ok(Some(entry_id))
}

/// A session moved back to a checkpoint between runs.
#[derive(Debug)]
pub(crate) struct Rewound {
    /// The folder restored: a branch's new run works there.
    pub(crate) work_dir: PathBuf,
}

/// The working folder in a session file's header.
fn header_cwd(path: &Path) -> Option<PathBuf> {
    crate::session::find::header(path)?["cwd"]
        .as_str()
        .map(PathBuf::from)
}

impl Agent {
    fn can_rewind(&self) -> Result<(), RewindError> {
        if self.capabilities().rollback {
            Ok(())
        } else {
            Err(RewindError::Unsupported(self.config().llm.engine.as_str()))
        }
    }

    /// The checkpoint `step` of a session and the repository (on the folder it
    /// snapshotted) to restore it with.
    fn checkpoint_repo(
        &self,
        s: &Session,
        step: u64,
    ) -> Result<(records::Checkpoint, Checkpoints), RewindError> {
        let (_, c) = s
            .checkpoint(step)
            .ok_or_else(|| RewindError::NoCheckpoint {
                session: s.id().to_string(),
                step,
            })?;
        // Sessions from before the record named its folder: the session's own.
        let dir = c
            .dir
            .as_deref()
            .map(PathBuf::from)
            .or_else(|| header_cwd(&self.sessions().path(s.id()).ok()?))
            .unwrap_or_else(|| self.config().work_dir.clone());
        let dir = self
            .sandbox()
            .check_work_dir(&dir)
            .map_err(|e| RewindError::Folder(dir.display().to_string(), e.to_string()))?;
        let cfg = self.config();
        let repo = Checkpoints::open(&cfg.state_dir(), s.id(), &dir, self.sandbox())?;
        Ok((c, repo))
    }

    /// Rolls a session whose run has ended back to checkpoint `step`: its files
    /// (only what the session changed; the abandoned tip is kept) and its leaf, so the
    /// next prompt continues from there. With `branch`, the new path is named. Refused
    /// while a run holds the session.
    pub(crate) async fn rewind(
        &self,
        session_id: &str,
        step: u64,
        branch: Option<String>,
    ) -> Result<Rewound, RewindError> {
        self.can_rewind()?;
        let Some(lock) = self.sessions().try_lock(session_id)? else {
            return Err(RewindError::Busy(session_id.to_string()));
        };
        let store = self.sessions().clone();
        let session = blocking(move || store.open_existing(lock)).await??;
        let agent = self.clone();
        let (session, repo) = blocking(move || {
            let repo = agent.checkpoint_repo(&session, step).map(|(_, r)| r);
            (session, repo)
        })
        .await?;
        let (mut session, repo) = (session, repo?);
        if restore(&repo, &mut session, step, branch).await?.is_none() {
            return Err(RewindError::NoCheckpoint {
                session: session_id.to_string(),
                step,
            });
        }
        session.sync().await?;
        session.close().await?;
        Ok(Rewound {
            work_dir: repo.work_tree().to_path_buf(),
        })
    }

    /// Which files a rollback of the session to checkpoint `step` would put back.
    pub(crate) async fn rollback_preview(
        &self,
        session_id: &str,
        step: u64,
    ) -> Result<Preview, RewindError> {
        self.can_rewind()?;
        let (agent, id) = (self.clone(), session_id.to_string());
        blocking(move || {
            let s = agent.sessions().snapshot(&id)?;
            let (c, repo) = agent.checkpoint_repo(&s, step)?;
            Ok(repo.preview(&c.commit)?)
        })
        .await?
    }
}
