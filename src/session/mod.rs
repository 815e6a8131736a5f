//! Sessions: append-only JSONL files in the pi coding agent's format, version 3.
//!
//! Line 1 is the header; every later line is an entry with an `id` (8 hex digits; 16
//! for a chat prompt, named by its request) and the
//! `parentId` of the entry it continues, so the file holds a tree and the leaf is the
//! last entry. Only the holder of the session's lock (`lock`) opens it to write; such a
//! session has one writer (`writer`, the store's log over the file): appends are
//! handed to it and written in order, off the async runtime, and each step's `sync`
//! makes them durable, so a crash loses at most what was not synced yet; a torn last
//! line is cut off when the writer opens the file and skipped by readers (`snapshot`),
//! which never write. Opening or loading a session reads the whole file: async callers
//! do it on a blocking thread (`SessionStore::open_off_runtime`).
//! Entry types picogent does not use (labels, other tools' custom entries, ...) are kept
//! as they are.
//!
//! `records` is picogent's own typed entries (`Record`: checkpoints, rollbacks,
//! branches, interventions, preferences, the Claude Code session id), stored as pi
//! `custom` entries; `branches` reads the tree back as branches, comparisons and exports.

pub mod branches;
mod context;
mod evict;
mod file;
pub mod find;
mod lock;
mod migrate;
mod model;
pub mod summary;
/// picogent's own records in pi `custom` entries.
pub use picogent_protocol::session::records;
mod repair;
mod writer;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::message::Message;
pub use context::Context;
use file::{parse_lines, read_repaired, Span};
pub use lock::SessionLock;
pub use picogent_protocol::session::Known;
pub use records::Record;

/// The record an entry holds, if it is one of ours.
pub(crate) fn record_of(entry: &Entry) -> Option<Record> {
    match &entry.body {
        Body::Known(Known::Custom { custom_type, data }) => {
            Record::from_custom(&entry.id, custom_type, data)
        }
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("invalid session id {0:?}: use letters, digits, '.', '_' and '-' (at most 128)")]
    BadId(String),
    #[error("session file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("session file {}: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    /// The blocking thread that read the session ended abnormally.
    #[error("reading the session failed: {0}")]
    Internal(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Known(Known),
    /// An entry type picogent does not interpret; kept for the tree.
    Other(String),
    /// An entry of pi's that the model sees as user text (`bashExecution` and `custom`
    /// messages, `custom_message` entries): its type and that text.
    UserText(String, String),
    /// A message before the newest compaction, dropped from the writer's memory so a
    /// long session does not grow it: the entry is the `len` bytes at `offset` in the
    /// file, read back by `Session::context` when a rollback or branch reaches it.
    Evicted {
        offset: u64,
        len: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    id: String,
    pub parent_id: Option<String>,
    timestamp: String,
    pub body: Body,
}

impl Entry {
    pub fn id(&self) -> &str {
        &self.id
    }
}

#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    known: &'a Known,
    id: &'a str,
    #[serde(rename = "parentId")]
    parent_id: &'a Option<String>,
    timestamp: &'a str,
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(rename = "type")]
    kind: String,
    version: u32,
    id: String,
    timestamp: String,
    cwd: String,
}

/// Where sessions live.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
    locks: lock::LockTable,
}

pub(crate) use picogent_protocol::session::valid_id;

