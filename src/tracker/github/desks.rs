//! The repositories GitHub mode serves, each at a desk of its own: its API paths, its
//! book of issues, its intake, progress comments and sink, its polling. One desk for
//! `github.repo` (task ids `issue-7`, the work folder's clone); with `github.repos`,
//! a desk for each repository the list names, made at start for the names and the
//! patterns' matches GitHub lists, or when a webhook delivery first comes from a
//! repository a pattern matches (task ids `acme:api:issue-7`, clones of the cache's,
//! `clones.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use reqwest::Method;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::api::{Api, ApiError};
use super::book::Book;
use super::intake::Intake;
use super::poll::Poller;
use super::progress::Progress;
use super::sink::Sink;
use crate::config::{GithubConfig, Trigger};
use crate::store::pg::Pg;
use crate::tracker::router::Router;
use crate::tracker::types::{Arrival, TaskId};
use crate::util::lock;

/// The most repositories one deployment serves: each has a desk in memory, and
/// deliveries could otherwise name ever more of them.
const MAX_DESKS: usize = 2000;

/// One repository's part of GitHub mode.
pub(crate) struct Desk {
    /// `owner/name` as GitHub spells it.
    pub(crate) repo: String,
    pub(crate) api: Arc<Api>,
    pub(crate) intake: Arc<Intake>,
    pub(crate) progress: Arc<Progress>,
    pub(crate) sink: Sink,
    pub(crate) book: Arc<Book>,
    pub(crate) trigger: Trigger,
    /// The branch tasks start from and pull requests go into.
    pub(crate) base: String,
    /// Where its task branches are pushed (and its clone fetched from).
    pub(crate) remote: String,
    /// Its clone's worktrees, once a task needed them (`repos` only); `None` again
    /// when the clone was removed to make room.
    pub(crate) trees: tokio::sync::Mutex<Option<Arc<crate::tracker::worktree::Worktrees>>>,
}

impl Desk {
    /// Where each polled list's last poll stopped; a first poll looks a minute back.
    pub(crate) fn marks(&self) -> HashMap<&'static str, String> {
        ["/issues", "/issues/comments", "/pulls/comments"]
            .into_iter()
            .map(|l| {
                let mark = self.book.mark(l);
                let back = std::time::Duration::from_secs(60);
                (
                    l,
                    mark.unwrap_or_else(|| super::started_minus(&self.api, back)),
                )
            })
            .collect()
    }
}

/// What every desk is made with.
pub(crate) struct Kit {
    pub(crate) api: Arc<Api>,
    pub(crate) gh: GithubConfig,
    pub(crate) cfg: crate::config::Config,
    pub(crate) login: String,
    pub(crate) owned: TaskTracker,
    pub(crate) background: CancellationToken,
    pub(crate) store: Option<Arc<Pg>>,
}

/// Polling, once the front runs: each desk made after that starts its own.
#[derive(Clone)]
pub(crate) struct Polling {
    pub(crate) router: Router,
    pub(crate) stop: CancellationToken,
    pub(crate) owned: TaskTracker,
}

pub(crate) struct Desks {
    pub(crate) kit: Kit,
    /// `github.repos`: many repositories, ids that name theirs.
    pub(crate) many: bool,
    desks: Mutex<HashMap<String, Arc<Desk>>>,
    /// One desk made at a time (a webhook and a task may ask for the same).
    making: tokio::sync::Mutex<()>,
    /// The journal's unfinished events at start, for the books of desks made later.
    pending: Mutex<Vec<Arrival>>,
    polling: Mutex<Option<Polling>>,
    /// Where the clones' worktrees go (`<root>/<owner>/<name>`), once one is made.
    pub(crate) trees_base: std::sync::OnceLock<PathBuf>,
}

/// Why a repository has no desk.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeskError {
    #[error("{0} is not one of github.repos")]
    NotServed(String),
    #[error("GitHub: {0}")]
    Api(#[from] ApiError),
    #[error("{0}")]
    Setup(String),
}

