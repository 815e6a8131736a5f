//! Landlock rules that leave holes: Landlock can only grant, and a rule on a folder
//! grants everything beneath it, so "all of `/` but picogent's state" is said as rules
//! on every sibling along the way down to each hole. This is how the Landlock level
//! (no namespaces to cover files with) keeps picogent's configuration, `.env`, state
//! and sessions, and the checkout's git folder, out of commands' reach.

use std::path::{Path, PathBuf};

/// Bounds the walk: a folder with more entries than this along the way is not
/// granted (safe: less access, never more).
const MAX_ENTRIES: usize = 20_000;

/// What to grant under `root` so that nothing in `holes` is reached: `covered` gets a
/// rule each (everything beneath them, resolved: a link is granted where it leads,
/// and one that leads into or above a hole is not granted at all); `ancestors` are
/// the folders on the way down to a hole, which can get no rule that reaches beneath.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Carved {
    pub(crate) covered: Vec<PathBuf>,
    pub(crate) ancestors: Vec<PathBuf>,
}

pub(crate) fn carve(root: &Path, holes: &[PathBuf]) -> Carved {
    let holes: Vec<&PathBuf> = holes.iter().filter(|h| h.starts_with(root)).collect();
    let mut out = Carved::default();
    if holes.iter().any(|h| h.as_path() == root) {
        return out;
    }
    if holes.is_empty() {
        out.covered.push(root.to_path_buf());
        return out;
    }
    let touches_hole = |p: &Path| holes.iter().any(|h| h.starts_with(p) || p.starts_with(h));
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        out.ancestors.push(dir.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return out;
            }
            let p = e.path();
            if holes.iter().any(|h| h.as_path() == p) {
                continue;
            }
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && holes.iter().any(|h| h.starts_with(&p)) {
                stack.push(p);
                continue;
            }
            // A link (or anything) whose real place holds a hole or lies in one.
            let Ok(real) = std::fs::canonicalize(&p) else {
                continue;
            };
            if touches_hole(&real) {
                continue;
            }
            out.covered.push(real);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_left_out_and_links_into_them_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let agent = root.join("agent");
        std::fs::create_dir_all(agent.join("state/x")).unwrap();
        std::fs::create_dir_all(agent.join("skills")).unwrap();
        std::fs::write(agent.join("agent.json"), "{}").unwrap();
        std::fs::write(agent.join("notes.md"), "n").unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        std::os::unix::fs::symlink(agent.join("state"), root.join("link-in")).unwrap();
        std::os::unix::fs::symlink(&root, agent.join("skills/up")).unwrap();
        let holes = vec![agent.join("state"), agent.join("agent.json")];
        let c = carve(&root, &holes);
        let mut covered = c.covered.clone();
        covered.sort();
        assert_eq!(
            covered,
            vec![
                agent.join("notes.md"),
                agent.join("skills"),
                root.join("other")
            ]
        );
        assert_eq!(c.ancestors, vec![root.clone(), agent.clone()]);
        // No hole: the root itself; the root a hole: nothing.
        assert_eq!(
            carve(&root.join("other"), &holes).covered,
            vec![root.join("other")]
        );
        assert_eq!(carve(&agent.join("state"), &holes), Carved::default());
    }
}
