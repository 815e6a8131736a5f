//! The event journal: every accepted event is written (and synced) to
//! `state/journal.jsonl` before it is acknowledged, so a crash never loses it and a
//! redelivery is recognised as a duplicate. Ids are remembered for at least seven days.
//! Unfinished events are replayed at start-up, with how often their work was started,
//! so a task that keeps crashing the daemon is not retried forever.
//!
//! The file is append-only between compactions; a compaction rewrites it (to a temp
//! file, synced, then renamed) with only the remembered ids and unfinished events.
//!
//! Group commit: an accepted event is written under the journal's lock, then the
//! lock is released and the caller waits for a sync that covers its write (`GroupSync`).
//! Events arriving together share one sync instead of queueing one sync each; none is
//! acknowledged before a sync that includes it has finished.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use serde::{Deserialize, Serialize};

use super::types::Envelope;

/// How long accepted ids are remembered.
const REMEMBER_MS: i64 = 7 * 24 * 3600 * 1000;
/// Records appended before the file is compacted again, at least (see `done`).
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

/// Syncs the journal for many writers at once: each waits until a sync that started
/// after its write has finished, and one writer syncs for all who wait.
pub(crate) struct GroupSync {
    state: Mutex<SyncState>,
    done: Condvar,
}

struct SyncState {
    /// The journal file as last opened (a compaction replaces it).
    file: Arc<File>,
    /// Writes made, and the highest one a finished sync covers.
    written: u64,
    synced: u64,
    syncing: bool,
}

impl GroupSync {
    fn new(file: Arc<File>) -> Arc<GroupSync> {
        Arc::new(GroupSync {
            state: Mutex::new(SyncState {
                file,
                written: 0,
                synced: 0,
                syncing: false,
            }),
            done: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a write; its number, to wait for.
    fn wrote(&self) -> u64 {
        let mut s = self.lock();
        s.written += 1;
        s.written
    }

    /// A compaction wrote (and synced) everything so far into a new file.
    fn replaced(&self, file: Arc<File>) {
        let mut s = self.lock();
        s.file = file;
        s.synced = s.written;
        self.done.notify_all();
    }

    /// Returns once write `n` is on disk: syncing for everyone when no sync runs,
    /// else waiting for the running one (and the next, if it started too early).
    pub(crate) fn wait(&self, n: u64) -> io::Result<()> {
        let mut s = self.lock();
        loop {
            if s.synced >= n {
                return Ok(());
            }
            if !s.syncing {
                s.syncing = true;
                let (file, upto) = (s.file.clone(), s.written);
                drop(s);
                let result = file.sync_data();
                s = self.lock();
                s.syncing = false;
                if result.is_ok() {
                    s.synced = s.synced.max(upto);
                }
                self.done.notify_all();
                result?;
                continue;
            }
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

pub(crate) struct Journal {
    path: PathBuf,
    file: Arc<File>,
    sync: Arc<GroupSync>,
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
        let file = Arc::new(open_append(&path)?);
        let mut j = Journal {
            path,
            sync: GroupSync::new(file.clone()),
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
        (&*self.file).write_all(&line)?;
        if sync {
            self.file.sync_data()?;
        }
        self.appended += 1;
        Ok(())
    }

    /// Records an event durably. `Ok(false)` when its id was accepted before.
    #[cfg(test)]
    pub(crate) fn accept(&mut self, env: &Envelope) -> io::Result<bool> {
        match self.accept_unsynced(env)? {
            Some(n) => self.sync.wait(n).map(|()| true),
            None => Ok(false),
        }
    }

    /// Writes an event without waiting for the disk: the write's number, to wait for
    /// with `sync().wait(n)` (without holding the journal) before acknowledging it;
    /// `None` when its id was accepted before.
    pub(crate) fn accept_unsynced(&mut self, env: &Envelope) -> io::Result<Option<u64>> {
        if self.seen.contains_key(&env.id) {
            return Ok(None);
        }
        let at = crate::util::now_millis();
        self.append(
            &Record::Accepted {
                event: env.clone(),
                at,
            },
            false,
        )?;
        let n = self.sync.wrote();
        self.seen.insert(env.id.clone(), at);
        self.pending.push(Pending {
            envelope: env.clone(),
            attempts: 0,
        });
        Ok(Some(n))
    }

    /// The group sync writers wait on.
    pub(crate) fn sync(&self) -> Arc<GroupSync> {
        self.sync.clone()
    }

    /// Forgets an event whose write could not be synced, so a redelivery is taken.
    pub(crate) fn forget(&mut self, id: &str) {
        self.seen.remove(id);
        self.pending.retain(|p| p.envelope.id != id);
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
        // Proportional to what a compaction rewrites, so its cost stays constant per
        // record: with many ids remembered, rewriting them every 1,000 records held the
        // journal (and every acknowledgement waiting on it) for milliseconds each time.
        if self.appended >= COMPACT_EVERY.max(2 * (self.seen.len() + self.pending.len())) {
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
        self.file = Arc::new(open_append(&self.path)?);
        self.sync.replaced(self.file.clone());
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

    #[test]
    fn concurrent_accepts_share_syncs_and_all_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let j = Arc::new(Mutex::new(Journal::open(dir.path()).unwrap()));
        let threads: Vec<_> = (0..16)
            .map(|t| {
                let j = j.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let e = env(&format!("e{t}-{i}"));
                        let (n, sync) = {
                            let mut j = j.lock().unwrap();
                            (j.accept_unsynced(&e).unwrap(), j.sync())
                        };
                        sync.wait(n.unwrap()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let sync = j.lock().unwrap().sync();
        let s = sync.lock();
        assert_eq!((s.written, s.synced), (400, 400));
        drop(s);
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.pending().len(), 400);
    }
}
