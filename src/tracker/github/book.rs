//! The GitHub tracker's own record (`state/github.json`): which issues are picogent's
//! tasks now (assigned, labelled or mentioned, and not closed or unassigned since),
//! how often each became one (each time is a new task start), the pull request each
//! one's branch became (or why GitHub would not open it), whether its progress comment
//! still says work goes on, and where polling (or the last webhook delivery) got to.
//! Changed in memory at once, then rewritten whole (a synced temporary file renamed
//! over it) by the store's one log (`store::log`), after a webhook's answer rather than
//! before it; it is small, and it changes only when an issue does. Rewrites waiting
//! together are one: the last holds every change before it.
//!
//! The journal stays the truth about events: at start, an accepted task start or
//! cancellation that the record missed (a crash between the two writes) is applied
//! again from the journal's unfinished events.
//!
//! In a fleet the book is the store's (`store::pg::github`), shared by every worker;
//! what is in memory here is a copy of the entries read last. Decisions read the
//! entries they need afresh and write them back in their own transaction, under the
//! repository's lock (`Locked`); other changes (`update`, `change`) read, change and
//! write the entry under the same lock.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::store::log::Log;
use crate::store::pg::{Locked, Pg, StoreError, Which};
use crate::util::lock;

/// The book's mark of the last webhook delivery handled (GitHub's time).
pub(crate) const HEARD: &str = "webhook";

pub(crate) use crate::store::issues::{By, Entry};

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    issues: BTreeMap<u64, Entry>,
    /// Polling: each list's `since`, so a restart misses nothing said meanwhile.
    #[serde(default)]
    marks: BTreeMap<String, String>,
}

/// Where the book is kept.
enum Keeper {
    /// `state/github.json`, rewritten whole.
    File(Log),
    /// A fleet's store, with the entries changed in memory and not yet written.
    Store {
        pg: Arc<Pg>,
        repo: String,
        dirty: Mutex<BTreeSet<u64>>,
    },
}

pub(crate) struct Book {
    keeper: Keeper,
    /// A fleet's decisions, changes and refreshes take turns here: a read from the
    /// store never lands in the middle of a decision's.
    turn: tokio::sync::Mutex<()>,
    file: Mutex<File>,
    /// Changes made in memory, and how many of them the file holds.
    changes: AtomicU64,
    written: AtomicU64,
    /// When each mark `note_mark` records was last handed out to be written.
    flushed_marks: Mutex<BTreeMap<String, Time>>,
}

type Time = chrono::DateTime<chrono::Utc>;

