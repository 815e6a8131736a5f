//! Reading a session as a tree of branches: the paths from the root to every tip, their
//! names, steps and human interventions, and the comparisons and exports built on
//! them (`picogent export`: trajectory, tree, dpo, prm, annotations).
//!
//! A branch is the path to a tip (an entry without children). The first path in the
//! file is `main`; a path that starts at a `branch` entry takes its name; any other
//! path made by a rollback is `branch-N` in the order the paths appear.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

pub use picogent_protocol::session::{Compared, Comparison, Step};

use super::records::{Preference, RunRating, StepLabel, StepVerdict};
use super::{Body, Known, Record, Session};
use crate::message::{blocks_text, Content, Message};

pub struct Branch {
    pub name: String,
    /// Indices into the session's entries, root first.
    pub(crate) path: Vec<usize>,
}

/// The branches of a session, in the order their tips appear in the file.
pub fn branches(session: &Session) -> Vec<Branch> {
    let entries = session.entries();
    let index: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.as_str(), i))
        .collect();
    let parents: HashSet<&str> = entries
        .iter()
        .filter_map(|e| e.parent_id.as_deref())
        .collect();
    let mut out: Vec<Branch> = Vec::new();
    let mut auto = 0;
    for (i, e) in entries.iter().enumerate() {
        if parents.contains(e.id.as_str()) {
            continue;
        }
        let mut path = vec![i];
        let mut cur = e.parent_id.as_deref();
        while let Some(p) = cur.and_then(|id| index.get(id)) {
            if path.len() > entries.len() {
                break;
            }
            path.push(*p);
            cur = entries[*p].parent_id.as_deref();
        }
        path.reverse();
        let named = path
            .iter()
            .rev()
            .find_map(|&j| match crate::session::record_of(&entries[j]) {
                Some(Record::Branch(b)) => Some(b.name),
                _ => None,
            });
        let name = match named {
            Some(n) => n,
            None if out.is_empty() => "main".to_string(),
            None => {
                auto += 1;
                format!("branch-{auto}")
            }
        };
        out.push(Branch { name, path });
    }
    out
}

/// How many of `steps` are tool calls: what a person counts as steps.
pub(crate) fn tool_steps(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| matches!(s, Step::Tool { .. }))
        .count()
}

/// One step of a branch: a tool call with its result, or the final text.
pub(crate) fn steps(session: &Session, path: &[usize]) -> Vec<Step> {
    let entries = session.entries();
    let mut results: HashMap<&str, &crate::message::ToolResultMessage> = HashMap::new();
    for &i in path {
        if let Body::Known(Known::Message {
            message: Message::ToolResult(r),
        }) = &entries[i].body
        {
            results.insert(r.tool_call_id.as_str(), r);
        }
    }
    let mut out = Vec::new();
    for &i in path {
        let Body::Known(Known::Message {
            message: Message::Assistant(a),
        }) = &entries[i].body
        else {
            continue;
        };
        for b in &a.content {
            match b {
                Content::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let r = results.get(id.as_str());
                    let details = r.and_then(|r| r.details.as_ref());
                    let detail = |k: &str| {
                        details
                            .and_then(|d| d.get(k))
                            .cloned()
                            .unwrap_or(Value::Null)
                    };
                    out.push(Step::Tool {
                        entry_id: entries[i].id.clone(),
                        call_id: id.clone(),
                        tool: name.clone(),
                        args_summary: crate::tools::describe_call(name, arguments),
                        result_summary: r
                            .map(|r| crate::util::one_line(&blocks_text(&r.content), 300)),
                        is_error: r.map(|r| r.is_error),
                        exit_code: detail("exit_code"),
                        diff: detail("diff"),
                    });
                }
                Content::Text { text } if !text.trim().is_empty() => out.push(Step::Text {
                    entry_id: entries[i].id.clone(),
                    text: text.clone(),
                }),
                _ => {}
            }
        }
    }
    out
}

