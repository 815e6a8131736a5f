//! Frames addressed to a request: a prompt starts one, `subscribe` replays and follows
//! one, and the live controls (`cancel`, `pause`, `resume`, `stop`, `instruct`,
//! `rollback`, `branch`) steer a running one. Requests belong to their connection
//! (keyed `c<conn>/<id>`); a `keepAlive` run can also be reached by its `runId`.

use std::path::PathBuf;
use std::sync::Arc;

use super::protocol::{Action, Control, Outgoing, Prompt, ServerFrame, Subscribe, Target};
use super::runs::{attach, forget_later, forward, Outbound, RunLog};
use super::{ChatState, Conn};
use crate::agent::control::Role;
use crate::agent::RunRequest;
use tokio_util::sync::CancellationToken;

/// The key of a request in `runs`: its client's id, scoped to its connection.
fn own_key(conn: &Conn, id: &str) -> String {
    format!("c{}/{id}", conn.id)
}

/// The running (or recently finished) request a frame addresses: any connection's
/// `keepAlive` run by its server-issued `runId`, else this connection's request `id`.
fn find_run(st: &ChatState, conn: &Conn, to: &Target) -> Option<Arc<RunLog>> {
    let runs = st.runs.lock().ok()?;
    if let Some(run) = &to.run_id {
        return runs
            .get(run)
            .filter(|l| l.run_id.as_ref() == Some(run))
            .cloned();
    }
    to.id
        .as_ref()
        .and_then(|i| runs.get(&own_key(conn, i)).cloned())
}

/// Starts a prompt's run and streams its frames to this connection.
pub(super) async fn start(st: &ChatState, conn: &Conn, p: Prompt, tx: &Outbound) {
    let Prompt {
        id,
        content,
        session_id,
        work_dir,
        system_prompt,
        keep_alive,
    } = p;
    let session = session_id.unwrap_or_else(crate::util::new_session_id);
    if st.stopping.is_cancelled() {
        let message = "the server is shutting down: send it again once it is back";
        return refuse(tx, id, session, message.into());
    }
    let work_dir = match work_dir.map(|dir| check_work_dir(st, &dir)).transpose() {
        Ok(w) => w,
        Err(e) => return refuse(tx, id, session, e.to_string()),
    };
    // A run normally ends with its connection; `keepAlive` runs go on, and any client
    // can re-attach with `subscribe`.
    let token = if keep_alive {
        st.stop.child_token()
    } else {
        conn.token.child_token()
    };
    // The id the run gives its prompt's entry: history shows the session file up to
    // that entry and this request's log from there on.
    let prompt_entry = crate::util::random_hex(16);
    // A keepAlive run outlives its connection, so it also gets an id any client can
    // address it by (`runId` in its frames); other runs stay the connection's.
    let run_id = keep_alive.then(|| format!("run-{}", crate::util::random_hex(16)));
    // Noted on disk before the run starts and before the shared map is locked (a
    // small write by the log's job, not synced).
    let running = st
        .inflight
        .begin(&session, run_id.as_deref(), &content, st.stop.clone())
        .await;
    // The drain may have begun while the line was written.
    if st.stopping.is_cancelled() {
        running.end(false).await;
        let message = "the server is shutting down: send it again once it is back";
        return refuse(tx, id, session, message.into());
    }
    // Checked and started under the shared map's lock, which no await may hold.
    let request = RunRequest {
        prompt: content.clone(),
        session_id: session.clone(),
        work_dir,
        system_prompt,
        worktree: None,
        prompt_entry: Some(prompt_entry.clone()),
    };
    let started = launch(
        st,
        conn,
        tx,
        (id, request),
        (token, run_id, prompt_entry, content),
    );
    let (handle, log, keys) = match started {
        Ok(started) => started,
        Err(duplicate) => {
            running.end(false).await;
            if let Some(id) = duplicate {
                let message = format!("a request with id {id:?} is already running");
                tx.send(&Outgoing::error(Some(id), None, message));
            }
            return;
        }
    };
    forward_in_the_background(st, handle, &log, running, keys);
    let following = follow(conn, &log);
    attach(&st.tasks, log, 0, tx.clone(), following);
}

