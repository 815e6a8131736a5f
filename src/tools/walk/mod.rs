//! The directory walk grep and find share: `.gitignore` respected (inside a git
//! repository or not, see `rules`), `.git/` skipped, protected paths skipped, dotfiles
//! included, links not followed; files come in sorted order, each folder's entries
//! sorted by name and a folder's files right after its name.
//!
//! Memory is bounded whatever the tree. A folder is read in sorted windows: one pass
//! over its entries keeps the smallest names after the last one walked (`Smallest`, at
//! most `WINDOW` names), and another pass follows when the window is used up. The
//! windows of all the folders being walked share `HELD_BYTES`; a deep folder gets
//! what is left, never less than `MIN_WINDOW_BYTES`, so a folder of millions of entries
//! costs passes (time, which the step's timeout and cancellation bound) rather than
//! memory. Every pass and every entry checks the call's cancellation, so a walk left
//! behind by a timed-out or cancelled call stops.

mod rules;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::smallest::Smallest;
use super::Sandbox;
use rules::{Budget, Rules};

/// The most names of one folder held at once.
const WINDOW: usize = 100_000;
/// The names held at once by all the folders being walked, in bytes.
const HELD_BYTES: usize = 16 << 20;
/// A folder's window when the others hold all of `HELD_BYTES`.
const MIN_WINDOW_BYTES: usize = 16 << 10;
/// What one name held costs besides its bytes (the entry and the allocation).
const ENTRY_COST: usize = 48;

/// Files under `root` (or `root` itself when it is a file), in sorted order, until
/// `cancel` is cancelled.
pub(crate) fn files(root: &Path, sandbox: &Arc<Sandbox>, cancel: &CancellationToken) -> Walk {
    let mut walk = Walk {
        root: root.to_path_buf(),
        sandbox: sandbox.clone(),
        cancel: cancel.clone(),
        parents: Vec::new(),
        stack: Vec::new(),
        single: None,
        held: 0,
        budget: Budget::new(),
    };
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => {
            // The rules of the folders above the root apply too (nearest first).
            for dir in root.ancestors().skip(1) {
                let rules = walk.load_rules(dir);
                walk.parents.push(rules);
            }
            walk.enter(root.to_path_buf());
        }
        Ok(m) if m.is_file() && !walk.protected(root) => walk.single = Some(root.to_path_buf()),
        _ => {}
    }
    walk
}

/// A walk under way; an iterator of the files found.
pub(crate) struct Walk {
    root: PathBuf,
    sandbox: Arc<Sandbox>,
    cancel: CancellationToken,
    /// The rules of the folders above the root, nearest first.
    parents: Vec<Rules>,
    /// The folders being walked, the root first.
    stack: Vec<Level>,
    /// The root, when it is a file.
    single: Option<PathBuf>,
    /// What the stack's windows weigh.
    held: usize,
    budget: Budget,
}

/// One folder being walked.
struct Level {
    dir: PathBuf,
    rules: Rules,
    /// The window's entries not yet walked, largest first.
    window: Vec<Entry>,
    /// The largest name read so far: the next pass starts after it.
    cursor: Option<OsString>,
    /// Whether the folder has entries past the window.
    more: bool,
    /// What the window weighs.
    held: usize,
}

/// A folder entry: its name and its own type (a link is not looked through).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    name: OsString,
    kind: Kind,
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Kind {
    Dir,
    File,
    Other,
}

impl Walk {
    /// A line for the model about what the walk could not honour (ignore rules it
    /// did not apply), if anything.
    pub(crate) fn note(&self) -> Option<String> {
        self.budget.note()
    }

    fn load_rules(&mut self, dir: &Path) -> Rules {
        let root = self.root.clone();
        Rules::load(dir, &mut self.budget, &|p| display(p, &root))
    }

    fn protected(&self, path: &Path) -> bool {
        self.sandbox
            .is_protected(&std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
    }

    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let levels = self.stack.iter().rev().map(|l| &l.rules);
        rules::ignored(levels.chain(self.parents.iter()), path, is_dir)
    }

