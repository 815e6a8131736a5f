//! Reports as GitHub takes them, delivered from the outbox in order, per task:
//!
//! | report | on GitHub |
//! |---|---|
//! | status `in_progress` | the progress comment says work started (made if missing) |
//! | pull request | the branch's pull request, found or opened (`Closes #n`); when GitHub will not open it, the progress comment says why and names the branch |
//! | the task's result | the progress comment holds the outcome and the link |
//! | status `review` / `blocked` | the progress comment's header says how it ended |
//! | a reply to a comment | a new comment (a reply in a review thread) |
//!
//! GitHub takes no idempotency key, so every report is found before it is made again:
//! the progress comment by its marker, the pull request by its branch, a reply by the
//! key hidden in it. A repeat after a crash between a send and its record changes
//! nothing.

use std::sync::Arc;

use reqwest::Method;
use serde_json::{json, Value};

use super::api::{Api, ApiError};
use super::book::Book;
use super::progress::Progress;
use crate::tracker::defuse::defuse;
use crate::tracker::types::{Report, TaskId, TaskStatus};
use crate::tracker::TrackerError;

/// A pull request's body takes the run's answer up to this size.
const MAX_SUMMARY: usize = 30_000;

#[derive(Clone)]
pub(crate) struct Sink {
    pub(crate) api: Arc<Api>,
    pub(crate) progress: Arc<Progress>,
    pub(crate) book: Arc<Book>,
    pub(crate) owner: String,
    /// Pull requests go into this branch.
    pub(crate) base: String,
    pub(crate) login: String,
}

/// A task id that is no GitHub issue's (of a repository served here).
pub(crate) fn not_an_issue(task_id: &TaskId) -> TrackerError {
    TrackerError::Rejected {
        status: 400,
        url: task_id.to_string(),
        message: "not a GitHub issue's task".into(),
    }
}

/// How much earlier than its queueing a report's copy is looked for: the local clock
/// may have been stepped since (and GitHub's offset learnt again).
const LOOK_BACK_MS: i64 = 10 * 60_000;

