//! Chat runs in flight, on disk: each server keeps one log in `<state>/chat-runs/`
//! (`<id>.jsonl`, the store's log: a `begin` line when a run starts, an `end` line when
//! it ends), beside a lock file (`<id>.lock`) held for the server's life. What a crash
//! (or a stop that cut runs short) leaves there names the runs it interrupted: at the
//! next start each run begun and never ended is marked `interrupted` in its session,
//! so `history` shows where its answer stops and the page offers to continue it, and a
//! page still following it by `runId` is told so. Another server's log on the same
//! folder is never taken for a leftover while its lock is held.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::session::records::Interrupted;
use crate::session::Record;
use crate::store::log::{self, Log};
use crate::util::lock;

/// Ended runs after which the log is rewritten with only the runs still going.
const COMPACT_AFTER: usize = 1000;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mark {
    session: String,
    #[serde(default)]
    run: Option<String>,
    prompt: String,
    started: String,
}

/// One line of a server's log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Begin {
        key: u64,
        #[serde(flatten)]
        mark: Mark,
    },
    End {
        key: u64,
    },
}

pub(super) struct InFlight {
    /// This server's log and its lock; `None` when they could not be made (runs are
    /// then not noted, as before a disk has room).
    own: Option<Own>,
    /// The runs going; its lock also orders what is handed to the log.
    going: Mutex<Going>,
    /// `runId`s of the runs found interrupted at start, and their sessions.
    interrupted: Mutex<HashMap<String, String>>,
}

#[derive(Default)]
struct Going {
    /// The runs begun and not ended, by key.
    runs: HashMap<u64, Mark>,
    /// Runs ended since the last compaction.
    ended: usize,
    last_key: u64,
}

struct Own {
    log: Log,
    lock_path: PathBuf,
    /// Held for the server's life: the kernel lets it go when the process dies.
    _lock: File,
}

/// A run noted as going; its `end` line is written when it ends, unless the server's
/// stop cut it short (then the next start marks it interrupted).
pub(super) struct Running {
    key: Option<u64>,
    inflight: Arc<InFlight>,
    stop: CancellationToken,
}

impl Running {
    /// The run ended; `cancelled`: by a cancellation (the server's stop among them).
    /// Returns once the `end` line is in the file (not synced), so a kill right after
    /// never marks a finished run interrupted.
    pub(super) async fn end(mut self, cancelled: bool) {
        if let Some(key) = self.key.take() {
            if cancelled && self.stop.is_cancelled() {
                return;
            }
            self.inflight.ended(key);
            if let Some(own) = &self.inflight.own {
                let _ = own.log.written().await;
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Dropped without `end`: the task was dropped with the runtime, mid-run.
        if let Some(key) = self.key.take().filter(|_| !self.stop.is_cancelled()) {
            self.inflight.ended(key);
        }
    }
}

impl InFlight {
    /// Marks the runs the last servers left in flight as interrupted in their
    /// sessions, then opens this server's log.
    pub(super) async fn recover(agent: &Agent) -> Arc<InFlight> {
        let dir = agent.config().state_dir().join("chat-runs");
        let (found, own) = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || (leftovers(&dir), Own::open(&dir)))
                .await
                .unwrap_or_else(|e| (Vec::new(), Err(std::io::Error::other(e))))
        };
        let own = match own {
            Ok(own) => Some(own),
            Err(e) => {
                tracing::warn!("cannot note chat runs in {}: {e}", dir.display());
                None
            }
        };
        let mut interrupted = HashMap::new();
        // Each leftover's lock is held (`_held`) until its files are gone: a server
        // starting beside this one never marks the same runs.
        for Leftover {
            files,
            marks,
            _held,
        } in found
        {
            for mark in marks {
                mark_interrupted(agent, &mark).await;
                if let Some(run) = mark.run {
                    interrupted.insert(run, mark.session);
                }
            }
            // Every run it names is marked: the leftover goes.
            for f in files {
                let _ = std::fs::remove_file(f);
            }
        }
        Arc::new(InFlight {
            own,
            going: Mutex::new(Going::default()),
            interrupted: Mutex::new(interrupted),
        })
    }

