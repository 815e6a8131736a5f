//! What the checkpoints of every session in one folder share: one object store (a
//! repository of picogent's own per folder, under the state folder), one index, and
//! the scans of the folder.
//!
//! A snapshot is the folder's tree (`git add --all` then `git write-tree`, in the
//! folder's store) and a commit on the session's own branch. Many sessions asking at
//! once are served by one scan: a request waits for the next scan that starts after
//! it was made (so it sees everything its session wrote before asking), and whoever
//! finds no scan running starts one. The commit and the branch's ref are written
//! here, without forking git: both are a few lines of text. Sessions read the store's
//! objects through their repository's `objects/info/alternates`. Nothing ever prunes
//! the store (no `gc` runs: picogent never runs a command that starts one, and it is
//! pinned off), so every checkpoint and abandoned tip stays readable.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sha1::{Digest, Sha1};

/// The folders' stores this process has open, by the store's path; an entry goes
/// with the last session using it.
static STORES: Mutex<Vec<(PathBuf, Weak<Store>)>> = Mutex::new(Vec::new());

/// The scans of one folder: how many started and finished, and the last one's tree.
#[derive(Default)]
struct Scans {
    started: u64,
    finished: u64,
    running: bool,
    last: Option<Result<String, CheckpointError>>,
}

/// One folder's shared store.
pub(crate) struct Store {
    pub(crate) git_dir: PathBuf,
    scans: Mutex<Scans>,
    scanned: Condvar,
    /// Held while git works in the folder (a scan, a rollback).
    work: Mutex<()>,
}

use crate::util::lock;

/// Why a checkpoint could not be taken, listed or restored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoints need git, which was not found ({0}); install git or set \"checkpoints\": false")]
    NoGit(String),
    #[error("git {args} failed: {message}")]
    Git { args: String, message: String },
    #[error("no checkpoint {0}")]
    Unknown(String),
}

impl Store {
    /// The store for `work_tree` under `checkpoints` (created when new), shared with
    /// every other session of this process in that folder.
    pub(crate) fn for_folder(checkpoints: &Path, work_tree: &Path) -> std::io::Result<Arc<Store>> {
        let real = std::fs::canonicalize(work_tree).unwrap_or_else(|_| work_tree.to_path_buf());
        let key = hex(&Sha1::digest(real.as_os_str().as_encoded_bytes()))
            .chars()
            .take(16)
            .collect::<String>();
        let git_dir = checkpoints.join("folders").join(format!("{key}.git"));
        let mut stores = lock(&STORES);
        stores.retain(|(_, w)| w.strong_count() > 0);
        if let Some(s) = stores
            .iter()
            .find(|(p, _)| *p == git_dir)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(s);
        }
        create_repository(&git_dir)?;
        let store = Arc::new(Store {
            git_dir: git_dir.clone(),
            scans: Mutex::default(),
            scanned: Condvar::new(),
            work: Mutex::new(()),
        });
        stores.push((git_dir, Arc::downgrade(&store)));
        Ok(store)
    }

    /// Held while git changes the folder (a rollback): no scan runs meanwhile.
    pub(crate) fn working(&self) -> MutexGuard<'_, ()> {
        lock(&self.work)
    }

    /// The folder's tree as of a scan that started after this call; `scan` scans.
    pub(crate) fn tree(
        &self,
        scan: impl FnOnce() -> Result<String, CheckpointError>,
    ) -> Result<String, CheckpointError> {
        let mut s = lock(&self.scans);
        let want = s.started + 1;
        let mut scan = Some(scan);
        loop {
            if s.finished >= want {
                if let Some(last) = &s.last {
                    return last.clone();
                }
            }
            if !s.running {
                if let Some(scan) = scan.take() {
                    s.running = true;
                    s.started += 1;
                    let me = s.started;
                    drop(s);
                    let result = {
                        let _work = self.working();
                        // A scan that panicked must still end: every waiter would
                        // otherwise wait on this folder for good.
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(scan)).unwrap_or_else(
                            |_| {
                                Err(CheckpointError::Git {
                                    args: "add --all".into(),
                                    message: "the scan of the folder panicked".into(),
                                })
                            },
                        )
                    };
                    s = lock(&self.scans);
                    (s.running, s.finished, s.last) = (false, me, Some(result));
                    self.scanned.notify_all();
                    continue;
                }
            }
            s = self.scanned.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Writes a commit of `tree` after `parent` into the store; returns its id.
    pub(crate) fn commit(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
    ) -> std::io::Result<String> {
        let who = format!(
            "picogent <picogent@localhost> {} +0000",
            crate::util::now_millis() / 1000
        );
        let mut body = format!("tree {tree}\n");
        if let Some(p) = parent {
            body.push_str(&format!("parent {p}\n"));
        }
        body.push_str(&format!("author {who}\ncommitter {who}\n\n"));
        body.push_str(message.replace('\0', " ").trim_end());
        body.push('\n');
        write_object(&self.git_dir.join("objects"), "commit", body.as_bytes())
    }
}

/// Makes a repository of picogent's own at `git_dir` when there is none, as
/// `git init` would (without forking it): `HEAD` on `master`, `objects/`, `refs/`.
/// Its config and `info/` are [`crate::sandbox::git::restore_own_repository`]'s.
pub(crate) fn create_repository(git_dir: &Path) -> std::io::Result<bool> {
    if git_dir.join("HEAD").exists() {
        return Ok(false);
    }
    for d in [
        "objects/info",
        "objects/pack",
        "refs/heads",
        "refs/tags",
        "info",
    ] {
        std::fs::create_dir_all(git_dir.join(d))?;
    }
    // Written last: a repository without HEAD is made again.
    write_atomically(&git_dir.join("HEAD"), b"ref: refs/heads/master\n")?;
    Ok(true)
}

