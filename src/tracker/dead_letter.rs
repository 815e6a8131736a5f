//! Reports the tracker refused for good (a bad token, a request it calls invalid, a
//! task it still does not know after `report_refused_for`): never dropped in silence,
//! but kept in `state/dead-letter.jsonl`, one JSON line each (when, the task, the
//! report, the tracker's answer), counted in `/healthz` and `/metrics` and logged. An
//! archive on the store's one log (`store::log`): appended and synced, never compacted.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use super::types::Report;
use crate::store::log::{self, Log};

/// One kept report, as its line says it.
#[derive(Serialize)]
struct Letter<'a> {
    at: String,
    task_id: &'a str,
    key: &'a str,
    report: &'a Report,
    error: &'a str,
}

pub(crate) struct DeadLetters {
    log: Log,
    count: AtomicUsize,
}

impl DeadLetters {
    /// The file in `dir`, with the reports it already holds counted (a line torn by a
    /// crash or a full disk is cut off first, so the next one starts whole). Blocking:
    /// call off the runtime.
    pub(crate) fn open(dir: &Path) -> std::io::Result<DeadLetters> {
        let path = dir.join("dead-letter.jsonl");
        let count = log::read(&path)?.lines().count();
        crate::metrics::set_dead_letters(count);
        Ok(DeadLetters {
            log: Log::open(&path)?,
            count: AtomicUsize::new(count),
        })
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn path(&self) -> &Path {
        self.log.path()
    }

    /// Hands one refused report to the log (not yet durable).
    fn hand_over(
        &self,
        task_id: &str,
        key: &str,
        report: &Report,
        why: &str,
    ) -> std::io::Result<()> {
        let letter = Letter {
            at: crate::util::now_iso(),
            task_id,
            key,
            report,
            error: why,
        };
        let mut line = Vec::new();
        crate::util::push_json_line(&mut line, &letter)?;
        Ok(self.log.append(&line)?)
    }

    /// Keeps one refused report; `Ok` once it is on disk.
    pub(crate) async fn keep(
        &self,
        task_id: &str,
        key: &str,
        report: &Report,
        why: &str,
    ) -> std::io::Result<()> {
        self.hand_over(task_id, key, report, why)?;
        self.log.sync().await?;
        self.counted();
        Ok(())
    }

    /// `keep`, waiting on this thread (at open, off the runtime).
    pub(crate) fn keep_blocking(
        &self,
        task_id: &str,
        key: &str,
        report: &Report,
        why: &str,
    ) -> std::io::Result<()> {
        self.hand_over(task_id, key, report, why)?;
        self.log.wait_synced()?;
        self.counted();
        Ok(())
    }

    fn counted(&self) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        crate::metrics::set_dead_letters(n);
    }
}
