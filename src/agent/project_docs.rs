//! Project instructions: the `AGENTS.md` files that apply to a working folder, for the
//! system prompt.
//!
//! A global `~/.picogent/AGENTS.md` comes first; with `pi_home` on, the files other
//! agents keep in a home folder follow it: pi's `~/.pi/agent/AGENTS.md`, Claude Code's
//! `~/.claude/CLAUDE.md` and Codex's `~/.codex/AGENTS.md` (its `AGENTS.override.md`
//! instead when there is one). Then, from the repository's top folder (the nearest
//! folder above the working folder with a `.git`; the filesystem root when there is
//! none) down to the working folder, each folder's
//! `AGENTS.override.md` (Codex's), else its `AGENTS.md`, else its `CLAUDE.md`, and after
//! it the folder's `CLAUDE.local.md` (Claude Code's personal notes) when there is one.
//! Above the repository's top (the working folder itself when it is in none), as pi
//! finds them, the same files of each folder up to the filesystem root — but only where
//! no one else could have put them: a plain file (no link, no second name) and its
//! folder owned by picogent's user (or root), writable by no one else (but their own
//! group, and a shared folder such as `/tmp` only when it is sticky), so another local
//! user cannot plant `/tmp/AGENTS.md` in a run under `/tmp`, nor a `/tmp/.git` that
//! would make `/tmp` a repository's top. Agent mode (`above_top` off) never looks above
//! a task's repository: its worktree is the task's, not the operator's folders.
//! Outermost first, so the nearer file has the last word. Each file is under a heading
//! naming its path; the whole is capped at `MAX_BYTES`, cut on a UTF-8 boundary with a
//! note saying what was left out. A file that is a link must point within its folder.
//!
//! Read once per run, so the system prompt stays the same at every step of it.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most of all files together that goes into the prompt.
pub(crate) const MAX_BYTES: usize = 32 * 1024;

/// The files that apply to `work_dir`, in prompt order.
pub(crate) fn files(
    work_dir: &Path,
    home: Option<&Path>,
    pi_home: bool,
    above_top: bool,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(home) = home {
        out.extend(first_file(&[home.join(".picogent").join("AGENTS.md")]));
        if pi_home {
            let codex = home.join(".codex");
            out.extend(first_file(&[home
                .join(".pi")
                .join("agent")
                .join("AGENTS.md")]));
            out.extend(first_file(&[home.join(".claude").join("CLAUDE.md")]));
            out.extend(first_file(&[
                codex.join("AGENTS.override.md"),
                codex.join("AGENTS.md"),
            ]));
        }
    }
    // A repository's top above the working folder counts only where no one else could
    // have made it one.
    let top = work_dir
        .ancestors()
        .find(|d| d.join(".git").exists() && (*d == work_dir || trusted(d, &d.join(".git"), false)))
        .unwrap_or(work_dir);
    let names = ["AGENTS.override.md", "AGENTS.md", "CLAUDE.md"];
    if above_top {
        let mut above: Vec<&Path> = top.ancestors().skip(1).collect();
        above.reverse();
        for dir in above {
            let own = |f: &PathBuf| trusted(dir, f, true);
            out.extend(first_file(&names.map(|n| dir.join(n))).filter(own));
            out.extend(first_file(&[dir.join("CLAUDE.local.md")]).filter(own));
        }
    }
    let mut chain: Vec<&Path> = work_dir
        .ancestors()
        .take_while(|d| d.starts_with(top))
        .collect();
    chain.reverse();
    for dir in chain {
        out.extend(first_file(&names.map(|n| dir.join(n))));
        out.extend(first_file(&[dir.join("CLAUDE.local.md")]));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|f| seen.insert(f.clone()));
    out
}