impl Book {
    /// Blocking: call off the runtime.
    pub(crate) fn open(dir: &Path) -> io::Result<Book> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("github.json");
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => File::default(),
            Err(e) => return Err(e),
        };
        let log = Log::replace(&path, &serde_json::to_vec_pretty(&file)?)?;
        Ok(Book::with(Keeper::File(log), file))
    }

    fn with(keeper: Keeper, file: File) -> Book {
        Book {
            keeper,
            turn: tokio::sync::Mutex::new(()),
            file: Mutex::new(file),
            changes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            flushed_marks: Mutex::new(BTreeMap::new()),
        }
    }

    /// A fleet's book of `repo`, in its store: the open entries and the marks read.
    pub(crate) async fn open_fleet(pg: Arc<Pg>, repo: &str) -> Result<Book, StoreError> {
        let issues = pg
            .github_entries(repo, Which::Open)
            .await?
            .into_iter()
            .collect();
        let marks = pg.github_marks(repo).await?.into_iter().collect();
        let keeper = Keeper::Store {
            pg,
            repo: repo.to_string(),
            dirty: Mutex::new(BTreeSet::new()),
        };
        Ok(Book::with(keeper, File { issues, marks }))
    }

    /// The fleet's store and the repository, when the book is there.
    pub(crate) fn fleet(&self) -> Option<(&Arc<Pg>, &str)> {
        match &self.keeper {
            Keeper::Store { pg, repo, .. } => Some((pg, repo)),
            Keeper::File(_) => None,
        }
    }

    /// Takes the entries read in the store (a fleet's), over what memory had.
    fn take(&self, entries: Vec<(u64, Entry)>, asked: &[u64]) {
        let mut f = lock(&self.file);
        for n in asked {
            f.issues.remove(n);
        }
        for (n, e) in entries {
            f.issues.insert(n, e);
        }
    }

    /// Reads entries afresh from a fleet's store (a no-op on one machine); `Open`
    /// replaces every open entry known here.
    pub(crate) async fn refresh(&self, which: Which<'_>) -> Result<(), StoreError> {
        let Some((pg, repo)) = self.fleet() else {
            return Ok(());
        };
        let _turn = self.turn().await;
        let found = pg.github_entries(repo, which).await?;
        self.refreshed(which, found);
        Ok(())
    }

    /// This book's turn for a fleet's decision or change (see `turn`).
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    fn refreshed(&self, which: Which<'_>, found: Vec<(u64, Entry)>) {
        match which {
            Which::Issues(ns) => self.take(found, ns),
            Which::Pull(_) => self.take(found, &[]),
            Which::Open => {
                let stale: Vec<u64> = lock(&self.file)
                    .issues
                    .iter()
                    .filter(|(_, e)| e.active || e.working)
                    .map(|(n, _)| *n)
                    .collect();
                self.take(found, &stale);
            }
        }
    }

    /// A fleet's decision begins: changes a failed one left in memory (never written)
    /// are forgotten, to be read again.
    pub(crate) fn begin(&self) {
        let Keeper::Store { dirty, .. } = &self.keeper else {
            return;
        };
        let left = std::mem::take(&mut *lock(dirty));
        let mut f = lock(&self.file);
        for n in left {
            f.issues.remove(&n);
        }
    }

    /// In a decision (a fleet's): reads the entries it needs.
    pub(crate) async fn load(
        &self,
        locked: &Locked<'_>,
        which: Which<'_>,
    ) -> Result<(), StoreError> {
        let found = locked.entries(which).await?;
        self.refreshed(which, found);
        Ok(())
    }

    /// In a decision (a fleet's): writes the entries it changed.
    pub(crate) async fn write(&self, locked: &Locked<'_>) -> Result<(), StoreError> {
        let Keeper::Store { dirty, .. } = &self.keeper else {
            return Ok(());
        };
        // Still dirty until the transaction commits (`committed`): a failure after
        // this leaves them to be forgotten by the next decision's `begin`.
        let changed: Vec<u64> = lock(dirty).iter().copied().collect();
        for n in changed {
            locked.put(n, &self.get(n)).await?;
        }
        Ok(())
    }

    /// A fleet's decision committed: what it wrote is the store's now.
    pub(crate) fn committed(&self) {
        if let Keeper::Store { dirty, .. } = &self.keeper {
            lock(dirty).clear();
        }
    }

    pub(crate) fn get(&self, issue: u64) -> Entry {
        lock(&self.file)
            .issues
            .get(&issue)
            .cloned()
            .unwrap_or_default()
    }

    /// The issues that are tasks now.
    pub(crate) fn active(&self) -> Vec<u64> {
        lock(&self.file)
            .issues
            .iter()
            .filter(|(_, e)| e.active)
            .map(|(n, _)| *n)
            .collect()
    }

    /// The issue whose task branch became pull request `pull`.
    pub(crate) fn issue_of_pull(&self, pull: u64) -> Option<u64> {
        lock(&self.file)
            .issues
            .iter()
            .find(|(_, e)| e.pull == Some(pull))
            .map(|(n, _)| *n)
    }

    /// Issues whose progress comment still says work goes on, though they are no tasks.
    pub(crate) fn still_working(&self) -> Vec<u64> {
        lock(&self.file)
            .issues
            .iter()
            .filter(|(_, e)| e.working && !e.active)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Changes an issue's entry and writes the record (synced) before returning; when
    /// the change changed nothing, nothing is written.
    pub(crate) async fn change(
        &self,
        issue: u64,
        change: impl FnOnce(&mut Entry),
    ) -> io::Result<()> {
        if self.fleet().is_some() {
            // The entry as the store has it now decides whether anything changes.
            return self.update(issue, change).await;
        }
        let before = self.get(issue);
        let mut after = before.clone();
        change(&mut after);
        if after == before {
            return Ok(());
        }
        self.update(issue, |e| *e = after).await
    }

    /// Changes an issue's entry and writes the record (synced) before returning.
    pub(crate) async fn update(
        &self,
        issue: u64,
        change: impl FnOnce(&mut Entry),
    ) -> io::Result<()> {
        if let Some((pg, repo)) = self.fleet() {
            // Read, changed and written under the repository's lock: another worker's
            // decision about the issue is not undone.
            let stored = async {
                let _turn = self.turn().await;
                let locked = pg.github_lock(repo).await?;
                self.begin();
                self.load(&locked, Which::Issues(&[issue])).await?;
                self.apply(issue, change);
                self.write(&locked).await?;
                locked.commit().await?;
                self.committed();
                Ok::<_, StoreError>(())
            };
            return stored.await.map_err(io::Error::other);
        }
        self.apply(issue, change);
        self.persist().await
    }

    /// Changes an issue's entry in memory, at once: later decisions see it. The file
    /// follows with the next `persist` (the journal has the event meanwhile, and the
    /// record is mended from it at start).
    pub(crate) fn apply(&self, issue: u64, change: impl FnOnce(&mut Entry)) {
        let mut f = lock(&self.file);
        change(f.issues.entry(issue).or_default());
        self.changes.fetch_add(1, Ordering::SeqCst);
        if let Keeper::Store { dirty, .. } = &self.keeper {
            lock(dirty).insert(issue);
        }
    }

    /// Writes every change made so far (synced), unless a write since already did.
    pub(crate) async fn persist(&self) -> io::Result<()> {
        let log = match &self.keeper {
            Keeper::File(log) => log,
            // A fleet's entries are written by the decision that changed them, the
            // marks by `set_mark`.
            Keeper::Store { .. } => return Ok(()),
        };
        let (synced, upto) = {
            let f = lock(&self.file);
            let upto = self.changes.load(Ordering::SeqCst);
            if upto == self.written.load(Ordering::SeqCst) {
                return Ok(());
            }
            // Under the lock: the log's rewrites follow the changes' order.
            log.rewrite(serde_json::to_vec_pretty(&*f)?)?;
            (log.sync(), upto)
        };
        synced.await?;
        self.written.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    /// Reads a fleet's marks afresh (another worker polled until now).
    pub(crate) async fn reload_marks(&self) -> Result<(), StoreError> {
        let Some((pg, repo)) = self.fleet() else {
            return Ok(());
        };
        let marks = pg.github_marks(repo).await?;
        lock(&self.file).marks.extend(marks);
        Ok(())
    }

    /// A polled list's `since`, if one was recorded.
    pub(crate) fn mark(&self, list: &str) -> Option<String> {
        lock(&self.file).marks.get(list).cloned()
    }

    /// Records a mark in memory; true when the last one handed out to be written is
    /// `stale_after` older (or there is none), so the caller writes it: a mark that
    /// changes with every webhook delivery is written at most that often.
    pub(crate) fn note_mark(&self, list: &str, at: Time, stale_after: chrono::Duration) -> bool {
        let text = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        lock(&self.file).marks.insert(list.to_string(), text);
        self.changes.fetch_add(1, Ordering::SeqCst);
        let mut flushed = lock(&self.flushed_marks);
        if flushed.get(list).is_some_and(|t| at - *t < stale_after) {
            return false;
        }
        flushed.insert(list.to_string(), at);
        true
    }

    /// Writes the mark `note_mark` recorded (with every other change, on one machine).
    pub(crate) async fn write_mark(&self, list: &str) -> io::Result<()> {
        match (self.fleet(), self.mark(list)) {
            (Some(_), Some(since)) => self.set_mark(list, &since).await,
            (Some(_), None) => Ok(()),
            (None, _) => self.persist().await,
        }
    }

    pub(crate) async fn set_mark(&self, list: &str, since: &str) -> io::Result<()> {
        if let Some((pg, repo)) = self.fleet() {
            lock(&self.file)
                .marks
                .insert(list.to_string(), since.to_string());
            return pg
                .github_set_mark(repo, list, since)
                .await
                .map_err(io::Error::other);
        }
        {
            let mut f = lock(&self.file);
            f.marks.insert(list.to_string(), since.to_string());
            self.changes.fetch_add(1, Ordering::SeqCst);
        }
        self.persist().await
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn entries_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let book = super::Book::open(dir.path()).unwrap();
        book.update(7, |e| {
            e.active = true;
            e.generation += 1;
        })
        .await
        .unwrap();
        book.update(7, |e| e.pull = Some(8)).await.unwrap();
        let again = super::Book::open(dir.path()).unwrap();
        assert!(again.get(7).active);
        assert_eq!(again.get(7).generation, 1);
        assert_eq!(again.issue_of_pull(8), Some(7));
        assert!(!again.get(1).active);
        std::fs::write(dir.path().join("github.json"), "{oops").unwrap();
        let err = super::Book::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("github.json"), "{err}");
    }
}
