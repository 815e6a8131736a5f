//! `picogent acp`: the Agent Client Protocol (version 1) over standard input and
//! output, for editors (Zed, JetBrains IDEs, Neovim and Emacs plugins). The protocol's
//! own SDK (`agent-client-protocol`) reads and writes the JSON-RPC lines; this module
//! answers `initialize`, `session/new`, `session/load`, `session/prompt` (streaming
//! `session/update`s, asking `session/request_permission` where `approval` says so)
//! and `session/cancel`. Standard output is the protocol's alone: fd 1 is pointed at
//! standard error before anything runs, and the protocol writes to a private copy.

mod session;
mod updates;

use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, McpCapabilities, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, SessionNotification,
    SessionUpdate, StopReason, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{
    on_receive_notification, on_receive_request, Agent as AcpAgent, ByteStreams, Client, Error,
};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::agent::approval::ApprovalAnswer;
use crate::agent::{Agent, AgentEvent, FailureKind, Outcome, RunRequest};
use crate::config::Config;
use crate::util::lock;
use session::{AcpSession, Running};

/// Sessions an editor may hold open at once; the oldest idle one goes past this.
const MAX_SESSIONS: usize = 64;

/// The server: the configuration every session starts from, and the sessions.
struct Server {
    base: Config,
    sessions: Mutex<Vec<Arc<AcpSession>>>,
    /// Told whenever a session's prompt ends.
    ended: tokio::sync::Notify,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(-32602, message.into())
}

fn internal(message: impl Into<String>) -> Error {
    Error::new(-32603, message.into())
}

/// Serves ACP on this process's standard input and output until the editor closes it.
pub async fn serve(base: Config) -> anyhow::Result<()> {
    let out = crate::sandbox::sys::take_stdout()?;
    let out = tokio::fs::File::from_std(std::fs::File::from(out)).compat_write();
    let input = tokio::io::stdin().compat();
    let server = Arc::new(Server {
        base,
        sessions: Mutex::new(Vec::new()),
        ended: tokio::sync::Notify::new(),
    });
    let (s1, s2, s3, s4) = (
        server.clone(),
        server.clone(),
        server.clone(),
        server.clone(),
    );
    AcpAgent
        .v1()
        .name("picogent")
        .on_receive_request(
            async move |req: InitializeRequest, responder, _cx| responder.respond(hello(&req)),
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, cx| {
                let server = s1.clone();
                cx.spawn(async move {
                    let made = server.open(&req.cwd, &req.mcp_servers, None).await;
                    let _ = match made {
                        Ok(s) => responder.respond(NewSessionResponse::new(s.acp_id.clone())),
                        Err(e) => responder.respond_with_error(e),
                    };
                    Ok(())
                })
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest, responder, cx| {
                let (server, conn) = (s2.clone(), cx.clone());
                cx.spawn(async move {
                    let _ = match server.load(req, &conn).await {
                        Ok(()) => responder.respond(LoadSessionResponse::new()),
                        Err(e) => responder.respond_with_error(e),
                    };
                    Ok(())
                })
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx| {
                // Claimed and started here, in order: a cancel right behind the prompt
                // finds its run.
                let started = updates::prompt_text(&req.prompt)
                    .map_err(invalid)
                    .and_then(|text| s3.start(&req.session_id.0, text));
                let (s, events) = match started {
                    Ok(r) => r,
                    Err(e) => return responder.respond_with_error(e),
                };
                let conn = cx.clone();
                cx.spawn(async move {
                    let _ = match prompt(&s, events, &conn).await {
                        Ok(stop) => responder.respond(PromptResponse::new(stop)),
                        Err(e) => responder.respond_with_error(e),
                    };
                    Ok(())
                })
            },
            on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                if let Some(s) = s4.find(&n.session_id.0) {
                    s.cancel();
                }
                Ok(())
            },
            on_receive_notification!(),
        )
        .connect_to(ByteStreams::new(out, input))
        .await
        .map_err(|e| anyhow::anyhow!("the editor's connection failed: {e}"))?;
    server.wind_down().await;
    Ok(())
}

/// `initialize`'s answer: protocol version 1 (or the client's older one), sessions
/// that load, embedded context, MCP over HTTP.
fn hello(req: &InitializeRequest) -> InitializeResponse {
    let version = if req.protocol_version < ProtocolVersion::V1 {
        req.protocol_version
    } else {
        ProtocolVersion::V1
    };
    InitializeResponse::new(version)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                .mcp_capabilities(McpCapabilities::new().http(true)),
        )
        .agent_info(Implementation::new("picogent", env!("CARGO_PKG_VERSION")))
}

