//! Chat runs in flight, on disk: a small file per run in `<state>/chat-runs/`, made
//! when it starts and removed when it ends. What a crash (or a stop that cut runs short)
//! leaves there names the runs it interrupted: at the next start each is marked
//! `interrupted` in its session, so `history` shows where its answer stops and the page
//! offers to continue it, and a page still following it by `runId` is told so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::session::records::Interrupted;
use crate::session::Record;

#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    session: String,
    #[serde(default)]
    run: Option<String>,
    prompt: String,
    started: String,
}

pub(super) struct InFlight {
    dir: PathBuf,
    /// `runId`s of the runs found interrupted at start, and their sessions.
    interrupted: Mutex<HashMap<String, String>>,
}

/// Its run's file, locked while the run goes (so another server on the same folder
/// never takes it for a leftover), removed when the run ends unless the server's stop
/// cut it short (then the next start marks it interrupted).
pub(super) struct Running {
    file: Option<(PathBuf, std::fs::File)>,
    stop: CancellationToken,
}

impl Running {
    /// The run ended; `cancelled`: by a cancellation (the server's stop among them).
    pub(super) fn end(mut self, cancelled: bool) {
        if let Some((path, _)) = self.file.take() {
            if cancelled && self.stop.is_cancelled() {
                return;
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Dropped without `end`: the task was dropped with the runtime, mid-run.
        if let Some((path, _)) = self.file.take().filter(|_| !self.stop.is_cancelled()) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Takes `file`'s lock without waiting; false when another process holds it.
fn try_lock(file: &std::fs::File) -> bool {
    file.try_lock().is_ok()
}

impl InFlight {
    /// Marks the runs the last server left in flight as interrupted in their sessions.
    pub(super) async fn recover(agent: &Agent) -> Arc<InFlight> {
        let dir = agent.config().state_dir().join("chat-runs");
        let found = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || leftovers(&dir))
                .await
                .unwrap_or_default()
        };
        let mut interrupted = HashMap::new();
        for (file, mark) in found {
            let record = Record::Interrupted(Interrupted {
                run: mark.run.clone(),
                prompt: mark.prompt,
                started: mark.started,
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
            if let Some(run) = mark.run {
                interrupted.insert(run, mark.session);
            }
            let _ = std::fs::remove_file(file);
        }
        Arc::new(InFlight {
            dir,
            interrupted: Mutex::new(interrupted),
        })
    }

    /// Notes a run that starts; the file goes when the returned guard is dropped. Not
    /// synced: it has to outlive the process, not the machine.
    pub(super) fn begin(
        &self,
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
        let file = self
            .dir
            .join(format!("{}.json", crate::util::random_hex(12)));
        // Locked before it has content: another server never reads it half-written.
        let opened = std::fs::create_dir_all(&self.dir).and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&file)
        });
        let held = match opened {
            Ok(mut f) if try_lock(&f) => {
                let body = serde_json::to_vec(&mark).unwrap_or_default();
                match std::io::Write::write_all(&mut f, &body) {
                    Ok(()) => Some((file, f)),
                    Err(e) => {
                        tracing::warn!("cannot note a chat run in {}: {e}", self.dir.display());
                        let _ = std::fs::remove_file(&file);
                        None
                    }
                }
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&file);
                None
            }
            Err(e) => {
                tracing::warn!("cannot note a chat run in {}: {e}", self.dir.display());
                None
            }
        };
        Running { file: held, stop }
    }

    /// The session of a run found interrupted at start, by its `runId`.
    pub(super) fn interrupted(&self, run: &str) -> Option<String> {
        self.interrupted.lock().ok()?.get(run).cloned()
    }
}

fn leftovers(dir: &Path) -> Vec<(PathBuf, Mark)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        // Locked: a run another server on this folder is still going.
        if !std::fs::File::open(&path).is_ok_and(|f| try_lock(&f)) {
            continue;
        }
        match std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Mark>(&b).ok())
        {
            Some(mark) => out.push((path, mark)),
            // Torn by the crash it records: nothing to mark.
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.sort_by(|a, b| a.1.started.cmp(&b.1.started));
    out
}
