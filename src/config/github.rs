//! `tracker` and the `github` block: which tracker agent mode speaks, and, for GitHub,
//! the repository, how picogent authenticates (a token, or a GitHub App), how events
//! arrive (the webhook's secret, or polling) and what makes an issue a task.
//!
//! Secrets come from the environment (`GITHUB_TOKEN` or `GH_TOKEN`,
//! `GITHUB_WEBHOOK_SECRET`); a webhook secret in the file is taken too, as the tracker's
//! token is. Every error names the field or variable at fault.

use std::path::PathBuf;
use std::time::Duration;

use super::load::{check_url, Sources};
use super::types::{FileGithub, FileTrigger, TrackerKind};
use super::ConfigError;

/// How picogent authenticates to GitHub.
#[derive(Clone)]
pub enum GithubAuth {
    /// A personal access token or any other token (`GITHUB_TOKEN`, `GH_TOKEN`).
    Token(String),
    /// A GitHub App: installation tokens are minted with a JWT signed by its key.
    App {
        app_id: u64,
        private_key_file: PathBuf,
        installation_id: u64,
    },
}

impl std::fmt::Debug for GithubAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GithubAuth::Token(_) => f.write_str("Token(<redacted>)"),
            GithubAuth::App {
                app_id,
                installation_id,
                ..
            } => write!(
                f,
                "App {{ app_id: {app_id}, installation_id: {installation_id} }}"
            ),
        }
    }
}

/// What makes an issue a task for picogent. `None` fields do not trigger; when the
/// block sets none of them, assignment to picogent's own login and a mention of it do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trigger {
    pub assignee: Option<String>,
    pub label: Option<String>,
    /// Written `@login`.
    pub mention: Option<String>,
}

impl Trigger {
    /// Whether the block named any trigger.
    pub fn is_empty(&self) -> bool {
        self.assignee.is_none() && self.label.is_none() && self.mention.is_none()
    }

    /// The triggers in effect for an agent whose login is `login`.
    pub fn for_login(&self, login: &str) -> Trigger {
        if !self.is_empty() {
            return self.clone();
        }
        match login.strip_suffix("[bot]") {
            // A GitHub App's bot cannot be assigned, and people mention it by its slug.
            Some(slug) => Trigger {
                assignee: None,
                label: None,
                mention: Some(format!("@{slug}")),
            },
            None => Trigger {
                assignee: Some(login.to_string()),
                label: None,
                mention: Some(format!("@{login}")),
            },
        }
    }
}

/// One entry of `github.repos`: the repositories it names (one, or a pattern's), and
/// the settings they take instead of the block's.
#[derive(Debug, Clone)]
pub struct RepoRule {
    /// `owner/name`, either part possibly with `*`.
    pub pattern: String,
    matcher: globset::GlobMatcher,
    pub base_branch: Option<String>,
    pub trigger: Option<Trigger>,
    pub remote_url: Option<String>,
}

impl RepoRule {
    /// Whether the rule names `repo` (`owner/name`, in any case).
    pub fn matches(&self, repo: &str) -> bool {
        self.matcher.is_match(repo)
    }

    /// Whether it names one repository, not a pattern.
    pub fn is_name(&self) -> bool {
        !self.pattern.contains('*')
    }
}

/// The resolved `github` block.
#[derive(Debug, Clone)]
pub struct GithubConfig {
    /// The one repository (`repo`); empty when `repos` lists them.
    pub owner: String,
    pub name: String,
    /// `repos`: the repositories one deployment serves (empty: just `repo`).
    pub repos: Vec<RepoRule>,
    /// The most the clones of `repos` may take on disk together.
    pub clone_cache_bytes: u64,
    pub api_url: String,
    pub auth: GithubAuth,
    /// `X-Hub-Signature-256` is checked with it; without it no webhook is served.
    pub webhook_secret: Option<String>,
    /// Where task branches are pushed (a URL or a path); `None`: the clone's `origin`.
    pub remote_url: Option<String>,
    /// Polling instead of (or besides) the webhook.
    pub poll_interval: Option<Duration>,
    pub trigger: Trigger,
    /// Logins whose comments may start or steer a task besides the repository's
    /// owners, members and collaborators.
    pub trusted_users: Vec<String>,
}

