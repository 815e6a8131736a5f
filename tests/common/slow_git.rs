//! A `git` that stands in front of the real one and, for the subcommand a test names,
//! stops at a chosen moment (announcing it with a file): until it is killed, so a test
//! kills picogent at that exact step, or until the test lets it go on, so a test
//! changes the world (fills a disk) at that exact step. Not by timing luck either way.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{git_program, Sandbox};

pub struct SlowGit {
    dir: PathBuf,
}

impl SlowGit {
    pub fn new(sb: &Sandbox) -> SlowGit {
        let dir = sb.base().join("slow-git");
        std::fs::create_dir_all(&dir).unwrap();
        SlowGit { dir }
    }

    /// Stops the next `git SUB` after `before` (shell, with `$gitdir` and `$real`) ran,
    /// until it is killed.
    pub fn stop_at(&self, sub: &str, before: &str) {
        self.install(sub, before, "exec sleep 60");
    }

    /// Holds the next `git SUB` after `before` ran until [`SlowGit::go`], then runs it.
    pub fn pause_at(&self, sub: &str, before: &str) {
        let wait = "while [ ! -e \"$dir/go\" ]; do sleep 0.02; done\n  exec \"$real\" \"$@\"";
        self.install(sub, before, wait);
    }

    fn install(&self, sub: &str, before: &str, then: &str) {
        let body = format!(
            "if [ -e \"$dir/armed\" ]; then\n    rm -f \"$dir/armed\"\n    {before}\n    touch \"$dir/reached\"\n    {then}\n  fi"
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

    /// `PATH` with the stand-in first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Returns once git stopped at the step.
    pub async fn reached(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.dir.join("reached").exists() {
            assert!(Instant::now() < deadline, "git never reached the step");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets a git held by [`SlowGit::pause_at`] go on.
    pub fn go(&self) {
        std::fs::write(self.dir.join("go"), "").unwrap();
    }
}
