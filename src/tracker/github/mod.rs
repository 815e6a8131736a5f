//! GitHub as the tracker (`tracker: "github"`): issues become tasks behind the same
//! router, journal, outbox and per-task worktrees as Team Board's. `webhook` and
//! `poll` find what happened, `intake` decides what it means (with the `book` of
//! issues that are tasks), `sink` delivers the outbox's reports as GitHub takes them
//! (the `progress` comment, the pull request, replies), `api` and `auth` speak to
//! GitHub. `open` makes it the daemon's door: `Github` is the router's tracker,
//! `Intakes` takes its events.

mod api;
mod auth;
mod book;
mod clock;
mod intake;
mod ledger;
mod payload;
mod poll;
mod progress;
mod sink;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use tokio_util::sync::CancellationToken;

use futures_util::future::BoxFuture;
use tokio_util::task::TaskTracker;

use crate::config::GithubConfig;
use crate::tracker::base::{DaemonError, Timing};
use crate::tracker::door::{Door, Front, Listen, Opening};
use crate::tracker::router::Router;
use crate::tracker::seam::Tracker;
use crate::tracker::types::{Report, TaskId};
use crate::tracker::TrackerError;

use api::{Api, ApiError};
use auth::Auth;

pub(crate) use crate::tracker::client::urlencode;

/// GitHub as the router's tracker: reports through the sink, steps to the progress
/// comment, finished branches proposed as pull requests, and a task's issue looked at
/// again right before its run.
struct Github {
    sink: sink::Sink,
    progress: Arc<progress::Progress>,
    intake: Arc<intake::Intake>,
}

impl Tracker for Github {
    fn report<'a>(
        &'a self,
        task: &'a TaskId,
        report: &'a Report,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), TrackerError>> {
        Box::pin(self.sink.report(task, report, key))
    }

    fn step(&self, task: &TaskId, summary: &str) {
        if let Some(n) = task.issue() {
            self.progress.step(n, summary);
        }
    }

    fn proposes(&self) -> bool {
        true
    }

    fn admit(&self, task: &TaskId) -> BoxFuture<'static, bool> {
        let (intake, issue) = (self.intake.clone(), task.issue());
        Box::pin(async move {
            match issue {
                Some(n) => intake.still_wanted(n).await,
                None => true,
            }
        })
    }
}

/// Who picogent is on GitHub: `GET /user` for a token, the App's bot for an App.
async fn whoami(api: &Api) -> Result<String, ApiError> {
    match &**api.auth() {
        Auth::Token(_) => {
            let a = api.call(Method::GET, "/user", None).await?;
            Ok(a.body["login"].as_str().unwrap_or_default().to_string())
        }
        Auth::App(app) => {
            let jwt = |api: &Api| {
                app.jwt(api.clock().epoch())
                    .map_err(|e| ApiError::Unauthorized {
                        status: 0,
                        what: "GitHub App JWT".into(),
                        message: e.to_string(),
                    })
            };
            let before = api.clock().now();
            let a = match api.call_as(Method::GET, "/app", &jwt(api)?).await {
                // The first JWT is dated by the local clock; once GitHub's answer said
                // its clock is far from it, a JWT dated by GitHub's is tried.
                Err(ApiError::Unauthorized { .. })
                    if (api.clock().now() - before).num_seconds().abs() > 30 =>
                {
                    api.call_as(Method::GET, "/app", &jwt(api)?).await?
                }
                other => other?,
            };
            let slug = a.body["slug"].as_str().unwrap_or_default();
            Ok(if slug.is_empty() {
                String::new()
            } else {
                format!("{slug}[bot]")
            })
        }
    }
}

/// Asks until GitHub answers (a network outage at start is waited out); a refusal
/// (the token, the repository) is a start-up error that names the setting.
async fn ask<T, F: std::future::Future<Output = Result<T, ApiError>>>(
    what: &str,
    retry: Duration,
    stop: &CancellationToken,
    mut f: impl FnMut() -> F,
) -> Result<Option<T>, DaemonError> {
    loop {
        match f().await {
            Ok(v) => return Ok(Some(v)),
            Err(
                e @ (ApiError::Transient { .. }
                | ApiError::RateLimited { .. }
                | ApiError::Malformed { .. }),
            ) => {
                tracing::warn!("{what}: {e}; trying again in {retry:?}");
            }
            Err(e) => return Err(DaemonError::Config(format!("{what}: {e}"))),
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.cancelled() => return Ok(None),
        }
    }
}

