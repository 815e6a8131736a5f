//! Finding events without a webhook: at start, the open issues that already match the
//! trigger (and the tasks whose issues were closed meanwhile), and without polling the
//! comments written since the last webhook delivery picogent handled (a comment
//! written while it was down gets no delivery it could take); then, with
//! `poll_interval_sec`, every interval the issues, comments and review comments
//! updated since the last change seen. Each list is asked for with the same `since`
//! until something newer appears, so GitHub can answer 304 to the ETag picogent sends
//! (such answers do not count against the rate limit).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::api::{Api, ApiError};
use super::book::Book;
use super::book::HEARD;
use super::intake::Intake;
use super::payload::{self, CommentKind, Incoming, Issue};

/// Pages of one list read per poll, at most.
const MAX_PAGES: usize = 10;
/// Comments are read from this long before that mark: it is written at most every ten
/// seconds. What was taken already is a duplicate the journal knows.
const HEARD_SLACK: i64 = 15;

type Time = chrono::DateTime<chrono::Utc>;

/// A list's changed items, the mark they were asked with, and the next mark.
type Changed = (Vec<Value>, Option<Time>, Option<String>);

/// A time as GitHub (or a compatible server, with an offset) writes it, in UTC.
fn time(s: &str) -> Option<Time> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Whether a comment a poll found was written since the mark, not an older one
/// edited since (whose edit says nothing new to picogent).
fn written_since(c: &Value, mark: Option<Time>) -> bool {
    match (mark, c["created_at"].as_str().and_then(time)) {
        (Some(m), Some(created)) => created >= m,
        _ => true,
    }
}

/// The fleet's role of polling `repo`.
fn poll_role(repo: &str) -> String {
    format!("github-poll:{repo}")
}

pub(crate) struct Poller {
    pub(crate) intake: Arc<Intake>,
    /// Where what the intake takes goes.
    pub(crate) router: crate::tracker::router::Router,
    pub(crate) api: Arc<Api>,
    pub(crate) book: Arc<Book>,
    /// The `since` of each list: the newest `updated_at` it answered with.
    pub(crate) marks: HashMap<&'static str, String>,
}

fn seen(issue: Issue) -> Incoming {
    Incoming::Issue {
        issue,
        action: "seen".into(),
        subject: None,
    }
}

impl Poller {
    /// The open issues that match the trigger now, the tasks whose issues were closed
    /// while picogent was not listening, and (`catch_up`, without polling) the comments
    /// written since the last webhook delivery.
    pub(crate) async fn sweep(
        &self,
        (assignee, label): (Option<&str>, Option<&str>),
        catch_up: bool,
    ) {
        let swept_at = self.api.clock().now();
        // Let go before this start: what the sweep below lets go says why itself
        // (`the issue was closed`), and must not be raced by the generic word.
        if let Err(e) = self.book.refresh(crate::store::pg::Which::Open).await {
            tracing::warn!("cannot read the fleet's GitHub record: {e}");
        }
        let stale = self.intake.still_working();
        let mut queries = Vec::new();
        if let Some(a) = assignee {
            queries.push(format!(
                "/issues?state=open&assignee={}&per_page=100",
                super::urlencode(a)
            ));
        }
        if let Some(l) = label {
            queries.push(format!(
                "/issues?state=open&labels={}&per_page=100",
                super::urlencode(l)
            ));
        }
        for q in queries {
            match self.api.list(&self.api.repo(&q), MAX_PAGES).await {
                Ok(items) => {
                    for issue in items.iter().filter_map(payload::issue) {
                        let _ = self.hand(seen(issue)).await;
                    }
                }
                Err(e) => tracing::warn!("cannot list the issues that match the trigger: {e}"),
            }
        }
        for n in self.book.active() {
            let path = self.api.repo(&format!("/issues/{n}"));
            match self.api.call(Method::GET, &path, None).await {
                Ok(a) => {
                    if let Some(issue) = payload::issue(&a.body) {
                        let _ = self.hand(seen(issue)).await;
                    }
                }
                Err(e) => tracing::warn!(issue = n, "cannot read a task's issue: {e}"),
            }
        }
        self.intake.settle_stopped(stale);
        if catch_up {
            self.catch_up(swept_at).await;
        }
    }