/// Pauses, instructions, rollbacks and branch starts on a path, with the number of
/// steps taken before each.
fn interventions(session: &Session, path: &[usize]) -> Vec<Value> {
    let entries = session.entries();
    let mut out = Vec::new();
    let mut steps = 0usize;
    for &i in path {
        let e = &entries[i];
        if let Body::Known(Known::Message {
            message: Message::Assistant(a),
        }) = &e.body
        {
            steps += a
                .content
                .iter()
                .filter(|c| matches!(c, Content::ToolCall { .. }))
                .count();
        }
        // Rollbacks and branch starts are named by their record type.
        let (kind, row) = match crate::session::record_of(e) {
            Some(Record::Intervention(i)) => (None, serde_json::to_value(i)),
            Some(Record::Rollback(r)) => (Some("rollback"), serde_json::to_value(r)),
            Some(Record::Branch(b)) => (Some("branch"), serde_json::to_value(b)),
            _ => continue,
        };
        let Ok(Value::Object(mut v)) = row else {
            continue;
        };
        if let Some(kind) = kind {
            v.insert("kind".into(), json!(kind));
        }
        v.insert("after_steps".into(), json!(steps));
        v.entry("time").or_insert_with(|| json!(e.timestamp));
        out.push(Value::Object(v));
    }
    out
}

fn task(session: &Session) -> String {
    session
        .entries()
        .iter()
        .find_map(|e| match &e.body {
            Body::Known(Known::Message {
                message: Message::User(u),
            }) => Some(blocks_text(&u.content)),
            _ => None,
        })
        .unwrap_or_default()
}

fn outcome(session: &Session, path: &[usize]) -> Value {
    let last = path
        .iter()
        .rev()
        .find_map(|&i| match &session.entries()[i].body {
            Body::Known(Known::Message {
                message: Message::Assistant(a),
            }) => Some(a),
            _ => None,
        });
    match last {
        Some(a) => {
            json!({"stop_reason": a.stop_reason, "text": a.text(), "error": a.error_message})
        }
        None => json!({"stop_reason": null}),
    }
}

/// How many entries two paths share from the root.
fn shared(a: &[usize], b: &[usize]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The last checkpoint commit on a path.
fn final_commit(session: &Session, path: &[usize]) -> Option<String> {
    path.iter().rev().find_map(
        |&i| match crate::session::record_of(&session.entries()[i]) {
            Some(Record::Checkpoint(c)) => Some(c.commit),
            _ => None,
        },
    )
}

/// A comparison that names a branch the session does not have.
#[derive(Debug, thiserror::Error)]
#[error("no branch {name:?}; the branches are {}", known.join(", "))]
pub struct NoBranch {
    pub name: String,
    pub known: Vec<String>,
}

pub(crate) fn compare(session: &Session, a: &str, b: &str) -> Result<Comparison, NoBranch> {
    let all = branches(session);
    let find = |n: &str| {
        all.iter().find(|br| br.name == n).ok_or_else(|| NoBranch {
            name: n.to_string(),
            known: all.iter().map(|b| b.name.clone()).collect(),
        })
    };
    let (ba, bb) = (find(a)?, find(b)?);
    let common = shared(&ba.path, &bb.path);
    let point = common
        .checked_sub(1)
        .and_then(|i| ba.path.get(i))
        .and_then(|&e| session.entries().get(e))
        .map(|e| e.id.clone());
    let side = |name: &str, br: &Branch| Compared {
        name: name.to_string(),
        steps: steps(session, br.path.get(common..).unwrap_or_default()),
        final_commit: final_commit(session, &br.path),
    };
    Ok(Comparison {
        branch_point: point,
        shared_steps: tool_steps(&steps(session, ba.path.get(..common).unwrap_or_default())),
        a: side(a, ba),
        b: side(b, bb),
        diff: None,
    })
}

fn preferences(session: &Session) -> Vec<Preference> {
    session
        .records()
        .filter_map(|(_, r)| match r {
            Record::Preference(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// A person's step labels by call id: the last one given for a call wins.
fn step_labels(session: &Session) -> HashMap<String, StepLabel> {
    session
        .records()
        .filter_map(|(_, r)| match r {
            Record::StepLabel(l) => Some((l.call_id.clone(), l)),
            _ => None,
        })
        .collect()
}

/// The prm label a person's verdict gives.
fn verdict_label(v: StepVerdict) -> &'static str {
    match v {
        StepVerdict::Correct => "correct",
        StepVerdict::Incorrect => "error",
        StepVerdict::Unsure => "unsure",
    }
}

/// The export lines for one format.
/// What `picogent export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One line per branch: its steps, interventions and outcome.
    Trajectory,
    /// The whole tree.
    Tree,
    /// One pair per recorded preference.
    Dpo,
    /// Per-step labels.
    Prm,
    /// Labels and ratings.
    Annotations,
}

impl ExportFormat {
    pub const ALL: [ExportFormat; 5] = [
        ExportFormat::Trajectory,
        ExportFormat::Tree,
        ExportFormat::Dpo,
        ExportFormat::Prm,
        ExportFormat::Annotations,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Trajectory => "trajectory",
            ExportFormat::Tree => "tree",
            ExportFormat::Dpo => "dpo",
            ExportFormat::Prm => "prm",
            ExportFormat::Annotations => "annotations",
        }
    }
}

impl std::str::FromStr for ExportFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ExportFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown export format {s:?}; use trajectory, tree, dpo, prm or annotations"
                )
            })
    }
}