/// When a report's key says it was queued (`picogent-<millis>-...`, the local clock),
/// on GitHub's clock and `LOOK_BACK_MS` early: where to look for a copy of it. GitHub
/// compares `since` with its own times; by the local clock, one ahead of GitHub's
/// would look past a copy made before a crash or a lost answer, and post it again.
fn since_of(key: &str, clock: &super::clock::Clock) -> Option<String> {
    let millis: i64 = key
        .strip_prefix("picogent-")?
        .split('-')
        .next()?
        .parse()
        .ok()?;
    let local = chrono::DateTime::from_timestamp_millis(millis - LOOK_BACK_MS)?;
    Some(
        clock
            .at_local(local)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

impl Sink {
    /// Delivers one report from the outbox (`Tracker::report`).
    pub(crate) async fn report(
        &self,
        issue: u64,
        report: &Report,
        key: &str,
    ) -> Result<(), TrackerError> {
        let done = match report {
            Report::Status {
                status: TaskStatus::InProgress,
            } => self.progress.start(issue).await,
            Report::Status { status } => {
                if *status == TaskStatus::Review {
                    self.know_pull(issue).await;
                }
                self.progress
                    .finished(issue, *status == TaskStatus::Review)
                    .await
            }
            Report::PullRequest { branch, summary } => {
                self.pull_request(issue, branch, summary).await
            }
            Report::Comment {
                content,
                reply_to: None,
            } => {
                self.know_pull(issue).await;
                self.progress.outcome(issue, content).await
            }
            Report::Comment {
                content,
                reply_to: Some(to),
            } => self.reply(issue, to, content, key).await,
        };
        done.map_err(ApiError::into_tracker)
    }
}

impl Sink {
    /// The issue's pull request for its comment: after a restart, or in a fleet when
    /// another worker opened it, the link is not in memory and the branch finds it.
    async fn know_pull(&self, issue: u64) {
        if !self.progress.has_pull(issue) {
            if let Ok(Some(p)) = self.find_pull(&format!("picogent/issue-{issue}")).await {
                self.progress.pull(issue, p);
            }
        }
    }

    /// Finds the branch's pull request, or opens it. When GitHub refuses it (or answers
    /// what its API does not promise), the progress comment is told why before the
    /// outbox tries again or gives up: the outcome written after it then says so, not
    /// that picogent finished.
    async fn pull_request(&self, issue: u64, branch: &str, summary: &str) -> Result<(), ApiError> {
        match self.propose(issue, branch, summary).await {
            // Tried again for as long as it takes: nothing to say yet.
            Err(
                e @ (ApiError::Transient { .. }
                | ApiError::RateLimited { .. }
                | ApiError::Unauthorized { .. }),
            ) => Err(e),
            Err(e) => {
                let text = format!(
                    "GitHub did not open the pull request from the branch `{branch}`: {e}. The work is on that branch; a pull request can be opened from it by hand."
                );
                self.progress.unproposed(issue, text).await;
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    /// Finds the branch's pull request, or opens it; remembers it for the progress
    /// comment and for review comments on it.
    async fn propose(&self, issue: u64, branch: &str, summary: &str) -> Result<(), ApiError> {
        let found = match self.find_pull(branch).await? {
            Some(p) => Some(p),
            None => self.open_pull(issue, branch, summary).await?,
        };
        let Some((number, url)) = found else {
            return Ok(());
        };
        self.progress.pull(issue, (number, url));
        let recorded = self
            .book
            .change(issue, |e| {
                e.pull = Some(number);
                e.unproposed = None;
            })
            .await;
        if let Err(e) = recorded {
            tracing::error!(issue, "cannot record the pull request: {e}");
        }
        Ok(())
    }

    async fn find_pull(&self, branch: &str) -> Result<Option<(u64, String)>, ApiError> {
        let path = self.api.repo(&format!(
            "/pulls?head={}:{}&state=open&per_page=10",
            self.owner,
            crate::tracker::github::urlencode(branch)
        ));
        let answer = self.api.call(Method::GET, &path, None).await?;
        let Some(pulls) = answer.body.as_array() else {
            return Err(ApiError::lacking(format!("GET {path}"), "list"));
        };
        Ok(pulls
            .iter()
            // Only an open one: after a merged or closed one, new work is a new proposal.
            .find(|p| p["head"]["ref"].as_str() == Some(branch) && p["state"] == "open")
            .and_then(pull_of))
    }

    async fn open_pull(
        &self,
        issue: u64,
        branch: &str,
        summary: &str,
    ) -> Result<Option<(u64, String)>, ApiError> {
        let title = match self
            .api
            .call(
                Method::GET,
                &self.api.repo(&format!("/issues/{issue}")),
                None,
            )
            .await
        {
            Ok(a) => a.body["title"].as_str().unwrap_or_default().to_string(),
            Err(ApiError::NotFound { .. }) => String::new(),
            Err(e) => return Err(e),
        };
        // The title is the squash merge's subject: read as a commit message is.
        let title = if title.trim().is_empty() {
            format!("Work on issue #{issue}")
        } else {
            defuse(&title)
        };
        // The answer's closing keywords and mentions are broken; picogent's own
        // `Closes #n` stays live, and so does its own login (no one is notified of
        // their own mention).
        let summary = if summary.trim().is_empty() {
            "(The agent finished without a written summary.)".to_string()
        } else {
            defuse(crate::util::truncate_bytes(summary, MAX_SUMMARY))
        };
        let body = json!({
            "title": title,
            "head": branch,
            "base": self.base,
            "body": format!("{summary}\n\nCloses #{issue}\n\n_Opened by picogent (@{}) for #{issue}._", self.login),
        });
        match self
            .api
            .call(Method::POST, &self.api.repo("/pulls"), Some(&body))
            .await
        {
            Ok(a) => {
                let Some(pull) = pull_of(&a.body) else {
                    let what = format!("POST {}", self.api.repo("/pulls"));
                    return Err(ApiError::lacking(what, "number"));
                };
                tracing::info!(issue, pull = pull.0, "opened a pull request");
                Ok(Some(pull))
            }
            Err(ApiError::Invalid { message, .. }) if message.contains("already exists") => {
                self.find_pull(branch).await
            }
            Err(ApiError::Invalid { message, .. }) if message.contains("No commits between") => {
                tracing::info!(
                    issue,
                    "no pull request: the branch has no commits the base lacks"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Answers a comment: in its review thread, or as a new comment on the issue,
    /// unless a copy (a repeat after a crash) is there already.
    async fn reply(&self, issue: u64, to: &str, content: &str, key: &str) -> Result<(), ApiError> {
        let mark = format!("<!-- picogent:reply {key} -->");
        let since = since_of(key, self.api.clock())
            .map(|s| format!("&since={s}"))
            .unwrap_or_default();
        let review = to
            .strip_prefix('r')
            .and_then(|r| r.split_once('-'))
            .and_then(|(p, c)| Some((p.parse::<u64>().ok()?, c.parse::<u64>().ok()?)));
        let (list, post) = match review {
            Some((pull, comment)) => (
                format!("/pulls/{pull}/comments?per_page=100{since}"),
                format!("/pulls/{pull}/comments/{comment}/replies"),
            ),
            None => (
                format!("/issues/{issue}/comments?per_page=100{since}"),
                format!("/issues/{issue}/comments"),
            ),
        };
        let existing = self.api.list(&self.api.repo(&list), 10).await?;
        if existing
            .iter()
            .any(|c| c["body"].as_str().is_some_and(|b| b.contains(&mark)))
        {
            return Ok(());
        }
        let body = format!("{mark}\n{}", defuse(content));
        let body = json!({"body": crate::util::truncate_bytes(&body, 65_000)});
        self.api
            .call(Method::POST, &self.api.repo(&post), Some(&body))
            .await
            .map(drop)
    }
}

fn pull_of(v: &Value) -> Option<(u64, String)> {
    Some((
        v["number"].as_u64()?,
        v["html_url"].as_str().unwrap_or_default().to_string(),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_say_when_to_look_from() {
        let clock = crate::tracker::github::clock::Clock::default();
        let s = super::since_of("picogent-1767225600000-3-abcdef", &clock).unwrap();
        assert_eq!(s, "2025-12-31T23:50:00Z");
        assert_eq!(super::since_of("other", &clock), None);
    }
}