/// Whether a file above the repository's top could only have been put there by
/// picogent's user or root: it and its folder owned by one of them, neither writable by
/// anyone else (a folder anyone may write only when sticky: no one else can replace
/// what is in it).
/// (`file`: an instruction file, which must also be a plain file with one name.)
fn trusted(dir: &Path, entry: &Path, file: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (me, my_group) = (crate::sandbox::sys::euid(), crate::sandbox::sys::egid());
    let ours = |m: &std::fs::Metadata| m.uid() == me || m.uid() == 0;
    // Writable by others: the world, or a group other than this user's own.
    let shared = |m: &std::fs::Metadata| {
        m.mode() & 0o002 != 0 || (m.mode() & 0o020 != 0 && m.gid() != my_group)
    };
    let (Ok(d), Ok(f)) = (std::fs::metadata(dir), std::fs::symlink_metadata(entry)) else {
        return false;
    };
    let sticky = d.mode() & 0o1000 != 0;
    let plain = !file || (f.is_file() && f.nlink() == 1);
    let ok = ours(&d) && (!shared(&d) || sticky) && ours(&f) && !shared(&f) && plain;
    if !ok && file {
        tracing::warn!(
            "{} not read into the prompt: above the repository, a file must be a plain file that only you (or root) could have put there",
            entry.display()
        );
    }
    ok
}

/// A file that is a link may point only within its own folder (`CLAUDE.md ->
/// AGENTS.md`): a repository's `AGENTS.md -> ../../agent.json` would put picogent's own
/// files into the prompt, which no tool may read.
fn stays_in_its_folder(file: &Path) -> bool {
    let (Some(dir), Ok(real)) = (file.parent(), file.canonicalize()) else {
        return false;
    };
    dir.canonicalize()
        .is_ok_and(|d| real.parent() == Some(d.as_path()))
}

/// The first of `paths` that is a file (a link only to a file beside it).
fn first_file(paths: &[PathBuf]) -> Option<PathBuf> {
    paths
        .iter()
        .find(|p| p.is_file() && stays_in_its_folder(p))
        .cloned()
}

/// Reads at most `limit` bytes of a regular file.
fn read_capped(path: &Path, limit: usize) -> std::io::Result<(String, bool)> {
    let file = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut buf)?;
    let cut = buf.len() > limit;
    buf.truncate(limit);
    let text = match String::from_utf8(buf) {
        Ok(t) => t,
        // Cut inside a character, or not UTF-8 at all: keep what is valid.
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    Ok((text, cut))
}

/// The prompt section with the project instructions; empty when no file applies.
pub(crate) fn prompt_block(
    work_dir: &Path,
    home: Option<&Path>,
    pi_home: bool,
    above_top: bool,
) -> String {
    let files = files(work_dir, home, pi_home, above_top);
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# Project instructions\n\nThese files hold instructions for the project you work in, \
outermost first; where they disagree, the later (nearer) file wins.",
    );
    let mut budget = MAX_BYTES;
    for (i, path) in files.iter().enumerate() {
        let (text, cut) = match read_capped(path, budget) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot read {}: {e}", path.display());
                continue;
            }
        };
        budget -= text.len();
        out.push_str(&format!("\n\n## {}\n\n{}", path.display(), text.trim_end()));
        if cut {
            let left: Vec<String> = files[i + 1..]
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            out.push_str(&format!(
                "\n\n[Project instructions cut at {} KB: the rest of {}{} left out; read it with the read tool if needed.]",
                MAX_BYTES / 1024,
                path.display(),
                if left.is_empty() {
                    " was".to_string()
                } else {
                    format!(" and {} were", left.join(", "))
                }
            ));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn agent_mode_never_looks_above_the_repository() {
        let base = std::env::temp_dir().join(format!("picogent-docs-{}", std::process::id()));
        let repo = base.join("repo");
        let _ = std::fs::create_dir_all(repo.join(".git"));
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755));
        let _ = std::fs::write(base.join("AGENTS.md"), "above");
        let _ = std::fs::set_permissions(
            base.join("AGENTS.md"),
            std::fs::Permissions::from_mode(0o644),
        );
        let _ = std::fs::write(repo.join("AGENTS.md"), "top");
        let above = base.join("AGENTS.md");
        assert!(super::files(&repo, None, false, true).contains(&above));
        let tracker = super::files(&repo, None, false, false);
        assert!(!tracker.contains(&above) && tracker.contains(&repo.join("AGENTS.md")));
        let _ = std::fs::remove_dir_all(&base);
    }
}