pub fn export(session: &Session, format: ExportFormat) -> Vec<Value> {
    let all = branches(session);
    match format {
        ExportFormat::Trajectory => trajectory(session, &all),
        ExportFormat::Tree => vec![tree(session, &all)],
        ExportFormat::Dpo => dpo(session, &all),
        ExportFormat::Prm => prm(session, &all),
        ExportFormat::Annotations => annotations(session, &all),
    }
}

/// One line per branch: its steps, interventions and outcome.
fn trajectory(session: &Session, all: &[Branch]) -> Vec<Value> {
    all.iter()
        .map(|b| {
            json!({
                "session": session.id(), "branch": b.name, "task": task(session),
                "steps": steps(session, &b.path),
                "interventions": interventions(session, &b.path),
                "outcome": outcome(session, &b.path),
            })
        })
        .collect()
}

/// What an entry is, in a word and a line, for the tree export.
fn node_summary(body: &Body) -> (&str, String) {
    let line = |s: &str| crate::util::one_line(s, 200);
    match body {
        Body::Known(Known::Message { message }) => match message {
            Message::User(u) => ("user", line(&blocks_text(&u.content))),
            Message::Assistant(a) => ("assistant", line(&a.text())),
            Message::ToolResult(r) => (
                "tool_result",
                format!("{}: {}", r.tool_name, line(&blocks_text(&r.content))),
            ),
        },
        Body::Known(Known::Custom { custom_type, data }) => {
            (custom_type.as_str(), data.to_string())
        }
        Body::Known(Known::Compaction { summary, .. }) => ("compaction", line(summary)),
        Body::Known(_) => ("other", String::new()),
        Body::Other(t) => (t.as_str(), String::new()),
        Body::UserText(t, text) => (t.as_str(), crate::util::one_line(text, 200)),
        Body::Evicted { .. } => ("message", String::new()),
    }
}

/// The whole tree: every entry, the branch points and the branch tips.
fn tree(session: &Session, all: &[Branch]) -> Value {
    let entries = session.entries();
    let nodes: Vec<Value> = entries
        .iter()
        .map(|e| {
            let (kind, summary) = node_summary(&e.body);
            json!({"id": e.id, "parentId": e.parent_id, "kind": kind, "summary": summary, "timestamp": e.timestamp})
        })
        .collect();
    let mut kids: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in entries {
        if let Some(p) = &e.parent_id {
            kids.entry(p.as_str()).or_default().push(&e.id);
        }
    }
    let points: Vec<Value> = kids
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(p, c)| json!({"entry_id": p, "children": c}))
        .collect();
    let tips: Vec<Value> = all
        .iter()
        .filter_map(|b| {
            let tip = entries.get(*b.path.last()?)?;
            Some(json!({"name": b.name, "tip": tip.id}))
        })
        .collect();
    json!({"session": session.id(), "task": task(session), "nodes": nodes, "branch_points": points, "branches": tips})
}