    /// Starts walking folder `dir`: its rules, then its first window.
    fn enter(&mut self, dir: PathBuf) {
        let rules = self.load_rules(&dir);
        self.stack.push(Level {
            dir,
            rules,
            window: Vec::new(),
            cursor: None,
            more: true,
            held: 0,
        });
        self.refill();
    }

    /// Done with the innermost folder.
    fn leave(&mut self) {
        if let Some(level) = self.stack.pop() {
            self.held -= level.held;
            level.rules.release(&mut self.budget);
        }
    }

    /// Reads the innermost folder's next window; a folder that cannot be read has
    /// none.
    fn refill(&mut self) {
        let others = self.held - self.stack.last().map_or(0, |l| l.held);
        let room = HELD_BYTES.saturating_sub(others).max(MIN_WINDOW_BYTES);
        let Some(level) = self.stack.last_mut() else {
            return;
        };
        let (window, more, weight) =
            read_window(&level.dir, level.cursor.as_deref(), room, &self.cancel)
                .unwrap_or_default();
        if let Some(last) = window.last() {
            level.cursor = Some(last.name.clone());
        }
        level.window = window;
        level.window.reverse();
        level.more = more;
        self.held = others + weight;
        level.held = weight;
    }
}

impl Iterator for Walk {
    type Item = PathBuf;

    fn next(&mut self) -> Option<PathBuf> {
        if let Some(file) = self.single.take() {
            return Some(file);
        }
        loop {
            if self.cancel.is_cancelled() {
                while !self.stack.is_empty() {
                    self.leave();
                }
                return None;
            }
            let level = self.stack.last_mut()?;
            let Some(entry) = level.window.pop() else {
                if level.more {
                    self.refill();
                } else {
                    self.leave();
                }
                continue;
            };
            if entry.name == ".git" {
                continue;
            }
            let path = level.dir.join(&entry.name);
            match entry.kind {
                Kind::Dir if !self.ignored(&path, true) && !self.protected(&path) => {
                    self.enter(path)
                }
                Kind::File if !self.ignored(&path, false) && !self.protected(&path) => {
                    return Some(path)
                }
                _ => {}
            }
        }
    }
}

/// One window of folder `dir`: its smallest entries named after `after`, sorted, at
/// most `WINDOW` of them weighing at most `room`; whether the folder has more past
/// them, and what they weigh.
fn read_window(
    dir: &Path,
    after: Option<&OsStr>,
    room: usize,
    cancel: &CancellationToken,
) -> std::io::Result<(Vec<Entry>, bool, usize)> {
    let mut keep = Smallest::new(WINDOW, room);
    for e in std::fs::read_dir(dir)? {
        if cancel.is_cancelled() {
            break;
        }
        let Ok(e) = e else { continue };
        let name = e.file_name();
        if after.is_some_and(|a| name.as_os_str() <= a) {
            continue;
        }
        let kind = match e.file_type() {
            Ok(t) if t.is_dir() => Kind::Dir,
            Ok(t) if t.is_file() => Kind::File,
            _ => Kind::Other,
        };
        let weight = name.len() + ENTRY_COST;
        keep.push(Entry { name, kind }, weight);
    }
    let more = keep.seen() > keep.len();
    let weight = keep.weight();
    Ok((keep.into_sorted(), more, weight))
}

/// How a found path is shown: relative to the search root's folder when possible,
/// with control characters escaped (a name with a newline must not pass for two).
pub(crate) fn display(path: &Path, base: &Path) -> String {
    escape_name(
        &path
            .strip_prefix(base)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .unwrap_or(path)
            .display()
            .to_string(),
    )
}

