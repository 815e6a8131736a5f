//! The outbox: every report to the tracker (status change, comment) is written to
//! `state/outbox.jsonl` before it is sent, then delivered by one worker in the order it
//! was queued, so the reports of a task arrive in order (`review` only after the result
//! comment was accepted) and survive tracker outages and daemon restarts. Connection
//! errors, 429 and 5xx are retried with backoff (capped at 60 s) for as long as the
//! daemon runs; any other 4xx is logged and dropped so the next report proceeds.
//!
//! Each report carries an `Idempotency-Key`, so a tracker that honours it drops the one
//! repeat that can happen when the daemon dies between a send and its bookkeeping.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::types::Report;
use super::TrackerClient;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum Record {
    Add {
        seq: u64,
        key: String,
        task_id: String,
        report: Report,
    },
    Sent {
        seq: u64,
    },
}

#[derive(Debug, Clone)]
struct Item {
    seq: u64,
    key: String,
    task_id: String,
    report: Report,
}

struct State {
    path: PathBuf,
    file: File,
    items: VecDeque<Item>,
    next_seq: u64,
    appended: usize,
}

#[derive(Clone)]
pub(crate) struct Outbox {
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
}

impl State {
    /// Records a delivery. Not synced: a lost `sent` record (power loss only) means one
    /// repeat, which the idempotency key covers.
    fn append_sent(&mut self, seq: u64) -> io::Result<()> {
        let mut line = Vec::new();
        crate::util::push_json_line(&mut line, &Record::Sent { seq })?;
        self.file.write_all(&line)?;
        self.appended += 1;
        Ok(())
    }

    fn compact(&mut self) -> io::Result<()> {
        let mut buf = Vec::new();
        for it in &self.items {
            let rec = Record::Add {
                seq: it.seq,
                key: it.key.clone(),
                task_id: it.task_id.clone(),
                report: it.report.clone(),
            };
            crate::util::push_json_line(&mut buf, &rec)?;
        }
        crate::util::atomic_rewrite(&self.path, &buf)?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.appended = 0;
        Ok(())
    }
}

impl Outbox {
    pub(crate) fn open(dir: &Path) -> io::Result<Outbox> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("outbox.jsonl");
        let mut items: Vec<Item> = Vec::new();
        let mut next_seq = 1;
        if path.exists() {
            for (n, line) in std::fs::read_to_string(&path)?.lines().enumerate() {
                match serde_json::from_str::<Record>(line) {
                    Ok(Record::Add {
                        seq,
                        key,
                        task_id,
                        report,
                    }) => {
                        next_seq = next_seq.max(seq + 1);
                        items.push(Item {
                            seq,
                            key,
                            task_id,
                            report,
                        });
                    }
                    Ok(Record::Sent { seq }) => items.retain(|i| i.seq != seq),
                    Err(e) => tracing::warn!("{}: line {} skipped: {e}", path.display(), n + 1),
                }
            }
        }
        items.sort_by_key(|i| i.seq);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let mut state = State {
            path,
            file,
            items: items.into(),
            next_seq,
            appended: 0,
        };
        state.compact()?;
        if !state.items.is_empty() {
            tracing::info!(
                "{} unsent report(s) from before the restart will be delivered",
                state.items.len()
            );
        }
        Ok(Outbox {
            state: Arc::new(Mutex::new(state)),
            notify: Arc::new(Notify::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    /// Queues reports for a task durably, with one write and one sync; they are
    /// delivered in this order, after every report queued before them.
    pub(crate) fn push(&self, task_id: &str, reports: Vec<Report>) -> io::Result<()> {
        {
            let mut s = self.lock();
            let mut items = Vec::with_capacity(reports.len());
            let mut bytes = Vec::new();
            for (n, report) in reports.into_iter().enumerate() {
                let seq = s.next_seq + n as u64;
                let key = format!(
                    "picogent-{}-{seq}-{}",
                    crate::util::now_millis(),
                    crate::util::random_hex(6)
                );
                let rec = Record::Add {
                    seq,
                    key: key.clone(),
                    task_id: task_id.into(),
                    report: report.clone(),
                };
                crate::util::push_json_line(&mut bytes, &rec)?;
                items.push(Item {
                    seq,
                    key,
                    task_id: task_id.into(),
                    report,
                });
            }
            s.file.write_all(&bytes)?;
            s.file.sync_data()?;
            s.appended += items.len();
            s.next_seq += items.len() as u64;
            s.items.extend(items);
        }
        self.notify.notify_one();
        Ok(())
    }

    /// Reports not yet delivered.
    pub(crate) fn len(&self) -> usize {
        self.lock().items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn mark_sent(&self, seq: u64) {
        let mut s = self.lock();
        if let Err(e) = s.append_sent(seq) {
            tracing::error!(
                "cannot record a delivered report in {}: {e}",
                s.path.display()
            );
        }
        s.items.retain(|i| i.seq != seq);
        if s.appended >= 1000 {
            if let Err(e) = s.compact() {
                tracing::error!("cannot compact {}: {e}", s.path.display());
            }
        }
    }

    /// Delivers reports until `stop` is cancelled.
    pub(crate) async fn run(
        self,
        client: TrackerClient,
        backoff: (Duration, Duration),
        stop: CancellationToken,
    ) {
        let (start, cap) = backoff;
        loop {
            let next = self.lock().items.front().cloned();
            let Some(item) = next else {
                tokio::select! {
                    _ = self.notify.notified() => continue,
                    _ = stop.cancelled() => return,
                }
            };
            let mut delay = start;
            loop {
                match client.report(&item.task_id, &item.report, &item.key).await {
                    Ok(()) => {
                        tracing::debug!(task = %item.task_id, seq = item.seq, "report delivered");
                        self.mark_sent(item.seq);
                        break;
                    }
                    Err(e) if e.is_transient() => {
                        tracing::warn!(task = %item.task_id, "report not delivered, retrying in {delay:?}: {e}");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = stop.cancelled() => return,
                        }
                        delay = (delay * 2).min(cap);
                    }
                    Err(e) => {
                        tracing::error!(task = %item.task_id, "report dropped, the tracker refused it: {e}");
                        self.mark_sent(item.seq);
                        break;
                    }
                }
            }
        }
    }
}
