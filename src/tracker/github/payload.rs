//! What picogent reads of GitHub's objects (issues, comments, pull requests) and of its
//! webhook deliveries, whether they came in a webhook or from a poll: one `Incoming`
//! either way. Fields are read leniently (a missing one is empty), because a payload
//! carries far more than picogent needs and GitHub adds fields over time.

use serde_json::Value;

/// An issue as picogent needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Issue {
    pub(crate) number: u64,
    pub(crate) title: String,
    pub(crate) body: String,
    pub(crate) open: bool,
    pub(crate) assignees: Vec<String>,
    pub(crate) labels: Vec<String>,
    /// A pull request seen through the issues API.
    pub(crate) is_pull: bool,
    /// Who opened it, and their standing in the repository (`author_association`).
    pub(crate) author: String,
    pub(crate) association: String,
}

/// Which kind of comment, and so how it is answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CommentKind {
    /// On an issue's (or a pull request's) conversation.
    Issue,
    /// On a line of a pull request's diff.
    Review { pull: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comment {
    pub(crate) id: u64,
    pub(crate) kind: CommentKind,
    pub(crate) author: String,
    pub(crate) body: String,
    /// The author's standing in the repository: `OWNER`, `MEMBER`, `COLLABORATOR`...
    pub(crate) association: String,
    /// When it was written (an edit moves `updated_at`, not this).
    pub(crate) created_at: String,
}

impl Comment {
    /// The chat message id it becomes: how its answer finds it again.
    pub(crate) fn message_id(&self) -> String {
        match self.kind {
            CommentKind::Issue => format!("c{}", self.id),
            CommentKind::Review { pull } => format!("r{pull}-{}", self.id),
        }
    }
}

/// One thing that happened on the repository.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// The issue as it is now, after `action` (`assigned`, `labeled`, `closed`...;
    /// `seen` for an issue a poll or the start-up found); `subject` is the login or
    /// label the action was about.
    Issue {
        issue: Issue,
        action: String,
        subject: Option<String>,
    },
    /// A new comment on an issue or pull request (`issue` is the issue it was written
    /// on; for a review comment, the pull request, found by its branch in `head`).
    Comment {
        issue: Issue,
        comment: Comment,
        head: Option<String>,
    },
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn logins(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["login"].as_str().map(str::to_string))
        .collect()
}

/// An issue (or pull request) object; `None` without a number.
pub(crate) fn issue(v: &Value) -> Option<Issue> {
    Some(Issue {
        number: v["number"].as_u64()?,
        title: s(&v["title"]),
        body: s(&v["body"]),
        open: v["state"].as_str() != Some("closed"),
        assignees: logins(&v["assignees"]),
        labels: v["labels"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["name"].as_str().or(l.as_str()).map(str::to_string))
            .collect(),
        // In the issues API a pull request has `pull_request`; a pull request object
        // itself has `head`.
        is_pull: v.get("pull_request").is_some_and(|p| !p.is_null()) || v.get("head").is_some(),
        author: s(&v["user"]["login"]),
        association: s(&v["author_association"]),
    })
}

/// A comment object of the given kind; `None` without an id.
pub(crate) fn comment(v: &Value, kind: CommentKind) -> Option<Comment> {
    Some(Comment {
        id: v["id"].as_u64()?,
        kind,
        author: s(&v["user"]["login"]),
        body: s(&v["body"]),
        association: s(&v["author_association"]),
        created_at: s(&v["created_at"]),
    })
}

/// The issue number an issue comment from the repository-wide list belongs to (its
/// `issue_url` ends in it).
pub(crate) fn issue_number_of(comment: &Value) -> Option<u64> {
    comment["issue_url"]
        .as_str()?
        .rsplit('/')
        .next()?
        .parse()
        .ok()
}

/// The pull request number a review comment from the repository-wide list belongs to.
pub(crate) fn pull_number_of(comment: &Value) -> Option<u64> {
    comment["pull_request_url"]
        .as_str()?
        .rsplit('/')
        .next()?
        .parse()
        .ok()
}