/// A file name as one line: `\n`, `\r`, tabs and other control characters escaped.
pub(crate) fn escape_name(name: &str) -> String {
    if !name.chars().any(char::is_control) {
        return name.to_string();
    }
    name.chars()
        .map(|c| match c {
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => "\\t".to_string(),
            c if c.is_control() => format!("\\x{:02x}", u32::from(c)),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `ignore` crate's sorted walk, as the tools walked before: the oracle.
    fn oracle(root: &Path) -> Vec<PathBuf> {
        ignore::WalkBuilder::new(root)
            .hidden(false)
            .git_global(false)
            .require_git(false)
            .sort_by_file_path(|a, b| a.cmp(b))
            .filter_entry(|e| e.file_name() != ".git")
            .build()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(ignore::DirEntry::into_path)
            .collect()
    }

    fn ours(root: &Path) -> Vec<PathBuf> {
        let sandbox = Arc::new(Sandbox::default());
        files(root, &sandbox, &CancellationToken::new()).collect()
    }

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(root)).ok();
        std::fs::write(p, text).ok();
    }

    /// Same files, same order, as the `ignore` crate: nesting, negation, `.ignore`
    /// over `.gitignore`, a repository's `info/exclude` (and the rules above it still
    /// applying), directory-only patterns, anchored ones.
    #[test]
    fn walks_as_the_ignore_crate_does() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let top = tmp.path().join("top");
        put(&top, ".gitignore", "*.log\nbuild/\n/anchored.txt\n");
        put(&top, "a.log", "");
        put(&top, "anchored.txt", "");
        put(&top, "keep.txt", "");
        put(&top, "build/x.txt", "");
        put(&top, "src/anchored.txt", "");
        put(&top, "src/.gitignore", "!keep.log\nsecret*\n");
        put(&top, "src/keep.log", "");
        put(&top, "src/other.log", "");
        put(&top, "src/secret.rs", "");
        put(&top, "src/.ignore", "!secret2.rs\n");
        put(&top, "src/secret2.rs", "");
        put(&top, "src/a.b/c.txt", "");
        put(&top, "src/a/c.txt", "");
        put(&top, "repo/.git/info/exclude", "excluded.txt\n");
        put(&top, "repo/excluded.txt", "");
        put(&top, "repo/x.log", "");
        put(&top, "repo/.git/config", "");
        put(&top, ".git", "gitdir: /nowhere\n");
        let want = oracle(&top);
        assert!(want.len() > 5, "{want:?}");
        assert_eq!(ours(&top), want);
        // From below the top: the rules of the folders above apply.
        assert_eq!(ours(&top.join("src")), oracle(&top.join("src")));
        assert_eq!(ours(&top.join("repo")), oracle(&top.join("repo")));
    }

    /// A worktree's `.git` is a file: its `info/exclude` is the main repository's.
    #[test]
    fn a_worktree_uses_its_repositorys_exclude() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let base = tmp.path();
        put(base, "main/.git/info/exclude", "local.txt\n");
        put(base, "main/.git/worktrees/wt/commondir", "../..\n");
        let gitdir = base.join("main/.git/worktrees/wt");
        put(base, "wt/.git", &format!("gitdir: {}\n", gitdir.display()));
        put(base, "wt/local.txt", "");
        put(base, "wt/kept.txt", "");
        let want = oracle(&base.join("wt"));
        assert_eq!(want, [base.join("wt/kept.txt")]);
        assert_eq!(ours(&base.join("wt")), want);
    }

    #[test]
    fn a_linked_rule_file_is_not_followed_and_is_noted() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = tmp.path();
        put(root, "rules", "*.txt\n");
        put(root, "a.txt", "");
        std::os::unix::fs::symlink(root.join("rules"), root.join(".gitignore")).ok();
        let sandbox = Arc::new(Sandbox::default());
        let mut walk = files(root, &sandbox, &CancellationToken::new());
        let found: Vec<PathBuf> = walk.by_ref().collect();
        assert_eq!(found, [root.join("a.txt"), root.join("rules")]);
        assert_eq!(
            walk.note().as_deref(),
            Some(
                "[Ignore rules not applied, so files they would skip may be listed: \
                 .gitignore (a link).]"
            )
        );
    }

    #[test]
    fn a_cancelled_walk_ends() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        put(tmp.path(), "a.txt", "");
        let cancel = CancellationToken::new();
        cancel.cancel();
        let sandbox = Arc::new(Sandbox::default());
        assert_eq!(files(tmp.path(), &sandbox, &cancel).count(), 0);
    }
}