/// What start-up learns from GitHub: picogent's login and the default branch.
async fn meet(
    api: &Api,
    gh: &GithubConfig,
    timing: &Timing,
    stop: &CancellationToken,
) -> Result<Option<(String, String)>, DaemonError> {
    let retry = timing.register_retry;
    let Some(login) = ask("GitHub: who is picogent (GET /user)", retry, stop, || {
        whoami(api)
    })
    .await?
    else {
        return Ok(None);
    };
    if login.is_empty() {
        return Err(DaemonError::Config(
            "GitHub did not say picogent's login (GET /user)".into(),
        ));
    }
    let what = format!("github.repo {}", gh.repo());
    let repo_path = api.repo("");
    let Some(repo) = ask(&what, retry, stop, || {
        api.call(Method::GET, &repo_path, None)
    })
    .await?
    else {
        return Ok(None);
    };
    let base = repo.body["default_branch"]
        .as_str()
        .unwrap_or("main")
        .to_string();
    Ok(Some((login, base)))
}

/// The task worktrees of GitHub mode: `work_dir` must be a clone; every task branch is
/// pushed with the token, to GitHub's host only. Blocking (git): off the runtime.
fn worktrees(
    cfg: &crate::config::Config,
    gh: &GithubConfig,
    auth: &Arc<Auth>,
    default_branch: &str,
) -> Result<crate::tracker::worktree::Worktrees, DaemonError> {
    let Some(mut worktrees) =
        crate::tracker::worktree::Worktrees::decide(cfg).map_err(DaemonError::Config)?
    else {
        return Err(DaemonError::Config(format!(
            "tracker \"github\" needs work_dir ({}) to be a clone of {} with at least one commit, and workspace \"worktree\"",
            cfg.work_dir.display(),
            gh.repo()
        )));
    };
    let token_auth = auth.clone();
    worktrees.push_every_branch(
        gh.remote_url.clone(),
        Some(crate::tracker::worktree::Credential {
            user: "x-access-token",
            token: Arc::new(move || token_auth.current()),
            host: web_host(&gh.api_url),
        }),
    );
    worktrees.start_from_default(default_branch);
    Ok(worktrees)
}

/// GitHub mode's door once GitHub answered: the tracker the router reports through
/// (with the intake it asks before a run), and what takes events (webhook, polling).
fn assemble(
    o: &Opening<'_>,
    gh: GithubConfig,
    api: &Arc<Api>,
    (login, default_branch): (String, String),
    (worktrees, book): (crate::tracker::worktree::Worktrees, Arc<book::Book>),
) -> Result<Door, DaemonError> {
    let cfg = o.agent.config();
    let progress = progress::Progress::new(api.clone(), book.clone(), login.clone());
    let sink = sink::Sink {
        api: api.clone(),
        progress: progress.clone(),
        book: book.clone(),
        owner: gh.owner.clone(),
        // Into the branch the task branches start from.
        base: cfg
            .git
            .base_branch
            .as_deref()
            .map(|b| b.strip_prefix("origin/").unwrap_or(b).to_string())
            .unwrap_or(default_branch),
        login: login.clone(),
    };
    let intake = Arc::new(intake::Intake::new(
        o.owned.clone(),
        (api.clone(), progress.clone()),
        book.clone(),
        login.clone(),
        gh.trigger.for_login(&login),
        gh.repo(),
        gh.trusted_users.clone(),
    ));
    // Where the last run's polls stopped; a first run looks a minute back.
    let marks = ["/issues", "/issues/comments", "/pulls/comments"]
        .into_iter()
        .map(|l| {
            let mark = book.mark(l);
            (
                l,
                mark.unwrap_or_else(|| started_minus(api, Duration::from_secs(60))),
            )
        })
        .collect();
    o.owned.spawn(progress.clone().run(o.background.clone()));
    if matches!(&**api.auth(), Auth::App(_)) {
        o.owned
            .spawn(keep_token_fresh(api.clone(), o.background.clone()));
    }
    let tracker = Github {
        sink,
        progress,
        intake: intake.clone(),
    };
    Ok(Door {
        tracker: Arc::new(tracker),
        workspace: crate::tracker::worktree::Workspace::Worktrees(worktrees),
        front: Box::new(Intakes {
            token: cfg.token.clone(),
            trigger: gh.trigger.for_login(&login),
            gh,
            intake,
            api: api.clone(),
            book,
            marks,
        }),
    })
}

/// How GitHub's events come in: the webhook, the sweep at start and polling.
struct Intakes {
    /// `/metrics`' token (AGENT_TOKEN), when one is set.
    token: Option<String>,
    gh: GithubConfig,
    trigger: crate::config::Trigger,
    intake: Arc<intake::Intake>,
    api: Arc<Api>,
    book: Arc<book::Book>,
    marks: std::collections::HashMap<&'static str, String>,
}

impl Front for Intakes {
    /// The book takes back what the journal accepted and it missed.
    fn attach(&mut self, router: &Router) {
        self.intake.mend_from_journal(router.pending_arrivals());
    }

    fn listen(&self, router: &Router) -> Listen {
        let token = self.token.clone().unwrap_or_else(|| {
            tracing::info!(
                "/metrics answers only with AGENT_TOKEN as its bearer token: set one to read it"
            );
            crate::util::random_hex(48)
        });
        Listen {
            host: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            token,
            routes: self
                .gh
                .webhook_secret
                .as_deref()
                .map(|secret| webhook::routes(self.intake.clone(), router.clone(), secret)),
            required: true,
        }
    }

