//! The loop's side of live control: waiting at step boundaries while paused, taking
//! checkpoints after changing tool calls, and carrying out rollbacks.

use tokio_util::sync::CancellationToken;

use super::checkpoint::Checkpoints;
use super::control::{Boundary, RunControl, RunState};
use super::event::{AgentEvent, Emitter, FailureKind, RunError};
use super::rewind::RewindError;
use crate::session::records::{self, Intervention};
use crate::session::{Record, Session};

/// The session's checkpoint repository and the next step number.
pub(super) struct Ckpt {
    pub(super) repo: Checkpoints,
    pub(super) next_step: u64,
}

impl Ckpt {
    /// Snapshots the folder and records the checkpoint in the session.
    pub(super) async fn take(
        &mut self,
        session: &mut Session,
        what: &str,
        out: &Emitter,
    ) -> Result<(), RunError> {
        let step = self.next_step;
        let message = format!("Step {step}: {what}");
        let repo = self.repo.clone();
        let m = message.clone();
        let commit = tokio::task::spawn_blocking(move || repo.snapshot(&m))
            .await
            .map_err(|e| {
                RunError::Stop(
                    FailureKind::Infrastructure,
                    format!("checkpoint failed: {e}"),
                )
            })?
            .map_err(|e| {
                RunError::Stop(
                    FailureKind::Infrastructure,
                    format!("checkpoint failed: {e}"),
                )
            })?;
        let entry_id = session.append_record(&Record::Checkpoint(records::Checkpoint {
            step,
            commit: commit.clone(),
            message: message.clone(),
            dir: Some(self.repo.work_tree().display().to_string()),
        }))?;
        self.next_step += 1;
        // In the file before anyone hears of it: a rollback, preview or compare asked
        // for the moment the event arrives reads the file.
        session.written().await?;
        out.emit(AgentEvent::Checkpoint {
            step,
            commit,
            entry_id,
            message,
        });
        Ok(())
    }

    /// Restores checkpoint `step`: the files exactly, and the conversation's leaf to the
    /// entry recorded for it (by id), persisted by a `rollback` entry as its child (and
    /// a `branch` entry naming the new path, for a branch).
    /// `Ok(false)` when there is no such checkpoint (nothing changed).
    async fn rollback(
        &self,
        session: &mut Session,
        step: u64,
        branch: Option<String>,
        out: &Emitter,
    ) -> Result<bool, RunError> {
        match super::rewind::restore(&self.repo, session, step, branch).await {
            Ok(Some(entry_id)) => {
                out.emit(AgentEvent::RolledBack { step, entry_id });
                Ok(true)
            }
            Ok(None) => {
                out.emit(AgentEvent::Notice {
                    message: format!("rollback refused: no checkpoint {step} in this session"),
                });
                Ok(false)
            }
            Err(RewindError::Session(e)) => Err(e.into()),
            Err(e) => Err(RunError::Stop(
                FailureKind::Infrastructure,
                format!("rollback failed: {e}"),
            )),
        }
    }
}

/// Writes the labels and ratings a person sent meanwhile, then tells their senders.
async fn write_annotations(control: &RunControl, session: &mut Session) -> Result<(), RunError> {
    let queued = control.take_annotations();
    for (entry, _) in &queued {
        session.append(entry.clone())?;
    }
    session.sync().await?;
    for (_, receipt) in queued {
        let _ = receipt.send(());
    }
    Ok(())
}

/// Waits at a step boundary while the run is paused, saying so, and carries out
/// rollbacks asked for meanwhile. `Ok(true)` when the conversation was rolled back (the
/// caller drops what it was about to do); `Err` when the run must end.
pub(super) async fn boundary(
    control: &RunControl,
    cancel: &CancellationToken,
    out: &Emitter,
    session: &mut Session,
    ckpt: Option<&Ckpt>,
) -> Result<bool, RunError> {
    let paused = control.state() == RunState::Paused;
    if paused {
        session.append_record(&Record::Intervention(Intervention::Pause {
            time: crate::util::now_iso(),
        }))?;
        out.emit(AgentEvent::State {
            state: RunState::Paused,
        });
    }
    let mut rolled_back = false;
    loop {
        match control.boundary(cancel).await {
            Boundary::Stop => return Err(RunError::Cancelled),
            Boundary::Continue => break,
            Boundary::Annotate => write_annotations(control, session).await?,
            Boundary::Rollback(step, branch) => match ckpt {
                Some(c) => {
                    // A refused rollback changes nothing: what the run was about to do
                    // (a held tool call) still happens.
                    if !c.rollback(session, step, branch, out).await? {
                        continue;
                    }
                    rolled_back = true;
                }
                None => out.emit(AgentEvent::Notice {
                    message: "rollback refused: checkpoints are off for this run".into(),
                }),
            },
        }
    }
    if paused {
        session.append_record(&Record::Intervention(Intervention::Resume {
            time: crate::util::now_iso(),
        }))?;
        out.emit(AgentEvent::State {
            state: RunState::Running,
        });
    }
    Ok(rolled_back)
}
