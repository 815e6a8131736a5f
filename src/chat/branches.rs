//! Frames about a session's branches rather than a running request: `branches` (list
//! them), `compare` (two side by side, with the diff of their files) and `prefer`
//! (record which was better), `label` and `rate` (a person's annotations), `preview`
//! (what a rollback would change), and `history` and `delete` ([`history`]'s). Each
//! gets one answer, of its own `type` or `error`.

use super::history;
use super::protocol::{
    BranchSummary, Compare, Label, Outgoing, Prefer, Query, Rate, Rename, ServerFrame,
    SessionFrame, SessionRef,
};
pub(super) use super::refused::Refused;
use super::runs::{Outbound, Runs};
use crate::agent::Agent;
use crate::session::branches;
use crate::session::records::{Preference, RunRating, StepLabel};
use crate::session::{Record, Session};

/// Answers a question about a session.
pub(super) async fn answer(agent: Agent, runs: Runs, f: SessionFrame, tx: Outbound) {
    let SessionFrame {
        about: SessionRef { id, session_id },
        query,
    } = f;
    let frame = reply(&agent, &runs, &session_id, query)
        .await
        .unwrap_or_else(|e| ServerFrame::error(e.to_string()));
    let (asked, session) = (id.clone(), session_id.clone());
    let out = Outgoing::new(id, Some(session_id), frame);
    // A history is megabytes at most: encoded off the runtime's threads.
    match tokio::task::spawn_blocking(move || out.encode()).await {
        Ok(text) => tx.send_encoded(text),
        Err(e) => tx.send(&Outgoing::error(
            asked,
            Some(session),
            format!("the answer failed: {e}"),
        )),
    };
}

async fn reply(
    agent: &Agent,
    runs: &Runs,
    session: &str,
    query: Query,
) -> Result<ServerFrame, Refused> {
    let kind = query.kind();
    if let Query::Delete = query {
        return history::delete(agent, session, runs)
            .await
            .map(|()| ServerFrame::Deleted {
                content: "deleted".into(),
            });
    }
    if let Query::Preview(p) = query {
        return match agent.rollback_preview(session, p.step).await {
            Ok(content) => Ok(ServerFrame::Preview {
                content,
                step: p.step,
            }),
            Err(e) => Err(Refused::Preview(e)),
        };
    }
    // Taken before the file is read, and again after (see `history::history`).
    let running = history::running(runs, session);
    // Reading a long session is blocking work: off the runtime's threads.
    let (store, id) = (agent.sessions().clone(), session.to_string());
    let s = tokio::task::spawn_blocking(move || store.snapshot(&id))
        .await
        .map_err(|e| Refused::Internal(kind, e.to_string()))?
        .map_err(|e| Refused::Session(kind, e))?;
    if let Query::Branches | Query::History = query {
        // Walking a long session's tree is blocking work too.
        let history = matches!(query, Query::History);
        let (runs, id) = (runs.clone(), session.to_string());
        return tokio::task::spawn_blocking(move || match history {
            true => ServerFrame::History {
                content: history::history(&s, running_after(running, &runs, &id)),
            },
            false => ServerFrame::Branches { content: list(&s) },
        })
        .await
        .map_err(|e| Refused::Internal(kind, e.to_string()));
    }
    match query {
        Query::Branches | Query::History | Query::Delete | Query::Preview(_) => {
            Err(Refused::Internal(kind, "answered above".into()))
        }
        Query::Compare(c) => {
            // The diff runs git: off the runtime's threads too.
            let (agent, session) = (agent.clone(), session.to_string());
            tokio::task::spawn_blocking(move || compare(&agent, &s, &session, &c))
                .await
                .map_err(|e| Refused::Internal(kind, e.to_string()))?
                .map(|content| ServerFrame::Compare { content })
        }
        Query::Prefer(p) => {
            known_branches(&s, &[&p.chosen, &p.rejected])?;
            drop(s);
            prefer(agent, session, p).await
        }
        Query::Label(l) => {
            known_call(&s, &l.call_id)?;
            drop(s);
            label(agent, runs, session, l).await
        }
        Query::Rate(r) => {
            drop(s);
            rate(agent, runs, session, r).await
        }
        Query::Rename(r) => {
            drop(s);
            rename(agent, runs, session, r).await
        }
    }
}

fn list(s: &Session) -> Vec<BranchSummary> {
    branches::branches(s)
        .into_iter()
        .map(|b| BranchSummary {
            steps: branches::tool_steps(&branches::steps(s, &b.path)),
            name: b.name,
        })
        .collect()
}

