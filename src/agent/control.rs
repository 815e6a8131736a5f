//! Live control of a run at step boundaries: pause, resume, stop and instructions.
//!
//! A run checks its control before every model call and before every tool call. While
//! paused it waits there, so nothing new reaches the model or the tools; a model
//! response that arrived as the pause did is held until resume. Instructions queue up
//! and are written into the session just before the next model call. The run's state
//! is a small explicit state machine, so an impossible request (resume a running run,
//! pause a finished one) is an error the caller sees, not a silent no-op.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use picogent_protocol::agent::RunState;

/// What can happen to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pause,
    Resume,
    /// The operator ends the run; it finishes with what it has.
    Stop,
    Finish,
    Fail,
    /// Only a paused run can be rolled back; the state does not change.
    Rollback,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action:?} a run that is {from:?}")]
pub struct InvalidTransition {
    from: RunState,
    action: Action,
}

/// The run's state machine over the protocol's states.
trait Machine: Sized + Copy {
    fn apply(self, action: Action) -> Result<Self, InvalidTransition>;
    fn is_over(&self) -> bool;
}

impl Machine for RunState {
    /// The state after `action`, or why it is not allowed.
    fn apply(self, action: Action) -> Result<RunState, InvalidTransition> {
        use Action::*;
        use RunState::*;
        match (self, action) {
            (Running, Pause) => Ok(Paused),
            (Paused, Resume) => Ok(Running),
            (Running | Paused, Stop | Finish) => Ok(Finished),
            (Running | Paused, Fail) => Ok(Failed),
            (Paused, Rollback) => Ok(Paused),
            (from, action) => Err(InvalidTransition { from, action }),
        }
    }

    fn is_over(&self) -> bool {
        matches!(self, RunState::Finished | RunState::Failed)
    }
}

pub use crate::message::Role;
use crate::session::Known;

#[derive(Debug)]
pub(crate) struct Instruction {
    pub(crate) text: String,
    pub(crate) role: Role,
    /// Told once the instruction is durably part of the session; dropped unsent when
    /// the run ends without reading it.
    pub(crate) receipt: Option<tokio::sync::oneshot::Sender<()>>,
}

struct Inner {
    state: watch::Sender<RunState>,
    instructions: Mutex<VecDeque<Instruction>>,
    /// A requested rollback to this checkpoint step (and the name of the branch it
    /// starts, if any), done by the paused run itself.
    rollback: Mutex<Option<(u64, Option<String>)>>,
    /// A person's labels and ratings sent while the run holds the session: the run
    /// writes them at its next boundary (even while paused) and tells each receipt.
    annotations: Mutex<VecDeque<(Known, tokio::sync::oneshot::Sender<()>)>>,
    /// Tool calls waiting for a person's approval.
    approvals: super::approval::Pending,
    stop: CancellationToken,
}

/// The handle a front door uses to steer a run. Cheap to clone.
#[derive(Clone)]
pub struct RunControl {
    inner: Arc<Inner>,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            inner: Arc::new(Inner {
                state: watch::channel(RunState::Running).0,
                instructions: Mutex::new(VecDeque::new()),
                rollback: Mutex::new(None),
                annotations: Mutex::new(VecDeque::new()),
                approvals: Default::default(),
                stop: CancellationToken::new(),
            }),
        }
    }
}

/// What a run does at a boundary.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    Continue,
    Stop,
    /// Roll back to this checkpoint step (starting the named branch), then wait again
    /// (the run stays paused).
    Rollback(u64, Option<String>),
    /// Write the queued annotations, then wait again.
    Annotate,
}

impl RunControl {
    /// A person's answer to tool call `id`, which waits for approval.
    pub fn approve(
        &self,
        id: &str,
        answer: super::approval::ApprovalAnswer,
    ) -> Result<(), super::approval::NotWaiting> {
        self.inner.approvals.answer(id, answer)
    }

    /// The tool calls waiting for approval now.
    pub fn waiting_approvals(&self) -> Vec<String> {
        self.inner.approvals.waiting()
    }

    pub(crate) fn expect_approval(
        &self,
        id: &str,
    ) -> impl std::future::Future<Output = Option<super::approval::ApprovalAnswer>> {
        self.inner.approvals.expect(id)
    }

