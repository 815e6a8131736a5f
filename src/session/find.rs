//! `--session ARG`: a session file's path, the id in its header (pi's UUID), or a
//! unique prefix of either, looked up in picogent's sessions folder and then in pi's
//! (`~/.pi/agent/sessions/<cwd>/<time>_<uuid>.jsonl`).

use std::path::{Path, PathBuf};

use super::valid_id;

#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("--session {arg:?} matches several sessions: {}", list(.matches))]
    Ambiguous { arg: String, matches: Vec<PathBuf> },
    #[error("--session {0:?} matches no session and is not a valid new session name (letters, digits, '.', '_' and '-')")]
    NoMatch(String),
    #[error("--session file {}: its name is not a usable session id", .0.display())]
    BadFileName(PathBuf),
}

fn list(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// Where the session to run lives.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// An existing file: its folder and its id there (the file's name without `.jsonl`).
    Existing { dir: PathBuf, id: String },
    /// Nothing matched: a new session of that name in picogent's folder.
    New(String),
    /// A path to a file that does not exist yet: a new session there (as pi's
    /// `--session PATH` makes one).
    NewAt { dir: PathBuf, id: String },
}

/// pi's sessions folder under `home`.
pub fn pi_sessions_dir(home: &Path) -> PathBuf {
    home.join(".pi").join("agent").join("sessions")
}

/// Resolves `arg` against picogent's folder (`own`) and pi's (`pi`).
pub fn resolve(arg: &str, own: &Path, pi: Option<&Path>) -> Result<Found, FindError> {
    if valid_id(arg) && own.join(format!("{arg}.jsonl")).is_file() {
        return Ok(Found::Existing {
            dir: own.to_path_buf(),
            id: arg.to_string(),
        });
    }
    let as_path = Path::new(arg);
    if arg.contains('/') || arg.ends_with(".jsonl") {
        if as_path.is_file() {
            return existing(as_path);
        }
        // A new file where its folder is (or will be): named like any session.
        let id = stem(as_path).filter(|s| valid_id(s) && arg.ends_with(".jsonl"));
        // `notes.jsonl` alone is a file in the current folder.
        let dir = as_path.parent().map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        });
        if let (Some(id), Some(dir)) = (id, dir) {
            return Ok(Found::NewAt {
                dir: dir.to_path_buf(),
                id,
            });
        }
    }
    let mut files = jsonl_files(own, 0);
    if let Some(pi) = pi {
        files.extend(jsonl_files(pi, 2));
    }
    let named: Vec<(PathBuf, String, Option<String>)> = files
        .into_iter()
        .map(|p| {
            let stem = stem(&p).unwrap_or_default();
            let header = header_id(&p);
            (p, stem, header)
        })
        .collect();
    let exact: Vec<&PathBuf> = named
        .iter()
        .filter(|(_, s, h)| s == arg || h.as_deref() == Some(arg))
        .map(|(p, _, _)| p)
        .collect();
    let matches = if exact.is_empty() {
        named
            .iter()
            .filter(|(_, s, h)| {
                s.starts_with(arg) || h.as_deref().is_some_and(|h| h.starts_with(arg))
            })
            .map(|(p, _, _)| p)
            .collect()
    } else {
        exact
    };
    match matches.as_slice() {
        [] if valid_id(arg) => Ok(Found::New(arg.to_string())),
        [] => Err(FindError::NoMatch(arg.to_string())),
        [one] => existing(one),
        many => Err(FindError::Ambiguous {
            arg: arg.to_string(),
            matches: many.iter().map(|p| p.to_path_buf()).collect(),
        }),
    }
}

fn stem(path: &Path) -> Option<String> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".jsonl")
        .map(str::to_string)
}

fn existing(path: &Path) -> Result<Found, FindError> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let bad = || FindError::BadFileName(path.clone());
    let id = stem(&path).filter(|s| valid_id(s)).ok_or_else(bad)?;
    let dir = path.parent().ok_or_else(bad)?.to_path_buf();
    Ok(Found::Existing { dir, id })
}

/// The `.jsonl` files in `dir` and, `depth` levels down, in its subfolders.
fn jsonl_files(dir: &Path, depth: u32) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && depth > 0 {
            out.extend(jsonl_files(&path, depth - 1));
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The newest session in `dir` (by its file's last change) that was started in `cwd`:
/// what `picogent run --continue` continues.
pub fn latest_in(dir: &Path, cwd: &Path) -> Option<String> {
    recent_in(dir, cwd, 1)
        .into_iter()
        .next()
        .map(|(_, id, _)| id)
}

/// The sessions in `dir` started in `cwd`, newest first (by their files' last change),
/// at most `n`: when, the id, the file.
pub fn recent_in(
    dir: &Path,
    cwd: &Path,
    n: usize,
) -> Vec<(std::time::SystemTime, String, PathBuf)> {
    let want = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let mut all = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return all;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let Some(h) = header(&path) else { continue };
        let started_here = h["cwd"].as_str().is_some_and(|c| {
            let c = Path::new(c);
            c == want || std::fs::canonicalize(c).is_ok_and(|c| c == want)
        });
        let (Some(id), Ok(modified)) = (h["id"].as_str(), e.metadata().and_then(|m| m.modified()))
        else {
            continue;
        };
        if started_here {
            all.push((modified, id.to_string(), path));
        }
    }
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    all.truncate(n);
    all
}

/// The `id` in a file's header line, if it has one.
fn header_id(path: &Path) -> Option<String> {
    header(path)?["id"].as_str().map(str::to_string)
}

/// A session file's header line (its first 64 KB at most), without reading the rest.
pub fn header(path: &Path) -> Option<serde_json::Value> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    std::io::BufReader::new(file)
        .take(64 * 1024)
        .read_line(&mut first)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&first).ok()?;
    (v["type"] == "session").then_some(v)
}
