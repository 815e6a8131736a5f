//! A fake GitHub REST API for the GitHub tracker: issues, issue comments, pull requests
//! (on the issues' number sequence, as on GitHub), review comments, reactions and the
//! App token exchange. Every request is checked against GitHub's own OpenAPI description
//! before it is answered (github/openapi.rs), so what the fake accepts GitHub would too.
//! Answers carry GitHub's headers: rate limit, ETag (a matching If-None-Match gets 304
//! free of charge), Link for the next page. Faults are queued per request.
//!
//! In github/: openapi.rs (the checks), serve.rs (auth, faults, headers), endpoints.rs
//! (what each endpoint does), shapes.rs (GitHub's JSON), hooks.rs (webhooks: signing,
//! real example payloads, delivery).

mod endpoints;
mod hooks;
mod openapi;
mod serve;
mod shapes;

pub use hooks::{deliver, deliver_raw, example, retarget, sign};

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::{json, Value};

const LIMIT: u64 = 5000;
const DOCS: &str = "https://docs.github.com/rest";

/// A scripted answer for the next request that matches, in GitHub's shapes.
#[derive(Debug, Clone)]
pub enum Fault {
    /// This status with this JSON body (401, 404, 422, 500, …).
    Status(u16, Value),
    /// The primary rate limit: 403, `x-ratelimit-remaining: 0`, reset in N seconds.
    RateLimited { reset_in_secs: u64 },
    /// A secondary rate limit: 403 with `retry-after`.
    Secondary { retry_after_secs: u64 },
    /// 429 with `retry-after`.
    TooMany { retry_after_secs: u64 },
    /// This status with this body and `Content-Type` (a proxy's HTML page, say).
    Raw {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// The request is carried out (GitHub has it), then answered with this status and
    /// GitHub's error body: a client never learns it went through.
    AfterDoing(u16),
}

/// One request the fake received, and the status it answered.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    /// The body as JSON (a JSON string of the text when it is not JSON).
    pub body: Option<Value>,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub at: Instant,
    pub status: u16,
}

struct Issue {
    number: u64,
    id: u64,
    title: String,
    body: Option<String>,
    open: bool,
    assignees: Vec<String>,
    labels: Vec<String>,
    user: String,
    created: i64,
    updated: i64,
    closed: Option<i64>,
    comments: u64,
    /// Set for a pull request: GitHub's pull requests are issues too.
    pull: Option<Pull>,
}

struct Pull {
    head: String,
    base: String,
    draft: bool,
}

struct Comment {
    id: u64,
    issue: u64,
    user: String,
    body: String,
    created: i64,
    updated: i64,
}

struct ReviewComment {
    id: u64,
    pr: u64,
    user: String,
    body: String,
    path: String,
    reply_to: Option<u64>,
    created: i64,
    updated: i64,
}

struct Reaction {
    id: u64,
    /// "issue", "issue_comment" or "review_comment".
    kind: &'static str,
    target: u64,
    content: String,
    user: String,
    created: i64,
}

#[derive(Default)]
struct St {
    repo: String,
    login: String,
    token: String,
    api: String,
    started: i64,
    next_number: u64,
    next_id: u64,
    issues: Vec<Issue>,
    comments: Vec<Comment>,
    review_comments: Vec<ReviewComment>,
    reactions: Vec<Reaction>,
    associations: HashMap<String, String>,
    no_commits: HashSet<String>,
    faults: VecDeque<(String, String, Fault)>,
    /// Requests to carry out, then answer only after a long while (the client is
    /// killed meanwhile): method, path fragment.
    stalls: Vec<(String, String)>,
    /// How many stalled requests were carried out.
    stalled: usize,
    requests: Vec<Request>,
    violations: Vec<String>,
    jwts: Vec<String>,
    used: u64,
    reset: i64,
    not_modified: usize,
    /// How far the fake's clock is ahead of the real one, in seconds: its times, its
    /// `Date` header and its rate-limit resets all read it.
    ahead: i64,
}

#[derive(Clone)]
pub struct FakeGithub {
    pub addr: SocketAddr,
    st: Arc<Mutex<St>>,
}

/// The query: decoded pairs, and the raw text (for the Link header's URLs).
struct Q {
    pairs: Vec<(String, String)>,
    raw: String,
}