    /// Notes a run that starts, once its line is in the file (not synced: it has to
    /// outlive the process, not the machine); its `end` line comes when the returned
    /// guard ends or is dropped.
    pub(super) async fn begin(
        self: &Arc<Self>,
        session: &str,
        run: Option<&str>,
        prompt: &str,
        stop: CancellationToken,
    ) -> Running {
        let mark = Mark {
            session: session.into(),
            run: run.map(str::to_string),
            prompt: prompt.into(),
            started: crate::util::now_iso(),
        };
        let key = match &self.own {
            Some(own) => {
                let (key, handed) = {
                    let mut g = lock(&self.going);
                    g.last_key += 1;
                    let key = g.last_key;
                    g.runs.insert(key, mark.clone());
                    (key, append(&own.log, &Line::Begin { key, mark }))
                };
                let written = match handed {
                    Ok(()) => own.log.written().await.map_err(std::io::Error::from),
                    Err(e) => Err(e),
                };
                match written {
                    Ok(()) => Some(key),
                    Err(e) => {
                        tracing::warn!(
                            "cannot note a chat run in {}: {e}",
                            own.log.path().display()
                        );
                        lock(&self.going).runs.remove(&key);
                        None
                    }
                }
            }
            None => None,
        };
        Running {
            key,
            inflight: self.clone(),
            stop,
        }
    }

    /// A run ended: its `end` line is handed to the log (written off the runtime), and
    /// a log of many ended runs is rewritten with the ones still going.
    fn ended(&self, key: u64) {
        let Some(own) = &self.own else {
            return;
        };
        // Handed over under the lock: a compaction's rewrite never supersedes a begin
        // it does not hold.
        let done = {
            let mut g = lock(&self.going);
            g.runs.remove(&key);
            g.ended += 1;
            if g.ended >= COMPACT_AFTER {
                g.ended = 0;
                let mut going: Vec<_> = g.runs.iter().map(|(k, m)| (*k, m.clone())).collect();
                going.sort_by_key(|(k, _)| *k);
                rewrite(&own.log, going)
            } else {
                append(&own.log, &Line::End { key })
            }
        };
        if let Err(e) = done {
            tracing::warn!(
                "cannot note a chat run's end in {}: {e}",
                own.log.path().display()
            );
        }
    }

    /// The session of a run found interrupted at start, by its `runId`.
    pub(super) fn interrupted(&self, run: &str) -> Option<String> {
        lock(&self.interrupted).get(run).cloned()
    }

    /// The server's end: its log is closed (awaited), and removed with its lock when
    /// no run is left going (one cut short stays, for the next start to mark).
    pub(super) async fn close(&self) {
        let Some(own) = &self.own else {
            return;
        };
        if let Err(e) = own.log.close().await {
            tracing::warn!("the chat runs' log is not all on disk: {e}");
        }
        if lock(&self.going).runs.is_empty() {
            let (log, lock_path) = (own.log.path().to_path_buf(), own.lock_path.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let _ = std::fs::remove_file(log);
                let _ = std::fs::remove_file(lock_path);
            })
            .await;
        }
    }
}

impl Own {
    /// This server's lock (taken first, so a log is never found without its lock held)
    /// and its new, empty log. Blocking: call off the runtime.
    fn open(dir: &Path) -> std::io::Result<Own> {
        std::fs::create_dir_all(dir)?;
        let id = crate::util::random_hex(12);
        let lock_path = dir.join(format!("{id}.lock"));
        let held = create_new(&lock_path)?;
        held.try_lock().map_err(std::io::Error::other)?;
        let path = dir.join(format!("{id}.jsonl"));
        Ok(Own {
            log: Log::with_file(&path, create_new(&path)?),
            lock_path,
            _lock: held,
        })
    }
}

fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn append(log: &Log, line: &Line) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    crate::util::push_json_line(&mut bytes, line)?;
    Ok(log.append(&bytes)?)
}