/// How long runs the editor left behind get to end (their commands killed, their
/// sessions written) before picogent exits.
const WIND_DOWN: std::time::Duration = std::time::Duration::from_secs(10);

impl Server {
    fn find(&self, id: &str) -> Option<Arc<AcpSession>> {
        lock(&self.sessions)
            .iter()
            .find(|s| s.acp_id == id)
            .cloned()
    }

    /// Starts a prompt's run in session `id` (refused when there is none, or one runs):
    /// the session's slot is taken until the run has ended, whoever follows it, and a
    /// task of the server's owns the run and hands its events on.
    #[allow(clippy::type_complexity)]
    fn start(
        self: &Arc<Self>,
        id: &str,
        text: String,
    ) -> Result<
        (
            Arc<AcpSession>,
            tokio::sync::mpsc::UnboundedReceiver<AgentEvent>,
        ),
        Error,
    > {
        let s = self.find(id).ok_or_else(|| {
            invalid(format!(
                "no session {id:?}: make one with session/new or session/load"
            ))
        })?;
        let mut running = lock(&s.running);
        if running.is_some() {
            return Err(invalid(format!("session {id} is already running a prompt")));
        }
        let mut handle = s.agent.start(RunRequest::new(text, s.id.clone()));
        *running = Some(Running {
            cancel: handle.cancel_token(),
            control: Some(handle.control.clone()),
        });
        drop(running);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (server, session) = (self.clone(), s.clone());
        tokio::spawn(async move {
            while let Some(ev) = handle.events.recv().await {
                let _ = tx.send(ev);
            }
            drop(tx);
            let _ = handle.finish().await;
            *lock(&session.running) = None;
            server.ended.notify_waiters();
        });
        Ok((s, rx))
    }

    /// The editor went away: runs still going are cancelled (their commands killed)
    /// and waited for, a while, so their sessions end whole.
    async fn wind_down(&self) {
        let all: Vec<_> = lock(&self.sessions).clone();
        for s in &all {
            s.cancel();
        }
        let deadline = tokio::time::Instant::now() + WIND_DOWN;
        loop {
            // Registered before the check, so an end between the two is not missed.
            let mut ended = std::pin::pin!(self.ended.notified());
            ended.as_mut().enable();
            if all.iter().all(|s| lock(&s.running).is_none()) {
                return;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return;
            }
        }
    }

    /// A session in `cwd`: its agent made off the runtime (skills read, MCP servers
    /// started); `existing`, a stored session to continue: the id the editor knows it
    /// by, its file's name and its folder.
    async fn open(
        &self,
        cwd: &std::path::Path,
        mcp: &[agent_client_protocol::v1::schema::McpServer],
        existing: Option<(String, String, Option<std::path::PathBuf>)>,
    ) -> Result<Arc<AcpSession>, Error> {
        let (acp_id, id, dir) = match existing {
            Some(e) => e,
            None => {
                let id = crate::util::new_session_id();
                (id.clone(), id, None)
            }
        };
        let cfg = session::config_for(&self.base, cwd, mcp, dir).map_err(invalid)?;
        let work_dir = cfg.work_dir.clone();
        let agent = tokio::task::spawn_blocking(move || Agent::new(cfg))
            .await
            .map_err(|e| internal(e.to_string()))?
            .map_err(|e| internal(e.to_string()))?;
        let s = Arc::new(AcpSession {
            agent,
            acp_id: acp_id.clone(),
            id,
            work_dir,
            running: Mutex::new(None),
        });
        let mut all = lock(&self.sessions);
        // One file, one open session: by the editor's id or the file's (a pi session
        // loads by its file's name or its UUID).
        let same = |o: &Arc<AcpSession>| o.acp_id == acp_id || o.id == s.id;
        if all.iter().any(|o| same(o) && lock(&o.running).is_some()) {
            return Err(invalid(format!("session {acp_id} is running a prompt")));
        }
        // The same session loaded again replaces its older one.
        all.retain(|o| !same(o));
        if all.len() >= MAX_SESSIONS {
            if let Some(i) = all.iter().position(|o| lock(&o.running).is_none()) {
                all.remove(i);
            } else {
                return Err(internal(format!(
                    "{MAX_SESSIONS} sessions are running prompts; end one first"
                )));
            }
        }
        all.push(s.clone());
        Ok(s)
    }