impl GithubConfig {
    /// `owner/name`.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The first rule of `repos` that names `repo`.
    pub fn rule_for(&self, repo: &str) -> Option<&RepoRule> {
        self.repos.iter().find(|r| r.matches(repo))
    }
}

/// The clones' size limit without `clone_cache_mb`: 10 GiB.
const CLONE_CACHE_MB: u64 = 10_240;

/// A login as GitHub allows it (letters, digits, single hyphens; a bot's `[bot]`).
fn valid_login(s: &str) -> bool {
    let base = s.strip_suffix("[bot]").unwrap_or(s);
    !base.is_empty()
        && base.len() <= 39
        && base.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !base.starts_with('-')
}

/// Whether `repo` is a repository's `owner/name` as GitHub allows them (what may
/// become a folder's name: never `.` or `..`, no other `/`).
pub fn valid_repo_name(repo: &str) -> bool {
    repo.split_once('/')
        .is_some_and(|(o, n)| valid_login(o) && !o.ends_with("[bot]") && valid_repo_part(n))
}

fn valid_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Sources<'_> {
    /// `tracker` (`PICOGENT_TRACKER` over the file).
    pub(super) fn tracker_kind(&self) -> Result<TrackerKind, ConfigError> {
        super::load::choice(
            self.env,
            "PICOGENT_TRACKER",
            &[
                ("team-board", TrackerKind::TeamBoard),
                ("github", TrackerKind::Github),
            ],
            self.file.tracker,
            TrackerKind::TeamBoard,
        )
    }

    /// The `github` block, resolved and checked, when the tracker is GitHub.
    pub(super) fn github(
        &self,
        kind: TrackerKind,
        resolve_path: &dyn Fn(&std::path::Path) -> PathBuf,
    ) -> Result<Option<GithubConfig>, ConfigError> {
        let block = self.file.github.clone();
        if kind != TrackerKind::Github {
            if block.is_some() {
                return Err(self.field_error(
                    "github",
                    "is set, but `tracker` is \"team-board\": set \"tracker\": \"github\" (or PICOGENT_TRACKER=github) to use it".into(),
                ));
            }
            return Ok(None);
        }
        let f = block.unwrap_or_default();
        let repos = self.repo_rules(&f)?;
        let (owner, name, api_url) = self.github_repo(&f, !repos.is_empty())?;
        let auth = self.github_auth(&f, resolve_path)?;
        let (webhook_secret, poll_interval) = self.github_events(&f)?;
        let trusted_users = f.trusted_users.clone().unwrap_or_default();
        if let Some(bad) = trusted_users.iter().find(|u| !valid_login(u)) {
            return Err(self.field_error(
                "github.trusted_users",
                format!("expected GitHub logins, got {bad:?}"),
            ));
        }
        if let Some(r) = &f.remote_url {
            if r.trim().is_empty() {
                return Err(self.field_error("github.remote_url", "is empty".into()));
            }
        }
        let clone_cache_mb = match f.clone_cache_mb {
            Some(0) => {
                return Err(self.field_error(
                    "github.clone_cache_mb",
                    "must be at least 1 (megabytes the clones may take)".into(),
                ))
            }
            Some(mb) => mb,
            None => CLONE_CACHE_MB,
        };
        Ok(Some(GithubConfig {
            owner,
            name,
            repos,
            clone_cache_bytes: clone_cache_mb.saturating_mul(1 << 20),
            api_url,
            auth,
            webhook_secret,
            remote_url: f.remote_url.clone(),
            poll_interval,
            trigger: self.trigger(f.trigger.as_ref())?,
            trusted_users,
        }))
    }

    /// `repo` (or GITHUB_REPOSITORY) as owner and name (none with `repos`), and the
    /// API's URL.
    fn github_repo(
        &self,
        f: &FileGithub,
        listed: bool,
    ) -> Result<(String, String, String), ConfigError> {
        let repo = self
            .env
            .get("GITHUB_REPOSITORY")
            .map(str::to_string)
            .or(f.repo.clone());
        let (owner, name) = match (repo, listed) {
            (Some(_), true) if f.repo.is_some() => {
                return Err(self.field_error(
                    "github.repo",
                    "and github.repos are both set: list every repository in `repos`".into(),
                ))
            }
            (None, false) => {
                return Err(self.field_error(
                    "github.repo",
                    "is required with \"tracker\": \"github\" (\"owner/name\", or GITHUB_REPOSITORY), unless github.repos lists the repositories".into(),
                ))
            }
            // GITHUB_REPOSITORY (set in every Actions job) does not narrow a list.
            (_, true) => (String::new(), String::new()),
            (Some(repo), false) => repo
                .split_once('/')
                .filter(|(o, n)| valid_login(o) && valid_repo_part(n))
                .map(|(o, n)| (o.to_string(), n.to_string()))
                .ok_or_else(|| {
                    self.field_error(
                        "github.repo",
                        format!("expected \"owner/name\", got {repo:?}"),
                    )
                })?,
        };
        let api_url = match self.env.get("GITHUB_API_URL") {
            Some(u) => check_url(u, "GITHUB_API_URL", "environment")?,
            None => match &f.api_url {
                Some(u) => check_url(u, "github.api_url", &self.origin)?,
                None => "https://api.github.com".to_string(),
            },
        };
        Ok((owner, name, api_url))
    }

    /// `repos`: each entry a repository or a pattern (`*` within a part), with its
    /// own settings when it is an object.
    fn repo_rules(&self, f: &FileGithub) -> Result<Vec<RepoRule>, ConfigError> {
        use super::types::FileRepoRule;
        let Some(list) = &f.repos else {
            return Ok(Vec::new());
        };
        if list.is_empty() {
            return Err(self.field_error(
                "github.repos",
                "is empty: list repositories (\"owner/name\", or a pattern such as \"acme/*\"), or use `repo`".into(),
            ));
        }
        list.iter()
            .enumerate()
            .map(|(i, entry)| {
                let at = format!("github.repos[{i}]");
                let (pattern, settings) = match entry {
                    FileRepoRule::Name(n) => (n.clone(), None),
                    FileRepoRule::With(w) => (w.repo.clone(), Some(w)),
                };
                // `*` stands for part of a name; `**` would cross the `/`.
                let plain = |p: &str| p.replace('*', "x");
                if pattern.contains("**") {
                    return Err(self.field_error(&at, format!("{pattern:?}: `**` is not a pattern of one part; use `*`")));
                }
                let usable = pattern.split_once('/').is_some_and(|(o, n)| {
                    valid_login(&plain(o)) && valid_repo_part(&plain(n)) && !n.contains('/')
                });
                if !usable {
                    return Err(self.field_error(
                        &at,
                        format!("expected \"owner/name\" or a pattern such as \"acme/*\", got {pattern:?}"),
                    ));
                }
                let matcher = globset::GlobBuilder::new(&pattern)
                    .case_insensitive(true)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| self.field_error(&at, e.to_string()))?
                    .compile_matcher();
                let trigger = match settings.and_then(|s| s.trigger.as_ref()) {
                    Some(t) => Some(self.trigger(Some(t))?),
                    None => None,
                };
                let nonempty = |v: Option<&String>| v.filter(|s| !s.trim().is_empty()).cloned();
                Ok(RepoRule {
                    pattern,
                    matcher,
                    base_branch: nonempty(settings.and_then(|s| s.base_branch.as_ref())),
                    trigger,
                    remote_url: nonempty(settings.and_then(|s| s.remote_url.as_ref())),
                })
            })
            .collect()
    }

    /// How events arrive: the webhook's secret, polling, or both; one is required.
    fn github_events(
        &self,
        f: &FileGithub,
    ) -> Result<(Option<String>, Option<Duration>), ConfigError> {
        let webhook_secret = self
            .pick("GITHUB_WEBHOOK_SECRET", &f.webhook_secret)
            .filter(|s| !s.is_empty());
        let poll_interval = match f.poll_interval_sec {
            Some(0) => {
                return Err(self.field_error(
                    "github.poll_interval_sec",
                    "must be at least 1 (seconds between polls)".into(),
                ))
            }
            Some(s) => Some(Duration::from_secs(s)),
            None => None,
        };
        if webhook_secret.is_none() && poll_interval.is_none() {
            return Err(self.field_error(
                "github.webhook_secret",
                "is required (or GITHUB_WEBHOOK_SECRET) unless github.poll_interval_sec is set: without either, no event could arrive".into(),
            ));
        }
        Ok((webhook_secret, poll_interval))
    }

    fn github_auth(
        &self,
        f: &FileGithub,
        resolve_path: &dyn Fn(&std::path::Path) -> PathBuf,
    ) -> Result<GithubAuth, ConfigError> {
        let token = ["GITHUB_TOKEN", "GH_TOKEN"]
            .iter()
            .find_map(|v| self.env.get(v).filter(|t| !t.is_empty()));
        match (&f.app, token) {
            (Some(app), _) => {
                let key = resolve_path(&app.private_key_file);
                if !key.is_file() {
                    return Err(self.field_error(
                        "github.app.private_key_file",
                        format!("{} is not a readable file", key.display()),
                    ));
                }
                Ok(GithubAuth::App {
                    app_id: app.app_id,
                    private_key_file: key,
                    installation_id: app.installation_id,
                })
            }
            (None, Some(t)) => Ok(GithubAuth::Token(t.to_string())),
            (None, None) => Err(ConfigError::Env {
                var: "GITHUB_TOKEN".into(),
                message: "agent mode with \"tracker\": \"github\" needs a token (GITHUB_TOKEN or GH_TOKEN) or a GitHub App (`github.app`)".into(),
            }),
        }
    }

    fn trigger(&self, t: Option<&FileTrigger>) -> Result<Trigger, ConfigError> {
        let Some(t) = t else {
            return Ok(Trigger::default());
        };
        let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let trigger = Trigger {
            assignee: nonempty(&t.assignee),
            label: nonempty(&t.label),
            mention: nonempty(&t.mention),
        };
        if let Some(a) = &trigger.assignee {
            if !valid_login(a) {
                return Err(self.field_error(
                    "github.trigger.assignee",
                    format!("expected a GitHub login, got {a:?}"),
                ));
            }
        }
        if let Some(m) = &trigger.mention {
            if !m.strip_prefix('@').is_some_and(valid_login) {
                return Err(self.field_error(
                    "github.trigger.mention",
                    format!("expected \"@login\", got {m:?}"),
                ));
            }
        }
        if trigger.is_empty() {
            return Err(self.field_error(
                "github.trigger",
                "names no trigger: set assignee, label or mention (or leave the block out for assignment to and mentions of picogent's own login)".into(),
            ));
        }
        Ok(trigger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_and_repos_are_checked() {
        assert!(valid_login("octocat"));
        assert!(valid_login("picogent[bot]"));
        assert!(!valid_login("-x"));
        assert!(!valid_login("a b"));
        assert!(valid_repo_part("hello-world.rs"));
        assert!(!valid_repo_part(".."));
        assert!(!valid_repo_part("a/b"));
        let t = Trigger::default().for_login("bot");
        assert_eq!(t.assignee.as_deref(), Some("bot"));
        assert_eq!(t.mention.as_deref(), Some("@bot"));
        let t = Trigger::default().for_login("my-app[bot]");
        assert_eq!(t.assignee, None);
        assert_eq!(t.mention.as_deref(), Some("@my-app"));
    }
}
