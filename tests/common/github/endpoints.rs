//! What each endpoint does to the fake's state: listing (filters, sort, pages), creating
//! and editing issues, comments, pull requests, review comments and reactions.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::{
    error, has, not_found, ok, parse_ts, set_state, ts, Answer, Comment, Issue, Pull, Reaction,
    ReviewComment, St, Q,
};

/// GitHub's 422 for a request that is well-formed but refused.
fn validation_failed(errors: Value) -> Answer {
    Answer::json(
        422,
        json!({"message": "Validation Failed", "errors": errors, "status": "422",
               "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"}),
    )
}

/// Sorted by (key, id), newest first when `desc`.
fn sorted(mut items: Vec<(i64, u64, Value)>, desc: bool) -> Vec<Value> {
    items.sort_by_key(|(k, id, _)| (*k, *id));
    if desc {
        items.reverse();
    }
    items.into_iter().map(|(_, _, v)| v).collect()
}

/// Names from `["a", …]` or `[{"name": "a"}, …]`.
fn names(v: &Value) -> Option<Vec<String>> {
    let list = v.as_array()?;
    Some(
        list.iter()
            .filter_map(|x| x.as_str().or(x["name"].as_str()).map(str::to_string))
            .collect(),
    )
}

impl St {
    pub(super) fn new_issue(
        &mut self,
        title: &str,
        body: Option<&str>,
        user: &str,
        pull: Option<Pull>,
    ) -> u64 {
        self.next_number += 1;
        let (number, id, t) = (self.next_number, self.id(), self.now());
        self.issues.push(Issue {
            number,
            id,
            title: title.into(),
            body: body.map(str::to_string),
            open: true,
            assignees: Vec::new(),
            labels: Vec::new(),
            user: user.into(),
            created: t,
            updated: t,
            closed: None,
            comments: 0,
            pull,
        });
        number
    }

    /// A comment on issue or pull request `n`; it counts as a change of the issue.
    pub(super) fn new_comment(&mut self, n: u64, user: &str, body: &str) -> Option<u64> {
        let ix = self.issue_ix(n)?;
        let (id, t) = (self.id(), self.now());
        self.comments.push(Comment {
            id,
            issue: n,
            user: user.into(),
            body: body.into(),
            created: t,
            updated: t,
        });
        self.issues[ix].comments += 1;
        self.issues[ix].updated = t;
        Some(id)
    }

    pub(super) fn new_review_comment(
        &mut self,
        pr: u64,
        user: &str,
        body: &str,
        reply_to: Option<u64>,
        path: String,
    ) -> Option<u64> {
        let ix = self
            .issue_ix(pr)
            .filter(|&i| self.issues[i].pull.is_some())?;
        let (id, t) = (self.id(), self.now());
        self.review_comments.push(ReviewComment {
            id,
            pr,
            user: user.into(),
            body: body.into(),
            path,
            reply_to,
            created: t,
            updated: t,
        });
        self.issues[ix].updated = t;
        Some(id)
    }

    fn react(&mut self, kind: &'static str, target: u64, b: &Value) -> Answer {
        let exists = match kind {
            "issue" => self.issue_ix(target).is_some(),
            "issue_comment" => self.comments.iter().any(|c| c.id == target),
            _ => self.review_comments.iter().any(|c| c.id == target),
        };
        if !exists {
            return not_found();
        }
        let content = b["content"].as_str().unwrap_or_default().to_string();
        let user = self.login.clone();
        let same = |r: &&Reaction| {
            r.kind == kind && r.target == target && r.content == content && r.user == user
        };
        if let Some(r) = self.reactions.iter().find(same) {
            return ok(self.reaction_json(r));
        }
        let r = Reaction {
            id: self.id(),
            kind,
            target,
            content,
            user,
            created: self.now(),
        };
        let v = self.reaction_json(&r);
        self.reactions.push(r);
        Answer::json(201, v)
    }

