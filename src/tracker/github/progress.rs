//! The one progress comment picogent keeps on a task's issue: made when work starts,
//! edited as the run goes (its steps so far, at most one edit every `EVERY`), and at
//! the end holding the outcome and the pull request's link, or why GitHub would not
//! open the pull request and the branch that has the work. A task let go without a run
//! to report (its issue closed while picogent was down) has it say that work stopped.
//! It is found again by its hidden marker after a restart, never written twice; the
//! book remembers whether it still says work goes on.
//!
//! Edits of one issue's comment go out one at a time, each rendering the latest state
//! when it is sent, so a late step edit can never overwrite the outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError};
use super::book::{Book, Entry};
use crate::tracker::defuse::defuse;
use crate::util::lock;

/// The hidden first line that names the comment as picogent's progress comment.
pub(crate) const MARKER: &str = "<!-- picogent:progress -->";
/// Between the header and the rest: what survives a restart.
const BODY: &str = "<!-- picogent:body -->";
/// Steps are edited in at most this often.
const EVERY: Duration = Duration::from_secs(3);
/// Steps shown, the latest ones.
const MAX_STEPS: usize = 40;
/// GitHub refuses a comment longer than 65,536 characters (bytes are at least as
/// many).
const MAX_BODY: usize = 65_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Phase {
    Working,
    /// The result is written; its status not yet.
    Ended,
    Done,
    Failed,
    /// The task was let go before its run could end (its issue closed meanwhile).
    Stopped,
}

#[derive(Debug, Default)]
struct Data {
    comment: Option<u64>,
    phase: Option<Phase>,
    steps: Vec<String>,
    total_steps: usize,
    outcome: Option<String>,
    /// What the comment said below its header before a restart.
    restored: Option<String>,
    pull: Option<(u64, String)>,
    /// Why the branch's pull request could not be opened, and where the work is.
    unproposed: Option<String>,
    dirty: bool,
}

/// One issue's comment: its state, and the turn to edit it.
#[derive(Default)]
struct View {
    data: Mutex<Data>,
    sending: tokio::sync::Mutex<()>,
}

pub(crate) struct Progress {
    api: Arc<Api>,
    book: Arc<Book>,
    login: String,
    views: Mutex<HashMap<u64, Arc<View>>>,
    dirty: Notify,
}

impl Progress {
    pub(crate) fn new(api: Arc<Api>, book: Arc<Book>, login: String) -> Arc<Progress> {
        Arc::new(Progress {
            api,
            book,
            login,
            views: Mutex::new(HashMap::new()),
            dirty: Notify::new(),
        })
    }

    fn view(&self, issue: u64) -> Arc<View> {
        lock(&self.views).entry(issue).or_default().clone()
    }

    /// A step of the issue's run: edited in with the next batch.
    pub(crate) fn step(&self, issue: u64, summary: &str) {
        let view = self.view(issue);
        let mut d = lock(&view.data);
        // Before the start is on GitHub (`None`) the steps are kept for it.
        if !matches!(d.phase, None | Some(Phase::Working)) {
            return;
        }
        d.steps
            .push(crate::util::one_line(summary, 160).replace('`', "'"));
        if d.steps.len() > MAX_STEPS {
            d.steps.remove(0);
        }
        d.total_steps += 1;
        d.dirty = true;
        drop(d);
        self.dirty.notify_one();
    }

    /// Work starts: the comment says so (made when there is none).
    pub(crate) async fn start(&self, issue: u64) -> Result<(), ApiError> {
        self.change(issue, |d| {
            // A new run: the last one's steps and outcome go (this run's first steps
            // may already be here).
            if d.phase.is_some_and(|p| p != Phase::Working) {
                d.steps.clear();
                d.total_steps = 0;
            }
            d.phase = Some(Phase::Working);
            d.outcome = None;
            d.restored = None;
            d.unproposed = None;
        })
        .await?;
        self.remember(issue, |e| {
            e.working = true;
            e.unproposed = None;
        })
        .await;
        Ok(())
    }