    /// The comments and review comments written since the last webhook delivery that
    /// was handled; the mark then moves to `swept_at`, once all were taken.
    async fn catch_up(&self, swept_at: Time) {
        let mark = self.book.mark(HEARD).as_deref().and_then(time);
        let mut taken = true;
        if let Some(mark) = mark.map(|m| m - chrono::Duration::seconds(HEARD_SLACK)) {
            let since = mark.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            for list in ["/issues/comments", "/pulls/comments"] {
                let path = self.api.repo(&format!(
                    "{list}?since={}&sort=updated&direction=asc&per_page=100",
                    super::urlencode(&since)
                ));
                match self.api.list(&path, MAX_PAGES).await {
                    Ok(items) if list == "/issues/comments" => {
                        taken &= self
                            .take_comments(&items, Some(mark), &HashMap::new())
                            .await;
                    }
                    Ok(items) => taken &= self.take_review_comments(&items, Some(mark)).await,
                    Err(e) => {
                        tracing::warn!(
                            "cannot read the comments written while picogent was down: {e}"
                        );
                        taken = false;
                    }
                }
            }
        }
        if taken {
            let text = swept_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            if let Err(e) = self.book.set_mark(HEARD, &text).await {
                tracing::warn!("cannot record where the start-up sweep got to: {e}");
            }
        }
    }