    pub(crate) fn forget_approval(&self, id: &str) {
        self.inner.approvals.forget(id)
    }

    pub(crate) fn state(&self) -> RunState {
        *self.inner.state.borrow()
    }

    fn transition(&self, action: Action) -> Result<RunState, InvalidTransition> {
        let mut result = Err(InvalidTransition {
            from: self.state(),
            action,
        });
        self.inner
            .state
            .send_if_modified(|s| match s.apply(action) {
                Ok(next) => {
                    *s = next;
                    result = Ok(next);
                    true
                }
                Err(e) => {
                    result = Err(e);
                    false
                }
            });
        result
    }

    pub fn pause(&self) -> Result<RunState, InvalidTransition> {
        self.transition(Action::Pause)
    }

    pub fn resume(&self) -> Result<RunState, InvalidTransition> {
        self.transition(Action::Resume)
    }

    /// Ends the run at its next boundary (a paused run ends at once).
    pub(crate) fn stop(&self) -> Result<RunState, InvalidTransition> {
        if self.state().is_over() {
            return Err(InvalidTransition {
                from: self.state(),
                action: Action::Stop,
            });
        }
        self.inner.stop.cancel();
        Ok(self.state())
    }

    /// Queues an instruction for the next model call.
    pub fn instruct(&self, text: impl Into<String>, role: Role) -> Result<(), InvalidTransition> {
        self.queue_instruction(text.into(), role, None)
    }