impl SessionStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SessionStore {
            dir: dir.into(),
            locks: lock::LockTable::default(),
        }
    }

    /// Waits for the session's lock: what opening it to write takes.
    pub async fn lock(&self, id: &str) -> Result<SessionLock, SessionError> {
        self.path(id)?;
        Ok(self.locks.lock(id).await)
    }

    /// `lock`, waiting on this thread, which must not be running async code (tokio's
    /// blocking lock panics there): a command-line tool, a blocking task, a test.
    pub fn lock_blocking(&self, id: &str) -> Result<SessionLock, SessionError> {
        self.path(id)?;
        Ok(self.locks.lock_blocking(id))
    }

    /// The session's lock if nobody holds it.
    pub fn try_lock(&self, id: &str) -> Result<Option<SessionLock>, SessionError> {
        self.path(id)?;
        Ok(self.locks.try_lock(id))
    }

    pub fn path(&self, id: &str) -> Result<PathBuf, SessionError> {
        if !valid_id(id) {
            return Err(SessionError::BadId(id.to_string()));
        }
        Ok(self.dir.join(format!("{id}.jsonl")))
    }

    /// Opens a session that must already exist, to write, under its lock.
    pub(crate) fn open_existing(&self, lock: SessionLock) -> Result<Session, SessionError> {
        let path = self.existing(lock.id())?;
        Session::load(&path, Some(lock))
    }

    /// The file of a session that must already exist.
    fn existing(&self, id: &str) -> Result<PathBuf, SessionError> {
        let path = self.path(id)?;
        if !path.exists() {
            return Err(SessionError::Corrupt {
                path,
                message: "no such session".into(),
            });
        }
        Ok(path)
    }

    /// A read-only view of an existing session for readers (exports, branch lists,
    /// compare) that may run while a writer appends: a torn last line is skipped in
    /// memory, and the file is never written (only the writer, under the session
    /// lock, repairs it). Appending to a snapshot fails.
    pub fn snapshot(&self, id: &str) -> Result<Session, SessionError> {
        let path = self.existing(id)?;
        Session::load_snapshot(id, path)
    }

    /// `open` on a blocking thread: a long session takes a while to read and parse,
    /// and an async runtime thread must not wait for it.
    pub(crate) async fn open_off_runtime(
        &self,
        lock: SessionLock,
        cwd: &Path,
    ) -> Result<Session, SessionError> {
        let (me, cwd) = (self.clone(), cwd.to_path_buf());
        off_runtime(move || me.open(lock, &cwd)).await
    }

    /// `open_existing` on a blocking thread.
    pub(crate) async fn open_existing_off_runtime(
        &self,
        lock: SessionLock,
    ) -> Result<Session, SessionError> {
        let me = self.clone();
        off_runtime(move || me.open_existing(lock)).await
    }

    /// `snapshot` on a blocking thread.
    pub(crate) async fn snapshot_off_runtime(&self, id: &str) -> Result<Session, SessionError> {
        let (me, id) = (self.clone(), id.to_string());
        off_runtime(move || me.snapshot(&id)).await
    }

    /// Makes session `id`'s file with its header (`cwd` in it), whole or not at all (a
    /// disk without room for the header leaves no file), its name synced; `None` when
    /// the file exists already. With the file, the header's length.
    fn create(&self, id: &str, cwd: &Path) -> Result<Option<(File, u64)>, SessionError> {
        let path = self.path(id)?;
        let io = |source| SessionError::Io {
            path: path.clone(),
            source,
        };
        let header = Header {
            kind: "session".into(),
            version: 3,
            id: id.into(),
            timestamp: crate::util::now_iso(),
            cwd: cwd.display().to_string(),
        };
        let mut line = serde_json::to_vec(&header).map_err(|e| io(std::io::Error::other(e)))?;
        line.push(b'\n');
        let Some(file) = file::create_whole(&path, &line).map_err(io)? else {
            return Ok(None);
        };
        // The new file's name survives a power loss too (its lines, at the first sync).
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| SessionError::Io {
                path: self.dir.clone(),
                source,
            })?;
        Ok(Some((file, line.len() as u64)))
    }

    /// Makes a new session's file, with only its header, where none is yet (`run
    /// --session FILE` in the working folder: the file must exist before the sandbox
    /// that keeps it from the agent is set up).
    pub fn make(&self, id: &str, cwd: &Path) -> Result<(), SessionError> {
        self.create(id, cwd).map(drop)
    }

    /// Opens the session to write, under its lock, creating it (with `cwd` in its
    /// header) when new.
    pub fn open(&self, lock: SessionLock, cwd: &Path) -> Result<Session, SessionError> {
        let id = lock.id().to_string();
        let id = id.as_str();
        let path = self.path(id)?;
        let io = |source| SessionError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(|source| SessionError::Io {
            path: self.dir.clone(),
            source,
        })?;
        if path.exists() {
            if !file::blank(&path) {
                return Session::load(&path, Some(lock));
            }
            // A creation a full disk or a crash cut short (before creations were whole):
            // nothing was in it, so it is made again rather than never loading.
            tracing::warn!("session file {}: empty; made again", path.display());
            std::fs::remove_file(&path).map_err(io)?;
        }
        let Some((file, header_len)) = self.create(id, cwd)? else {
            // Another process made it first.
            return Session::load(&path, Some(lock));
        };
        let writer = Some(writer::Writer::start(
            file.try_clone().map_err(io)?,
            path.clone(),
            lock,
            header_len,
        ));
        Ok(Session {
            id: id.into(),
            path,
            file,
            writer,
            entries: Vec::new(),
            spans: Vec::new(),
            size: header_len,
            evicted_to: 0,
            index: HashMap::new(),
            parents: Vec::new(),
            leaf: None,
        })
    }
}