    /// One page of `items`, with GitHub's Link header when there are others.
    fn page(&self, path: &str, q: &Q, items: Vec<Value>) -> Answer {
        let int = |k: &str, d: usize| q.get(k).and_then(|v| v.parse::<usize>().ok()).unwrap_or(d);
        let per = int("per_page", 30).clamp(1, 100);
        let page = int("page", 1).max(1);
        let last = items.len().div_ceil(per).max(1);
        let chunk: Vec<Value> = items.into_iter().skip((page - 1) * per).take(per).collect();
        let link = |n: usize, rel: &str| {
            let mut parts: Vec<&str> = q
                .raw
                .split('&')
                .filter(|x| !x.is_empty() && !x.starts_with("page="))
                .collect();
            let p = format!("page={n}");
            parts.push(&p);
            format!("<{}{path}?{}>; rel=\"{rel}\"", self.api, parts.join("&"))
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(link(page - 1, "prev"));
        }
        if page < last {
            links.push(link(page + 1, "next"));
            links.push(link(last, "last"));
        }
        if page > 1 {
            links.push(link(1, "first"));
        }
        let a = ok(Value::Array(chunk));
        if links.is_empty() {
            a
        } else {
            a.with("link", links.join(", "))
        }
    }

    fn list_issues(&self, q: &Q, path: &str) -> Answer {
        let state = q.get("state").unwrap_or("open");
        let since = q.get("since").and_then(parse_ts);
        let labels: Vec<&str> = q
            .get("labels")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let items = self
            .issues
            .iter()
            .filter(|i| state == "all" || (state == "closed") != i.open)
            .filter(|i| match q.get("assignee") {
                None => true,
                Some("*") => !i.assignees.is_empty(),
                Some("none") => i.assignees.is_empty(),
                Some(a) => has(&i.assignees, a),
            })
            .filter(|i| {
                q.get("creator")
                    .is_none_or(|c| i.user.eq_ignore_ascii_case(c))
            })
            .filter(|i| labels.iter().all(|l| has(&i.labels, l)))
            .filter(|i| since.is_none_or(|t| i.updated >= t))
            .map(|i| {
                let key = match q.get("sort") {
                    Some("updated") => i.updated,
                    Some("comments") => i.comments as i64,
                    _ => i.created,
                };
                (key, i.number, self.issue_json(i))
            })
            .collect();
        self.page(path, q, sorted(items, q.get("direction") != Some("asc")))
    }

    fn list_pulls(&self, q: &Q, path: &str) -> Answer {
        let state = q.get("state").unwrap_or("open");
        // Like GitHub, a `head` without its "owner:" filters nothing.
        let head = q.get("head").and_then(|h| h.split_once(':'));
        let items = self
            .issues
            .iter()
            .filter_map(|i| i.pull.as_ref().map(|p| (i, p)))
            .filter(|(i, _)| state == "all" || (state == "closed") != i.open)
            .filter(|(_, p)| {
                head.is_none_or(|(o, b)| o.eq_ignore_ascii_case(self.owner()) && p.head == b)
            })
            .filter(|(_, p)| q.get("base").is_none_or(|b| p.base == b))
            .map(|(i, _)| {
                let key = if q.get("sort") == Some("updated") {
                    i.updated
                } else {
                    i.created
                };
                (key, i.number, self.pull_json(i))
            })
            .collect();
        let desc = match q.get("direction") {
            Some(d) => d == "desc",
            None => matches!(q.get("sort"), None | Some("created")),
        };
        self.page(path, q, sorted(items, desc))
    }

    /// Issue or review comments, oldest first unless `sort` and `direction=desc` say otherwise.
    fn list_comments(&self, q: &Q, path: &str, items: Vec<(i64, i64, u64, Value)>) -> Answer {
        let since = q.get("since").and_then(parse_ts);
        let by_update = q.get("sort") == Some("updated");
        let items = items
            .into_iter()
            .filter(|(_, updated, _, _)| since.is_none_or(|t| *updated >= t))
            .map(|(created, updated, id, v)| (if by_update { updated } else { created }, id, v))
            .collect();
        let desc = q.get("sort").is_some() && q.get("direction") == Some("desc");
        self.page(path, q, sorted(items, desc))
    }

    fn patch_issue(&mut self, n: u64, b: &Value, pull: bool) -> Answer {
        let Some(ix) = self
            .issue_ix(n)
            .filter(|&i| !pull || self.issues[i].pull.is_some())
        else {
            return not_found();
        };
        let t = self.now();
        let i = &mut self.issues[ix];
        if let Some(x) = b["title"].as_str() {
            i.title = x.into();
        }
        if let Some(x) = b.get("body").filter(|x| x.is_string() || x.is_null()) {
            i.body = x.as_str().map(str::to_string);
        }
        if let Some(x) = b["state"].as_str() {
            set_state(i, x == "open", t);
        }
        if let Some(x) = names(&b["labels"]) {
            i.labels = x;
        }
        if let Some(x) = names(&b["assignees"]) {
            i.assignees = x;
        }
        if let (Some(x), Some(p)) = (b["base"].as_str(), i.pull.as_mut()) {
            p.base = x.into();
        }
        i.updated = t;
        let i = &self.issues[ix];
        ok(if pull {
            self.pull_json(i)
        } else {
            self.issue_json(i)
        })
    }