    /// `session/load`: the stored session (picogent's or pi's) replayed as updates,
    /// then kept open to continue.
    async fn load(
        &self,
        req: LoadSessionRequest,
        conn: &ConnectionTo<Client>,
    ) -> Result<(), Error> {
        let wanted = req.session_id.0.to_string();
        if self
            .find(&wanted)
            .is_some_and(|s| lock(&s.running).is_some())
        {
            return Err(invalid(format!("session {wanted} is running a prompt")));
        }
        let own = self.base.own_sessions_dir();
        let pi = self
            .base
            .home_dir
            .as_deref()
            .map(crate::session::find::pi_sessions_dir);
        let (looked_in, asked) = (own.clone(), wanted.clone());
        // Every session file's header may be read: off the runtime's threads.
        let (dir, id) = tokio::task::spawn_blocking(move || {
            use crate::session::find;
            let (dir, id) = match find::resolve(&asked, &looked_in, pi.as_deref()) {
                Ok(find::Found::Existing { dir, id }) => (dir, id),
                Ok(_) => return Err(invalid(format!("no session {asked:?}"))),
                Err(e) => return Err(invalid(e.to_string())),
            };
            // By its file's name or its header's id (pi's UUID), not a prefix of either.
            let header = find::header(&dir.join(format!("{id}.jsonl")));
            if id != asked && header.as_ref().and_then(|h| h["id"].as_str()) != Some(&asked) {
                return Err(invalid(format!("no session {asked:?}")));
            }
            Ok((dir, id))
        })
        .await
        .map_err(|e| internal(e.to_string()))??;
        let dir = (dir != own).then_some(dir);
        let s = self
            .open(
                &req.cwd,
                &req.mcp_servers,
                Some((wanted.clone(), id.clone(), dir)),
            )
            .await?;
        let store = s.agent.sessions().clone();
        let (sid, work_dir) = (id.clone(), s.work_dir.clone());
        let shown = tokio::task::spawn_blocking(move || {
            let session = store.snapshot(&sid).map_err(|e| e.to_string())?;
            let messages: Vec<_> = session
                .context()
                .messages
                .into_iter()
                .map(|(_, m)| m.into_owned())
                .collect();
            Ok::<_, String>(updates::replay(&messages, &work_dir))
        })
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(internal)?;
        for u in shown {
            conn.send_notification(SessionNotification::new(wanted.clone(), u))?;
        }
        Ok(())
    }
}

