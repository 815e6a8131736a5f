//! Repositories for the tests of picogent's git work: a checkout with one commit, a
//! bare `origin` beside it, and a stand-in `git` that stops (or misbehaves) at a step.

use crate::common::{git, git_program, Sandbox};

/// The working folder as a repository with one commit of `shared.txt`.
pub fn repository(sb: &Sandbox) {
    sb.write("shared.txt", "original\n");
    git(&sb.work, &["init", "-q", "-b", "main"]);
    git(&sb.work, &["add", "."]);
    git(&sb.work, &["commit", "-q", "-m", "first"]);
}

/// A bare repository outside the allowed paths, added to the checkout as `origin`.
pub fn with_origin(sb: &Sandbox) -> std::path::PathBuf {
    let origin = sb.base().join("origin.git");
    git(
        &sb.base(),
        &["init", "-q", "--bare", origin.to_str().unwrap()],
    );
    git(
        &sb.work,
        &["remote", "add", "origin", origin.to_str().unwrap()],
    );
    origin
}

/// A `git` that stands in front of the real one and, for the subcommand a test names,
/// stops at a chosen moment (announcing it with a file) until it is killed: so a test
/// kills picogent at that exact step, not by timing luck.
pub struct SlowGit {
    dir: std::path::PathBuf,
}

impl SlowGit {
    pub fn new(sb: &Sandbox) -> SlowGit {
        let dir = sb.base().join("slow-git");
        std::fs::create_dir_all(&dir).unwrap();
        SlowGit { dir }
    }

    /// Stops the next `git SUB` after `before` (shell, with `$gitdir` and `$real`) ran.
    pub fn stop_at(&self, sub: &str, before: &str) {
        let body = format!(
            "if [ -e \"$dir/armed\" ]; then\n    rm -f \"$dir/armed\"\n    {before}\n    touch \"$dir/reached\"\n    exec sleep 60\n  fi"
        );
        self.instead_of(sub, &body);
        std::fs::write(self.dir.join("armed"), "").unwrap();
    }

    /// Runs `body` (shell, with `$gitdir`, `$real` and `$dir`, this stand-in's folder)
    /// for every `git SUB` before the real git (`body` may exit or exec instead);
    /// every other git runs as it is.
    pub fn instead_of(&self, sub: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let real = git_program();
        let script = format!(
            "#!/bin/sh\nreal={real}\ndir={d}\nskip=0; sub=; gitdir=\nfor a in \"$@\"; do\n  if [ $skip = 1 ]; then skip=0; continue; fi\n  case \"$a\" in\n    -c) skip=1;;\n    --git-dir=*) gitdir=\"${{a#--git-dir=}}\";;\n    -*) ;;\n    *) sub=\"$a\"; break;;\n  esac\ndone\nif [ \"$sub\" = {sub} ]; then\n  {body}\nfi\nexec \"$real\" \"$@\"\n",
            d = self.dir.display()
        );
        let git = self.dir.join("git");
        std::fs::write(&git, script).unwrap();
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// How many times a `body` given to `instead_of` ran `count` (it appends a line to
    /// `$dir/count`).
    pub fn count(&self) -> usize {
        std::fs::read_to_string(self.dir.join("count"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    pub async fn reached(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.dir.join("reached").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "git never reached the step"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
