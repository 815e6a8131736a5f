//! The event journal: every accepted event is written (and synced) to
//! `state/journal.jsonl` before it is acknowledged, so a crash never loses it and a
//! redelivery is recognised as a duplicate. Ids are remembered for at least seven days.
//! Unfinished events are replayed at start-up, with how often their work was started,
//! so a task that keeps crashing the daemon is not retried forever.
//!
//! The file is append-only between compactions; a compaction rewrites it (to a temp
//! file, synced, then renamed) with only the remembered ids and unfinished events.
//!
//! Writes go through the store's one log (`store::log`): handed over under the
//! journal's lock, synced in groups by the log's job; `journal_writer.rs` is the handle
//! the router holds, which waits for an accepted event's sync before answering.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::types::{Arrival, Envelope, Event, Origin};
use crate::store::log::{self, Log, LogError};

/// How long accepted ids are remembered.
const REMEMBER_MS: i64 = 7 * 24 * 3600 * 1000;
/// Records appended before the file is compacted again, at least (see `done`).
const COMPACT_EVERY: usize = 1000;

#[derive(Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum Record {
    /// An accepted event, as the router took it.
    Event {
        id: String,
        event: Event,
        origin: Origin,
        at: i64,
    },
    /// An accepted event in a journal written before typed events: the envelope as it
    /// came (GitHub's with a `github` field). Read, and rewritten as `Event` at the
    /// compaction every open does.
    Accepted {
        event: Envelope,
        at: i64,
    },
    Started {
        id: String,
    },
    Done {
        id: String,
        at: i64,
    },
    Seen {
        id: String,
        at: i64,
    },
}

/// An accepted event whose work has not finished.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pending {
    pub(crate) arrival: Arrival,
    /// How many times its work was started (by this or an earlier process).
    pub(crate) attempts: u32,
}

/// Unfinished events in the order they were accepted, found by id without a scan (a
/// scan per start and per finish made a long backlog quadratic).
#[derive(Default)]
struct PendingSet {
    by_order: BTreeMap<u64, Pending>,
    order_of: HashMap<String, u64>,
    next: u64,
}

impl PendingSet {
    fn push(&mut self, arrival: Arrival) {
        let n = self.next;
        self.next += 1;
        if let Some(old) = self.order_of.insert(arrival.id.clone(), n) {
            self.by_order.remove(&old);
        }
        self.by_order.insert(
            n,
            Pending {
                arrival,
                attempts: 0,
            },
        );
    }

    fn remove(&mut self, id: &str) {
        if let Some(n) = self.order_of.remove(id) {
            self.by_order.remove(&n);
        }
    }

    fn get_mut(&mut self, id: &str) -> Option<&mut Pending> {
        let n = self.order_of.get(id)?;
        self.by_order.get_mut(n)
    }

    fn contains(&self, id: &str) -> bool {
        self.order_of.contains_key(id)
    }

    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.by_order.values()
    }

    fn len(&self) -> usize {
        self.by_order.len()
    }
}

impl Record {
    fn of(arrival: &Arrival, at: i64) -> Record {
        Record::Event {
            id: arrival.id.clone(),
            event: arrival.event.clone(),
            origin: arrival.origin.clone(),
            at,
        }
    }
}

pub(crate) struct Journal {
    log: Log,
    /// id → when it was accepted.
    seen: HashMap<String, i64>,
    pending: PendingSet,
    appended: usize,
}

