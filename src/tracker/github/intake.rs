//! From what happened on GitHub to the router's events: an issue that now matches the
//! trigger (assigned to picogent's login, labelled, or mentioning it) starts a task
//! (`task.assigned`); a new comment on a task's issue or a review comment on its pull
//! request is a chat message to it; a task's issue closed, unassigned or unlabelled
//! cancels it (`task.cancelled`), quietly when nothing of it is running (a progress
//! comment that still says work goes on is edited to say it stopped). Comments picogent
//! wrote itself never count.
//!
//! Decisions are taken one at a time (webhook deliveries and polls may arrive
//! together), each against the book of active issues, and the event is journaled
//! before the book changes. Event ids make a repeat a duplicate: a webhook's issue
//! change is keyed by its `X-GitHub-Delivery`, a comment by its id (so a comment seen
//! by both the webhook and a poll is one message), and a poll's task start by the
//! issue and how often it became a task.

use std::sync::Arc;

use serde_json::json;
use tokio_util::task::TaskTracker;

use super::api::{Api, ApiError};
use super::book::{Book, By};
pub(super) use super::ledger::Ledger;
use super::payload::{self, Comment, CommentKind, Incoming, Issue};
use super::progress::Progress;
use crate::config::Trigger;
use crate::tracker::router::{AcceptError, Accepted, Router};
use crate::tracker::types::{Arrival, Author, ChatMessage, Event, Origin, Task, TaskId};

/// An issue's body and a triggering comment are given to the model up to this size.
const MAX_TEXT: usize = 20_000;

/// What an incoming event means for picogent.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    Start {
        issue: Issue,
        comment: Option<Comment>,
        by: By,
    },
    Chat {
        number: u64,
        comment: Comment,
    },
    Stop {
        number: u64,
        why: &'static str,
    },
    Ignore(&'static str),
}

/// The intake holds no router: it is asked before a run starts (`still_wanted`, by
/// the router's tracker), and is handed the router with each event to take.
pub(crate) struct Intake {
    api: Arc<Api>,
    progress: Arc<Progress>,
    pub(super) book: Arc<Book>,
    /// picogent's own login (its comments never count).
    login: String,
    trigger: Trigger,
    repo: String,
    /// Whose comments (and issues) may start or steer a task besides the repository's
    /// owners, members and collaborators (`github.trusted_users`).
    trusted_users: Vec<String>,
    /// Its tasks' ids name the repository (one of `github.repos`): `acme:api:issue-7`.
    qualified: bool,
    /// One decision at a time (a fleet's take turns on the store's lock instead).
    pub(super) gate: tokio::sync::Mutex<()>,
    /// The work it starts after answering (the book's writes, reactions, progress
    /// comments told that work stopped, webhook deliveries): the daemon waits for it.
    owned: TaskTracker,
}

