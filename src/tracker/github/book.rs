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

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::store::log::Log;
use crate::util::lock;

/// The book's mark of the last webhook delivery handled (GitHub's time).
pub(crate) const HEARD: &str = "webhook";

/// One issue's entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// It is a task now: later comments are chat, and later triggers do nothing.
    pub(crate) active: bool,
    /// How many times it became a task.
    pub(crate) generation: u32,
    /// The pull request its branch became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pull: Option<u64>,
    /// What made it a task this time: it ends when that no longer holds.
    #[serde(default)]
    pub(crate) by: By,
    /// Its progress comment says picogent is working: a task let go without a run to
    /// report (its issue closed while picogent was down) must still say it stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) working: bool,
    /// Why GitHub would not open the pull request of its branch (the progress comment
    /// says so, not "finished"), until one is opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unproposed: Option<String>,
}

pub(crate) use crate::tracker::types::By;

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    issues: BTreeMap<u64, Entry>,
    /// Polling: each list's `since`, so a restart misses nothing said meanwhile.
    #[serde(default)]
    marks: BTreeMap<String, String>,
}

pub(crate) struct Book {
    log: Log,
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
        Ok(Book {
            log,
            file: Mutex::new(file),
            changes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            flushed_marks: Mutex::new(BTreeMap::new()),
        })
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
    }

    /// Writes every change made so far (synced), unless a write since already did.
    pub(crate) async fn persist(&self) -> io::Result<()> {
        let (synced, upto) = {
            let f = lock(&self.file);
            let upto = self.changes.load(Ordering::SeqCst);
            if upto == self.written.load(Ordering::SeqCst) {
                return Ok(());
            }
            // Under the lock: the log's rewrites follow the changes' order.
            self.log.rewrite(serde_json::to_vec_pretty(&*f)?)?;
            (self.log.sync(), upto)
        };
        synced.await?;
        self.written.fetch_max(upto, Ordering::SeqCst);
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

    pub(crate) async fn set_mark(&self, list: &str, since: &str) -> io::Result<()> {
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