    /// Queues an instruction and returns a receipt: it resolves once the instruction
    /// is written (and synced) into the session, and fails when the run ends without
    /// having read it — the caller must then deliver it some other way.
    pub(crate) fn instruct_with_receipt(
        &self,
        text: impl Into<String>,
        role: Role,
    ) -> Result<tokio::sync::oneshot::Receiver<()>, InvalidTransition> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue_instruction(text.into(), role, Some(tx))?;
        Ok(rx)
    }

    fn queue_instruction(
        &self,
        text: String,
        role: Role,
        receipt: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> Result<(), InvalidTransition> {
        // Checked under the queue's lock: `end` changes the state first and then
        // drains the queue under it, so an instruction is either refused here or
        // drained (its receipt failing) there, never left behind unread.
        let Ok(mut q) = self.inner.instructions.lock() else {
            return Err(InvalidTransition {
                from: self.state(),
                action: Action::Resume,
            });
        };
        if self.state().is_over() {
            return Err(InvalidTransition {
                from: self.state(),
                action: Action::Resume,
            });
        }
        q.push_back(Instruction {
            text,
            role,
            receipt,
        });
        Ok(())
    }

    /// Asks the paused run to restore checkpoint `step` (files and conversation).
    pub fn rollback(&self, step: u64) -> Result<(), InvalidTransition> {
        self.request_rollback(step, None)
    }

    /// A branch: a rollback to `step` that keeps the old path, named, with an
    /// instruction for the new one.
    pub(crate) fn branch(
        &self,
        step: u64,
        name: Option<String>,
        instruction: String,
    ) -> Result<(), InvalidTransition> {
        self.request_rollback(step, name)?;
        self.instruct(instruction, Role::User)
    }

    fn request_rollback(&self, step: u64, name: Option<String>) -> Result<(), InvalidTransition> {
        if self.state() != RunState::Paused {
            return Err(InvalidTransition {
                from: self.state(),
                action: Action::Rollback,
            });
        }
        if let Ok(mut r) = self.inner.rollback.lock() {
            *r = Some((step, name));
        }
        // Wake the waiting boundary.
        self.inner.state.send_modify(|_| {});
        Ok(())
    }

    /// Queues a person's label or rating for the run to write into its session at
    /// its next boundary. The receipt resolves once it is written and synced, and fails
    /// when the run ends first (the caller then writes it itself).
    pub(crate) fn annotate(
        &self,
        entry: Known,
    ) -> Result<tokio::sync::oneshot::Receiver<()>, InvalidTransition> {
        let refused = InvalidTransition {
            from: self.state(),
            action: Action::Resume,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        // As for instructions: checked under the queue's lock, which `end` drains under.
        let Ok(mut q) = self.inner.annotations.lock() else {
            return Err(refused);
        };
        if self.state().is_over() {
            return Err(refused);
        }
        q.push_back((entry, tx));
        drop(q);
        // Wake a paused boundary.
        self.inner.state.send_modify(|_| {});
        Ok(rx)
    }

    pub(crate) fn take_annotations(&self) -> Vec<(Known, tokio::sync::oneshot::Sender<()>)> {
        match self.inner.annotations.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn has_annotations(&self) -> bool {
        self.inner.annotations.lock().is_ok_and(|q| !q.is_empty())
    }

    fn take_rollback(&self) -> Option<(u64, Option<String>)> {
        self.inner.rollback.lock().ok().and_then(|mut r| r.take())
    }

    pub(crate) fn take_instructions(&self) -> Vec<Instruction> {
        match self.inner.instructions.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Cancelled when a stop is asked (a call waiting for approval stops waiting).
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.inner.stop.clone()
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.inner.stop.is_cancelled()
    }

    /// Marks the run over (finished or failed); later requests are refused.
    pub(crate) fn end(&self, failed: bool) {
        let _ = self.transition(if failed { Action::Fail } else { Action::Finish });
        // Instructions and annotations the run never read: their receipts fail now,
        // not whenever the last handle is dropped.
        self.take_instructions();
        self.take_annotations();
    }

    /// Waits while paused. `Stop` when the operator stopped the run or `cancel` fired.
    pub(crate) async fn boundary(&self, cancel: &CancellationToken) -> Boundary {
        let mut rx = self.inner.state.subscribe();
        loop {
            if self.stop_requested() || cancel.is_cancelled() {
                return Boundary::Stop;
            }
            if let Some((step, name)) = self.take_rollback() {
                return Boundary::Rollback(step, name);
            }
            if self.has_annotations() {
                return Boundary::Annotate;
            }
            if *rx.borrow_and_update() != RunState::Paused {
                return Boundary::Continue;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return Boundary::Stop },
                _ = self.inner.stop.cancelled() => return Boundary::Stop,
                _ = cancel.cancelled() => return Boundary::Stop,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;
    use RunState::*;

    #[test]
    fn the_state_machine_allows_only_sensible_transitions() {
        let table = [
            (Running, Pause, Ok(Paused)),
            (Paused, Resume, Ok(Running)),
            (Running, Stop, Ok(Finished)),
            (Paused, Stop, Ok(Finished)),
            (Running, Finish, Ok(Finished)),
            (Paused, Fail, Ok(Failed)),
            (
                Running,
                Resume,
                Err(InvalidTransition {
                    from: Running,
                    action: Resume,
                }),
            ),
            (
                Paused,
                Pause,
                Err(InvalidTransition {
                    from: Paused,
                    action: Pause,
                }),
            ),
            (
                Finished,
                Pause,
                Err(InvalidTransition {
                    from: Finished,
                    action: Pause,
                }),
            ),
            (
                Failed,
                Resume,
                Err(InvalidTransition {
                    from: Failed,
                    action: Resume,
                }),
            ),
            (
                Finished,
                Stop,
                Err(InvalidTransition {
                    from: Finished,
                    action: Stop,
                }),
            ),
        ];
        for (from, action, want) in table {
            assert_eq!(from.apply(action), want, "{from:?} + {action:?}");
        }
    }

    #[tokio::test]
    async fn a_paused_boundary_waits_until_resume_or_stop() {
        let c = RunControl::default();
        let cancel = CancellationToken::new();
        assert_eq!(c.boundary(&cancel).await, Boundary::Continue);
        c.pause().unwrap();
        let waiting = {
            let c = c.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move { c.boundary(&cancel).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        c.resume().unwrap();
        assert_eq!(waiting.await.unwrap(), Boundary::Continue);
        c.pause().unwrap();
        c.stop().unwrap();
        assert_eq!(c.boundary(&cancel).await, Boundary::Stop);
        c.end(false);
        assert_eq!(c.state(), Finished);
        assert!(c.pause().is_err());
    }
}
