//! `rollback` and `branch` addressed by `sessionId`: a session whose run has ended goes
//! back to a checkpoint (files and conversation), answered with a `rollback` frame;
//! a branch with `content` then starts a request there under the frame's `id`. A
//! session with a running request is refused: that request takes them live.

use std::sync::Arc;

use super::protocol::{NewBranch, Outgoing, Prompt, Rewind, RewindAction, ServerFrame, SessionRef};
use super::runs::Outbound;
use super::{history, requests, ChatState, Conn};

/// Carries out a rewind off the connection's loop, answering on `tx`.
pub(super) fn handle(st: &Arc<ChatState>, conn: &Conn, r: Rewind, tx: &Outbound) {
    let (me, conn, tx) = (st.clone(), conn.clone(), tx.clone());
    st.tasks.spawn(async move {
        let st = me;
        let Rewind {
            about: SessionRef { id, session_id },
            action,
        } = r;
        let kind = action.kind();
        let (step, name, then) = match action {
            RewindAction::Rollback(r) => (r.step, None, None),
            RewindAction::Branch(NewBranch {
                step,
                name,
                content,
                keep_alive,
            }) => (step, name, content.map(|c| (c, keep_alive))),
        };
        let reply = |frame| Outgoing::new(id.clone(), Some(session_id.clone()), frame);
        // A refused branch with `content` is a request that ends here: `done` follows.
        let refuse = |message: String| {
            tx.send(&reply(ServerFrame::error(format!("{kind}: {message}"))));
            if then.is_some() {
                tx.send(&reply(ServerFrame::done()));
            }
        };
        if let Some(busy) = busy(&st, &session_id) {
            return refuse(busy);
        }
        let rewound = match st.agent.rewind(&session_id, step, name).await {
            Ok(r) => r,
            Err(e) => return refuse(e.to_string()),
        };
        tx.send(&reply(ServerFrame::Rollback {
            content: format!("rolled back to step {step}"),
            step,
        }));
        if let (Some((content, keep_alive)), Some(id)) = (then, id.clone()) {
            let prompt = Prompt {
                id,
                content,
                session_id: Some(session_id.clone()),
                work_dir: Some(rewound.work_dir.display().to_string()),
                system_prompt: None,
                keep_alive,
            };
            requests::start(&st, &conn, prompt, &tx).await;
        }
    });
}

/// Why the session cannot be rewound now: a request of this server runs in it.
fn busy(st: &ChatState, session: &str) -> Option<String> {
    let running = history::running(&st.runs, session);
    let first = running.first()?;
    let name = first.run_id.as_deref().map_or_else(
        || format!("id {:?}", first.id()),
        |r| format!("runId {r:?}"),
    );
    Some(format!(
        "a request is running in session {session}: pause it and send this to it by its {name}, or wait for it to end"
    ))
}