impl Journal {
    pub(crate) fn open(dir: &Path) -> io::Result<Journal> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("journal.jsonl");
        let mut seen = HashMap::new();
        let mut pending = PendingSet::default();
        {
            let text = log::read(&path)?;
            for (n, line) in text.lines().enumerate() {
                let rec: Record = match serde_json::from_str(line) {
                    Ok(r) => r,
                    Err(e) => {
                        // A torn last line is cut off by `read`: this is damage.
                        tracing::warn!("{}: line {} skipped: {e}", path.display(), n + 1);
                        continue;
                    }
                };
                match rec {
                    Record::Event {
                        id,
                        event,
                        origin,
                        at,
                    } => {
                        seen.insert(id.clone(), at);
                        pending.push(Arrival { id, event, origin });
                    }
                    Record::Accepted { event, at } => {
                        seen.insert(event.id.clone(), at);
                        // One that no longer reads as an event the agent handles is
                        // remembered (a redelivery stays a duplicate), not worked.
                        match Arrival::from_old_journal(&event) {
                            Ok(Some(arrival)) => pending.push(arrival),
                            Ok(None) | Err(_) => {
                                tracing::warn!(id = %event.id, "{}: an event of type {:?} that cannot be worked is dropped", path.display(), event.kind);
                            }
                        }
                    }
                    Record::Started { id } => {
                        if let Some(p) = pending.get_mut(&id) {
                            p.attempts += 1;
                        }
                    }
                    Record::Done { id, .. } => pending.remove(&id),
                    Record::Seen { id, at } => {
                        seen.insert(id, at);
                    }
                }
            }
        }
        let cutoff = crate::util::now_millis() - REMEMBER_MS;
        seen.retain(|id, at| *at >= cutoff || pending.contains(id));
        // The file starts as what is still needed, written durably before any event.
        let log = Log::replace(&path, &content(&seen, &pending)?)?;
        Ok(Journal {
            log,
            seen,
            pending,
            appended: 0,
        })
    }

    /// Unfinished events in the order they were accepted.
    pub(crate) fn pending(&self) -> Vec<Pending> {
        self.pending.iter().cloned().collect()
    }

    /// Whether the event's work is still to finish.
    pub(crate) fn is_pending(&self, id: &str) -> bool {
        self.pending.contains(id)
    }

    pub(crate) fn is_seen(&self, id: &str) -> bool {
        self.seen.contains_key(id)
    }

    /// Hands a record to the log, not synced. After a failure the log refuses every
    /// append until a compaction rewrites the file from memory: that is tried first.
    fn append(&mut self, rec: &Record) -> io::Result<()> {
        if self.log.failed().is_some() {
            self.compact()?;
        }
        let mut line = Vec::new();
        crate::util::push_json_line(&mut line, rec)?;
        self.log.append(&line)?;
        self.appended += 1;
        Ok(())
    }

    /// Records an event durably. `Ok(false)` when its id was accepted before.
    #[cfg(test)]
    pub(crate) fn accept(&mut self, arrival: &Arrival) -> io::Result<bool> {
        let new = self.accept_unsynced(arrival)?;
        self.wait_durable()?;
        Ok(new)
    }

    /// Blocks until everything handed over is durable (tests outside a runtime).
    #[cfg(test)]
    pub(crate) fn wait_durable(&self) -> io::Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.log.sync_then(move |r| drop(tx.send(r)));
        Ok(rx.recv().map_err(io::Error::other)??)
    }

    /// Writes an event without waiting for the disk (`false` when its id was accepted
    /// before); not to be acknowledged before `sync` says it is durable.
    pub(crate) fn accept_unsynced(&mut self, arrival: &Arrival) -> io::Result<bool> {
        if self.seen.contains_key(&arrival.id) {
            return Ok(false);
        }
        let at = crate::util::now_millis();
        self.append(&Record::of(arrival, at))?;
        self.seen.insert(arrival.id.clone(), at);
        self.pending.push(arrival.clone());
        Ok(true)
    }

    /// Resolves once every record handed over so far is durable. What it waits for is
    /// fixed now, under the journal's lock.
    pub(crate) fn sync(
        &self,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        self.log.sync()
    }

    /// A handle on the journal's log, to close it without holding the journal's lock.
    pub(crate) fn log_handle(&self) -> Log {
        self.log.clone()
    }

    /// Forgets an event whose write could not be synced, so a redelivery is taken.
    pub(crate) fn forget(&mut self, id: &str) {
        self.seen.remove(id);
        self.pending.remove(id);
    }

    /// Notes that work for the event started; returns the attempt number. Not synced:
    /// a process crash keeps it (the kernel has it); only a power loss can drop it, and
    /// then the attempt is merely not counted.
    pub(crate) fn started(&mut self, id: &str) -> io::Result<u32> {
        self.append(&Record::Started { id: id.into() })?;
        Ok(match self.pending.get_mut(id) {
            Some(p) => {
                p.attempts += 1;
                p.attempts
            }
            None => 1,
        })
    }

    /// The event's work is over (finished, failed, or cancelled by the tracker). Not
    /// synced, for the same reason as `started`: after a power loss the event would run
    /// once more, which loses nothing; syncing here would slow every acknowledgement.
    pub(crate) fn done(&mut self, id: &str) -> io::Result<()> {
        self.append(&Record::Done {
            id: id.into(),
            at: crate::util::now_millis(),
        })?;
        self.pending.remove(id);
        // Proportional to what a compaction rewrites, so its cost stays constant per
        // record: with many ids remembered, rewriting them every 1,000 records held the
        // journal (and every acknowledgement waiting on it) for milliseconds each time.
        if self.appended >= COMPACT_EVERY.max(2 * (self.seen.len() + self.pending.len())) {
            self.compact()?;
        }
        Ok(())
    }

    /// Has the file rewritten with only what is still needed (by the log's job).
    fn compact(&mut self) -> io::Result<()> {
        self.log.rewrite(content(&self.seen, &self.pending)?)?;
        self.appended = 0;
        Ok(())
    }
}

