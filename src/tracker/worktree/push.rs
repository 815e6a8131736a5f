//! Pushing a task's branch: where the push may go (no path the agent could have
//! written, no transport that runs a program, no rewrite that sends it elsewhere),
//! with what credentials (the operator's, when trusted; GitHub's token through a
//! descriptor), and how often (a push is idempotent: tried again, and the remote asked
//! before a failure is reported).

use std::path::PathBuf;
use std::time::Duration;

use super::{run_raw, TaskTree, Worktrees};

/// Pushes tried within one delivery before the failure is reported.
pub(super) const PUSH_ATTEMPTS: u32 = 5;
/// The first wait between two pushes; each later one doubles it (1 + 2 + 4 + 8 s).
const PUSH_BACKOFF: Duration = Duration::from_secs(1);

/// The folder a remote URL names, when it names one on this machine
/// (`check_url` refused every other form of a local path before).
fn folder_of(url: &str) -> Option<PathBuf> {
    match url.split_once("://") {
        Some(("file", p)) => Some(PathBuf::from(p)),
        None if url.starts_with('/') => Some(PathBuf::from(url)),
        _ => None,
    }
}

/// A push to a folder whose `git-receive-pack` died with an earlier picogent can leave
/// the lock of the task's branch there, refusing every later push: it is removed when
/// it is the very lock an earlier attempt failed on (`seen`: same file, unchanged) and
/// no process has it open. Only the task's own branch, only in a folder remote (a
/// server cleans up after itself; a non-bare folder is refused by git for pushes to
/// its checked-out branch anyway).
fn clear_remote_lock(urls: &[String], branch: &str, seen: &mut Vec<(u64, u64, i64, i64)>) {
    for folder in urls.iter().filter_map(|u| folder_of(u)) {
        let lock = folder.join("refs/heads").join(format!("{branch}.lock"));
        let Some(id) = crate::util::file_id(&lock) else {
            continue;
        };
        if !seen.contains(&id) {
            seen.push(id);
            continue;
        }
        if crate::util::open_by_anyone(&lock) {
            continue;
        }
        match std::fs::remove_file(&lock) {
            Ok(()) => {
                tracing::warn!(lock = %lock.display(), "removed the lock a killed push left in the remote")
            }
            Err(e) => {
                tracing::warn!(lock = %lock.display(), "cannot remove a stale lock in the remote: {e}")
            }
        }
    }
}

/// Where a push's git runs: a task's worktree, or the repository itself (a fetch
/// before the worktree is made).
#[derive(Clone, Copy)]
pub(super) enum GitAt<'a> {
    Tree(&'a TaskTree),
    Repo,
}

/// Why a task's branch was not pushed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PushError {
    /// picogent does not push there: a scheme or remote helper it does not use, a
    /// repository the agent could write, a URL the configuration rewrites.
    #[error("{0}")]
    Refused(String),
    /// git did not push (every attempt; the remote asked before it was believed).
    #[error("{0}")]
    Git(String),
    /// The token could not be handed to git's credential helper.
    #[error("cannot hand the push's token to git: {0}")]
    Credential(String),
}