    fn create_pull(&mut self, b: &Value) -> Answer {
        let head = b["head"].as_str().unwrap_or_default();
        let base = b["base"].as_str().unwrap_or("main").to_string();
        let (owner, branch) = head.split_once(':').unwrap_or((self.owner(), head));
        let (owner, branch) = (owner.to_string(), branch.to_string());
        let Some(title) = b["title"].as_str() else {
            return validation_failed(
                json!([{"resource": "PullRequest", "field": "title", "code": "missing_field"}]),
            );
        };
        let open = |i: &Issue| i.open && i.pull.as_ref().is_some_and(|p| p.head == branch);
        if self.issues.iter().any(open) {
            let message = format!("A pull request already exists for {owner}:{branch}.");
            return validation_failed(
                json!([{"resource": "PullRequest", "code": "custom", "message": message}]),
            );
        }
        if self.no_commits.contains(&branch) {
            let message = format!("No commits between {base} and {branch}");
            return validation_failed(
                json!([{"resource": "PullRequest", "code": "custom", "message": message}]),
            );
        }
        let (login, draft) = (self.login.clone(), b["draft"].as_bool().unwrap_or(false));
        let pull = Pull {
            head: branch,
            base,
            draft,
        };
        let n = self.new_issue(title, b["body"].as_str(), &login, Some(pull));
        let v = self.pull_json(self.issues.last().expect("just added"));
        Answer::json(201, v).with("location", format!("{}/pulls/{n}", self.base()))
    }
}

