//! Room to work: a task or a chat reply starts only when the disks picogent writes to
//! for it (the state folder, the sessions, the worktrees) have room for its journal
//! records, session and reports. Started on a full disk, a run would fail at its first
//! write and be reported blocked for good; instead it waits, the daemon says it is
//! degraded meanwhile, and it starts as soon as there is room again. A start that fails
//! for lack of room all the same (the disk filled after the look) waits the same way.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::tracker::types::TaskId;
use crate::util::lock;

/// Free space a run needs on each disk, at most (a small disk needs an eighth of it).
const ROOM: u64 = 8 << 20;
/// How often a waiting run looks again.
const LOOK_EVERY: Duration = Duration::from_secs(1);

pub(super) struct Room {
    dirs: Vec<PathBuf>,
    /// Runs waiting for room now, and what the last look found.
    waiting: AtomicUsize,
    short: Mutex<String>,
    /// Cancelled when the daemon drains: a run still waiting gives up at once (its
    /// event stays pending) instead of holding the shutdown for its grace period.
    drain: CancellationToken,
}

impl Room {
    pub(super) fn new(dirs: Vec<PathBuf>) -> Arc<Room> {
        Arc::new(Room {
            dirs,
            waiting: AtomicUsize::new(0),
            short: Mutex::new(String::new()),
            drain: CancellationToken::new(),
        })
    }

    /// The first disk without room, in words; `None` when every one has room (or
    /// cannot be asked: then the run's own writes will tell).
    fn short_of_room(dirs: &[PathBuf]) -> Option<String> {
        dirs.iter().find_map(|dir| {
            let (free, total) = crate::tools::bash::capture::disk_space(dir).ok()?;
            (free < ROOM.min(total / 8)).then(|| {
                format!(
                    "{} has {} KB free of {} KB",
                    dir.display(),
                    free >> 10,
                    total >> 10
                )
            })
        })
    }

    async fn look(&self) -> Option<String> {
        let dirs = self.dirs.clone();
        // statvfs can block on a network file system: off the runtime's threads.
        tokio::task::spawn_blocking(move || Room::short_of_room(&dirs))
            .await
            .ok()
            .flatten()
    }

    /// Runs waiting for room stop waiting (the daemon is shutting down).
    pub(super) fn drain(&self) {
        self.drain.cancel();
    }

    /// Returns once there is room (true), or when `stop` is cancelled or the daemon
    /// drains first (false).
    pub(super) async fn wait(&self, task: &TaskId, stop: &CancellationToken) -> bool {
        let Some(why) = self.look().await else {
            return true;
        };
        tracing::warn!(
            task = %task,
            "not starting while the disk is full ({why}); it starts when there is room"
        );
        self.wait_from(task, stop, why).await
    }

    /// After a start that failed for lack of room (`error`: the disk filled after the
    /// look, or ran out of what a look does not see, such as a quota): waits one look
    /// at least, then as `wait` does. Its result is `wait`'s.
    pub(super) async fn retry(&self, task: &TaskId, stop: &CancellationToken, error: &str) -> bool {
        let why = self.look().await.unwrap_or_else(|| error.to_string());
        tracing::warn!(
            task = %task,
            "the start failed for lack of room ({error}); it starts again when there is room"
        );
        self.wait_from(task, stop, why).await
    }

    async fn wait_from(&self, task: &TaskId, stop: &CancellationToken, why: String) -> bool {
        *lock(&self.short) = why;
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let started = loop {
            tokio::select! {
                _ = tokio::time::sleep(LOOK_EVERY) => {}
                _ = stop.cancelled() => break false,
                _ = self.drain.cancelled() => break false,
            }
            match self.look().await {
                Some(why) => *lock(&self.short) = why,
                None => break true,
            }
        };
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        if started {
            tracing::info!(task = %task, "there is room again; starting");
        }
        started
    }

    /// Why runs are waiting, while some are.
    pub(super) fn degraded(&self) -> Option<String> {
        let n = self.waiting.load(Ordering::Relaxed);
        (n > 0).then(|| {
            format!(
                "{n} run(s) wait for disk space: {}",
                lock(&self.short).as_str()
            )
        })
    }
}
