//! Giving memory back to the system after a burst of work.
//!
//! glibc's allocator keeps what a burst freed: each thread that allocates may get an
//! arena of its own (up to eight per core), and freed pages in the middle of a heap
//! stay mapped. A daemon that served 200 sessions at once then holds several times
//! its idle footprint for good. Two measures (figures in `bench/RESULTS.md`):
//! - at start, the number of arenas is capped ([`limit_arenas`]): the runtime's few
//!   threads and the blocking pool's many then share a couple of heaps instead of
//!   scattering freed memory over a dozen;
//! - once the server has gone idle after some work, [`trim_when_idle`] asks glibc to
//!   return the free pages (`malloc_trim`), off the runtime's threads.
//!
//! Work is counted by [`Busy`] guards (runs): the trim waits until none is held and
//! nothing started or ended for [`QUIET`]. A chat connection is not work (an idle tab
//! left open would hold off every trim); its end only counts as activity ([`touch`]),
//! so what it held is returned too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Work in progress (runs, connections).
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Bumped whenever work starts or ends.
static CHANGES: AtomicU64 = AtomicU64::new(0);
/// Told whenever `CHANGES` is bumped: the trim waits for it, never polls.
static CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn changed() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
    CHANGED.notify_waiters();
}

/// How long the server must have been idle before memory is trimmed.
const QUIET: Duration = Duration::from_secs(2);
/// The second trim: after tokio's blocking threads, idle for 10 s, have exited.
const LATE: Duration = Duration::from_secs(12);

/// Arenas glibc may create: with two, 30 s after a 200-session burst RSS was 17.8 MB
/// against 19.1 MB uncapped and 21.0 MB with one (bench/RESULTS.md).
const ARENAS: i32 = 2;

/// Held while a piece of work runs; its end counts as activity.
pub(crate) struct Busy(());

impl Busy {
    pub(crate) fn new() -> Busy {
        HELD.fetch_add(1, Ordering::AcqRel);
        changed();
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::AcqRel);
        changed();
    }
}

/// Something ended that freed memory: trim again once quiet.
pub(crate) fn touch() {
    changed();
}

/// Caps glibc's arenas; call once at start, before other threads exist.
pub fn limit_arenas() {
    crate::sandbox::sys::limit_arenas(ARENAS);
}

/// Returns freed memory to the system once work has stopped for [`QUIET`], and again
/// after [`LATE`] (the runtime's idle blocking threads have exited by then, freeing
/// their caches and stacks), until `stop`.
pub async fn trim_when_idle(stop: CancellationToken) {
    // The activity count last seen and when it last changed; the trims done since.
    let (mut seen, mut since, mut done) = (0, tokio::time::Instant::now(), 2);
    loop {
        // Made before the count is read: a change after the read still wakes it.
        let moved = CHANGED.notified();
        let now = CHANGES.load(Ordering::Acquire);
        if now != seen {
            (seen, since, done) = (now, tokio::time::Instant::now(), 0);
        }
        let due = match done {
            0 => Some(QUIET),
            1 => Some(LATE),
            _ => None,
        };
        let idle = HELD.load(Ordering::Acquire) == 0;
        let wake = async {
            match due {
                Some(due) if idle => tokio::time::sleep_until(since + due).await,
                // Busy, or trimmed twice: nothing to do until work starts or ends.
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = moved => continue,
            _ = wake => {}
            _ = stop.cancelled() => return,
        }
        done += 1;
        // It walks every heap under its lock: not on the runtime's threads.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

fn trim() {
    crate::sandbox::sys::trim_heap();
}
