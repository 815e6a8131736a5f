//! The directory walk grep and find share: `.gitignore` respected (inside a git
//! repository or not), `.git/` skipped, protected paths skipped, dotfiles included.

use std::path::{Path, PathBuf};

use super::Sandbox;

/// Files under `root` (or `root` itself when it is a file), in sorted order.
pub(crate) fn files(root: &Path, sandbox: &Sandbox) -> impl Iterator<Item = PathBuf> {
    let sandbox = sandbox.clone();
    ignore::WalkBuilder::new(root)
        .hidden(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .parents(true)
        .sort_by_file_path(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git")
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
        .filter(move |p| {
            !sandbox.is_protected(&std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        })
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