pub struct Session {
    id: String,
    path: PathBuf,
    /// Read from (evicted entries are read back); written only through `writer`.
    file: File,
    /// The writer thread of a session opened to write; `None` for a snapshot.
    writer: Option<writer::Writer>,
    entries: Vec<Entry>,
    /// Where each entry's line is in the file.
    spans: Vec<Span>,
    /// The file's length: where the next line goes.
    size: u64,
    /// Entries before this index hold no messages in memory (`Body::Evicted`).
    evicted_to: usize,
    index: HashMap<String, usize>,
    /// Each entry's parent, by index (`None` for a root or a parent not in the file):
    /// the context walk follows these instead of hashing ids every step.
    parents: Vec<Option<usize>>,
    leaf: Option<String>,
}

impl Session {
    /// The session's file.
    pub(crate) fn file_path(&self) -> &Path {
        &self.path
    }

    /// Reads the file, opening it for appending and repairing a torn last line: the
    /// lock's holder is its writer.
    fn load(path: &Path, lock: Option<SessionLock>) -> Result<Session, SessionError> {
        let id = lock
            .as_ref()
            .map(|l| l.id().to_string())
            .unwrap_or_default();
        Session::read(&id, path.to_path_buf(), lock)
    }

    /// Reads the file only: a snapshot, which never writes.
    fn load_snapshot(id: &str, path: PathBuf) -> Result<Session, SessionError> {
        Session::read(id, path, None)
    }

    fn read(id: &str, path: PathBuf, lock: Option<SessionLock>) -> Result<Session, SessionError> {
        let io = |source| SessionError::Io {
            path: path.clone(),
            source,
        };
        let (file, bytes, size) = read_repaired(&path, lock.is_some())?;
        let (entries, spans) = parse_lines(&path, &bytes)?;
        let index: HashMap<String, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        let parents = entries
            .iter()
            .map(|e| e.parent_id.as_ref().and_then(|p| index.get(p).copied()))
            .collect();
        let leaf = entries.last().map(|e| e.id.clone());
        let writer = match lock {
            Some(lock) => Some(writer::Writer::start(
                file.try_clone().map_err(io)?,
                path.clone(),
                lock,
                size,
            )),
            None => None,
        };
        let mut session = Session {
            id: id.into(),
            path,
            file,
            writer,
            entries,
            spans,
            size,
            evicted_to: 0,
            index,
            parents,
            leaf,
        };
        if session.writer.is_some() {
            let kept = session.path_to_leaf().first().map(|e| e.id.clone());
            if let Some(kept) = kept {
                session.evict_before(&kept);
            }
        }
        Ok(session)
    }

    /// Makes what was appended so far survive a power loss; the writer thread writes
    /// and syncs, never the async runtime's threads. The first failed write of the
    /// session is returned here (and by every later append).
    pub(crate) async fn sync(&self) -> Result<(), SessionError> {
        match &self.writer {
            Some(w) => w.sync().await,
            None => Ok(()),
        }
    }