/// One line per recorded preference between two existing branches.
fn dpo(session: &Session, all: &[Branch]) -> Vec<Value> {
    let find = |n: &str| all.iter().find(|b| b.name == n);
    let mut out = Vec::new();
    for p in preferences(session) {
        let (Some(bc), Some(br)) = (find(&p.chosen), find(&p.rejected)) else {
            continue;
        };
        let common = shared(&bc.path, &br.path);
        out.push(json!({
            "session": session.id(),
            "prompt": {"task": task(session), "shared_steps": steps(session, &bc.path[..common])},
            "chosen": {"branch": p.chosen, "steps": steps(session, &bc.path[common..])},
            "rejected": {"branch": p.rejected, "steps": steps(session, &br.path[common..])},
            "note": p.note,
        }));
    }
    out
}

/// One line per step label and run rating a person gave, in the order given; a step
/// label names its branch, step number and step when the call is on a branch.
fn annotations(session: &Session, all: &[Branch]) -> Vec<Value> {
    let id = session.id();
    let mut out = Vec::new();
    for (e, r) in session.records() {
        match r {
            Record::StepLabel(l) => {
                // Numbered as a person sees them: the branch's tool steps, from 1.
                let found = all.iter().find_map(|b| {
                    steps(session, &b.path)
                        .into_iter()
                        .filter(|s| matches!(s, Step::Tool { .. }))
                        .enumerate()
                        .find(|(_, s)| matches!(s, Step::Tool { call_id, .. } if *call_id == l.call_id))
                        .map(|(n, s)| (b.name.clone(), n + 1, s))
                });
                let (branch, step, content) = match found {
                    Some((b, n, s)) => (json!(b), json!(n), json!(s)),
                    None => (Value::Null, Value::Null, Value::Null),
                };
                out.push(json!({
                    "session": id, "kind": "step_label", "entry_id": e.id,
                    "call_id": l.call_id, "branch": branch, "step": step,
                    "label": l.label, "note": l.note, "time": l.time, "content": content,
                }));
            }
            Record::RunRating(RunRating {
                run,
                rating,
                note,
                time,
            }) => out.push(json!({
                "session": id, "kind": "run_rating", "entry_id": e.id,
                "run": run, "rating": rating, "note": note, "time": time,
            })),
            _ => {}
        }
    }
    out
}

/// Step labels: a person's label where one was given (`source: "person"`); otherwise
/// every step of the accepted branch is correct and the first step of any other branch
/// after it leaves the accepted one is an error (`source: "rule"`). Later steps of
/// another branch build on an error and are labelled only by a person.
fn prm(session: &Session, all: &[Branch]) -> Vec<Value> {
    let id = session.id();
    // The accepted branch: the chosen one of the last preference, else the newest.
    let accepted = preferences(session)
        .pop()
        .map(|p| p.chosen)
        .or_else(|| all.last().map(|b| b.name.clone()));
    let Some(acc) = accepted.and_then(|n| all.iter().find(|b| b.name == n)) else {
        return Vec::new();
    };
    let labels = step_labels(session);
    let person = |s: &Step| match s {
        Step::Tool { call_id, .. } => labels.get(call_id),
        Step::Text { .. } => None,
    };
    let line = |branch: &str,
                n: usize,
                label: &str,
                source: &str,
                note: Option<&String>,
                s: &Step| {
        json!({"session": id, "branch": branch, "step": n, "label": label, "source": source, "note": note, "content": s})
    };
    let mut out = Vec::new();
    for (n, s) in steps(session, &acc.path).into_iter().enumerate() {
        out.push(match person(&s) {
            Some(l) => line(
                &acc.name,
                n,
                verdict_label(l.label),
                "person",
                l.note.as_ref(),
                &s,
            ),
            None => line(&acc.name, n, "correct", "rule", None, &s),
        });
    }
    for b in all.iter().filter(|b| b.name != acc.name) {
        let common = shared(&acc.path, &b.path);
        let before = steps(session, &b.path[..common]).len();
        for (k, s) in steps(session, &b.path[common..]).into_iter().enumerate() {
            let n = before + k;
            match person(&s) {
                Some(l) => out.push(line(
                    &b.name,
                    n,
                    verdict_label(l.label),
                    "person",
                    l.note.as_ref(),
                    &s,
                )),
                None if k == 0 => out.push(line(&b.name, n, "error", "rule", None, &s)),
                None => {}
            }
        }
    }
    out
}