fn same_login(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

impl Intake {
    pub(crate) fn new(
        owned: TaskTracker,
        (api, progress): (Arc<Api>, Arc<Progress>),
        book: Arc<Book>,
        login: String,
        trigger: Trigger,
        (repo, qualified): (String, bool),
        trusted_users: Vec<String>,
    ) -> Intake {
        Intake {
            owned,
            api,
            progress,
            book,
            login,
            trigger,
            repo,
            trusted_users,
            qualified,
            gate: tokio::sync::Mutex::new(()),
        }
    }

    /// The task of issue `n`.
    pub(crate) fn task_of(&self, n: u64) -> TaskId {
        if self.qualified {
            TaskId::of_repo_issue(&self.repo, n)
        } else {
            TaskId::of_issue(n)
        }
    }

    /// The issue of one of this repository's tasks.
    pub(crate) fn issue_of(&self, task: &TaskId) -> Option<u64> {
        if !self.qualified {
            return task.issue();
        }
        task.repo_issue()
            .filter(|(repo, _)| repo.eq_ignore_ascii_case(&self.repo))
            .map(|(_, n)| n)
    }

    /// Whether someone may start or steer a task: the repository's owners, members
    /// and collaborators (GitHub's `author_association`), and `trusted_users`. On a
    /// public repository anyone can comment; only these can make picogent work.
    fn trusted(&self, login: &str, association: &str) -> bool {
        matches!(association, "OWNER" | "MEMBER" | "COLLABORATOR")
            || self.trusted_users.iter().any(|u| same_login(u, login))
    }

    /// Why the issue, as it is now, asks for picogent, if it does: its assignment or
    /// label, or (`opened`) a mention in its body. Only an issue someone trusted
    /// opened: an issue template's labels and assignees are its author's doing, so a
    /// stranger's issue starts only by a trusted person's mention in a comment.
    fn wants(&self, issue: &Issue, action: &str) -> Option<By> {
        if !issue.open || issue.is_pull || !self.trusted(&issue.author, &issue.association) {
            return None;
        }
        let t = &self.trigger;
        let triggered = t
            .assignee
            .as_ref()
            .is_some_and(|a| issue.assignees.iter().any(|x| same_login(x, a)))
            || t.label
                .as_ref()
                .is_some_and(|l| issue.labels.iter().any(|x| x.eq_ignore_ascii_case(l)));
        let mentioned = action == "opened"
            && t.mention
                .as_ref()
                .is_some_and(|m| payload::mentions(&issue.body, m));
        if triggered {
            Some(By::Trigger)
        } else {
            mentioned.then_some(By::Mention)
        }
    }

    pub(crate) fn decide(&self, incoming: &Incoming) -> Decision {
        match incoming {
            Incoming::Issue {
                issue,
                action,
                subject,
            } => self.decide_issue(issue, action, subject.as_deref()),
            Incoming::Comment {
                issue,
                comment,
                head,
            } => self.decide_comment(issue, comment, head.as_deref()),
        }
    }

    fn decide_issue(&self, issue: &Issue, action: &str, subject: Option<&str>) -> Decision {
        if issue.is_pull {
            return Decision::Ignore("a pull request, not an issue");
        }
        let entry = self.book.get(issue.number);
        let active = entry.active;
        let about = |setting: &Option<String>| {
            setting
                .as_ref()
                .zip(subject)
                .is_some_and(|(s, x)| s.eq_ignore_ascii_case(x))
        };
        let stop = |why| Decision::Stop {
            number: issue.number,
            why,
        };
        // A task its assignment or label made ends when neither holds any more.
        let let_go = active && entry.by == By::Trigger && self.wants(issue, "").is_none();
        match action {
            _ if active && !issue.open => stop("the issue was closed"),
            "unassigned" if let_go && about(&self.trigger.assignee) => {
                stop("picogent was unassigned")
            }
            "unlabeled" if let_go && about(&self.trigger.label) => stop("the label was removed"),
            "seen" if let_go => stop("the issue no longer matches the trigger"),
            _ if active => Decision::Ignore("the issue is already a task"),
            _ => match self.wants(issue, action) {
                Some(by) => Decision::Start {
                    issue: issue.clone(),
                    comment: None,
                    by,
                },
                None => Decision::Ignore("the issue does not match the trigger"),
            },
        }
    }

    fn decide_comment(&self, issue: &Issue, comment: &Comment, head: Option<&str>) -> Decision {
        if same_login(&comment.author, &self.login) || comment.body.contains("<!-- picogent:") {
            return Decision::Ignore("picogent's own comment");
        }
        let number = match (&comment.kind, issue.is_pull) {
            (CommentKind::Review { pull }, _) => head
                .and_then(payload::issue_of_branch)
                .or_else(|| self.book.issue_of_pull(*pull)),
            (CommentKind::Issue, true) => self.book.issue_of_pull(issue.number),
            (CommentKind::Issue, false) => Some(issue.number),
        };
        let Some(number) = number else {
            return Decision::Ignore("a pull request that is no task's");
        };
        if !self.trusted(&comment.author, &comment.association) {
            return Decision::Ignore("a comment by someone who is no collaborator");
        }
        if self.book.get(number).active {
            return Decision::Chat {
                number,
                comment: comment.clone(),
            };
        }
        let mentioned = self
            .trigger
            .mention
            .as_ref()
            .is_some_and(|m| payload::mentions(&comment.body, m));
        if mentioned && comment.kind == CommentKind::Issue && !issue.is_pull && issue.open {
            return Decision::Start {
                issue: issue.clone(),
                comment: Some(comment.clone()),
                by: By::Mention,
            };
        }
        Decision::Ignore("a comment on an issue that is no task")
    }

    /// Decides and hands the event to the router; `delivery` is the webhook's
    /// `X-GitHub-Delivery`, `None` for what a poll found.
    pub(crate) async fn handle(
        &self,
        router: &Router,
        incoming: Incoming,
        delivery: Option<&str>,
    ) -> Result<Accepted, AcceptError> {
        if let Some((pg, repo)) = self.book.fleet() {
            return self
                .handle_in_store(pg, repo, router, &incoming, delivery)
                .await;
        }
        let _one = self.gate.lock().await;
        let decision = self.decide(&incoming);
        self.act(Ledger::Journal(router), decision, delivery).await
    }

    /// Takes what the decision says: the event to the router (or the store), and the
    /// book's change.
    pub(super) async fn act(
        &self,
        ledger: Ledger<'_, '_>,
        decision: Decision,
        delivery: Option<&str>,
    ) -> Result<Accepted, AcceptError> {
        match decision {
            Decision::Ignore(why) => {
                tracing::debug!(delivery, "GitHub event ignored: {why}");
                Ok(Accepted::Ignored)
            }
            Decision::Start { issue, comment, by } => {
                self.start(ledger, (issue, comment, by), delivery).await
            }
            Decision::Chat { number, comment } => self.chat(ledger, number, comment).await,
            Decision::Stop { number, why } => self.stop(ledger, number, why, delivery).await,
        }
    }

    /// Whether the issue still asks for picogent as it is now on GitHub, asked right
    /// before its task's run starts: a delivery or a poll's page may be older than what
    /// happened since (a `closed` handled before a late `assigned`, a redelivery days
    /// later), and a queued task may have waited. When GitHub cannot say, it does.
    pub(crate) async fn still_wanted(&self, n: u64) -> bool {
        // Read under the gate: the start that queued this run notes its generation
        // after the router took the event, and may not have yet.
        let asked_for = match self.section(n, || self.book.get(n).generation).await {
            Ok(generation) => generation,
            Err(e) => {
                tracing::warn!(
                    issue = n,
                    "cannot read the GitHub record before the run: {e}"
                );
                return true;
            }
        };
        let path = self.api.repo(&format!("/issues/{n}"));
        let now = match self.api.call(reqwest::Method::GET, &path, None).await {
            Ok(a) => match payload::issue(&a.body) {
                Some(issue) => Some(issue),
                None => {
                    tracing::warn!(
                        issue = n,
                        "GitHub's answer about the issue before its run is no issue: it runs"
                    );
                    return true;
                }
            },
            Err(ApiError::NotFound { .. }) => None,
            Err(e) => {
                tracing::warn!(issue = n, "cannot read the issue before its run: {e}");
                return true;
            }
        };
        let judged = self.section(n, || {
            let entry = self.book.get(n);
            let wanted = now.as_ref().is_some_and(|now| match entry.by {
                By::Trigger => self.wants(now, "").is_some(),
                By::Mention => now.open && !now.is_pull,
            });
            // A newer start meanwhile (reopened, assigned again) owns the record now.
            let unwanted = !wanted && entry.generation == asked_for;
            if unwanted {
                self.note(n, |e| e.active = false);
            }
            (wanted, unwanted)
        });
        let (wanted, unwanted) = match judged.await {
            Ok(judged) => judged,
            Err(e) => {
                tracing::warn!(
                    issue = n,
                    "cannot read the GitHub record before the run: {e}"
                );
                return true;
            }
        };
        if unwanted {
            tracing::info!(
                issue = n,
                "not started: the issue no longer asks for picogent"
            );
            let why = match &now {
                Some(i) if !i.open => "the issue was closed",
                None => "the issue is gone",
                Some(_) => "the issue no longer asks for picogent",
            };
            self.say_stopped(n, why);
        }
        wanted
    }

    async fn start(
        &self,
        ledger: Ledger<'_, '_>,
        (issue, comment, by): (Issue, Option<Comment>, By),
        delivery: Option<&str>,
    ) -> Result<Accepted, AcceptError> {
        let n = issue.number;
        let generation = self.book.get(n).generation + 1;
        let id = match (&comment, delivery) {
            (Some(c), _) => format!("github-comment-{}", c.id),
            (None, Some(d)) => format!("github-delivery-{d}"),
            (None, None) => format!("github-issue-{n}-start-{generation}"),
        };
        let arrival = Arrival {
            id,
            event: Event::TaskAssigned {
                task: Task {
                    id: self.task_of(n),
                    title: issue.title.clone(),
                    description: Some(self.description(&issue, comment.as_ref())),
                },
            },
            origin: Origin::Github {
                generation,
                by: Some(by),
            },
        };
        let accepted = ledger.accept(arrival).await?;
        if accepted == Accepted::Duplicate && delivery.is_none() && comment.is_none() {
            // This start's id was used before, and the record did not keep it (a crash
            // before its write): the next start gets a new one.
            self.note(n, |e| e.generation = e.generation.max(generation));
        }
        if accepted == Accepted::New {
            self.note(n, |e| {
                e.active = true;
                e.generation = generation;
                e.by = by;
            });
            tracing::info!(issue = n, "GitHub issue became a task");
            self.react(n, comment.as_ref());
        }
        Ok(accepted)
    }

    async fn chat(
        &self,
        ledger: Ledger<'_, '_>,
        number: u64,
        comment: Comment,
    ) -> Result<Accepted, AcceptError> {
        let id = match comment.kind {
            CommentKind::Issue => format!("github-comment-{}", comment.id),
            CommentKind::Review { .. } => format!("github-review-comment-{}", comment.id),
        };
        let arrival = Arrival {
            id,
            event: Event::ChatMessage {
                task_id: self.task_of(number),
                message: ChatMessage {
                    id: comment.message_id(),
                    content: crate::util::truncate_bytes(&comment.body, MAX_TEXT).to_string(),
                    author: Some(Author {
                        name: Some(format!("@{}", comment.author)),
                    }),
                },
            },
            origin: Origin::Github {
                generation: self.book.get(number).generation,
                by: None,
            },
        };
        let accepted = ledger.accept(arrival).await?;
        if accepted == Accepted::New {
            self.react(number, Some(&comment));
        }
        Ok(accepted)
    }

    async fn stop(
        &self,
        ledger: Ledger<'_, '_>,
        number: u64,
        why: &'static str,
        delivery: Option<&str>,
    ) -> Result<Accepted, AcceptError> {
        let task = self.task_of(number);
        if !ledger.has_work(&task).await {
            // Nothing to stop (a merged pull request closed it, say): no comment.
            self.note(number, |e| e.active = false);
            ledger.router().forget_task(&task);
            self.say_stopped(number, why);
            tracing::info!(issue = number, "GitHub issue is no task any more ({why})");
            return Ok(Accepted::New);
        }
        let generation = self.book.get(number).generation;
        let id = match delivery {
            Some(d) => format!("github-delivery-{d}"),
            None => format!("github-issue-{number}-stop-{generation}"),
        };
        let arrival = Arrival {
            id,
            event: Event::TaskCancelled {
                task_id: task,
                reason: Some(why.to_string()),
            },
            origin: Origin::Github {
                generation,
                by: None,
            },
        };
        let accepted = ledger.accept(arrival).await?;
        if accepted == Accepted::New {
            self.note(number, |e| e.active = false);
        }
        Ok(accepted)
    }

    /// Has the progress comment say that work stopped, if it still says work goes on
    /// (after the answer: it asks GitHub).
    fn say_stopped(&self, number: u64, why: &'static str) {
        let progress = self.progress.clone();
        self.owned
            .spawn(async move { progress.stopped(number, why).await });
    }

    /// The issues let go whose progress comment still says work goes on.
    pub(crate) fn still_working(&self) -> Vec<u64> {
        self.book.still_working()
    }

    /// At start: `stale` (issues let go before picogent stopped, whose progress comment
    /// still says work goes on) have it say that work stopped.
    pub(crate) fn settle_stopped(&self, stale: Vec<u64>) {
        for n in stale {
            self.say_stopped(n, "the issue no longer asks for picogent");
        }
    }

    /// Notes that a webhook delivery was handled now (GitHub's time): after a restart,
    /// the comments written since are read (`poll::Poller::sweep`).
    pub(crate) fn heard(&self) {
        let stale_after = chrono::Duration::seconds(10);
        if self
            .book
            .note_mark(super::book::HEARD, self.api.clock().now(), stale_after)
        {
            let book = self.book.clone();
            self.owned.spawn(async move {
                if let Err(e) = book.write_mark(super::book::HEARD).await {
                    tracing::warn!("cannot record when the last webhook delivery came: {e}");
                }
            });
        }
    }

    /// Changes the book now, and writes it after the answer; a failed write is logged
    /// (the journal has the event, and the book is mended from it at the next start).
    fn note(&self, number: u64, change: impl FnOnce(&mut super::book::Entry)) {
        self.book.apply(number, change);
        let book = self.book.clone();
        self.owned.spawn(async move {
            if let Err(e) = book.persist().await {
                tracing::error!(issue = number, "cannot write the GitHub record: {e}");
            }
        });
    }

    /// Marks what picked the work up with 👀 (best effort: people see it was seen).
    fn react(&self, number: u64, comment: Option<&Comment>) {
        let path = match comment.map(|c| (&c.kind, c.id)) {
            Some((CommentKind::Issue, id)) => format!("/issues/comments/{id}/reactions"),
            Some((CommentKind::Review { .. }, id)) => format!("/pulls/comments/{id}/reactions"),
            None => format!("/issues/{number}/reactions"),
        };
        let (api, path) = (self.api.clone(), self.api.repo(&path));
        self.owned.spawn(async move {
            let body = json!({"content": "eyes"});
            if let Err(e) = api.call(reqwest::Method::POST, &path, Some(&body)).await {
                tracing::warn!("cannot react on GitHub: {e}");
            }
        });
    }

    /// The task's description: the issue, the comment that asked, and how the work
    /// is delivered.
    fn description(&self, issue: &Issue, comment: Option<&Comment>) -> String {
        let mut d = format!("GitHub issue #{} in {}.", issue.number, self.repo);
        if !issue.body.trim().is_empty() {
            d.push_str("\n\n");
            d.push_str(crate::util::truncate_bytes(&issue.body, MAX_TEXT));
        }
        if let Some(c) = comment {
            d.push_str(&format!(
                "\n\n@{} asked for this in a comment:\n\n{}",
                c.author,
                crate::util::truncate_bytes(&c.body, MAX_TEXT)
            ));
        }
        d.push_str(&format!(
            "\n\n---\nYou work in a git worktree on the branch `picogent/issue-{}`. When you finish, picogent commits your changes, pushes the branch and opens a pull request that closes this issue: do not push or open a pull request yourself. End with a short summary of what you changed; it becomes the pull request's description.",
            issue.number
        ));
        d
    }

    /// Spawns work the daemon waits for at shutdown (a webhook delivery's handling).
    pub(crate) fn spawn_owned<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.owned.spawn(f)
    }

    /// At start: the book takes back what the journal accepted and the book missed
    /// (a crash between the two writes).
    pub(crate) fn mend_from_journal(&self, pending: Vec<Arrival>) {
        for a in pending {
            let (Some(n), Origin::Github { generation, by }) =
                (self.issue_of(a.task_id()), &a.origin)
            else {
                continue;
            };
            // Only what is newer than the book: an assignment a later cancellation
            // ended stays ended.
            let (generation, by) = (*generation, by.unwrap_or_default());
            let entry = self.book.get(n);
            match a.event {
                Event::TaskAssigned { .. } if generation > entry.generation => self.note(n, |e| {
                    e.active = true;
                    e.generation = generation;
                    e.by = by;
                }),
                Event::TaskCancelled { .. } if entry.active && generation >= entry.generation => {
                    self.note(n, |e| e.active = false)
                }
                _ => {}
            }
        }
    }
}
