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
mod budget;
mod clock;
mod clones;
mod desks;
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

/// GitHub as the router's tracker: each task's reports through its repository's
/// sink, steps to its progress comment, finished branches proposed as pull requests,
/// and a task's issue looked at again right before its run.
struct Github {
    desks: Arc<desks::Desks>,
}

impl Tracker for Github {
    fn report<'a>(
        &'a self,
        task: &'a TaskId,
        report: &'a Report,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), TrackerError>> {
        Box::pin(async move {
            let Some((desk, n)) = self.desks.of_task(task).await else {
                return Err(sink::not_an_issue(task));
            };
            desk.sink.report(n, report, key).await
        })
    }

    fn step(&self, task: &TaskId, summary: &str) {
        if let Some((desk, n)) = self.desks.known_task(task) {
            desk.progress.step(n, summary);
        }
    }

    fn proposes(&self) -> bool {
        true
    }

    fn admit(&self, task: &TaskId) -> BoxFuture<'static, bool> {
        let (desks, task) = (self.desks.clone(), task.clone());
        Box::pin(async move {
            match desks.of_task(&task).await {
                Some((desk, n)) => desk.intake.still_wanted(n).await,
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
    if !gh.repos.is_empty() {
        // Each repository's desk asks for its own.
        return Ok(Some((login, String::new())));
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

/// GitHub mode's door once GitHub answered: the tracker the router reports through,
/// the tasks' worktrees, and what takes events (webhook, polling).
fn assemble(
    o: &Opening<'_>,
    gh: GithubConfig,
    api: &Arc<Api>,
    desks: Arc<desks::Desks>,
    workspace: crate::tracker::worktree::Workspace,
) -> Door {
    if matches!(&**api.auth(), Auth::App(_)) {
        o.owned
            .spawn(keep_token_fresh(api.clone(), o.background.clone()));
    }
    let tracker = Github {
        desks: desks.clone(),
    };
    Door {
        tracker: Arc::new(tracker),
        workspace,
        front: Box::new(Intakes {
            token: o.agent.config().token.clone(),
            gh,
            desks,
        }),
    }
}

/// How GitHub's events come in: the webhook, the sweep at start and polling.
struct Intakes {
    /// `/metrics`' token (AGENT_TOKEN), when one is set.
    token: Option<String>,
    gh: GithubConfig,
    desks: Arc<desks::Desks>,
}

impl Front for Intakes {
    /// The books take back what the journal accepted and they missed.
    fn attach(&mut self, router: &Router) {
        self.desks.mend_from_journal(router.pending_arrivals());
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
                .map(|secret| webhook::routes(self.desks.clone(), router.clone(), secret)),
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
            // Polling stops first at shutdown: what it would find now could not be taken.
            let polling = CancellationToken::new();
            self.desks.poll(desks::Polling {
                router,
                stop: polling.clone(),
                owned,
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

/// GitHub mode's door: GitHub met (picogent's login, the default branch), the
/// repositories' desks, the worktrees. `None` when `stop` came while GitHub was still
/// being asked.
pub(crate) async fn open(p: Prepared, o: &Opening<'_>) -> Result<Option<Door>, DaemonError> {
    let Prepared { gh, auth, api } = p;
    let cfg = o.agent.config().clone();
    if let Some(pg) = o.store {
        // One token's rate limit, whichever worker spends it.
        api.budget().share(pg.clone(), auth.budget_key());
    }
    let Some((login, default)) = meet(&api, &gh, o.timing, o.stop).await? else {
        return Ok(None);
    };
    let kit = desks::Kit {
        api: api.clone(),
        gh: gh.clone(),
        cfg: cfg.clone(),
        login: login.clone(),
        owned: o.owned.clone(),
        background: o.background.clone(),
        store: o.store.cloned(),
    };
    let desks = Arc::new(desks::Desks::new(kit));
    if desks.many {
        let names: Vec<&str> = gh.repos.iter().map(|r| r.pattern.as_str()).collect();
        tracing::info!(repositories = ?names, login = %login, webhook = gh.webhook_secret.is_some(), poll = ?gh.poll_interval, "GitHub mode: issues of many repositories become tasks");
        // In the background: a pattern may list many repositories, and webhook
        // deliveries make their desks meanwhile.
        let listing = desks.clone();
        o.owned.spawn(async move { listing.open_listed().await });
        let workspace = crate::tracker::worktree::Workspace::PerRepo(desks.clone());
        return Ok(Some(assemble(o, gh, &api, desks, workspace)));
    }
    let trigger = gh.trigger.for_login(&login);
    tracing::info!(repository = %gh.repo(), login = %login, webhook = gh.webhook_secret.is_some(), poll = ?gh.poll_interval, trigger = ?trigger, "GitHub mode: issues become tasks");
    desks.desk(&gh.repo()).await.map_err(|e| match e {
        desks::DeskError::Setup(m) => DaemonError::Config(m),
        other => DaemonError::Config(format!("github.repo {}: {other}", gh.repo())),
    })?;
    let (decided, gh_for) = (cfg.clone(), gh.clone());
    // The repository found off the runtime.
    let worktrees =
        tokio::task::spawn_blocking(move || worktrees(&decided, &gh_for, &auth, &default))
            .await
            .map_err(|e| DaemonError::Config(format!("finding the repository failed: {e}")))??;
    let workspace = crate::tracker::worktree::Workspace::Worktrees(Arc::new(worktrees));
    Ok(Some(assemble(o, gh, &api, desks, workspace)))
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