/// Every name is one of the session's branches.
fn known_branches(s: &Session, names: &[&str]) -> Result<(), Refused> {
    let all: Vec<String> = branches::branches(s).into_iter().map(|b| b.name).collect();
    match names.iter().find(|n| !all.iter().any(|m| m == *n)) {
        Some(n) => Err(Refused::Invalid(format!(
            "no branch {n:?}; the branches are {}",
            all.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The call is one of the session's tool calls (on any branch).
fn known_call(s: &Session, call: &str) -> Result<(), Refused> {
    let found = s.entries().iter().any(|e| match &e.body {
        crate::session::Body::Known(crate::session::Known::Message {
            message: crate::message::Message::Assistant(a),
        }) => a.content.iter().any(
            |c| matches!(c, crate::message::Content::ToolCall { id, .. } if id.as_str() == call),
        ),
        _ => false,
    });
    if found {
        Ok(())
    } else {
        Err(Refused::Invalid(format!(
            "label: no step with callId {call:?} in this session"
        )))
    }
}

/// The requests running before the session's file was read, and those running after:
/// one that started while it was read has its prompt in it, and is followed from there.
fn running_after(
    mut running: Vec<std::sync::Arc<super::runs::RunLog>>,
    runs: &Runs,
    session: &str,
) -> Vec<std::sync::Arc<super::runs::RunLog>> {
    for log in history::running(runs, session) {
        if !running.iter().any(|l| std::sync::Arc::ptr_eq(l, &log)) {
            running.push(log);
        }
    }
    running.sort_by_key(|l| l.made);
    running
}

/// Two branches' steps from their common point, and the diff of their final files
/// when both have checkpoints.
fn compare(
    agent: &Agent,
    s: &Session,
    session: &str,
    c: &Compare,
) -> Result<branches::Comparison, Refused> {
    let mut cmp =
        branches::compare(s, &c.a, &c.b).map_err(|e| Refused::Invalid(format!("compare: {e}")))?;
    if let (Some(ca), Some(cb)) = (&cmp.a.final_commit, &cmp.b.final_commit) {
        let cfg = agent.config();
        let diff = crate::agent::checkpoint::Checkpoints::open(
            &cfg.state_dir(),
            session,
            &cfg.work_dir,
            agent.sandbox(),
        )
        .and_then(|c| c.diff(ca, cb));
        cmp.diff = Some(match diff {
            Ok(d) => d,
            Err(e) => format!("(no diff: {e})"),
        });
    }
    Ok(cmp)
}

/// Records the preference in the session, for the `dpo` and `prm` exports.
async fn prefer(agent: &Agent, session: &str, p: Prefer) -> Result<ServerFrame, Refused> {
    let record = Record::Preference(Preference {
        chosen: p.chosen,
        rejected: p.rejected,
        note: p.note,
        time: crate::util::now_iso(),
    });
    match agent.annotate(session, record.to_custom()).await {
        Ok(_) => Ok(ServerFrame::Prefer {
            content: "recorded".into(),
        }),
        Err(e) => Err(Refused::Session("prefer", e)),
    }
}

/// Records a person's label on a step, for the `annotations` and `prm` exports.
async fn label(
    agent: &Agent,
    runs: &Runs,
    session: &str,
    l: Label,
) -> Result<ServerFrame, Refused> {
    let record = Record::StepLabel(StepLabel {
        call_id: l.call_id,
        label: l.label,
        note: l.note.filter(|n| !n.trim().is_empty()),
        time: crate::util::now_iso(),
    });
    annotate(agent, runs, session, record.to_custom(), "label").await
}

/// Records a person's rating of a run, for the `annotations` export.
async fn rate(agent: &Agent, runs: &Runs, session: &str, r: Rate) -> Result<ServerFrame, Refused> {
    let record = Record::RunRating(RunRating {
        run: r.run,
        rating: r.rating,
        note: r.note.filter(|n| !n.trim().is_empty()),
        time: crate::util::now_iso(),
    });
    annotate(agent, runs, session, record.to_custom(), "rate").await
}

/// The longest session name kept.
const MAX_NAME_CHARS: usize = 200;

/// Names the session as pi's `/name` does (a `session_info` entry): one line, at most
/// [`MAX_NAME_CHARS`] characters; an empty name clears it.
async fn rename(
    agent: &Agent,
    runs: &Runs,
    session: &str,
    r: Rename,
) -> Result<ServerFrame, Refused> {
    let name = r.name.split_whitespace().collect::<Vec<_>>().join(" ");
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(Refused::Invalid(format!(
            "rename: `name` is longer than {MAX_NAME_CHARS} characters"
        )));
    }
    let name = (!name.is_empty()).then_some(name);
    let entry = crate::session::Known::SessionInfo { name: name.clone() };
    annotate(agent, runs, session, entry, "rename").await?;
    Ok(ServerFrame::Renamed { name })
}

/// Writes an annotation: a request running in the session writes it at its next step
/// boundary (it holds the session); otherwise, or when that run ends first, it is
/// appended under the session's lock.
async fn annotate(
    agent: &Agent,
    runs: &Runs,
    session: &str,
    entry: crate::session::Known,
    kind: &'static str,
) -> Result<ServerFrame, Refused> {
    let recorded = || ServerFrame::Annotated {
        content: "recorded".into(),
    };
    if let Some(log) = history::running(runs, session).first() {
        if let Ok(receipt) = log.control.annotate(entry.clone()) {
            if receipt.await.is_ok() {
                return Ok(recorded());
            }
        }
    }
    match agent.annotate(session, entry).await {
        Ok(_) => Ok(recorded()),
        Err(e) => Err(Refused::Session(kind, e)),
    }
}