/// A prompt's run started and its log in the shared map, under the map's lock: the
/// run, its log and the log's keys; or the request's id when one with that id runs
/// (`None`: the map is unusable).
fn launch(
    st: &ChatState,
    conn: &Conn,
    tx: &Outbound,
    (id, request): (String, RunRequest),
    (token, run_id, prompt_entry, content): (CancellationToken, Option<String>, String, String),
) -> Result<(crate::agent::RunHandle, Arc<RunLog>, Vec<String>), Option<String>> {
    let key = own_key(conn, &id);
    let Ok(mut runs) = st.runs.lock() else {
        return Err(None);
    };
    if runs.get(&key).is_some_and(|l| !l.is_done()) {
        return Err(Some(id));
    }
    let session = request.session_id.clone();
    let handle = st.agent.start_with_cancel(request, token.clone());
    let log = RunLog::new(
        id,
        session,
        run_id.clone(),
        token,
        handle.control.clone(),
        prompt_entry,
        content,
    );
    announce(st, conn, &log, tx);
    let keys: Vec<String> = std::iter::once(key).chain(run_id).collect();
    for k in &keys {
        runs.insert(k.clone(), log.clone());
    }
    Ok((handle, log, keys))
}

/// This connection now shows the request's session; a keepAlive request is announced
/// to the other connections that show it.
fn announce(st: &ChatState, conn: &Conn, log: &RunLog, tx: &Outbound) {
    st.watchers.watch(conn.id, &log.session, tx);
    if let Some(run) = &log.run_id {
        let request = super::protocol::RunningRequest {
            id: log.id().to_string(),
            run_id: run.clone(),
            prompt: log.prompt.clone(),
            seq: 0,
        };
        st.watchers.started(conn.id, &log.session, request);
    }
}

/// Answers a prompt that is not run: the reason, then its `done`.
fn refuse(tx: &Outbound, id: String, session: String, message: String) {
    let (id, session) = (Some(id), Some(session));
    tx.send(&Outgoing::error(id.clone(), session.clone(), message));
    tx.send(&Outgoing::new(id, session, ServerFrame::done()));
}

/// Turns the run's events into its log's frames in a task of the server's, notes the
/// run's end for a restart, and lets the log go a while later (or at the server's end).
fn forward_in_the_background(
    st: &ChatState,
    handle: crate::agent::RunHandle,
    log: &Arc<RunLog>,
    running: super::inflight::Running,
    keys: Vec<String>,
) {
    let forwarding = forward(handle, log.clone());
    let (kept, runs, stop) = (log.clone(), st.runs.clone(), st.stop.clone());
    st.tasks.spawn(async move {
        let cancelled = forwarding.await;
        running.end(cancelled).await;
        // Kept a while for pages that reload, but never past the server's end.
        tokio::select! {
            _ = forget_later(kept, runs, keys) => {}
            _ = stop.cancelled() => {}
        }
    });
}

/// The token of this connection's one follower of `log`: a follower it had before is
/// stopped (a page that asks again, after a history, starts over from its `after`).
fn follow(conn: &Conn, log: &Arc<RunLog>) -> tokio_util::sync::CancellationToken {
    let token = conn.token.child_token();
    if let Ok(mut f) = conn.follows.lock() {
        // Finished logs' followers are gone: forget them as new ones come.
        f.retain(|_, t| !t.is_cancelled());
        if let Some(old) = f.insert(Arc::as_ptr(log) as usize, token.clone()) {
            old.cancel();
        }
    }
    token
}