impl Worktrees {
    /// Pushes the task's branch with the operator's own git credentials (their global
    /// configuration, when no command of the agent's could have written it; programs
    /// named by the repository's configuration never run).
    ///
    /// A push is idempotent, so a failed one is tried again (`PUSH_ATTEMPTS`, waits
    /// doubling from `PUSH_BACKOFF`): the remote may still be finishing a push a
    /// killed picogent started (`cannot lock ref`), or be down for a moment. Before a
    /// failure is believed, the remote is asked what it holds: a push that landed
    /// although git said otherwise is a push.
    pub(super) fn push_branch(&self, tree: &TaskTree, remote: &str) -> Result<(), PushError> {
        let home = crate::sandbox::programs::trusted_home(self.home.as_deref(), &self.allowed);
        if home.is_none() {
            // The agent could have written the home's git and ssh configuration (a
            // `pushInsteadOf`, a `ProxyCommand`): none of it is read.
            tracing::warn!("push: HOME lies inside the agent's allowed paths (or nothing is restricted), so picogent pushes without the global git and ssh configuration found there");
        }
        let urls = self.check_remote(GitAt::Tree(tree), remote, home.as_deref())?;
        // Read at the first failure: a push that works needs no check.
        let mut tip: Option<Option<String>> = None;
        let mut delay = PUSH_BACKOFF;
        let mut locks_seen = Vec::new();
        for attempt in 1.. {
            let e = match self.push_once(tree, remote, home.as_deref(), &urls) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let tip = tip.get_or_insert_with(|| self.full_tip(tree, &tree.branch));
            let landed = tip
                .as_deref()
                .is_some_and(|tip| self.remote_holds(tree, (remote, home.as_deref()), &urls, tip));
            if landed {
                tracing::info!(task = %tree.slug, remote, "git said the push failed, but the remote holds the branch's tip: pushed ({e})");
                return Ok(());
            }
            if attempt >= PUSH_ATTEMPTS {
                return Err(e);
            }
            tracing::warn!(task = %tree.slug, remote, attempt, "the push failed, trying again in {delay:?}: {e}");
            if urls.iter().all(|u| folder_of(u).is_some()) {
                clear_remote_lock(&urls, &tree.branch, &mut locks_seen);
            }
            #[allow(
                clippy::disallowed_methods,
                reason = "on a blocking thread (`close`), never the runtime's"
            )]
            std::thread::sleep(delay);
            delay *= 2;
        }
        unreachable!("the attempts end in a return")
    }

    /// The tip of `branch` where the task's pushes go, fetched into the repository
    /// (`refs/picogent/pushed/…`): the work pushed by another worker of a fleet, or by
    /// a person, that a new worktree starts from. `None` when nothing pushes, or the
    /// remote has no such branch. The fetch goes to the push's first URL, checked as
    /// the push is, with the same configuration and token.
    pub(super) fn fetch_pushed(&self, branch: &str) -> Result<Option<String>, PushError> {
        self.fetch_ref(
            &format!("refs/heads/{branch}"),
            &format!("refs/picogent/pushed/{branch}"),
        )
    }

    /// Fetches the default branch `branch` into `refs/remotes/origin/…` (a clone of
    /// the cache's, before a new task branches from it); its tip, when it has one.
    pub(super) fn fetch_default(&self, branch: &str) -> Result<Option<String>, PushError> {
        self.fetch_ref(
            &format!("refs/heads/{branch}"),
            &format!("refs/remotes/origin/{branch}"),
        )
    }

    /// Fetches the remote's `head` into `into`, from the push's first URL: its tip, or
    /// `None` when nothing pushes or the remote has no such ref.
    fn fetch_ref(&self, head: &str, into: &str) -> Result<Option<String>, PushError> {
        let Some(remote) = self.push.as_deref() else {
            return Ok(None);
        };
        let home = crate::sandbox::programs::trusted_home(self.home.as_deref(), &self.allowed);
        let urls = self.check_remote(GitAt::Repo, remote, home.as_deref())?;
        let Some(url) = urls.first() else {
            return Ok(None);
        };
        let mut ask = self.authorized_git(GitAt::Repo, (remote, home.as_deref()), &urls)?;
        ask.args(["ls-remote", "--quiet", "--upload-pack=git-upload-pack", url])
            .arg(head);
        let listed = self.run(ask).map_err(|e| PushError::Git(e.to_string()))?;
        let named = listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .any(|(_, name)| name == head);
        if !named {
            return Ok(None);
        }
        let mut fetch = self.authorized_git(GitAt::Repo, (remote, home.as_deref()), &urls)?;
        fetch
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-recurse-submodules",
                "--upload-pack=git-upload-pack",
                url,
            ])
            .arg(format!("+{head}:{into}"));
        self.run(fetch).map_err(|e| PushError::Git(e.to_string()))?;
        let mut tip = self.repo_git();
        tip.args(["rev-parse", "--verify", "--quiet", into]);
        Ok(self.run(tip).ok().filter(|t| !t.is_empty()))
    }

    /// The git that pushes, with the token for `urls` (the push and its check).
    fn authorized_git(
        &self,
        at: GitAt<'_>,
        (remote, home): (&str, Option<&std::path::Path>),
        urls: &[String],
    ) -> Result<std::process::Command, PushError> {
        let mut cmd = self.push_git(at, remote, home);
        self.authorize(&mut cmd, urls)?;
        Ok(cmd)
    }

    /// One `git push` of the task's branch.
    fn push_once(
        &self,
        tree: &TaskTree,
        remote: &str,
        home: Option<&std::path::Path>,
        urls: &[String],
    ) -> Result<(), PushError> {
        let mut cmd = self.authorized_git(GitAt::Tree(tree), (remote, home), urls)?;
        let refspec = format!("refs/heads/{0}:refs/heads/{0}", tree.branch);
        cmd.args(["push", "--quiet", "--no-verify", remote, &refspec]);
        self.run(cmd)
            .map(|_| ())
            .map_err(|e| PushError::Git(e.to_string()))
    }

    /// The full id of the branch's tip here.
    fn full_tip(&self, tree: &TaskTree, branch: &str) -> Option<String> {
        let mut cmd = self.tree_git(tree);
        cmd.args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ]);
        self.run(cmd).ok().filter(|t| !t.is_empty())
    }

    /// Whether every URL the push goes to (those `check_remote` checked) has the
    /// branch at `tip`, asked the way the push goes (same configuration, same token,
    /// git's own upload-pack); no when any cannot say.
    fn remote_holds(
        &self,
        tree: &TaskTree,
        (remote, home): (&str, Option<&std::path::Path>),
        urls: &[String],
        tip: &str,
    ) -> bool {
        let branch = format!("refs/heads/{}", tree.branch);
        !urls.is_empty()
            && urls.iter().all(|url| {
                let Ok(mut cmd) = self.authorized_git(GitAt::Tree(tree), (remote, home), urls)
                else {
                    return false;
                };
                cmd.args(["ls-remote", "--quiet", "--upload-pack=git-upload-pack", url])
                    .arg(&branch);
                self.run(cmd).is_ok_and(|out| {
                    out.lines()
                        .filter_map(|l| l.split_once('\t'))
                        .any(|(id, name)| name == branch && id == tip)
                })
            })
    }

    /// The git that pushes, and that says where a push goes: both see the same
    /// configuration, so the URL checked is the URL used.
    /// `home` is the operator's, when it is trusted (`programs::trusted_home`).
    pub(super) fn push_git(
        &self,
        at: GitAt<'_>,
        remote: &str,
        home: Option<&std::path::Path>,
    ) -> std::process::Command {
        let mut cmd = match at {
            GitAt::Tree(tree) => self.tree_git(tree),
            GitAt::Repo => self.repo_git(),
        };
        let mut ssh = "ssh -o BatchMode=yes -o ConnectTimeout=30".to_string();
        match home {
            Some(home) => {
                cmd.env("HOME", home).env_remove("XDG_CONFIG_HOME");
                cmd.env_remove("GIT_CONFIG_GLOBAL");
                if let Some(sock) = std::env::var_os("SSH_AUTH_SOCK") {
                    cmd.env("SSH_AUTH_SOCK", sock);
                }
            }
            None => ssh.push_str(" -F /dev/null"),
        }
        let settings: Vec<(String, String)> = [
            ("protocol.allow", "never"),
            ("protocol.file.allow", "always"),
            ("protocol.https.allow", "always"),
            ("protocol.http.allow", "always"),
            ("protocol.ssh.allow", "always"),
            ("protocol.git.allow", "always"),
            ("core.sshCommand", ssh.as_str()),
            // Never a prompt, never a hang on a dead host.
            ("http.lowSpeedLimit", "1000"),
            ("http.lowSpeedTime", "60"),
            ("credential.helper", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([
            (
                format!("remote.{remote}.receivepack"),
                "git-receive-pack".to_string(),
            ),
            (
                format!("remote.{remote}.uploadpack"),
                "git-upload-pack".to_string(),
            ),
        ])
        .collect();
        // `credential.helper=` empties the whole list (a helper is a program, and the
        // repository's list could name one): pushes authenticate by ssh key or agent,
        // a token in the remote's URL, or GitHub's token (picogent's own helper, set
        // after this, see `authorize`).
        crate::sandbox::git::set_config(&mut cmd, &settings);
        cmd
    }
}

impl Worktrees {
    /// Where a push would really go, after every rewrite git applies: refused when it
    /// is a path on this machine the agent could have written (inside the allowed
    /// paths or the worktrees), a relative path (git would take it from the worktree,
    /// which is the agent's), or a transport other than https, http, ssh, git or file.
    fn check_remote(
        &self,
        at: GitAt<'_>,
        remote: &str,
        home: Option<&std::path::Path>,
    ) -> Result<Vec<String>, PushError> {
        if self.push_url.as_deref() == Some(remote) {
            // A URL (GitHub mode's `remote_url`): no remote's settings apply, and no
            // rewrite may either.
            self.check_rewrites(at, remote, home)?;
            self.check_url(remote, remote)?;
            return Ok(vec![remote.to_string()]);
        }
        let mut cmd = self.push_git(at, remote, home);
        // Every URL: a push goes to each of a remote's push URLs.
        cmd.args(["remote", "get-url", "--push", "--all", remote]);
        let urls = self.run(cmd).map_err(|e| PushError::Git(e.to_string()))?;
        let urls: Vec<String> = urls.lines().map(str::to_string).collect();
        for url in &urls {
            self.check_url(remote, url)?;
        }
        Ok(urls)
    }

    /// Refuses a push to `url` that a `url.<base>.insteadOf` or `pushInsteadOf` in
    /// the push's configuration would send elsewhere.
    fn check_rewrites(
        &self,
        at: GitAt<'_>,
        url: &str,
        home: Option<&std::path::Path>,
    ) -> Result<(), PushError> {
        let mut cmd = self.push_git(at, "origin", home);
        // NUL-separated entries, each `key\nvalue`: a value may hold spaces.
        cmd.args(["config", "-z", "--get-regexp", r"^(url|remote)\."]);
        // Exit 1: no such setting.
        let entries = run_raw(cmd, self.limit).unwrap_or_default();
        for entry in entries.split('\0').filter(|e| !e.is_empty()) {
            let (key, value) = entry.split_once('\n').unwrap_or((entry, ""));
            let key_lower = key.to_ascii_lowercase();
            let rewrites =
                key_lower.ends_with("insteadof") && !value.is_empty() && url.starts_with(value);
            // `[remote "<url>"]` would give the URL settings of its own.
            let section = key_lower
                .strip_prefix("remote.")
                .is_some_and(|rest| rest.starts_with(&url.to_ascii_lowercase()));
            if rewrites || section {
                return Err(PushError::Refused(format!(
                    "remote_url {url}: the git configuration changes where it goes ({key}); picogent does not follow that"
                )));
            }
        }
        Ok(())
    }

    /// Whether a push may go to `url` (see `check_remote`).
    fn check_url(&self, remote: &str, url: &str) -> Result<(), PushError> {
        let url = url.to_string();
        let refuse = |why: String| {
            Err(PushError::Refused(format!(
                "remote {remote} ({url}): {why}"
            )))
        };
        let local = match url.split_once("://") {
            Some(("file", p)) => Some(p.to_string()),
            Some(("https" | "http" | "ssh" | "git" | "git+ssh" | "ssh+git", _)) => None,
            Some((scheme, _)) => {
                return refuse(format!("picogent pushes only over https, http, ssh, git or to a folder, not {scheme}://"));
            }
            None if url.contains("::") => {
                return refuse("picogent does not push through a remote helper".into());
            }
            // `host:path`, git's scp-like ssh form (no slash before the colon).
            None if url.split('/').next().unwrap_or("").contains(':') => None,
            None => Some(url.clone()),
        };
        let Some(path) = local else {
            return Ok(());
        };
        if !std::path::Path::new(&path).is_absolute() {
            return refuse("a relative path would be taken from the task's worktree, which the agent writes; configure the remote with an absolute path".into());
        }
        let path = crate::sandbox::resolved(std::path::Path::new(&path));
        if self.allowed.iter().any(|a| path.starts_with(a)) || path.starts_with(&self.root) {
            return refuse(format!(
                "it is a repository inside the agent's allowed paths ({}); picogent does not push there, since the agent could have planted hooks in it",
                path.display()
            ));
        }
        Ok(())
    }
}

impl Worktrees {
    /// The credential (GitHub's token) goes to the push's HTTPS URLs of its host only,
    /// as a credential git reads from a descriptor (`git_credential`): never in git's
    /// environment or on a command line, never on disk, never to another host.
    fn authorize(&self, cmd: &mut std::process::Command, urls: &[String]) -> Result<(), PushError> {
        let Some((user, token, host)) = self
            .push_token
            .as_ref()
            .and_then(|c| Some((c.user, (c.token)()?, &c.host)))
        else {
            return Ok(());
        };
        let mut origins: Vec<String> = urls
            .iter()
            .filter_map(|u| reqwest::Url::parse(u).ok())
            .filter(|u| u.scheme() == "https" && u.host_str() == Some(host.as_str()))
            // The URL's own origin (with its port): git matches `http.<url>.*` and
            // `credential.<url>.*` so.
            .map(|u| format!("{}/", u.origin().ascii_serialization()))
            .collect();
        if origins.is_empty() {
            return Ok(());
        }
        // One answer for each URL that may ask (each is a connection of its own).
        let answers = origins.len();
        origins.sort();
        origins.dedup();
        let helper = crate::sandbox::git_credential::hand_to(cmd, user, &token, answers)
            .map_err(|e| PushError::Credential(e.to_string()))?;
        let settings: Vec<(String, String)> = origins
            .iter()
            .flat_map(|origin| {
                [
                    // Drops any header the repository's configuration sets for the
                    // host (a CI checkout leaves one), which would be sent instead.
                    (format!("http.{origin}.extraHeader"), String::new()),
                    // After `credential.helper=` (see `push_git`): the only helper,
                    // and only for this host.
                    (format!("credential.{origin}.helper"), helper.clone()),
                ]
            })
            // The credential goes to that host, never where it redirects.
            .chain([("http.followRedirects".to_string(), "false".to_string())])
            .collect();
        crate::sandbox::git::set_config(cmd, &settings);
        Ok(())
    }
}