    fn run(
        self: Box<Self>,
        router: Router,
        port: Option<u16>,
        stop: CancellationToken,
        owned: TaskTracker,
    ) -> BoxFuture<'static, Result<(), DaemonError>> {
        Box::pin(async move {
            if let Some(port) = port {
                tracing::info!(
                    port,
                    "listening: /github/webhook, /healthz, /livez, /metrics"
                );
            }
            let poller = poll::Poller {
                intake: self.intake,
                router,
                api: self.api,
                marks: self.marks,
                book: self.book,
            };
            // Polling stops first at shutdown: what it would find now could not be taken.
            let polling = CancellationToken::new();
            let (every, poll_stop, trigger) =
                (self.gh.poll_interval, polling.clone(), self.trigger);
            owned.spawn(async move {
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
                        poller.run(every, poll_stop.clone()).await;
                    }
                };
                tokio::select! {
                    _ = sweep_then_poll => {}
                    _ = poll_stop.cancelled() => {}
                }
            });
            stop.cancelled().await;
            polling.cancel();
            Ok(())
        })
    }
}

/// What GitHub mode's settings give before anything opens: the block, the API client.
pub(crate) struct Prepared {
    gh: GithubConfig,
    auth: Arc<Auth>,
    api: Arc<Api>,
}

/// Checks GitHub mode's settings (before the state opens, so a missing block or a bad
/// key is the first thing an operator hears); `stop` ends the client's waits.
pub(crate) fn prepare(
    gh: &GithubConfig,
    stop: &CancellationToken,
) -> Result<Prepared, DaemonError> {
    let gh = gh.clone();
    let auth =
        Arc::new(Auth::from_config(&gh.auth).map_err(|e| DaemonError::Config(e.to_string()))?);
    let api = Arc::new(
        Api::new(&gh.api_url, &gh.repo(), auth.clone(), stop.clone())
            .map_err(|e| DaemonError::Config(format!("cannot build the HTTP client: {e}")))?,
    );
    Ok(Prepared { gh, auth, api })
}

/// GitHub mode's door: GitHub met (picogent's login, the default branch), the clone's
/// worktrees, the book. `None` when `stop` came while GitHub was still being asked.
pub(crate) async fn open(p: Prepared, o: &Opening<'_>) -> Result<Option<Door>, DaemonError> {
    let Prepared { gh, auth, api } = p;
    let cfg = o.agent.config().clone();
    let Some(met) = meet(&api, &gh, o.timing, o.stop).await? else {
        return Ok(None);
    };
    let trigger = gh.trigger.for_login(&met.0);
    tracing::info!(repository = %gh.repo(), login = %met.0, webhook = gh.webhook_secret.is_some(), poll = ?gh.poll_interval, trigger = ?trigger, "GitHub mode: issues become tasks");
    let (decided, gh_for, default) = (cfg.clone(), gh.clone(), met.1.clone());
    // A fleet's book is the store's, shared; one machine's is a file of its state.
    let shared = match o.store {
        Some(pg) => Some(
            book::Book::open_fleet(pg.clone(), &gh.repo())
                .await
                .map_err(|e| DaemonError::Store {
                    at: "github_issues".into(),
                    message: e.to_string(),
                })?,
        ),
        None => None,
    };
    // The repository found and the book read off the runtime.
    let (worktrees, book) = tokio::task::spawn_blocking(move || {
        let state = decided.state_dir();
        let book = match shared {
            Some(book) => book,
            None => book::Book::open(&state).map_err(|source| DaemonError::State {
                path: state.display().to_string(),
                source,
            })?,
        };
        Ok::<_, DaemonError>((worktrees(&decided, &gh_for, &auth, &default)?, book))
    })
    .await
    .map_err(|e| DaemonError::Config(format!("finding the repository failed: {e}")))??;
    assemble(o, gh, &api, met, (worktrees, Arc::new(book))).map(Some)
}

/// The host a repository's git URLs name for an API at `api_url`: `github.com` for
/// `api.github.com`, else the API's own host (GitHub Enterprise serves both).
fn web_host(api_url: &str) -> String {
    let host = reqwest::Url::parse(api_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default();
    match host.strip_prefix("api.") {
        Some(rest) if rest == "github.com" => rest.to_string(),
        _ => host,
    }
}

/// RFC 3339, `back` before GitHub's now: where polling starts looking.
fn started_minus(api: &Api, back: Duration) -> String {
    let t = api.clock().now() - chrono::Duration::from_std(back).unwrap_or_default();
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Mints a GitHub App's installation token before the current one expires, so a
/// push (which reads the token without asking GitHub) always has one.
async fn keep_token_fresh(api: Arc<Api>, stop: CancellationToken) {
    loop {
        if let Err(e) = api.token().await {
            tracing::warn!("cannot mint a GitHub App installation token: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
            _ = stop.cancelled() => return,
        }
    }
}
