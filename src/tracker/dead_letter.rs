//! Reports the tracker refused for good (a bad token, a request it calls invalid, a
//! task it still does not know after `report_refused_for`): never dropped in silence,
//! but kept in `state/dead-letter.jsonl`, one JSON line each (when, the task, the
//! report, the tracker's answer), counted in `/healthz` and `/metrics` and logged.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::types::Report;

pub(crate) struct DeadLetters {
    path: PathBuf,
    count: AtomicUsize,
}

impl DeadLetters {
    /// The file in `dir`, with the reports it already holds counted.
    pub(crate) fn open(dir: &Path) -> DeadLetters {
        let path = dir.join("dead-letter.jsonl");
        let count = std::fs::read(&path)
            .map(|b| b.iter().filter(|c| **c == b'\n').count())
            .unwrap_or(0);
        crate::metrics::set_dead_letters(count);
        DeadLetters {
            path,
            count: AtomicUsize::new(count),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one refused report and syncs it. Blocking: call off the runtime.
    pub(crate) fn keep(
        &self,
        task_id: &str,
        key: &str,
        report: &Report,
        why: &str,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let line = json!({
            "at": crate::util::now_iso(),
            "task_id": task_id,
            "key": key,
            "report": report,
            "error": why,
        });
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)?;
        let mut bytes = Vec::new();
        // A line torn by an earlier full disk is ended first, so this one stays whole.
        let len = f.metadata()?.len();
        if len > 0 {
            use std::os::unix::fs::FileExt;
            let mut last = [0u8; 1];
            f.read_exact_at(&mut last, len - 1)?;
            if last[0] != b'\n' {
                bytes.push(b'\n');
            }
        }
        bytes.extend(serde_json::to_vec(&line).map_err(std::io::Error::other)?);
        bytes.push(b'\n');
        f.write_all(&bytes)?;
        f.sync_data()?;
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        crate::metrics::set_dead_letters(n);
        Ok(())
    }
}
