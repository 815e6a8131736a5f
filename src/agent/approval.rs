//! Approvals: a tool call whose kind the `approval` setting asks about waits for a
//! person's answer before it runs. The run says `AgentEvent::Approval`, the front door
//! asks (an editor's permission dialog, the chat's prompt on the step, the terminal)
//! and answers through `RunControl::approve`; a rejected call never runs and the model
//! is told why. "Always" answers hold for the rest of the session, across its runs.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::control::RunControl;
use super::event::{AgentEvent, Emitter};
use crate::config::approval::Approval;
use crate::util::lock;
pub use picogent_protocol::agent::{ApprovalAnswer, ToolKind};

/// Sessions whose "always" answers are kept, at most (the oldest go first).
const SESSIONS_KEPT: usize = 4096;
/// Tools with an "always" answer per session, at most.
const TOOLS_KEPT: usize = 1024;

/// What a tool does: the built-ins by name, anything else an MCP server's.
pub(crate) fn kind_of(name: &str) -> ToolKind {
    match name {
        "read" | "ls" => ToolKind::Read,
        "grep" | "find" => ToolKind::Search,
        "write" | "edit" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        _ => ToolKind::Mcp,
    }
}

/// One session's "always" answers (tool name → allowed), and when it last got one.
type Answers = (u64, HashMap<String, bool>);

/// The "always" answers of each session, and a clock that orders them.
#[derive(Default)]
pub(crate) struct Remembered {
    sessions: Mutex<(u64, HashMap<String, Answers>)>,
}

impl Remembered {
    fn get(&self, session: &str, tool: &str) -> Option<bool> {
        let g = lock(&self.sessions);
        g.1.get(session).and_then(|(_, t)| t.get(tool).copied())
    }

    fn keep(&self, session: &str, tool: &str, allowed: bool) {
        let mut g = lock(&self.sessions);
        g.0 += 1;
        let now = g.0;
        if g.1.len() >= SESSIONS_KEPT && !g.1.contains_key(session) {
            let oldest =
                g.1.iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                g.1.remove(&k);
            }
        }
        let entry = g.1.entry(session.to_string()).or_default();
        entry.0 = now;
        if entry.1.len() < TOOLS_KEPT || entry.1.contains_key(tool) {
            entry.1.insert(tool.to_string(), allowed);
        }
    }
}

/// What one call needs to be asked about.
pub(super) struct Ask<'a> {
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) summary: String,
    /// The call's arguments whole: what a person approves (the summary is cut).
    pub(super) args: &'a serde_json::Value,
}

/// Where a run asks: its policy, the session's memory, its control and events.
pub(super) struct Gate<'a> {
    pub(super) policy: &'a Approval,
    pub(super) remembered: &'a Remembered,
    pub(super) session: &'a str,
    pub(super) control: &'a RunControl,
    pub(super) out: &'a Emitter,
}

impl Gate<'_> {
    /// `None` when the call may run; else why not, for the model.
    pub(super) async fn check(&self, call: Ask<'_>, cancel: &CancellationToken) -> Option<String> {
        let kind = kind_of(call.name);
        if !self.policy.asks(kind) {
            return None;
        }
        let name = call.name;
        let answer = match self.remembered.get(self.session, name) {
            Some(true) => return None,
            Some(false) => ApprovalAnswer::RejectAlways,
            None => {
                let waiting = self.control.expect_approval(call.id);
                self.out.emit(AgentEvent::Approval {
                    id: call.id.to_string(),
                    name: name.to_string(),
                    kind,
                    summary: call.summary,
                    arguments: call.args.clone(),
                });
                let stop = self.control.stop_token();
                let answer = tokio::select! {
                    a = waiting => a,
                    _ = cancel.cancelled() => None,
                    _ = stop.cancelled() => None,
                };
                self.control.forget_approval(call.id);
                let Some(answer) = answer else {
                    // The question is withdrawn: front doors still showing it take it away.
                    self.out.emit(AgentEvent::Approved {
                        id: call.id.to_string(),
                        answer: ApprovalAnswer::RejectOnce,
                    });
                    return Some(
                        "not run: the run was stopped while the call waited for approval".into(),
                    );
                };
                if answer.always() {
                    self.remembered.keep(self.session, name, answer.allows());
                }
                self.out.emit(AgentEvent::Approved {
                    id: call.id.to_string(),
                    answer,
                });
                answer
            }
        };
        match answer {
            ApprovalAnswer::AllowOnce | ApprovalAnswer::AllowAlways => None,
            ApprovalAnswer::RejectOnce => Some(format!(
                "not run: the person watching rejected this {name} call. Ask them, or do it another way."
            )),
            ApprovalAnswer::RejectAlways => Some(format!(
                "not run: the person watching rejects every {name} call in this session. Do not call {name} again; do it another way, or say what you would run."
            )),
        }
    }
}

/// The approvals a run waits for, by call id (in its control).
#[derive(Default)]
pub(crate) struct Pending(Mutex<HashMap<String, tokio::sync::oneshot::Sender<ApprovalAnswer>>>);

/// An answer to a call that is not waiting for one.
#[derive(Debug, thiserror::Error)]
#[error("no tool call {0:?} waits for approval")]
pub struct NotWaiting(pub String);

impl Pending {
    pub(crate) fn expect(
        &self,
        id: &str,
    ) -> impl std::future::Future<Output = Option<ApprovalAnswer>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        lock(&self.0).insert(id.to_string(), tx);
        async move { rx.await.ok() }
    }

    pub(crate) fn forget(&self, id: &str) {
        lock(&self.0).remove(id);
    }

    pub(crate) fn answer(&self, id: &str, answer: ApprovalAnswer) -> Result<(), NotWaiting> {
        let tx = lock(&self.0)
            .remove(id)
            .ok_or_else(|| NotWaiting(id.into()))?;
        tx.send(answer).map_err(|_| NotWaiting(id.into()))
    }

    /// The calls waiting now (a front door that attaches late asks them again).
    pub(crate) fn waiting(&self) -> Vec<String> {
        lock(&self.0).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_answers_are_kept_per_session_and_bounded() {
        let r = Remembered::default();
        r.keep("s1", "bash", true);
        r.keep("s1", "write", false);
        assert_eq!(r.get("s1", "bash"), Some(true));
        assert_eq!(r.get("s1", "write"), Some(false));
        assert_eq!(r.get("s2", "bash"), None);
        for i in 0..SESSIONS_KEPT + 10 {
            r.keep(&format!("x{i}"), "bash", true);
        }
        assert!(lock(&r.sessions).1.len() <= SESSIONS_KEPT);
        assert_eq!(r.get("s1", "bash"), None, "the oldest went first");
    }

    #[test]
    fn an_answer_reaches_only_a_waiting_call() {
        let p = Pending::default();
        assert!(p.answer("c1", ApprovalAnswer::AllowOnce).is_err());
        let _w = p.expect("c1");
        assert!(p.answer("c1", ApprovalAnswer::AllowOnce).is_ok());
        assert!(p.answer("c1", ApprovalAnswer::AllowOnce).is_err());
    }
}
