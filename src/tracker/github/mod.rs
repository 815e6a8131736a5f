//! GitHub as the tracker (`tracker: "github"`): issues become tasks behind the same
//! router, journal, outbox and per-task worktrees as Team Board's. `webhook` and
//! `poll` find what happened, `intake` decides what it means (with the `book` of
//! issues that are tasks), `sink` delivers the outbox's reports as GitHub takes them
//! (the `progress` comment, the pull request, replies), `api` and `auth` speak to
//! GitHub. `run` starts it all and shuts it down as Team Board mode does.

mod api;
mod auth;
mod book;
mod clock;
mod intake;
mod payload;
mod poll;
mod progress;
mod sink;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::GithubConfig;
use crate::tracker::base::{DaemonError, Timing};
use crate::tracker::router::{Router, TaskHooks};

use api::{Api, ApiError};
use auth::Auth;

pub(crate) use crate::tracker::client::urlencode;

/// The router's hooks in GitHub mode: steps go to the progress comment, finished
/// branches become pull requests.
struct Hooks {
    progress: Arc<progress::Progress>,
    /// Set once the intake exists (it needs the router, which needs these hooks).
    intake: std::sync::OnceLock<Arc<intake::Intake>>,
}

impl TaskHooks for Hooks {
    fn step(&self, task: &str, summary: &str) {
        if let Some(n) = intake::issue_of_task(task) {
            self.progress.step(n, summary);
        }
    }

    fn proposes(&self) -> bool {
        true
    }

    fn admit(
        &self,
        task: &str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        let intake = self.intake.get().cloned();
        let issue = intake::issue_of_task(task);
        Box::pin(async move {
            match (intake, issue) {
                (Some(intake), Some(n)) => intake.still_wanted(n).await,
                _ => true,
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
/// pushed with the token.
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
    worktrees.push_for_github(
        gh.remote_url.clone(),
        (
            Arc::new(move || token_auth.current()),
            web_host(&gh.api_url),
        ),
        Some(default_branch.to_string()),
    );
    Ok(worktrees)
}

/// GitHub mode's pieces, put together: the router with GitHub's hooks, the sink the
/// outbox delivers through, the intake, and the poller.
struct Parts {
    router: Router,
    sink: sink::Sink,
    intake: Arc<intake::Intake>,
    progress: Arc<progress::Progress>,
    poller: poll::Poller,
}

fn assemble(
    agent: &Agent,
    (journal, outbox): (
        crate::tracker::journal_writer::JournalWriter,
        &crate::tracker::outbox::Outbox,
    ),
    gh: &GithubConfig,
    api: &Arc<Api>,
    (login, default_branch): (String, String),
) -> Result<Parts, DaemonError> {
    let cfg = agent.config();
    let worktrees = worktrees(cfg, gh, api.auth(), &default_branch)?;
    let book =
        Arc::new(
            book::Book::open(&cfg.state_dir()).map_err(|source| DaemonError::State {
                path: cfg.state_dir().display().to_string(),
                source,
            })?,
        );
    let progress = progress::Progress::new(api.clone(), book.clone(), login.clone());
    let hooks = Arc::new(Hooks {
        progress: progress.clone(),
        intake: std::sync::OnceLock::new(),
    });
    let router = Router::new(
        agent.clone(),
        journal,
        outbox.clone(),
        Some(worktrees),
        Some(hooks.clone() as Arc<dyn TaskHooks>),
    );
    let sink = sink::Sink {
        api: api.clone(),
        progress: progress.clone(),
        book: book.clone(),
        owner: gh.owner.clone(),
        // Into the branch the task branches start from.
        base: cfg
            .base_branch
            .as_deref()
            .map(|b| b.strip_prefix("origin/").unwrap_or(b).to_string())
            .unwrap_or(default_branch),
        login: login.clone(),
    };
    let intake = Arc::new(intake::Intake::new(
        router.clone(),
        (api.clone(), progress.clone()),
        book.clone(),
        login.clone(),
        gh.trigger.for_login(&login),
        gh.repo(),
        gh.trusted_users.clone(),
    ));
    let _ = hooks.intake.set(intake.clone());
    let poller = poll::Poller {
        intake: intake.clone(),
        api: api.clone(),
        // Where the last run's polls stopped; a first run looks a minute back.
        marks: ["/issues", "/issues/comments", "/pulls/comments"]
            .into_iter()
            .map(|l| {
                let mark = book.mark(l);
                (
                    l,
                    mark.unwrap_or_else(|| started_minus(api, Duration::from_secs(60))),
                )
            })
            .collect(),
        book,
    };
    Ok(Parts {
        router,
        sink,
        intake,
        progress,
        poller,
    })
}

/// Runs agent mode against GitHub until `stop` is cancelled (then drains) or a
/// fatal error.
pub async fn run(agent: Agent, timing: Timing, stop: CancellationToken) -> Result<(), DaemonError> {
    let cfg = agent.config().clone();
    let gh = cfg
        .github
        .clone()
        .ok_or_else(|| DaemonError::Config("tracker \"github\" needs the `github` block".into()))?;
    let auth =
        Arc::new(Auth::from_config(&gh.auth).map_err(|e| DaemonError::Config(e.to_string()))?);
    let api = Arc::new(
        Api::new(&gh.api_url, &gh.repo(), auth.clone(), stop.clone())
            .map_err(|e| DaemonError::Config(format!("cannot build the HTTP client: {e}")))?,
    );
    let core = crate::tracker::base::Core::open(&agent, &timing)?;
    let Some(met) = meet(&api, &gh, &timing, &stop).await? else {
        return Ok(());
    };
    let trigger = gh.trigger.for_login(&met.0);
    tracing::info!(repository = %gh.repo(), login = %met.0, webhook = gh.webhook_secret.is_some(), poll = ?gh.poll_interval, trigger = ?trigger, "GitHub mode: issues become tasks");
    let parts = assemble(&agent, (core.journal, &core.outbox), &gh, &api, met)?;
    parts.intake.mend_from_journal().await;

    let background = CancellationToken::new();
    let outbox_task = tokio::spawn(core.outbox.clone().run(
        parts.sink,
        timing.report_backoff,
        timing.report_refused_for,
        background.clone(),
    ));
    let router = parts.router;
    router.resume_pending();
    let owned = tokio_util::task::TaskTracker::new();
    owned.spawn(parts.progress.clone().run(background.clone()));
    if matches!(&*auth, Auth::App(_)) {
        owned.spawn(keep_token_fresh(api.clone(), background.clone()));
    }
    let extra = gh
        .webhook_secret
        .as_deref()
        .map(|secret| webhook::routes(parts.intake.clone(), secret));
    let server_stop = CancellationToken::new();
    let port = crate::tracker::base::serve_health(&cfg, &router, extra, &server_stop).await?;
    tracing::info!(
        port,
        "listening: /github/webhook, /healthz, /livez, /metrics"
    );
    // Polling stops first at shutdown: what it would find now could not be taken.
    let polling = CancellationToken::new();
    let (poller, poll_every, poll_stop) = (parts.poller, gh.poll_interval, polling.clone());
    owned.spawn(async move {
        let sweep_then_poll = async {
            // Without polling, only the sweep reads what was said while picogent was down.
            poller
                .sweep(
                    (trigger.assignee.as_deref(), trigger.label.as_deref()),
                    poll_every.is_none(),
                )
                .await;
            if let Some(every) = poll_every {
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
    owned.close();
    crate::tracker::base::wind_down(
        &cfg,
        &router,
        &core.outbox,
        outbox_task,
        &background,
        &server_stop,
    )
    .await;
    owned.wait().await;
    Ok(())
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