    pub(crate) async fn outcome(&self, issue: u64, text: &str) -> Result<(), ApiError> {
        self.change(issue, |d| {
            d.phase = Some(Phase::Ended);
            d.outcome = Some(text.to_string());
        })
        .await?;
        self.remember(issue, |e| e.working = false).await;
        Ok(())
    }

    pub(crate) async fn finished(&self, issue: u64, ok: bool) -> Result<(), ApiError> {
        // In a fleet another worker may have written the outcome (any worker delivers a
        // task's next report): without it here, the comment is read again first, so
        // the status keeps what it says instead of writing this worker's older view.
        if self.book.fleet().is_some() {
            let view = self.view(issue);
            let mut d = lock(&view.data);
            if d.outcome.is_none() {
                d.comment = None;
                d.restored = None;
            }
        }
        self.change(issue, |d| {
            d.phase = Some(if ok { Phase::Done } else { Phase::Failed })
        })
        .await?;
        self.remember(issue, |e| e.working = false).await;
        Ok(())
    }

    /// The task was let go without a run to report: a progress comment that still says
    /// work goes on is edited to say it stopped, and `why`. Best effort: when GitHub
    /// does not take it, the book still says so, and the next start tries again.
    pub(crate) async fn stopped(&self, issue: u64, why: &str) {
        let view = self.view(issue);
        let _turn = view.sending.lock().await;
        // Asked in the turn: another call (another worker) may have said it meanwhile.
        if let Err(e) = self
            .book
            .refresh(crate::store::pg::Which::Issues(&[issue]))
            .await
        {
            tracing::warn!(issue, "cannot read the fleet's GitHub record: {e}");
            return;
        }
        if !self.book.get(issue).working {
            return;
        }
        let edited = async {
            self.find(issue, &view).await?;
            {
                let mut d = lock(&view.data);
                if d.comment.is_none() {
                    return Ok(());
                }
                let note = format!("Work on this issue stopped before it finished: {why}.");
                d.phase = Some(Phase::Stopped);
                d.outcome = Some(match d.restored.take() {
                    Some(r) => format!("{note}\n\n{r}"),
                    None => note,
                });
            }
            self.send(issue, &view).await
        };
        match edited.await {
            Ok(()) => self.remember(issue, |e| e.working = false).await,
            Err(e) => tracing::warn!(issue, "cannot say on the issue that work stopped: {e}"),
        }
    }

    /// GitHub would not open the branch's pull request: the comment's end says so.
    pub(crate) async fn unproposed(&self, issue: u64, text: String) {
        lock(&self.view(issue).data).unproposed = Some(text.clone());
        self.remember(issue, |e| e.unproposed = Some(text)).await;
    }

    /// Changes the issue's entry in the book (a failed write is logged: it only
    /// decides what a later comment says).
    async fn remember(&self, issue: u64, f: impl FnOnce(&mut Entry)) {
        if let Err(e) = self.book.change(issue, f).await {
            tracing::error!(issue, "cannot write the GitHub record: {e}");
        }
    }

    /// Whether the issue's pull request is known here.
    pub(crate) fn has_pull(&self, issue: u64) -> bool {
        lock(&self.view(issue).data).pull.is_some()
    }

    pub(crate) fn pull(&self, issue: u64, pull: (u64, String)) {
        let view = self.view(issue);
        let mut d = lock(&view.data);
        d.pull = Some(pull);
        d.unproposed = None;
    }

    /// Applies a change and writes the comment, in the issue's turn.
    async fn change(&self, issue: u64, f: impl FnOnce(&mut Data)) -> Result<(), ApiError> {
        let view = self.view(issue);
        let _turn = view.sending.lock().await;
        self.find(issue, &view).await?;
        {
            let mut d = lock(&view.data);
            // After a restart, what the book kept of a refused pull request.
            if d.pull.is_none() && d.unproposed.is_none() {
                d.unproposed = self.book.get(issue).unproposed;
            }
            f(&mut d);
        }
        self.send(issue, &view).await
    }

