//! The fake's records as GitHub's JSON: users, labels, the repository, issues, pull
//! requests, comments, review comments and reactions, with the URLs GitHub puts in them.

use serde_json::{json, Value};

use super::{hash, sha, ts, Comment, Issue, Reaction, ReviewComment, St};

const REACTIONS: [&str; 8] = [
    "+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes",
];

impl St {
    pub(super) fn owner(&self) -> &str {
        self.repo.split('/').next().unwrap_or("")
    }

    pub(super) fn base(&self) -> String {
        format!("{}/repos/{}", self.api, self.repo)
    }

    pub(super) fn web(&self) -> String {
        format!("https://github.com/{}", self.repo)
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn issue_ix(&self, n: u64) -> Option<usize> {
        self.issues.iter().position(|i| i.number == n)
    }

    pub(super) fn is_pull(&self, n: u64) -> bool {
        self.issue_ix(n)
            .is_some_and(|i| self.issues[i].pull.is_some())
    }

    pub(super) fn association(&self, login: &str) -> String {
        match self.associations.get(login) {
            Some(a) => a.clone(),
            None if login == self.owner() => "OWNER".into(),
            None => "NONE".into(),
        }
    }

    pub(super) fn user(&self, login: &str) -> Value {
        let id = 1_000_000 + hash(login.to_ascii_lowercase()) % 100_000_000;
        let kind = if login.ends_with("[bot]") {
            "Bot"
        } else {
            "User"
        };
        json!({"login": login, "id": id, "node_id": format!("U_{id}"), "type": kind,
               "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
               "gravatar_id": "", "url": format!("{}/users/{login}", self.api),
               "html_url": format!("https://github.com/{login}"), "site_admin": false})
    }

    pub(super) fn label(&self, name: &str) -> Value {
        let id = hash(name) % 1_000_000_000;
        json!({"id": id, "node_id": format!("LA_{id}"), "url": format!("{}/labels/{name}", self.base()),
               "name": name, "color": "ededed", "default": false, "description": null})
    }

    pub(super) fn repo_json(&self) -> Value {
        let name = self.repo.split('/').nth(1).unwrap_or("");
        let t = ts(self.started);
        json!({"id": 1_296_269, "node_id": "R_1", "name": name, "full_name": self.repo,
               "private": false, "owner": self.user(self.owner()), "html_url": self.web(),
               "url": self.base(), "description": null, "fork": false, "default_branch": "main",
               "visibility": "public", "has_issues": true, "archived": false, "disabled": false,
               "created_at": t, "updated_at": t, "pushed_at": t,
               "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true}})
    }

    pub(super) fn rollup(&self, kind: &str, target: u64, url: String) -> Value {
        let mine: Vec<&Reaction> = self
            .reactions
            .iter()
            .filter(|r| r.kind == kind && r.target == target)
            .collect();
        let mut v = json!({"url": url, "total_count": mine.len()});
        for c in REACTIONS {
            v[c] = mine.iter().filter(|r| r.content == c).count().into();
        }
        v
    }

    pub(super) fn issue_json(&self, i: &Issue) -> Value {
        let (n, base) = (i.number, self.base());
        let kind = if i.pull.is_some() { "pull" } else { "issues" };
        let assignees: Vec<Value> = i.assignees.iter().map(|a| self.user(a)).collect();
        let mut v = json!({
            "url": format!("{base}/issues/{n}"), "repository_url": base,
            "labels_url": format!("{base}/issues/{n}/labels{{/name}}"),
            "comments_url": format!("{base}/issues/{n}/comments"),
            "events_url": format!("{base}/issues/{n}/events"),
            "html_url": format!("{}/{kind}/{n}", self.web()),
            "id": i.id, "node_id": format!("I_{}", i.id), "number": n, "title": i.title,
            "user": self.user(&i.user),
            "labels": i.labels.iter().map(|l| self.label(l)).collect::<Vec<_>>(),
            "state": if i.open { "open" } else { "closed" },
            "state_reason": if i.open { Value::Null } else { "completed".into() },
            "locked": false, "assignee": assignees.first().cloned(), "assignees": assignees,
            "milestone": null, "comments": i.comments, "created_at": ts(i.created),
            "updated_at": ts(i.updated), "closed_at": i.closed.map(ts),
            "author_association": self.association(&i.user), "body": i.body,
            "reactions": self.rollup("issue", n, format!("{base}/issues/{n}/reactions")),
        });
        if let Some(p) = &i.pull {
            v["pull_request"] = json!({"url": format!("{base}/pulls/{n}"),
                "html_url": format!("{}/pull/{n}", self.web()),
                "diff_url": format!("{}/pull/{n}.diff", self.web()),
                "patch_url": format!("{}/pull/{n}.patch", self.web()), "merged_at": null});
            v["draft"] = p.draft.into();
        }
        v
    }

    pub(super) fn branch(&self, r: &str) -> Value {
        json!({"label": format!("{}:{r}", self.owner()), "ref": r, "sha": sha(r),
               "user": self.user(self.owner()), "repo": self.repo_json()})
    }

    pub(super) fn pull_json(&self, i: &Issue) -> Value {
        let Some(p) = &i.pull else {
            return Value::Null;
        };
        let (n, base, web) = (i.number, self.base(), self.web());
        let mut v = self.issue_json(i);
        let o = v.as_object_mut().expect("an issue is an object");
        for k in [
            "repository_url",
            "labels_url",
            "events_url",
            "pull_request",
            "reactions",
            "state_reason",
        ] {
            o.remove(k);
        }
        let review_comments = self.review_comments.iter().filter(|c| c.pr == n).count();
        let more = json!({
            "url": format!("{base}/pulls/{n}"), "node_id": format!("PR_{}", i.id),
            "html_url": format!("{web}/pull/{n}"), "diff_url": format!("{web}/pull/{n}.diff"),
            "patch_url": format!("{web}/pull/{n}.patch"), "issue_url": format!("{base}/issues/{n}"),
            "commits_url": format!("{base}/pulls/{n}/commits"),
            "review_comments_url": format!("{base}/pulls/{n}/comments"),
            "comments_url": format!("{base}/issues/{n}/comments"),
            "head": self.branch(&p.head), "base": self.branch(&p.base), "draft": p.draft,
            "merged_at": null, "merge_commit_sha": null, "merged": false, "mergeable": null,
            "requested_reviewers": [], "requested_teams": [], "auto_merge": null,
            "review_comments": review_comments, "commits": 1, "additions": 1, "deletions": 0,
            "changed_files": 1, "active_lock_reason": null,
        });
        for (k, x) in more.as_object().into_iter().flatten() {
            o.insert(k.clone(), x.clone());
        }
        v
    }

    pub(super) fn comment_json(&self, c: &Comment) -> Value {
        let (id, base) = (c.id, self.base());
        let kind = if self.is_pull(c.issue) {
            "pull"
        } else {
            "issues"
        };
        json!({"url": format!("{base}/issues/comments/{id}"),
               "html_url": format!("{}/{kind}/{}#issuecomment-{id}", self.web(), c.issue),
               "issue_url": format!("{base}/issues/{}", c.issue), "id": id,
               "node_id": format!("IC_{id}"), "user": self.user(&c.user),
               "created_at": ts(c.created), "updated_at": ts(c.updated),
               "author_association": self.association(&c.user), "body": c.body,
               "performed_via_github_app": null,
               "reactions": self.rollup("issue_comment", id, format!("{base}/issues/comments/{id}/reactions"))})
    }

    pub(super) fn review_comment_json(&self, c: &ReviewComment) -> Value {
        let (id, pr, base) = (c.id, c.pr, self.base());
        let head = self.issue_ix(pr).and_then(|i| self.issues[i].pull.as_ref());
        let sha = sha(head.map_or("", |p| p.head.as_str()));
        let html = format!("{}/pull/{pr}#discussion_r{id}", self.web());
        let mut v = json!({
            "url": format!("{base}/pulls/comments/{id}"), "pull_request_review_id": id + 1_000_000,
            "id": id, "node_id": format!("PRRC_{id}"), "diff_hunk": "@@ -1 +1 @@\n-old\n+new",
            "path": c.path, "position": 1, "original_position": 1, "commit_id": sha,
            "original_commit_id": sha, "user": self.user(&c.user), "body": c.body,
            "created_at": ts(c.created), "updated_at": ts(c.updated), "html_url": html,
            "pull_request_url": format!("{base}/pulls/{pr}"),
            "author_association": self.association(&c.user),
            "_links": {"self": {"href": format!("{base}/pulls/comments/{id}")},
                       "html": {"href": html}, "pull_request": {"href": format!("{base}/pulls/{pr}")}},
            "start_line": null, "original_start_line": null, "start_side": null, "line": 1,
            "original_line": 1, "side": "RIGHT", "subject_type": "line",
            "reactions": self.rollup("review_comment", id, format!("{base}/pulls/comments/{id}/reactions")),
        });
        if let Some(r) = c.reply_to {
            v["in_reply_to_id"] = r.into();
        }
        v
    }

    pub(super) fn reaction_json(&self, r: &Reaction) -> Value {
        json!({"id": r.id, "node_id": format!("REA_{}", r.id), "user": self.user(&r.user),
               "content": r.content, "created_at": ts(r.created)})
    }
}