    /// Hands one event to the intake; false when it was not taken (shutting down, the
    /// journal refusing): the list's mark then stays, so the next poll asks again.
    async fn hand(&self, incoming: Incoming) -> bool {
        match self.intake.handle(&self.router, incoming, None).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!("a polled GitHub event was not taken: {e}");
                false
            }
        }
    }

    /// Polls every `every` until `stop`.
    pub(crate) async fn run(mut self, every: Duration, stop: CancellationToken) {
        let mut leading = false;
        loop {
            leading = self.leads(every, leading).await;
            if leading {
                if let Err(e) = self.once().await {
                    tracing::warn!("polling GitHub: {e}");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.cancelled() => break,
            }
        }
        if let (true, Some((pg, repo))) = (leading, self.book.fleet()) {
            if let Err(e) = pg.resign(&poll_role(repo)).await {
                tracing::debug!("cannot give up polling for the fleet: {e}");
            }
        }
    }

    /// Whether this worker polls now: always on one machine; in a fleet, the one
    /// worker that holds the repository's polling (a lease of a few intervals, so a
    /// dead poller's successor takes over), starting from the marks the last left.
    async fn leads(&mut self, every: Duration, was: bool) -> bool {
        let Some((pg, repo)) = self.book.fleet() else {
            return true;
        };
        let lease = every * 3 + Duration::from_secs(10);
        match pg.lead(&poll_role(repo), lease).await {
            Ok(true) if !was => {
                if let Err(e) = self.book.reload_marks().await {
                    tracing::warn!("cannot read where the fleet's polling got to: {e}");
                    return false;
                }
                for list in ["/issues", "/issues/comments", "/pulls/comments"] {
                    if let Some(mark) = self.book.mark(list) {
                        self.marks.insert(list, mark);
                    }
                }
                tracing::info!(repository = repo, "this worker polls GitHub for the fleet");
                true
            }
            Ok(leads) => leads,
            Err(e) => {
                tracing::warn!("cannot tell which worker polls GitHub: {e}");
                false
            }
        }
    }

    /// What changed on `list` since its mark: the items, the mark, and the mark that
    /// comes next once every item was taken (`advance`).
    async fn changed(&mut self, list: &'static str) -> Result<Changed, ApiError> {
        let since = self.marks.get(list).cloned().unwrap_or_default();
        let path = self.api.repo(&format!(
            "{list}?since={}&sort=updated&direction=asc&per_page=100{}",
            super::urlencode(&since),
            if list == "/issues" { "&state=all" } else { "" }
        ));
        let first = self.api.get_cached(&path).await?;
        let mark = time(&since);
        if first.unchanged {
            return Ok((Vec::new(), mark, None));
        }
        let Value::Array(mut items) = first.body else {
            return Err(ApiError::lacking(format!("GET {path}"), "list"));
        };
        if let Some(next) = first.next {
            items.extend(self.api.list(&next, MAX_PAGES).await?);
        }
        let newest = items
            .iter()
            .filter_map(|i| time(i["updated_at"].as_str()?))
            .max();
        let next = newest
            .filter(|n| mark.is_none_or(|m| *n > m))
            .map(|n| n.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        Ok((items, mark, next))
    }

    /// Moves `list`'s mark on (and records it, so a restart goes on from there), once
    /// everything before it was taken.
    async fn advance(&mut self, list: &'static str, next: Option<String>, all_taken: bool) {
        let Some(text) = next.filter(|_| all_taken) else {
            return;
        };
        if let Err(e) = self.book.set_mark(list, &text).await {
            tracing::warn!("cannot record where polling got to: {e}");
        }
        self.marks.insert(list, text);
    }

    async fn once(&mut self) -> Result<(), ApiError> {
        let (items, _, next) = self.changed("/issues").await?;
        let issues: HashMap<u64, Issue> = items
            .iter()
            .filter_map(payload::issue)
            .map(|i| (i.number, i))
            .collect();
        let mut taken = true;
        for issue in issues.values().filter(|i| !i.is_pull) {
            taken &= self.hand(seen(issue.clone())).await;
        }
        self.advance("/issues", next, taken).await;
        let (comments, mark, next) = self.changed("/issues/comments").await?;
        let taken = self.take_comments(&comments, mark, &issues).await;
        self.advance("/issues/comments", next, taken).await;
        let (comments, mark, next) = self.changed("/pulls/comments").await?;
        let taken = self.take_review_comments(&comments, mark).await;
        self.advance("/pulls/comments", next, taken).await;
        Ok(())
    }

    /// Hands the issue comments written since `mark` (the issues a poll read are in
    /// `issues`; others are read); false when one was not taken.
    async fn take_comments(
        &self,
        comments: &[Value],
        mark: Option<Time>,
        issues: &HashMap<u64, Issue>,
    ) -> bool {
        let mut taken = true;
        for c in comments.iter().filter(|c| written_since(c, mark)) {
            let (Some(n), Some(comment)) = (
                payload::issue_number_of(c),
                payload::comment(c, CommentKind::Issue),
            ) else {
                continue;
            };
            let issue = match issues.get(&n) {
                Some(i) => i.clone(),
                None => match self.issue(n).await {
                    Some(i) => i,
                    None => continue,
                },
            };
            taken &= self
                .hand(Incoming::Comment {
                    issue,
                    comment,
                    head: None,
                })
                .await;
        }
        taken
    }

    /// Hands the review comments written since `mark`; false when one was not taken.
    async fn take_review_comments(&self, comments: &[Value], mark: Option<Time>) -> bool {
        let mut taken = true;
        for c in comments.iter().filter(|c| written_since(c, mark)) {
            let Some(pull) = payload::pull_number_of(c) else {
                continue;
            };
            let Some(comment) = payload::comment(c, CommentKind::Review { pull }) else {
                continue;
            };
            // What the decision needs of the pull request: its number, and that it is one.
            let issue = Issue {
                number: pull,
                open: true,
                is_pull: true,
                ..Issue::default()
            };
            taken &= self
                .hand(Incoming::Comment {
                    issue,
                    comment,
                    head: None,
                })
                .await;
        }
        taken
    }

    async fn issue(&self, n: u64) -> Option<Issue> {
        let path = self.api.repo(&format!("/issues/{n}"));
        match self.api.call(Method::GET, &path, None).await {
            Ok(a) => payload::issue(&a.body),
            Err(e) => {
                tracing::warn!(issue = n, "cannot read the issue of a comment: {e}");
                None
            }
        }
    }
}