    /// Knows the comment's id: remembered, or found by its marker among picogent's
    /// comments on the issue (after a restart), with what it said.
    async fn find(&self, issue: u64, view: &View) -> Result<(), ApiError> {
        if lock(&view.data).comment.is_some() {
            return Ok(());
        }
        let path = self
            .api
            .repo(&format!("/issues/{issue}/comments?per_page=100"));
        let comments = self.api.list(&path, 10).await?;
        let mine = comments.iter().find(|c| {
            c["user"]["login"]
                .as_str()
                .is_some_and(|l| l.eq_ignore_ascii_case(&self.login))
                && c["body"].as_str().is_some_and(|b| b.starts_with(MARKER))
        });
        if let Some(c) = mine {
            let mut d = lock(&view.data);
            d.comment = c["id"].as_u64();
            d.restored = c["body"]
                .as_str()
                .and_then(|b| b.split_once(BODY))
                .map(|(_, rest)| rest.trim().to_string());
        }
        Ok(())
    }

    /// Writes the comment as the view now is: an edit, or the first post.
    async fn send(&self, issue: u64, view: &View) -> Result<(), ApiError> {
        let (id, body) = {
            let mut d = lock(&view.data);
            d.dirty = false;
            (d.comment, render(&d))
        };
        let body = json!({"body": body});
        match id {
            Some(id) => {
                let path = self.api.repo(&format!("/issues/comments/{id}"));
                match self.api.call(Method::PATCH, &path, Some(&body)).await {
                    // Deleted by someone: a new one is made.
                    Err(ApiError::NotFound { .. }) => {
                        lock(&view.data).comment = None;
                        self.post(issue, view, &body).await
                    }
                    other => other.map(drop),
                }
            }
            None => self.post(issue, view, &body).await,
        }
    }

    async fn post(
        &self,
        issue: u64,
        view: &View,
        body: &serde_json::Value,
    ) -> Result<(), ApiError> {
        let path = self.api.repo(&format!("/issues/{issue}/comments"));
        let answer = self.api.call(Method::POST, &path, Some(body)).await?;
        // Without its id the comment cannot be edited: a new one would follow each time.
        let id = answer.body["id"]
            .as_u64()
            .ok_or_else(|| ApiError::lacking(format!("POST {path}"), "id"))?;
        lock(&view.data).comment = Some(id);
        Ok(())
    }

    /// Edits steps in, at most every `EVERY`, until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = self.dirty.notified() => {}
                _ = stop.cancelled() => return,
            }
            let dirty: Vec<(u64, Arc<View>)> = lock(&self.views)
                .iter()
                .filter(|(_, v)| {
                    let d = lock(&v.data);
                    d.dirty && d.comment.is_some() && d.phase == Some(Phase::Working)
                })
                .map(|(n, v)| (*n, v.clone()))
                .collect();
            for (issue, view) in dirty {
                let _turn = view.sending.lock().await;
                // The outcome may have come meanwhile: then there is nothing to add.
                if lock(&view.data).phase != Some(Phase::Working) {
                    continue;
                }
                if let Err(e) = self.send(issue, &view).await {
                    tracing::warn!(issue, "cannot update the progress comment: {e}");
                }
            }
            // Slower as the token's rate limit runs low; none at all near its end
            // (the start and the outcome still go out).
            let (pace, paused) = match self.api.budget().pace() {
                Some(p) => (p, false),
                None => (EVERY * 10, true),
            };
            tokio::select! {
                _ = tokio::time::sleep(pace) => {}
                _ = stop.cancelled() => return,
            }
            if paused {
                // Still dirty: edited in once the window leaves room again.
                self.dirty.notify_one();
            }
        }
    }
}

/// The comment, within GitHub's size: the outcome is cut to what the rest leaves room
/// for.
fn render(d: &Data) -> String {
    let full = render_with(d, usize::MAX);
    if full.len() <= MAX_BODY {
        return full;
    }
    let rest = render_with(d, 0).len();
    let mut text = render_with(d, MAX_BODY.saturating_sub(rest + 100));
    text.push_str(
        "\n\n_(Cut to fit GitHub's comment size; the branch and the session have all of it.)_",
    );
    text
}