/// Moves the branch `HEAD` names in `git_dir` to `commit`; `Ok(false)` when HEAD is
/// not a plain branch of picogent's own layout (the caller then asks git).
pub(crate) fn set_head(git_dir: &Path, commit: &str) -> std::io::Result<bool> {
    let head = std::fs::read_to_string(git_dir.join("HEAD"))?;
    let Some(name) = head.trim_end().strip_prefix("ref: refs/heads/") else {
        return Ok(false);
    };
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.ends_with(".lock")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.contains("..");
    // Never through a link planted in the repository.
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let heads = git_dir.join("refs/heads");
    if !plain || !real_dir(&git_dir.join("refs")) || !real_dir(&heads) {
        return Ok(false);
    }
    // git's own protocol: a `.lock` file made exclusively, renamed over the ref.
    let target = heads.join(name);
    let lock_path = heads.join(format!("{name}.lock"));
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock_path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    let written = f
        .write_all(format!("{commit}\n").as_bytes())
        .and_then(|()| f.sync_data())
        .and_then(|()| std::fs::rename(&lock_path, &target));
    if written.is_err() {
        let _ = std::fs::remove_file(&lock_path);
    }
    written.map(|()| true)
}

/// Writes a loose object (zlib-wrapped, stored uncompressed: git reads any valid
/// zlib stream) unless it is there already; returns its id.
fn write_object(objects: &Path, kind: &str, body: &[u8]) -> std::io::Result<String> {
    let mut data = format!("{kind} {}\0", body.len()).into_bytes();
    data.extend_from_slice(body);
    let id = hex(&Sha1::digest(&data));
    let (dir, file) = id.split_at(2);
    let dir = objects.join(dir);
    let path = dir.join(file);
    if path.exists() {
        return Ok(id);
    }
    std::fs::create_dir_all(&dir)?;
    // picogent writes here itself, unconfined: never through a link planted in the
    // store (git, which writes the other objects, runs confined).
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !real_dir(objects) || !real_dir(&dir) {
        return Err(std::io::Error::other(format!(
            "{} is not a folder of picogent's own",
            dir.display()
        )));
    }
    write_atomically(&path, &zlib_stored(&data))?;
    Ok(id)
}

/// Writes `data` to a temporary file beside `path`, then renames it into place.
fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!("tmp_{}", crate::util::random_hex(8)));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    // Synced before its name appears, as git's `core.fsync` does its own objects.
    let r = f
        .write_all(data)
        .and_then(|()| f.sync_data())
        .and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 65535 * 5 + 11);
    out.extend_from_slice(&[0x78, 0x01]);
    let mut chunks = data.chunks(65535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let last = u8::from(chunks.peek().is_none());
        let len = chunk.len() as u16;
        out.push(last);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How long a scan waits for another git (another picogent on the same state
/// folder) to release the store's index before giving up.
pub(crate) const INDEX_WAIT: Duration = Duration::from_secs(5);

/// The lock file git's error names (`Unable to create '<path>.lock': File exists`),
/// when it lies in one of `repositories` (picogent's own).
pub(crate) fn lock_named(message: &str, repositories: &[&Path]) -> Option<PathBuf> {
    let (_, rest) = message.split_once("Unable to create '")?;
    let (path, _) = rest.split_once("': File exists")?;
    let path = PathBuf::from(path);
    let ours = path.is_absolute()
        && path.extension().is_some_and(|e| e == "lock")
        && !path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        && repositories.iter().any(|r| path.starts_with(r));
    ours.then_some(path)
}

/// What tells one lock file from another made later at the same path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LockId {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

/// The lock file at `path`, when there is one (a plain file, not a link).
pub(crate) fn lock_id(path: &Path) -> Option<LockId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())?;
    Some(LockId {
        dev: m.dev(),
        ino: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests may block")]
mod tests {
    use super::*;

    #[test]
    fn only_a_lock_in_picogents_own_repositories_is_named() {
        let store = Path::new("/s/folders/x.git");
        let said =
            |p: &str| format!("fatal: Unable to create '{p}': File exists.\n\nAnother git process");
        assert_eq!(
            lock_named(&said("/s/folders/x.git/index.lock"), &[store]),
            Some(PathBuf::from("/s/folders/x.git/index.lock"))
        );
        for p in [
            "/elsewhere/index.lock",
            "/s/folders/x.git/../../y/index.lock",
            "/s/folders/x.git/index",
            "relative/index.lock",
        ] {
            assert_eq!(lock_named(&said(p), &[store]), None, "{p}");
        }
        assert_eq!(lock_named("fatal: bad object", &[store]), None);
    }

    #[test]
    fn a_written_commit_is_what_git_reads() {
        let dir = tempfile::tempdir().unwrap();
        let git_dir = dir.path().join("s.git");
        create_repository(&git_dir).unwrap();
        let objects = git_dir.join("objects");
        // The empty tree, then a commit of it, both as git names them.
        let tree = write_object(&objects, "tree", b"").unwrap();
        assert_eq!(tree, "4b825dc642cb6eb9a060e54bf8d69288fbee4904");
        let body = "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@b> 0 +0000\ncommitter a <a@b> 0 +0000\n\nm\n";
        let id = write_object(&objects, "commit", body.as_bytes()).unwrap();
        assert!(set_head(&git_dir, &id).unwrap_or(false));
        let out = std::process::Command::new("git")
            .arg(format!("--git-dir={}", git_dir.display()))
            .args(["cat-file", "-p", "HEAD"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), body);
    }
}