/// Why a frame addressed to a request is refused; its text is the error frame's.
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// A prompt's `workDir` is not a folder inside the allowed paths.
    #[error("workDir refused: {0}")]
    WorkDir(crate::sandbox::SandboxError),
    /// No running request has that id (or `runId`).
    #[error("no request with id {0:?} is running on this connection (a keepAlive run started elsewhere is addressed by its runId)")]
    NoRun(String),
    /// The run's engine has no live control.
    #[error("{kind} is not available: this run's engine ({engine}) runs its own loop and cannot pause, resume, stop at a step, take instructions or roll back; send cancel to end it")]
    Unavailable {
        kind: &'static str,
        engine: &'static str,
    },
    /// The run's state does not allow it (resume a running run, …).
    #[error(transparent)]
    Transition(#[from] crate::agent::control::InvalidTransition),
    /// A rollback or branch to a step the session has no checkpoint of.
    #[error("no checkpoint {step} in session {session}; nothing was rolled back")]
    NoCheckpoint { step: u64, session: String },
    /// An answer to a call that waits for none (answered already, or never asked).
    #[error(transparent)]
    NotWaiting(#[from] crate::agent::approval::NotWaiting),
}

/// A prompt's `workDir`: it must exist inside the allowed paths.
fn check_work_dir(st: &ChatState, dir: &str) -> Result<PathBuf, Refused> {
    let agent = &st.agent;
    let path = crate::config::absolute(&agent.config().work_dir, &PathBuf::from(dir));
    agent
        .sandbox()
        .check_work_dir(&path)
        .map_err(Refused::WorkDir)
}

/// `subscribe`: the request's frames after `after`, then its live stream.
pub(super) fn subscribe(st: &ChatState, conn: &Conn, s: Subscribe, tx: &Outbound) {
    match find_run(st, conn, &s.to) {
        Some(log) => {
            let following = follow(conn, &log);
            attach(&st.tasks, log, s.after, tx.clone(), following);
        }
        None => {
            let name = s.to.reply_id().to_string();
            let lost =
                s.to.run_id
                    .as_deref()
                    .and_then(|r| st.inflight.interrupted(r));
            let Some(session) = lost else {
                let message = format!("no request with id {name:?} to subscribe to");
                tx.send(&Outgoing::error(Some(name), None, message));
                return;
            };
            let message = "interrupted: the server stopped while this run was going; its session keeps what it did, and it can be continued".to_string();
            tx.send(&Outgoing::error(
                Some(name.clone()),
                Some(session.clone()),
                message,
            ));
            tx.send(&Outgoing::new(
                Some(name),
                Some(session),
                ServerFrame::done(),
            ));
        }
    }
}

/// A live-control frame, addressed to a running request.
pub(super) async fn control(st: &ChatState, conn: &Conn, c: Control, tx: &Outbound) {
    let Control { to, action } = c;
    let name = to.reply_id().to_string();
    let kind = action.kind();
    let result = match find_run(st, conn, &to).filter(|l| !l.is_done()) {
        None => Err(Refused::NoRun(name.clone())),
        Some(_) if !st.agent.can(&action) => Err(Refused::Unavailable {
            kind,
            engine: st.agent.config().llm.engine.as_str(),
        }),
        Some(log) => apply(st, &log, action).await,
    };
    if let Err(refused) = result {
        tx.send(&Outgoing::error(Some(name), None, refused.to_string()));
    }
}

async fn apply(st: &ChatState, log: &RunLog, action: Action) -> Result<(), Refused> {
    let c = &log.control;
    let result = match action {
        Action::Cancel => {
            log.token.cancel();
            Ok(())
        }
        Action::Pause => c.pause().map(drop),
        Action::Resume => c.resume().map(drop),
        Action::Stop => c.stop().map(drop),
        Action::Instruct(i) => c.instruct(i.content, i.role.unwrap_or(Role::User)),
        Action::Approve(a) => return Ok(c.approve(&a.call_id, a.answer)?),
        Action::Rollback(r) => {
            has_checkpoint(st, log, r.step).await?;
            c.rollback(r.step)
        }
        Action::Branch(b) => {
            has_checkpoint(st, log, b.step).await?;
            c.branch(b.step, b.name, b.content)
        }
    };
    Ok(result?)
}

/// A rollback or branch goes to a checkpoint the request's session has.
async fn has_checkpoint(st: &ChatState, log: &RunLog, step: u64) -> Result<(), Refused> {
    let known = st
        .agent
        .sessions()
        .snapshot_off_runtime(&log.session)
        .await
        .is_ok_and(|s| s.checkpoint(step).is_some());
    if known {
        Ok(())
    } else {
        Err(Refused::NoCheckpoint {
            step,
            session: log.session.clone(),
        })
    }
}

impl crate::agent::Agent {
    /// Whether this agent's engine can carry out a control frame.
    fn can(&self, action: &Action) -> bool {
        let caps = self.capabilities();
        match action {
            Action::Cancel | Action::Approve(_) => true,
            Action::Rollback(_) | Action::Branch(_) => caps.rollback,
            _ => caps.live_control,
        }
    }
}