/// The full name of the repository a delivery is about.
pub(crate) fn repository(payload: &Value) -> String {
    s(&payload["repository"]["full_name"])
}

/// A webhook delivery of `event` as one `Incoming`; `None` for events and actions
/// picogent does not act on (an edited comment, a pushed commit).
pub(crate) fn from_webhook(event: &str, p: &Value) -> Option<Incoming> {
    let action = s(&p["action"]);
    match event {
        "issues" => Some(Incoming::Issue {
            issue: issue(&p["issue"])?,
            subject: p["assignee"]["login"]
                .as_str()
                .or(p["label"]["name"].as_str())
                .map(str::to_string),
            action,
        }),
        "issue_comment" if action == "created" => Some(Incoming::Comment {
            issue: issue(&p["issue"])?,
            comment: comment(&p["comment"], CommentKind::Issue)?,
            head: None,
        }),
        "pull_request_review_comment" if action == "created" => {
            let pull = issue(&p["pull_request"])?;
            Some(Incoming::Comment {
                comment: comment(&p["comment"], CommentKind::Review { pull: pull.number })?,
                // Only a branch of this repository: a fork may name its branch
                // `picogent/issue-<n>` too.
                head: p["pull_request"]["head"]["ref"]
                    .as_str()
                    .filter(|_| {
                        p["pull_request"]["head"]["repo"]["full_name"]
                            .as_str()
                            .is_some_and(|r| r.eq_ignore_ascii_case(&repository(p)))
                    })
                    .map(str::to_string),
                issue: pull,
            })
        }
        _ => None,
    }
}

/// The issue a task branch `picogent/issue-<n>` works on.
pub(crate) fn issue_of_branch(head: &str) -> Option<u64> {
    head.strip_prefix("picogent/issue-")?.parse().ok()
}

/// Whether `body` mentions `mention` (`@login`) as GitHub would: not inside another
/// word or login, case-insensitive.
pub(crate) fn mentions(body: &str, mention: &str) -> bool {
    let (b, m) = (body.to_ascii_lowercase(), mention.to_ascii_lowercase());
    let login_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut from = 0;
    while let Some(at) = b.get(from..).and_then(|rest| rest.find(&m)) {
        let start = from + at;
        let end = start + m.len();
        let before = b.get(..start).and_then(|x| x.chars().last());
        let after = b.get(end..).and_then(|x| x.chars().next());
        if !before.is_some_and(|c| login_char(c) || c == '@')
            && !after.is_some_and(|c| login_char(c) || c == '[')
        {
            return true;
        }
        from = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mentions_are_whole_logins() {
        assert!(mentions("hey @picogent, fix this", "@picogent"));
        assert!(mentions("@PicoGent please", "@picogent"));
        assert!(!mentions("hey @picogent-dev", "@picogent"));
        assert!(!mentions("mail me at x@picogent.dev", "@picogent"));
        assert!(!mentions("nothing here", "@picogent"));
        assert!(mentions("@picogent-dev and @picogent.", "@picogent"));
    }

    #[test]
    fn deliveries_become_incoming_events() {
        let p = json!({"action": "assigned", "issue": {"number": 3, "title": "t", "state": "open",
            "assignees": [{"login": "bot"}], "labels": [{"name": "bug"}]}, "assignee": {"login": "bot"}});
        match from_webhook("issues", &p) {
            Some(Incoming::Issue {
                issue,
                action,
                subject,
            }) => {
                assert_eq!((issue.number, action.as_str()), (3, "assigned"));
                assert_eq!(subject.as_deref(), Some("bot"));
                assert_eq!(issue.labels, vec!["bug"]);
                assert!(!issue.is_pull);
            }
            other => panic!("{other:?}"),
        }
        let p = json!({"action": "edited", "issue": {"number": 3}, "comment": {"id": 1}});
        assert_eq!(from_webhook("issue_comment", &p), None);
        assert_eq!(issue_of_branch("picogent/issue-12"), Some(12));
        assert_eq!(issue_of_branch("feature/x"), None);
        assert_eq!(
            issue_number_of(&json!({"issue_url": "https://api.github.com/repos/o/r/issues/9"})),
            Some(9)
        );
    }
}