/// What the file must hold: the remembered ids and the unfinished events.
fn content(seen: &HashMap<String, i64>, pending: &PendingSet) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    for (id, at) in seen {
        if !pending.contains(id) {
            crate::util::push_json_line(
                &mut buf,
                &Record::Seen {
                    id: id.clone(),
                    at: *at,
                },
            )?;
        }
    }
    for p in pending.iter() {
        let at = seen.get(&p.arrival.id).copied().unwrap_or(0);
        crate::util::push_json_line(&mut buf, &Record::of(&p.arrival, at))?;
        for _ in 0..p.attempts {
            crate::util::push_json_line(
                &mut buf,
                &Record::Started {
                    id: p.arrival.id.clone(),
                },
            )?;
        }
    }
    Ok(buf)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::tracker::types::{Task, TaskId};
    use serde_json::json;
    use std::io::Write;

    /// A task.assigned arrival with this id (shared with the writer's tests).
    pub(crate) fn arrival(id: &str) -> Arrival {
        Arrival {
            id: id.into(),
            event: Event::TaskAssigned {
                task: Task {
                    id: TaskId::new("t").unwrap(),
                    title: "x".into(),
                    description: None,
                },
            },
            origin: Origin::Board { created_at: None },
        }
    }

    #[test]
    fn accepted_events_survive_a_reopen_until_done() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert!(j.accept(&arrival("e1")).unwrap());
        assert!(!j.accept(&arrival("e1")).unwrap());
        assert!(j.accept(&arrival("e2")).unwrap());
        assert_eq!(j.started("e1").unwrap(), 1);
        j.done("e2").unwrap();
        j.wait_durable().unwrap();
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(
            j.pending(),
            vec![Pending {
                arrival: arrival("e1"),
                attempts: 1
            }]
        );
        assert!(
            !j.accept(&arrival("e2")).unwrap(),
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

    /// A journal written before typed events: its envelopes are read as arrivals
    /// (GitHub's `github` field as their origin), and the open's compaction rewrites
    /// them as typed records.
    #[test]
    fn old_envelope_lines_are_read_and_rewritten_typed() {
        let dir = tempfile::tempdir().unwrap();
        let now = crate::util::now_millis();
        let lines = [
            json!({"r": "accepted", "at": now, "event": {"id": "b1", "type": "task.assigned", "data": {"task": {"id": "t1", "title": "T"}}}}),
            json!({"r": "accepted", "at": now, "event": {"id": "g1", "type": "task.cancelled", "data": {"task_id": "issue-4", "reason": "closed", "github": {"generation": 3}}}}),
            json!({"r": "accepted", "at": now, "event": {"id": "bad", "type": "task.assigned", "data": {"task": {"id": "a/b", "title": "T"}}}}),
            json!({"r": "started", "id": "b1"}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.path().join("journal.jsonl"), text).unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let pending = j.pending();
        assert_eq!(pending.len(), 2, "{pending:?}");
        assert_eq!(pending[0].attempts, 1);
        assert_eq!(pending[0].arrival.task_id().as_str(), "t1");
        assert_eq!(
            pending[1].arrival.origin,
            Origin::Github {
                generation: 3,
                by: None
            }
        );
        assert!(
            j.is_seen("bad"),
            "a line that cannot be worked is still a duplicate"
        );
        assert!(!j.accept(&arrival("bad")).unwrap());
        let written = std::fs::read_to_string(dir.path().join("journal.jsonl")).unwrap();
        assert!(!written.contains("\"accepted\""), "{written}");
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending(), pending);
    }
}