impl Q {
    fn get(&self, k: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer before the common headers go on.
struct Answer {
    status: u16,
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
    /// The rate limit shows as spent until this time (a `RateLimited` fault).
    exhausted_until: Option<i64>,
    /// A body that is not JSON, with its content type (a `Raw` fault).
    raw: Option<(&'static str, String)>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            body: Some(body),
            headers: Vec::new(),
            exhausted_until: None,
            raw: None,
        }
    }

    fn with(mut self, name: &'static str, value: String) -> Answer {
        self.headers.push((name, value));
        self
    }
}

fn ok(v: Value) -> Answer {
    Answer::json(200, v)
}

fn error(status: u16, message: &str) -> Answer {
    Answer::json(
        status,
        json!({"message": message, "documentation_url": DOCS, "status": status.to_string()}),
    )
}

fn not_found() -> Answer {
    error(404, "Not Found")
}

impl St {
    /// The fake GitHub's time now (seconds), `ahead` of the real clock.
    fn now(&self) -> i64 {
        chrono::Utc::now().timestamp() + self.ahead
    }
}

/// RFC 3339 in whole seconds with `Z`, as GitHub writes times.
fn ts(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

fn parse_ts(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.timestamp())
}

fn hash(x: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

/// A made-up commit id for a branch: stable, 40 hex digits.
fn sha(r: &str) -> String {
    format!(
        "{:016x}{:016x}{:08x}",
        hash(r),
        hash((r, 1)),
        hash((r, 2)) as u32
    )
}

fn has(list: &[String], x: &str) -> bool {
    list.iter().any(|y| y.eq_ignore_ascii_case(x))
}

fn set_state(i: &mut Issue, open: bool, t: i64) {
    if i.open != open {
        i.open = open;
        i.closed = (!open).then_some(t);
    }
}

impl FakeGithub {
    /// Serves `repo` ("owner/name") to a client holding `token`, as the bot `login`.
    pub async fn start(repo: &str, login: &str, token: &str) -> FakeGithub {
        // Read here, on the test's task: a missing description then fails the test with
        // how to install it, not a server task the client only sees as a dropped connection.
        openapi::spec();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let t = chrono::Utc::now().timestamp();
        let st = Arc::new(Mutex::new(St {
            repo: repo.into(),
            login: login.into(),
            token: token.into(),
            api: format!("http://{addr}"),
            started: t,
            reset: t + 3600,
            next_id: 1000,
            ..Default::default()
        }));
        let app = Router::new().fallback(serve::handle).with_state(st.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeGithub { addr, st }
    }

    /// Sets the fake's clock `secs` ahead of the real one (behind when negative): the
    /// times in its answers, its `Date` header and its rate-limit resets follow it.
    pub fn set_clock_ahead(&self, secs: i64) {
        self.with(|s| {
            let shift = secs - s.ahead;
            s.ahead = secs;
            s.started += shift;
            s.reset += shift;
        });
    }

    /// The API URL (`api_url`), without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<R>(&self, f: impl FnOnce(&mut St) -> R) -> R {
        f(&mut self.st.lock().unwrap())
    }

    /// Answers the first later request with `method` whose path contains `path_contains`
    /// with `fault` (faults queue up, each used once).
    pub fn fail_next(&self, method: &str, path_contains: &str, fault: Fault) {
        self.with(|s| {
            s.faults
                .push_back((method.into(), path_contains.into(), fault))
        });
    }

    /// The next request matching is carried out (GitHub has it) but answered only after
    /// two minutes: a client killed meanwhile never learns it went through.
    pub fn stall_next(&self, method: &str, path_contains: &str) {
        self.with(|s| s.stalls.push((method.into(), path_contains.into())));
    }

    /// How many stalled requests were carried out so far.
    pub fn stalled(&self) -> usize {
        self.with(|s| s.stalled)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.with(|s| s.requests.clone())
    }

    /// Every way a request differed from GitHub's description (empty when none did).
    pub fn violations(&self) -> Vec<String> {
        self.with(|s| s.violations.clone())
    }

    /// How many GETs were answered 304 Not Modified.
    pub fn not_modified_count(&self) -> usize {
        self.with(|s| s.not_modified)
    }

    /// The App JWTs presented to `/app` endpoints.
    pub fn jwts(&self) -> Vec<String> {
        self.with(|s| s.jwts.clone())
    }

    /// Sets a user's `author_association` (default: OWNER for the repo's owner, else NONE).
    pub fn set_association(&self, login: &str, association: &str) {
        self.with(|s| s.associations.insert(login.into(), association.into()));
    }

    pub fn add_issue(&self, title: &str, body: &str, author: &str) -> u64 {
        self.with(|s| s.new_issue(title, Some(body), author, None))
    }

    /// An open pull request from branch `head` into main.
    pub fn add_pull(&self, title: &str, head: &str, author: &str) -> u64 {
        let pull = Pull {
            head: head.into(),
            base: "main".into(),
            draft: false,
        };
        self.with(|s| s.new_issue(title, Some(""), author, Some(pull)))
    }

    /// Changes issue `n` and its `updated_at`.
    fn change(&self, n: u64, f: impl FnOnce(&mut Issue, i64)) {
        self.with(|s| {
            let ix = s.issue_ix(n).unwrap_or_else(|| panic!("no issue #{n}"));
            let t = s.now();
            f(&mut s.issues[ix], t);
            s.issues[ix].updated = t;
        });
    }

    pub fn assign(&self, n: u64, login: &str) {
        self.change(n, |i, _| {
            if !has(&i.assignees, login) {
                i.assignees.push(login.into());
            }
        });
    }

    pub fn unassign(&self, n: u64, login: &str) {
        self.change(n, |i, _| {
            i.assignees.retain(|a| !a.eq_ignore_ascii_case(login))
        });
    }

    pub fn add_label(&self, n: u64, label: &str) {
        self.change(n, |i, _| {
            if !has(&i.labels, label) {
                i.labels.push(label.into());
            }
        });
    }

    pub fn remove_label(&self, n: u64, label: &str) {
        self.change(n, |i, _| {
            i.labels.retain(|l| !l.eq_ignore_ascii_case(label))
        });
    }

    pub fn close_issue(&self, n: u64) {
        self.change(n, |i, t| set_state(i, false, t));
    }

    /// A comment by `author` on issue or pull request `n`; returns its id.
    pub fn add_comment(&self, n: u64, author: &str, body: &str) -> u64 {
        self.with(|s| s.new_comment(n, author, body))
            .unwrap_or_else(|| panic!("no issue #{n}"))
    }

    /// A review comment by `author` on pull request `pr` (on README.md); returns its id.
    pub fn add_review_comment(&self, pr: u64, author: &str, body: &str) -> u64 {
        self.with(|s| s.new_review_comment(pr, author, body, None, "README.md".into()))
            .unwrap_or_else(|| panic!("no pull request #{pr}"))
    }

    /// Makes creating a pull request from `head_ref` fail as for a branch with no commits.
    pub fn no_commits_for(&self, head_ref: &str) {
        self.with(|s| s.no_commits.insert(head_ref.into()));
    }

    /// Issue (or pull request) `n` as GET /repos/{o}/{r}/issues/{n} answers it.
    pub fn issue(&self, n: u64) -> Value {
        self.with(|s| {
            let ix = s.issue_ix(n).unwrap_or_else(|| panic!("no issue #{n}"));
            s.issue_json(&s.issues[ix])
        })
    }

    /// The comments on issue or pull request `n`, oldest first.
    pub fn comments(&self, n: u64) -> Vec<Value> {
        self.with(|s| {
            s.comments
                .iter()
                .filter(|c| c.issue == n)
                .map(|c| s.comment_json(c))
                .collect()
        })
    }

    /// Every pull request, in the order they were opened.
    pub fn pulls(&self) -> Vec<Value> {
        self.with(|s| {
            s.issues
                .iter()
                .filter(|i| i.pull.is_some())
                .map(|i| s.pull_json(i))
                .collect()
        })
    }

    pub fn review_comments(&self, pr: u64) -> Vec<Value> {
        self.with(|s| {
            let mine = s.review_comments.iter().filter(|c| c.pr == pr);
            mine.map(|c| s.review_comment_json(c)).collect()
        })
    }

    /// Every reaction as GitHub shows it, plus `target`: `{"kind": "issue" |
    /// "issue_comment" | "review_comment", "id": <comment id or issue number>}`.
    pub fn reactions(&self) -> Vec<Value> {
        self.with(|s| {
            let all = s.reactions.iter().map(|r| {
                let mut v = s.reaction_json(r);
                v["target"] = json!({"kind": r.kind, "id": r.target});
                v
            });
            all.collect()
        })
    }

    /// Polls every 20 ms until `cond` holds; after `secs` seconds, fails naming `what`
    /// with the last requests and the violations.
    pub async fn wait_for(&self, secs: u64, what: &str, cond: impl Fn(&FakeGithub) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            if Instant::now() > deadline {
                let all = self.requests();
                let recent: Vec<String> = all[all.len().saturating_sub(40)..]
                    .iter()
                    .map(|r| {
                        let body = r.body.as_ref().map(Value::to_string).unwrap_or_default();
                        let q = if r.query.is_empty() {
                            String::new()
                        } else {
                            format!("?{}", r.query)
                        };
                        format!("{} {}{q} -> {} {body}", r.method, r.path, r.status)
                    })
                    .collect();
                panic!(
                    "timed out after {secs} s waiting for {what}; the last requests:\n{}\nviolations: {:#?}",
                    recent.join("\n"),
                    self.violations()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