fn rewrite(log: &Log, going: Vec<(u64, Mark)>) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    for (key, mark) in going {
        crate::util::push_json_line(&mut bytes, &Line::Begin { key, mark })?;
    }
    Ok(log.rewrite(bytes)?)
}

async fn mark_interrupted(agent: &Agent, mark: &Mark) {
    let record = Record::Interrupted(Interrupted {
        run: mark.run.clone(),
        prompt: mark.prompt.clone(),
        started: mark.started.clone(),
        time: crate::util::now_iso(),
    });
    match agent.annotate(&mark.session, record.to_custom()).await {
        Ok(_) => {
            tracing::warn!(session = %mark.session, "a chat run was interrupted when the server stopped; its session says so")
        }
        // A session deleted since: nothing left to mark.
        Err(e) => {
            tracing::warn!(session = %mark.session, "cannot mark an interrupted run: {e}")
        }
    }
}

/// What a server no longer running left: the files that hold it, the runs it begun and
/// never ended (oldest first), and its lock, held until the files are removed.
struct Leftover {
    files: Vec<PathBuf>,
    marks: Vec<Mark>,
    _held: Option<File>,
}

/// The runs that servers no longer running left begun and never ended, oldest first:
/// each log whose lock nobody holds (its torn last line cut off), and a run file of
/// the one-file-per-run layout before the log. A compaction's temporary file and a lock
/// without its log (a start that could not make the log) go too, when free.
fn leftovers(dir: &Path) -> Vec<Leftover> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        let found = match path.extension().and_then(|x| x.to_str()) {
            Some("jsonl") => left_in_log(&path),
            Some("json") => left_in_run_file(&path),
            Some("tmp") | Some("lock") => left_alone(&path),
            _ => None,
        };
        out.extend(found);
    }
    out.sort_by(|a, b| first_start(a).cmp(first_start(b)));
    out
}

fn first_start(found: &Leftover) -> &str {
    found.marks.first().map_or("", |m| m.started.as_str())
}

/// The lock of `log`, taken without waiting: `None` while its server holds it.
fn free_lock(log: &Path) -> Option<File> {
    let held = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(log.with_extension("lock"))
        .ok()?;
    held.try_lock().ok()?;
    Some(held)
}

/// A log whose server is gone: its runs never ended. `None` while its lock is held.
fn left_in_log(path: &Path) -> Option<Leftover> {
    let held = free_lock(path)?;
    let mut begun: Vec<(u64, Mark)> = Vec::new();
    for line in log::read(path).ok()?.lines() {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Begin { key, mark }) => begun.push((key, mark)),
            Ok(Line::End { key }) => begun.retain(|(k, _)| *k != key),
            Err(e) => tracing::warn!(file = %path.display(), "a chat run's line skipped: {e}"),
        }
    }
    let mut marks: Vec<Mark> = begun.into_iter().map(|(_, m)| m).collect();
    marks.sort_by(|a, b| a.started.cmp(&b.started));
    Some(Leftover {
        // A compaction's temporary file, if its server died in the middle of one.
        files: vec![
            path.to_path_buf(),
            path.with_extension("lock"),
            path.with_extension("tmp"),
        ],
        marks,
        _held: Some(held),
    })
}

/// A compaction's temporary file, or a lock whose log was never made, of a server
/// that is gone (its lock free); a log's own lock is the log's to remove.
fn left_alone(path: &Path) -> Option<Leftover> {
    if path.with_extension("jsonl").exists() {
        return None;
    }
    let held = free_lock(path)?;
    Some(Leftover {
        files: vec![path.to_path_buf(), path.with_extension("lock")],
        marks: Vec::new(),
        _held: Some(held),
    })
}

/// A run file of the layout before the log (one file per run, locked while it ran).
fn left_in_run_file(path: &Path) -> Option<Leftover> {
    let f = File::open(path).ok()?;
    f.try_lock().ok()?;
    // Torn by the crash it records: nothing to mark, but the file goes.
    let mark = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Mark>(&b).ok());
    Some(Leftover {
        files: vec![path.to_path_buf()],
        marks: mark.into_iter().collect(),
        _held: Some(f),
    })
}