/// What the run, GitHub or an earlier comment said is defused as it is rendered (before
/// it is cut to size: the zero-width spaces count).
fn render_with(d: &Data, room: usize) -> String {
    let header = match d.phase {
        Some(Phase::Working) | None => "🚧 **picogent is working on this issue.**".to_string(),
        Some(Phase::Ended) => "**picogent's run ended.**".to_string(),
        Some(Phase::Done) => match (&d.pull, &d.unproposed) {
            (Some((n, _)), _) => format!("✅ **picogent finished: pull request #{n}.**"),
            (None, Some(_)) => {
                "⚠️ **picogent finished, but the pull request could not be opened.**".to_string()
            }
            (None, None) => "✅ **picogent finished.**".to_string(),
        },
        Some(Phase::Failed) => "❌ **picogent could not finish this issue.**".to_string(),
        Some(Phase::Stopped) => "⏹️ **picogent stopped working on this issue.**".to_string(),
    };
    let mut body = String::new();
    match (&d.pull, &d.unproposed) {
        (Some((n, url)), _) => body.push_str(&format!("Pull request: [#{n}]({url})\n\n")),
        // (A comment restored after a restart may say it already.)
        (None, Some(u))
            if matches!(d.phase, Some(Phase::Ended | Phase::Done))
                && (d.outcome.is_some()
                    || !d.restored.as_ref().is_some_and(|r| r.contains(&defuse(u)))) =>
        {
            body.push_str(&format!("{}\n\n", defuse(u)));
        }
        _ => {}
    }
    match (&d.outcome, &d.restored) {
        (Some(o), _) => body.push_str(crate::util::truncate_bytes(&defuse(o), room)),
        (None, Some(r)) => {
            // The link, when known, was written above: not twice.
            let r = match (&d.pull, r.strip_prefix("Pull request: [#")) {
                (Some(_), Some(rest)) => rest.split_once("\n\n").map_or("", |(_, r)| r),
                _ => r.as_str(),
            };
            body.push_str(crate::util::truncate_bytes(&defuse(r), room))
        }
        (None, None) if d.steps.is_empty() => body.push_str("Starting…"),
        (None, None) => {}
    }
    if !d.steps.is_empty() {
        let earlier = d.total_steps.saturating_sub(d.steps.len());
        body.push_str(&format!(
            "\n\n<details><summary>Steps so far: {}</summary>\n\n",
            d.total_steps
        ));
        if earlier > 0 {
            body.push_str(&format!("_({earlier} earlier steps not shown)_\n"));
        }
        for s in &d.steps {
            body.push_str(&format!("- `{}`\n", defuse(s)));
        }
        body.push_str("\n</details>");
    }
    format!("{MARKER}\n{header}\n{BODY}\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comment_keeps_its_marker_and_outcome() {
        let mut d = Data {
            phase: Some(Phase::Working),
            ..Data::default()
        };
        assert!(render(&d).starts_with(MARKER));
        d.steps.push("read src/lib.rs".into());
        d.total_steps = 1;
        assert!(render(&d).contains("Steps so far: 1"));
        d.phase = Some(Phase::Done);
        d.outcome = Some("Fixed it.".into());
        d.pull = Some((5, "https://x/pull/5".into()));
        let text = render(&d);
        assert!(text.contains("pull request #5") && text.contains("Fixed it."));
        let (_, rest) = text.split_once(BODY).unwrap();
        assert!(rest.contains("Fixed it."));
        d.outcome = Some("é".repeat(40_000));
        for i in 0..MAX_STEPS {
            d.steps.push(format!("step {i} {}", "x".repeat(150)));
        }
        let text = render(&d);
        assert!(text.len() <= MAX_BODY, "{}", text.len());
        assert!(text.contains("Cut to fit") && text.contains("Steps so far"));
    }
}