impl Desks {
    pub(crate) fn new(kit: Kit) -> Desks {
        Desks {
            many: !kit.gh.repos.is_empty(),
            kit,
            desks: Mutex::new(HashMap::new()),
            making: tokio::sync::Mutex::new(()),
            pending: Mutex::new(Vec::new()),
            polling: Mutex::new(None),
            trees_base: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn all(&self) -> Vec<Arc<Desk>> {
        let mut all: Vec<Arc<Desk>> = lock(&self.desks).values().cloned().collect();
        all.sort_by(|a, b| a.repo.cmp(&b.repo));
        all
    }

    /// The desk of `repo` when it is made.
    pub(crate) fn known(&self, repo: &str) -> Option<Arc<Desk>> {
        lock(&self.desks).get(&repo.to_ascii_lowercase()).cloned()
    }

    /// Whether `repo` is one this deployment serves (a name GitHub allows: it
    /// becomes a folder's).
    pub(crate) fn serves(&self, repo: &str) -> bool {
        if !crate::config::valid_repo_name(repo) {
            return false;
        }
        if self.many {
            self.kit.gh.rule_for(repo).is_some()
        } else {
            repo.eq_ignore_ascii_case(&self.kit.gh.repo())
        }
    }

    /// Whether a delivery comes from picogent's own App installation (every
    /// installation's deliveries are signed with the App's one secret: a stranger
    /// who installs the App must not be served). Deliveries without one, and a
    /// token's, pass.
    pub(crate) fn our_installation(&self, payload: &serde_json::Value) -> bool {
        let super::auth::Auth::App(app) = &**self.kit.api.auth() else {
            return true;
        };
        payload["installation"]["id"]
            .as_u64()
            .is_none_or(|id| id == app.installation_id)
    }

    /// The task's desk and issue, when its repository's desk is made.
    pub(crate) fn known_task(&self, task: &TaskId) -> Option<(Arc<Desk>, u64)> {
        let desk = if self.many {
            self.known(&task.repo_issue()?.0)?
        } else {
            self.all().into_iter().next()?
        };
        let n = desk.intake.issue_of(task)?;
        Some((desk, n))
    }

    /// The task's desk (made when it is not yet) and issue.
    pub(crate) async fn of_task(&self, task: &TaskId) -> Option<(Arc<Desk>, u64)> {
        if let Some(found) = self.known_task(task) {
            return Some(found);
        }
        let (repo, _) = task.repo_issue().filter(|_| self.many)?;
        match self.desk(&repo).await {
            Ok(_) => self.known_task(task),
            Err(e) => {
                tracing::warn!(task = %task, "no desk for the task's repository: {e}");
                None
            }
        }
    }

    /// The desk of `repo`, made when it is not yet (GitHub asked about it).
    pub(crate) async fn desk(&self, repo: &str) -> Result<Arc<Desk>, DeskError> {
        if let Some(d) = self.known(repo) {
            return Ok(d);
        }
        if !self.serves(repo) {
            return Err(DeskError::NotServed(repo.to_string()));
        }
        let _one = self.making.lock().await;
        if let Some(d) = self.known(repo) {
            return Ok(d);
        }
        if lock(&self.desks).len() >= MAX_DESKS {
            return Err(DeskError::Setup(format!(
                "{repo}: picogent serves {MAX_DESKS} repositories at most"
            )));
        }
        let desk = Arc::new(self.make(repo).await?);
        lock(&self.desks).insert(desk.repo.to_ascii_lowercase(), desk.clone());
        if !desk.repo.eq_ignore_ascii_case(repo) {
            // Asked by another spelling: found by that one too.
            lock(&self.desks).insert(repo.to_ascii_lowercase(), desk.clone());
        }
        desk.intake.mend_from_journal(lock(&self.pending).clone());
        let polling = lock(&self.polling).clone();
        if let Some(p) = polling {
            self.start_polling(&desk, &p);
        }
        Ok(desk)
    }

    /// Makes `repo`'s desk: GitHub asked for its name and default branch, its book read.
    async fn make(&self, repo: &str) -> Result<Desk, DeskError> {
        let k = &self.kit;
        let api = Arc::new(k.api.for_repo(repo));
        let answer = api.call(Method::GET, &api.repo(""), None).await?;
        // GitHub's spelling, when it is the same name (another is not believed).
        let full = answer.body["full_name"]
            .as_str()
            .filter(|f| f.eq_ignore_ascii_case(repo) && crate::config::valid_repo_name(f))
            .unwrap_or(repo)
            .to_string();
        let api = Arc::new(k.api.for_repo(&full));
        let default = answer.body["default_branch"]
            .as_str()
            .unwrap_or("main")
            .to_string();
        let rule = k.gh.rule_for(&full);
        let base = rule
            .and_then(|r| r.base_branch.clone())
            .or_else(|| {
                (!self.many)
                    .then(|| k.cfg.git.base_branch.clone())
                    .flatten()
            })
            .map(|b| b.strip_prefix("origin/").unwrap_or(&b).to_string())
            .unwrap_or(default);
        let remote = rule
            .and_then(|r| r.remote_url.clone())
            .or_else(|| (!self.many).then(|| k.gh.remote_url.clone()).flatten())
            .unwrap_or_else(|| format!("https://{}/{full}.git", super::web_host(&k.gh.api_url)));
        let trigger = rule
            .and_then(|r| r.trigger.clone())
            .unwrap_or_else(|| k.gh.trigger.clone())
            .for_login(&k.login);
        let book = Arc::new(self.book(&full).await?);
        let progress = Progress::new(api.clone(), book.clone(), k.login.clone());
        let sink = Sink {
            api: api.clone(),
            progress: progress.clone(),
            book: book.clone(),
            owner: full.split('/').next().unwrap_or_default().to_string(),
            base: base.clone(),
            login: k.login.clone(),
        };
        let intake = Arc::new(Intake::new(
            k.owned.clone(),
            (api.clone(), progress.clone()),
            book.clone(),
            k.login.clone(),
            trigger.clone(),
            (full.clone(), self.many),
            k.gh.trusted_users.clone(),
        ));
        k.owned.spawn(progress.clone().run(k.background.clone()));
        tracing::info!(repository = %full, base = %base, trigger = ?trigger, "GitHub: serving the repository's issues");
        Ok(Desk {
            repo: full,
            api,
            intake,
            progress,
            sink,
            book,
            trigger,
            base,
            remote,
            trees: tokio::sync::Mutex::new(None),
        })
    }

    /// The repository's book: the fleet's store, or a file of the state's (one
    /// repository's is `state/github.json`, as it always was).
    async fn book(&self, repo: &str) -> Result<Book, DeskError> {
        if let Some(pg) = &self.kit.store {
            return Book::open_fleet(pg.clone(), repo)
                .await
                .map_err(|e| DeskError::Setup(format!("the store (github_issues): {e}")));
        }
        let mut dir: PathBuf = self.kit.cfg.state_dir();
        if self.many {
            dir = dir.join("github").join(repo.to_ascii_lowercase());
        }
        tokio::task::spawn_blocking(move || {
            Book::open(&dir).map_err(|e| DeskError::Setup(format!("{}: {e}", dir.display())))
        })
        .await
        .map_err(|e| DeskError::Setup(e.to_string()))?
    }

    /// Keeps the journal's unfinished events for desks made later, and gives them to
    /// the desks made.
    pub(crate) fn mend_from_journal(&self, pending: Vec<Arrival>) {
        if self.kit.store.is_some() {
            // A fleet's book is written with its events, in one transaction.
            return;
        }
        for d in self.all() {
            d.intake.mend_from_journal(pending.clone());
        }
        *lock(&self.pending) = pending;
    }

    /// Starts every desk's polling (and each later desk's when it is made).
    pub(crate) fn poll(&self, p: Polling) {
        *lock(&self.polling) = Some(p.clone());
        for d in self.all() {
            self.start_polling(&d, &p);
        }
    }

    /// The desk's sweep at start, then its polls (when `poll_interval_sec` is set);
    /// until `stop`.
    fn start_polling(&self, desk: &Arc<Desk>, p: &Polling) {
        let poller = Poller {
            intake: desk.intake.clone(),
            router: p.router.clone(),
            api: desk.api.clone(),
            marks: desk.marks(),
            book: desk.book.clone(),
        };
        let (every, stop) = (self.kit.gh.poll_interval, p.stop.clone());
        let trigger = desk.trigger.clone();
        p.owned.spawn(async move {
            let sweep_then_poll = async {
                // Without polling, only the sweep reads what was said while picogent
                // was down.
                poller
                    .sweep(
                        (trigger.assignee.as_deref(), trigger.label.as_deref()),
                        every.is_none(),
                    )
                    .await;
                if let Some(every) = every {
                    poller.run(every, stop.clone()).await;
                }
            };
            tokio::select! {
                _ = sweep_then_poll => {}
                _ = stop.cancelled() => {}
            }
        });
    }

    /// Makes the desks `repos` names at start: each name, and each repository GitHub
    /// lists for the token (or the App's installation) that a pattern matches. A name
    /// GitHub does not answer for is named in the log, not fatal: its webhook
    /// deliveries try again.
    pub(crate) async fn open_listed(&self) {
        let mut wanted: Vec<String> = self
            .kit
            .gh
            .repos
            .iter()
            .filter(|r| r.is_name())
            .map(|r| r.pattern.clone())
            .collect();
        if self.kit.gh.repos.iter().any(|r| !r.is_name()) {
            match self.listed().await {
                Ok(names) => wanted.extend(names.into_iter().filter(|n| self.serves(n))),
                Err(e) => tracing::warn!(
                    "cannot list the repositories GitHub gives picogent; the patterns of github.repos are served as their webhook deliveries come: {e}"
                ),
            }
        }
        for repo in wanted {
            if let Err(e) = self.desk(&repo).await {
                tracing::warn!(repository = %repo, "cannot serve the repository: {e}");
            }
        }
    }

    /// The repositories GitHub gives picogent: an App's installation's, or those the
    /// token's user can reach.
    async fn listed(&self) -> Result<Vec<String>, ApiError> {
        let api = &self.kit.api;
        let items = match &**api.auth() {
            super::auth::Auth::App(_) => {
                api.list_in(
                    "/installation/repositories?per_page=100",
                    Some("repositories"),
                    20,
                )
                .await?
            }
            super::auth::Auth::Token(_) => api.list("/user/repos?per_page=100", 20).await?,
        };
        let names = items
            .iter()
            .filter_map(|r| r["full_name"].as_str().map(str::to_string))
            .collect();
        Ok(names)
    }
}
