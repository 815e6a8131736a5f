//! The event journal: every accepted event is written (and synced) to
//! `state/journal.jsonl` before it is acknowledged, so a crash never loses it and a
//! redelivery is recognised as a duplicate. Ids are remembered for at least seven days.
//! Unfinished events are replayed at start-up, with how often their work was started,
//! so a task that keeps crashing the daemon is not retried forever.
//!
//! The file is append-only between compactions; a compaction rewrites it (to a temp
//! file, synced, then renamed) with only the remembered ids and unfinished events.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::types::Envelope;

/// How long accepted ids are remembered.
const REMEMBER_MS: i64 = 7 * 24 * 3600 * 1000;
/// Records appended before the file is compacted again.
const COMPACT_EVERY: usize = 1000;

#[derive(Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum Record {
    Accepted { event: Envelope, at: i64 },
    Started { id: String },
    Done { id: String, at: i64 },
    Seen { id: String, at: i64 },
}

/// An accepted event whose work has not finished.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pending {
    pub(crate) envelope: Envelope,
    /// How many times its work was started (by this or an earlier process).
    pub(crate) attempts: u32,
}

pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    /// id → when it was accepted.
    seen: HashMap<String, i64>,
    pending: Vec<Pending>,
    appended: usize,
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Journal {
    pub(crate) fn open(dir: &Path) -> io::Result<Journal> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("journal.jsonl");
        let mut seen = HashMap::new();
        let mut pending: Vec<Pending> = Vec::new();
        if path.exists() {
            let text = std::fs::read_to_string(&path)?;
            for (n, line) in text.lines().enumerate() {
                let rec: Record = match serde_json::from_str(line) {
                    Ok(r) => r,
                    Err(e) => {
                        // Only the last line can be torn by a crash; anything else is damage.
                        tracing::warn!("{}: line {} skipped: {e}", path.display(), n + 1);
                        continue;
                    }
                };
                match rec {
                    Record::Accepted { event, at } => {
                        seen.insert(event.id.clone(), at);
                        pending.push(Pending {
                            envelope: event,
                            attempts: 0,
                        });
                    }
                    Record::Started { id } => {
                        if let Some(p) = pending.iter_mut().find(|p| p.envelope.id == id) {
                            p.attempts += 1;
                        }
                    }
                    Record::Done { id, .. } => pending.retain(|p| p.envelope.id != id),
                    Record::Seen { id, at } => {
                        seen.insert(id, at);
                    }
                }
            }
        }
        let cutoff = crate::util::now_millis() - REMEMBER_MS;
        seen.retain(|id, at| *at >= cutoff || pending.iter().any(|p| &p.envelope.id == id));
        let file = open_append(&path)?;
        let mut j = Journal {
            path,
            file,
            seen,
            pending,
            appended: 0,
        };
        j.compact()?;
        Ok(j)
    }

    /// Unfinished events in the order they were accepted.
    pub(crate) fn pending(&self) -> &[Pending] {
        &self.pending
    }

    pub(crate) fn is_seen(&self, id: &str) -> bool {
        self.seen.contains_key(id)
    }

    fn append(&mut self, rec: &Record, sync: bool) -> io::Result<()> {
        let mut line = Vec::new();
        crate::util::push_json_line(&mut line, rec)?;
        self.file.write_all(&line)?;
        if sync {
            self.file.sync_data()?;
        }
        self.appended += 1;
        Ok(())
    }

    /// Records an event durably. `Ok(false)` when its id was accepted before.
    pub(crate) fn accept(&mut self, env: &Envelope) -> io::Result<bool> {
        if self.seen.contains_key(&env.id) {
            return Ok(false);
        }
        let at = crate::util::now_millis();
        self.append(
            &Record::Accepted {
                event: env.clone(),
                at,
            },
            true,
        )?;
        self.seen.insert(env.id.clone(), at);
        self.pending.push(Pending {
            envelope: env.clone(),
            attempts: 0,
        });
        Ok(true)
    }

    /// Notes that work for the event started; returns the attempt number. Not synced:
    /// a process crash keeps it (the kernel has it); only a power loss can drop it, and
    /// then the attempt is merely not counted.
    pub(crate) fn started(&mut self, id: &str) -> io::Result<u32> {
        self.append(&Record::Started { id: id.into() }, false)?;
        Ok(
            match self.pending.iter_mut().find(|p| p.envelope.id == id) {
                Some(p) => {
                    p.attempts += 1;
                    p.attempts
                }
                None => 1,
            },
        )
    }

    /// The event's work is over (finished, failed, or cancelled by the tracker). Not
    /// synced, for the same reason as `started`: after a power loss the event would run
    /// once more, which loses nothing; syncing here would slow every acknowledgement.
    pub(crate) fn done(&mut self, id: &str) -> io::Result<()> {
        self.append(
            &Record::Done {
                id: id.into(),
                at: crate::util::now_millis(),
            },
            false,
        )?;
        self.pending.retain(|p| p.envelope.id != id);
        if self.appended >= COMPACT_EVERY {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the file with only what is still needed.
    fn compact(&mut self) -> io::Result<()> {
        let pending: HashSet<&str> = self
            .pending
            .iter()
            .map(|p| p.envelope.id.as_str())
            .collect();
        let mut buf = Vec::new();
        for (id, at) in &self.seen {
            if !pending.contains(id.as_str()) {
                crate::util::push_json_line(
                    &mut buf,
                    &Record::Seen {
                        id: id.clone(),
                        at: *at,
                    },
                )?;
            }
        }
        for p in &self.pending {
            let at = self.seen.get(&p.envelope.id).copied().unwrap_or(0);
            crate::util::push_json_line(
                &mut buf,
                &Record::Accepted {
                    event: p.envelope.clone(),
                    at,
                },
            )?;
            for _ in 0..p.attempts {
                crate::util::push_json_line(
                    &mut buf,
                    &Record::Started {
                        id: p.envelope.id.clone(),
                    },
                )?;
            }
        }
        crate::util::atomic_rewrite(&self.path, &buf)?;
        self.file = open_append(&self.path)?;
        self.appended = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(id: &str) -> Envelope {
        Envelope {
            id: id.into(),
            kind: "task.assigned".into(),
            created_at: None,
            data: json!({"task": {"id": "t", "title": "x"}}),
        }
    }

    #[test]
    fn accepted_events_survive_a_reopen_until_done() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert!(j.accept(&env("e1")).unwrap());
        assert!(!j.accept(&env("e1")).unwrap());
        assert!(j.accept(&env("e2")).unwrap());
        assert_eq!(j.started("e1").unwrap(), 1);
        j.done("e2").unwrap();
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(
            j.pending(),
            &[Pending {
                envelope: env("e1"),
                attempts: 1
            }]
        );
        assert!(
            !j.accept(&env("e2")).unwrap(),
            "done ids are still remembered"
        );
        // A torn last line is skipped.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("journal.jsonl"))
            .unwrap()
            .write_all(b"{\"r\":\"acc")
            .unwrap();
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending().len(), 1);
    }
}
