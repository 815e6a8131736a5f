//! The `sessions` answer: every session of the server reachable a page at a time,
//! newest first, and searched on the server over titles, first prompts and names. What
//! a list shows of each file (its first prompt and name) is kept by the file's size and
//! time, so a list reads only the files that changed since the last one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use super::protocol::{SessionInfo, Sessions, SESSIONS_PAGE};
use super::runs::Runs;
use crate::session::summary::{summary, Summary};

/// A title (the first prompt on one line) at most, in characters.
const MAX_TITLE: usize = 200;

/// What was read of each session file, and when the file was that.
#[derive(Default)]
pub(super) struct Listing {
    known: Mutex<HashMap<String, Seen>>,
}

struct Seen {
    /// The file's modification time (ms) and size when read.
    stamp: (u64, u64),
    summary: Summary,
}

/// One session file found: its id, modification time (ms) and size.
struct Found {
    id: String,
    modified: u64,
    size: u64,
}

impl Listing {
    /// The page `q` asks for, and whether more sessions follow it. Blocking: reads the
    /// sessions folder and the files that changed.
    pub(super) fn page(
        &self,
        agent: &crate::agent::Agent,
        runs: &Runs,
        q: &Sessions,
    ) -> (Vec<SessionInfo>, bool) {
        let mut found = files(&agent.config().sessions_dir());
        found.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.id.cmp(&b.id)));
        if let Some(c) = &q.before {
            // After the cursor in this order: older, or as old with a later id.
            found.retain(|f| f.modified < c.modified || (f.modified == c.modified && f.id > c.id));
        }
        let needle = q.query.as_deref().map(str::to_lowercase);
        let limit = q.limit.unwrap_or(SESSIONS_PAGE);
        let dir = agent.config().sessions_dir();
        // Read what changed without holding the lock (another tab's list waits for none
        // of it): a file that grew from where its last read stopped, another whole.
        let stale: Vec<(usize, Summary)> = {
            let known = crate::util::lock(&self.known);
            found
                .iter()
                .enumerate()
                .filter_map(|(i, f)| match known.get(&f.id) {
                    Some(s) if s.stamp == (f.modified, f.size) => None,
                    Some(s) if f.size > s.stamp.1 => Some((i, s.summary.clone())),
                    _ => Some((i, Summary::default())),
                })
                .collect()
        };
        let fresh: Vec<(usize, Summary)> = stale
            .into_iter()
            .map(|(i, from)| {
                let path = dir.join(format!("{}.jsonl", found[i].id));
                let read = summary(&path, from.clone()).unwrap_or(from);
                (i, read)
            })
            .collect();
        let mut known = crate::util::lock(&self.known);
        for (i, s) in fresh {
            let f = &found[i];
            known.insert(
                f.id.clone(),
                Seen {
                    stamp: (f.modified, f.size),
                    summary: s,
                },
            );
        }
        let mut out = Vec::new();
        let mut more = false;
        for f in &found {
            let Some(seen) = known.get(&f.id) else {
                continue;
            };
            if let Some(n) = &needle {
                if !matches(&seen.summary, &f.id, n) {
                    continue;
                }
            }
            if out.len() == limit {
                more = true;
                break;
            }
            out.push(info(f, &seen.summary, runs));
        }
        // Files deleted since are forgotten (only when the whole folder was looked at).
        if q.before.is_none() {
            let ids: std::collections::HashSet<&str> =
                found.iter().map(|f| f.id.as_str()).collect();
            known.retain(|id, _| ids.contains(id.as_str()));
        }
        (out, more)
    }
}

/// Whether a session's title, first prompt, name or id holds `needle` (lower case).
fn matches(s: &Summary, id: &str, needle: &str) -> bool {
    let holds = |t: &str| t.to_lowercase().contains(needle);
    s.prompt.as_deref().is_some_and(holds) || s.name.as_deref().is_some_and(holds) || holds(id)
}

fn info(f: &Found, s: &Summary, runs: &Runs) -> SessionInfo {
    SessionInfo {
        title: s
            .prompt
            .as_deref()
            .map(|p| crate::util::one_line(p.trim(), MAX_TITLE))
            .unwrap_or_else(|| f.id.clone()),
        name: s.name.clone(),
        running: !super::history::running(runs, &f.id).is_empty(),
        id: f.id.clone(),
        modified: f.modified,
    }
}

/// The session files in `dir` (valid ids only).
fn files(dir: &std::path::Path) -> Vec<Found> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".jsonl")?.to_string();
            // Regular files only (not a symlink, a pipe or a device in the folder).
            if !e.file_type().ok()?.is_file() {
                return None;
            }
            let meta = e.metadata().ok()?;
            let modified = meta
                .modified()
                .ok()?
                .duration_since(UNIX_EPOCH)
                .ok()?
                .as_millis();
            crate::session::valid_id(&id).then_some(Found {
                id,
                modified: modified as u64,
                size: meta.len(),
            })
        })
        .collect()
}