    /// Waits until everything appended so far is in the file (not made durable: that
    /// is `sync`), for readers of the file.
    pub(crate) async fn written(&self) -> Result<(), SessionError> {
        match &self.writer {
            Some(w) => w.written().await,
            None => Ok(()),
        }
    }

    /// Ends the session's writer once everything appended is written (waiting on a
    /// blocking thread), so the next writer of the session loads every line.
    pub(crate) async fn close(mut self) -> Result<(), SessionError> {
        match self.writer.take() {
            Some(w) => writer::close(w).await,
            None => Ok(()),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn leaf(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    /// Moves the leaf to an earlier entry; the next append continues from there.
    pub fn branch_from(&mut self, id: Option<&str>) -> Result<(), SessionError> {
        match id {
            Some(id) if !self.index.contains_key(id) => Err(SessionError::Corrupt {
                path: self.path.clone(),
                message: format!("no entry {id}"),
            }),
            _ => {
                self.leaf = id.map(str::to_string);
                Ok(())
            }
        }
    }

    fn new_id(&self) -> String {
        loop {
            let id = crate::util::random_hex(8);
            if !self.index.contains_key(&id) {
                return id;
            }
        }
    }

    /// Appends an entry as a child of the leaf and makes it the leaf.
    pub(crate) fn append(&mut self, known: Known) -> Result<String, SessionError> {
        self.append_as(known, None)
    }

    /// `append`, with the entry's id chosen by the caller when it is free (a chat
    /// request names its prompt's entry before the run writes it: where its history
    /// ends).
    pub(crate) fn append_as(
        &mut self,
        known: Known,
        id: Option<&str>,
    ) -> Result<String, SessionError> {
        let id = match id {
            Some(id) if !id.is_empty() && !self.index.contains_key(id) => id.to_string(),
            _ => self.new_id(),
        };
        let timestamp = crate::util::now_iso();
        let line = Line {
            known: &known,
            id: &id,
            parent_id: &self.leaf,
            timestamp: &timestamp,
        };
        let mut bytes = serde_json::to_vec(&line).map_err(|e| SessionError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        match &self.writer {
            Some(w) => w.append(&bytes)?,
            None => {
                return Err(SessionError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other("a read-only snapshot cannot be appended to"),
                })
            }
        }
        self.spans.push((self.size, bytes.len() - 1));
        self.size += bytes.len() as u64;
        let kept = match &known {
            Known::Compaction {
                first_kept_entry_id,
                ..
            } => Some(first_kept_entry_id.clone()),
            _ => None,
        };
        self.index.insert(id.clone(), self.entries.len());
        let parent = self.leaf.as_ref().and_then(|l| self.index.get(l).copied());
        self.parents.push(parent);
        self.entries.push(Entry {
            id: id.clone(),
            parent_id: self.leaf.take(),
            timestamp,
            body: Body::Known(known),
        });
        self.leaf = Some(id.clone());
        if let Some(kept) = kept {
            self.evict_before(&kept);
        }
        Ok(id)
    }

    /// Appends one of picogent's own records (a checkpoint, an intervention...).
    pub fn append_record(&mut self, record: &Record) -> Result<String, SessionError> {
        self.append(record.to_custom())
    }

    /// picogent's records in file order, with the entries that hold them.
    pub fn records(&self) -> impl DoubleEndedIterator<Item = (&Entry, Record)> {
        self.entries
            .iter()
            .filter_map(|e| record_of(e).map(|r| (e, r)))
    }

    /// The newest checkpoint recorded for `step`, with its entry's id.
    pub fn checkpoint(&self, step: u64) -> Option<(&str, records::Checkpoint)> {
        self.records().rev().find_map(|(e, r)| match r {
            Record::Checkpoint(c) if c.step == step => Some((e.id.as_str(), c)),
            _ => None,
        })
    }

    pub fn append_message(&mut self, message: Message) -> Result<String, SessionError> {
        self.append(Known::Message { message })
    }
}

async fn off_runtime(
    f: impl FnOnce() -> Result<Session, SessionError> + Send + 'static,
) -> Result<Session, SessionError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(SessionError::Internal(e.to_string())))
}