/// `session/prompt`: the run's events streamed as updates; the stop reason when it
/// ends. The run is the server's (`Server::start`): if the editor goes and this task is
/// dropped, the run is cancelled and still waited for.
async fn prompt(
    s: &Arc<AcpSession>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<AgentEvent>,
    conn: &ConnectionTo<Client>,
) -> Result<StopReason, Error> {
    let id = s.acp_id.clone();
    // Dropped with this task: the run is cancelled (its commands killed).
    let _cancel_if_dropped = s.cancel_guard();
    let mut tr = updates::Translator::new(s.work_dir.clone());
    let mut outcome = None;
    while let Some(ev) = events.recv().await {
        if let AgentEvent::Approval {
            id: call,
            summary,
            arguments,
            ..
        } = &ev
        {
            ask(conn, s, call, summary, arguments);
        }
        if let Some(u) = tr.update(&ev) {
            // The editor gone: the run is cancelled.
            if conn
                .send_notification(SessionNotification::new(id.clone(), u))
                .is_err()
            {
                s.cancel();
            }
        }
        if let AgentEvent::Finished { outcome: o } = ev {
            outcome = Some(o);
        }
    }
    match outcome {
        Some(o) => stop_reason(o, conn, &id),
        None => Err(internal("the run ended without an outcome")),
    }
}

/// How a run's end reads to the editor: a stop reason, or an error for a failure.
fn stop_reason(
    outcome: Outcome,
    conn: &ConnectionTo<Client>,
    id: &str,
) -> Result<StopReason, Error> {
    match outcome {
        Outcome::Completed { .. } => Ok(StopReason::EndTurn),
        Outcome::Cancelled { .. } => Ok(StopReason::Cancelled),
        Outcome::Failed {
            kind: FailureKind::MaxSteps,
            ..
        } => Ok(StopReason::MaxTurnRequests),
        Outcome::Failed {
            kind: FailureKind::OutputLimit,
            ..
        } => Ok(StopReason::MaxTokens),
        Outcome::Failed {
            kind: FailureKind::RepeatLoop,
            error,
            ..
        } => {
            let said = SessionUpdate::AgentMessageChunk(
                agent_client_protocol::v1::schema::ContentChunk::new(
                    format!("\n\n(picogent {error})").into(),
                ),
            );
            let _ = conn.send_notification(SessionNotification::new(id.to_string(), said));
            Ok(StopReason::EndTurn)
        }
        Outcome::Failed { error, kind, .. } => Err(internal(format!(
            "the run failed ({}): {error}",
            kind.as_str()
        ))),
    }
}

/// Asks the editor about a call waiting for approval, on a task of its own (the run's
/// events keep flowing; a cancel ends the wait), and answers the run.
fn ask(
    conn: &ConnectionTo<Client>,
    s: &Arc<AcpSession>,
    call: &str,
    summary: &str,
    args: &serde_json::Value,
) {
    let options = ApprovalAnswer::ALL
        .iter()
        .map(|a| {
            let (name, kind) = match a {
                ApprovalAnswer::AllowOnce => ("Allow", PermissionOptionKind::AllowOnce),
                ApprovalAnswer::AllowAlways => ("Always allow", PermissionOptionKind::AllowAlways),
                ApprovalAnswer::RejectOnce => ("Reject", PermissionOptionKind::RejectOnce),
                ApprovalAnswer::RejectAlways => {
                    ("Always reject", PermissionOptionKind::RejectAlways)
                }
            };
            PermissionOption::new(a.as_str().to_string(), name.to_string(), kind)
        })
        .collect();
    let update = ToolCallUpdate::new(
        call.to_string(),
        ToolCallUpdateFields::new()
            .title(summary.to_string())
            .raw_input(args.clone()),
    );
    let asked = conn.send_request(RequestPermissionRequest::new(
        s.acp_id.clone(),
        update,
        options,
    ));
    let Some(control) = lock(&s.running).as_ref().and_then(|r| r.control.clone()) else {
        return;
    };
    let call = call.to_string();
    let _ = conn.spawn(async move {
        let answer = match asked.block_task().await {
            Ok(r) => match r.outcome {
                RequestPermissionOutcome::Selected(sel) => ApprovalAnswer::ALL
                    .into_iter()
                    .find(|a| a.as_str() == &*sel.option_id.0)
                    .unwrap_or(ApprovalAnswer::RejectOnce),
                _ => ApprovalAnswer::RejectOnce,
            },
            Err(_) => ApprovalAnswer::RejectOnce,
        };
        let _ = control.approve(&call, answer);
        Ok(())
    });
}
