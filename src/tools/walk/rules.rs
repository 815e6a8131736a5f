//! The ignore rules of the walk: each folder's `.ignore` and `.gitignore`, and at a
//! repository's top its `info/exclude`, read and ranked as the `ignore` crate's walker
//! reads them with `require_git(false)` (as the tools walked before): the nearest
//! folder's rule wins, `.ignore` before `.gitignore` before `info/exclude`, and the
//! folders above the root count too, all the way up (the crate stops at a repository's
//! top only when it requires git).
//!
//! What the model controls here is bounded. A rule file is opened without following a
//! final link (as git does since 2.32) and without blocking, and read only when it is a
//! regular file: a FIFO or a device named `.gitignore` is skipped, never waited on. The
//! rules held at once (the folders being walked and those above the root) are at most
//! `RULE_BYTES` of text: past it a file's remaining rules are not applied, and the walk
//! says so, listing files it would have skipped rather than holding (and compiling into
//! matchers) rules without end.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// Rule text one walk holds at once, over all its rule files. Real ones are far
/// smaller (GitHub's templates are a few KB), and rules are compiled into matchers:
/// 64 KiB of globs chosen to compile badly (each its own regular expression) cost
/// ~40 MB and a third of a second (measured; 256 KiB cost 130 MB, then failed to
/// compile at the regex crate's size limit).
pub(super) const RULE_BYTES: usize = 64 << 10;

/// How many rule files a note names before "and N more".
const NOTED: usize = 3;

/// One folder's rules.
pub(super) struct Rules {
    ignore: Option<Gitignore>,
    git: Option<Gitignore>,
    exclude: Option<Gitignore>,
    /// Rule text held, given back to the budget when the folder is left.
    bytes: usize,
}

/// The walk's rule text left, and the rule files it could not apply.
pub(super) struct Budget {
    left: usize,
    skipped: Vec<String>,
    more: usize,
}

impl Budget {
    pub(super) fn new() -> Self {
        Budget {
            left: RULE_BYTES,
            skipped: Vec::new(),
            more: 0,
        }
    }

    fn skip(&mut self, why: String) {
        if self.skipped.len() < NOTED {
            self.skipped.push(why);
        } else {
            self.more += 1;
        }
    }

    /// A line for the model when some rules were not applied.
    pub(super) fn note(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let more = match self.more {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        Some(format!(
            "[Ignore rules not applied, so files they would skip may be listed: {}{more}.]",
            self.skipped.join("; ")
        ))
    }
}

impl Rules {
    /// The rules of folder `dir`; `shown` names a rule file in a note.
    pub(super) fn load(dir: &Path, budget: &mut Budget, shown: &dyn Fn(&Path) -> String) -> Rules {
        let git_type = std::fs::metadata(dir.join(".git"))
            .ok()
            .map(|m| m.file_type());
        let mut rules = Rules {
            ignore: None,
            git: None,
            exclude: None,
            bytes: 0,
        };
        rules.ignore = rules.matcher(dir, &dir.join(".ignore"), budget, shown);
        rules.git = rules.matcher(dir, &dir.join(".gitignore"), budget, shown);
        if let Some(common) = git_type.and_then(|t| common_dir(dir, t)) {
            rules.exclude = rules.matcher(dir, &common.join("info/exclude"), budget, shown);
        }
        rules
    }

    /// Gives this folder's rule text back to the budget.
    pub(super) fn release(&self, budget: &mut Budget) {
        budget.left += self.bytes;
    }

    /// The matcher of one rule file rooted at `dir`, if it exists and has rules.
    fn matcher(
        &mut self,
        dir: &Path,
        file: &Path,
        budget: &mut Budget,
        shown: &dyn Fn(&Path) -> String,
    ) -> Option<Gitignore> {
        let (text, cut) = match read_bounded(file, budget.left) {
            Ok(Some(read)) => read,
            Ok(None) => return None,
            Err(why) => {
                budget.skip(format!("{} ({why})", shown(file)));
                return None;
            }
        };
        if cut {
            budget.skip(format!(
                "{} past the {} KiB of ignore rules a search holds",
                shown(file),
                RULE_BYTES >> 10
            ));
        }
        budget.left -= text.len();
        self.bytes += text.len();
        let mut builder = GitignoreBuilder::new(dir);
        for (i, line) in text.split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // As the `ignore` crate reads a file: a line that is not UTF-8 is skipped,
            // a bad glob too, and a byte-order mark at the start is not a rule.
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            let line = if i == 0 {
                line.trim_start_matches('\u{feff}')
            } else {
                line
            };
            let _ = builder.add_line(Some(file.to_path_buf()), line);
        }
        match builder.build() {
            Ok(g) if !g.is_empty() => Some(g),
            Ok(_) => None,
            Err(e) => {
                budget.skip(format!("{} ({e})", shown(file)));
                None
            }
        }
    }
}

/// Whether `path` is ignored by the rules of `levels`, nearest folder first.
pub(super) fn ignored<'a>(
    levels: impl Iterator<Item = &'a Rules>,
    path: &Path,
    is_dir: bool,
) -> bool {
    let (mut by_ignore, mut by_git, mut by_exclude) = (None, None, None);
    let decide = |m: &Option<Gitignore>, was: Option<bool>| {
        was.or_else(|| {
            let m = m.as_ref()?.matched(path, is_dir);
            (!m.is_none()).then(|| m.is_ignore())
        })
    };
    for level in levels {
        by_ignore = decide(&level.ignore, by_ignore);
        by_git = decide(&level.git, by_git);
        by_exclude = decide(&level.exclude, by_exclude);
    }
    by_ignore.or(by_git).or(by_exclude).unwrap_or(false)
}

/// Where a repository's `info/exclude` lives: `.git` itself, or for a worktree (`.git`
/// a file) its common folder, as the `ignore` crate finds it.
fn common_dir(dir: &Path, git_type: std::fs::FileType) -> Option<PathBuf> {
    let git = dir.join(".git");
    if !git_type.is_file() {
        return Some(git);
    }
    let first_line = |p: &Path| -> Option<String> {
        let (text, _) = read_bounded(p, 4096).ok()??;
        let text = String::from_utf8(text).ok()?;
        text.lines().next().map(str::to_string)
    };
    let gitdir = dir.join(first_line(&git)?.strip_prefix("gitdir: ")?);
    let common = first_line(&gitdir.join("commondir"))?;
    Some(gitdir.join(common))
}

/// A rule file's text, at most `room` bytes of it cut at a line's end (and whether it
/// was cut); `None` when there is none. Opened without following a final link and
/// without blocking; anything but a regular file is refused, not read.
fn read_bounded(path: &Path, room: usize) -> Result<Option<(Vec<u8>, bool)>, String> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("a link".into()),
        Err(e) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut text = Vec::new();
    file.take(room as u64 + 1)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() <= room {
        return Ok(Some((text, false)));
    }
    // The rules that fit, up to the last whole line.
    let keep = text
        .get(..room)
        .and_then(|t| t.iter().rposition(|b| *b == b'\n'))
        .map_or(0, |i| i + 1);
    text.truncate(keep);
    Ok(Some((text, true)))
}