/// Answers one request by its OpenAPI path template (checked already).
pub(super) fn route(
    s: &mut St,
    m: &str,
    t: &str,
    p: &HashMap<String, String>,
    q: &Q,
    b: &Value,
    path: &str,
) -> Answer {
    let num = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let (n, id) = (
        num("issue_number").max(num("pull_number")),
        num("comment_id"),
    );
    let text = b["body"].as_str().unwrap_or_default();
    let login = s.login.clone();
    match (m, t) {
        ("GET", "/user") => ok(s.user(&login)),
        ("GET", "/app") => {
            let slug = login.trim_end_matches("[bot]");
            ok(
                json!({"id": 1, "slug": slug, "node_id": "A_1", "name": slug,
                      "owner": s.user(s.owner()), "html_url": format!("https://github.com/apps/{slug}"),
                      "created_at": ts(s.started), "updated_at": ts(s.started),
                      "permissions": {"issues": "write", "pull_requests": "write", "contents": "write", "metadata": "read"},
                      "events": ["issues", "issue_comment", "pull_request_review_comment"]}),
            )
        }
        ("POST", "/app/installations/{installation_id}/access_tokens") => Answer::json(
            201,
            json!({"token": s.token, "expires_at": ts(s.now() + 3600), "repository_selection": "selected",
                   "permissions": {"issues": "write", "pull_requests": "write", "contents": "write", "metadata": "read"}}),
        ),
        ("GET", "/user/repos") => ok(json!([s.repo_json()])),
        ("GET", "/installation/repositories") => ok(
            json!({"total_count": 1, "repository_selection": "selected", "repositories": [s.repo_json()]}),
        ),
        ("GET", "/repos/{owner}/{repo}") => ok(s.repo_json()),
        ("GET", "/repos/{owner}/{repo}/issues") => s.list_issues(q, path),
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}") => match s.issue_ix(n) {
            Some(i) => ok(s.issue_json(&s.issues[i])),
            None => not_found(),
        },
        ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}") => s.patch_issue(n, b, false),
        ("POST" | "DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/assignees") => {
            let Some(i) = s.issue_ix(n) else {
                return not_found();
            };
            let who = names(&b["assignees"]).unwrap_or_default();
            let list = &mut s.issues[i].assignees;
            list.retain(|a| !has(&who, a));
            if m == "POST" {
                list.extend(who);
            }
            s.issues[i].updated = s.now();
            Answer::json(
                if m == "POST" { 201 } else { 200 },
                s.issue_json(&s.issues[i]),
            )
        }
        ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels") => {
            let Some(i) = s.issue_ix(n) else {
                return not_found();
            };
            let add = names(&b["labels"]).or_else(|| names(b)).unwrap_or_default();
            for l in add {
                if !has(&s.issues[i].labels, &l) {
                    s.issues[i].labels.push(l);
                }
            }
            s.issues[i].updated = s.now();
            ok(s.issues[i].labels.iter().map(|l| s.label(l)).collect())
        }
        ("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}") => {
            let Some(i) = s.issue_ix(n) else {
                return not_found();
            };
            let name = p
                .get("name")
                .cloned()
                .unwrap_or_default()
                .replace("%20", " ");
            if !has(&s.issues[i].labels, &name) {
                return error(404, "Label does not exist");
            }
            s.issues[i]
                .labels
                .retain(|l| !l.eq_ignore_ascii_case(&name));
            s.issues[i].updated = s.now();
            ok(s.issues[i].labels.iter().map(|l| s.label(l)).collect())
        }
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => {
            if s.issue_ix(n).is_none() {
                return not_found();
            }
            let items = s.comments.iter().filter(|c| c.issue == n);
            let items = items
                .map(|c| (c.created, c.updated, c.id, s.comment_json(c)))
                .collect();
            s.list_comments(q, path, items)
        }
        ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => match s
            .new_comment(n, &login, text)
        {
            Some(id) => {
                let v = s.comment_json(s.comments.last().expect("just added"));
                Answer::json(201, v).with("location", format!("{}/issues/comments/{id}", s.base()))
            }
            None => not_found(),
        },
        ("GET", "/repos/{owner}/{repo}/issues/comments") => {
            let items = s
                .comments
                .iter()
                .map(|c| (c.created, c.updated, c.id, s.comment_json(c)))
                .collect();
            s.list_comments(q, path, items)
        }
        ("GET" | "PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}") => {
            let Some(c) = s.comments.iter().position(|c| c.id == id) else {
                return not_found();
            };
            if m == "PATCH" {
                s.comments[c].body = text.into();
                s.comments[c].updated = s.now();
            }
            ok(s.comment_json(&s.comments[c]))
        }
        ("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions") => {
            s.react("issue_comment", id, b)
        }
        ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/reactions") => s.react("issue", n, b),
        ("GET", "/repos/{owner}/{repo}/pulls") => s.list_pulls(q, path),
        ("POST", "/repos/{owner}/{repo}/pulls") => s.create_pull(b),
        ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}") => {
            match s.issue_ix(n).filter(|_| s.is_pull(n)) {
                Some(i) => ok(s.pull_json(&s.issues[i])),
                None => not_found(),
            }
        }
        ("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}") => s.patch_issue(n, b, true),
        ("GET", "/repos/{owner}/{repo}/pulls/comments") => {
            let items = s
                .review_comments
                .iter()
                .map(|c| (c.created, c.updated, c.id, s.review_comment_json(c)))
                .collect();
            s.list_comments(q, path, items)
        }
        ("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}") => {
            match s.review_comments.iter().find(|c| c.id == id) {
                Some(c) => ok(s.review_comment_json(c)),
                None => not_found(),
            }
        }
        ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/comments") => {
            if !s.is_pull(n) {
                return not_found();
            }
            let items = s.review_comments.iter().filter(|c| c.pr == n);
            let items = items
                .map(|c| (c.created, c.updated, c.id, s.review_comment_json(c)))
                .collect();
            s.list_comments(q, path, items)
        }
        ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies") => {
            let Some(parent) = s.review_comments.iter().find(|c| c.id == id && c.pr == n) else {
                return not_found();
            };
            let (root, file) = (parent.reply_to.unwrap_or(parent.id), parent.path.clone());
            match s.new_review_comment(n, &login, text, Some(root), file) {
                Some(_) => Answer::json(
                    201,
                    s.review_comment_json(s.review_comments.last().expect("just added")),
                ),
                None => not_found(),
            }
        }
        ("POST", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions") => {
            s.react("review_comment", id, b)
        }
        _ => {
            s.violations.push(format!(
                "{m} {path}: GitHub has {m} {t}, but the fake GitHub does not (add it to tests/common/github.rs)"
            ));
            not_found()
        }
    }
}
