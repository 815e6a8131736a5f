//! The fake GitHub itself: it holds every request to GitHub's OpenAPI description,
//! answers as GitHub does (credentials, conditional requests, pages, faults, shared
//! issue and pull request numbers), and signs and delivers webhooks as GitHub does.

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use serde_json::{json, Value};

use crate::common::github::{self, FakeGithub, Fault};

const REPO: &str = "acme/widgets";
const BOT: &str = "picogent-bot[bot]";
const TOKEN: &str = "ghs_fake_installation_token";

struct Resp {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Resp {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }
}

/// A request as a well-behaved client sends it: User-Agent, Accept and the token.
fn req(gh: &FakeGithub, method: &str, path: &str) -> reqwest::RequestBuilder {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    reqwest::Client::new()
        .request(method, format!("{}{path}", gh.url()))
        .header("user-agent", "picogent-tests")
        .header("accept", "application/vnd.github+json")
        .header("x-github-api-version", "2022-11-28")
        .header("authorization", format!("Bearer {TOKEN}"))
}

async fn send(r: reqwest::RequestBuilder) -> Resp {
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        body,
    }
}

async fn start() -> FakeGithub {
    FakeGithub::start(REPO, BOT, TOKEN).await
}

#[tokio::test]
async fn a_valid_comment_is_accepted_counted_and_shaped_like_githubs() {
    let gh = start().await;
    let n = gh.add_issue("Fix the widget", "It wobbles.", "alice");
    let r = send(
        req(&gh, "POST", &format!("/repos/{REPO}/issues/{n}/comments"))
            .json(&json!({"body": "On it."})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["user"]["login"], BOT);
    assert_eq!(r.body["user"]["type"], "Bot");
    assert_eq!(r.body["body"], "On it.");
    assert!(r.body["html_url"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/issues/{n}#issuecomment-{}", r.body["id"])));
    assert_eq!(r.header("x-github-api-version-selected"), "2022-11-28");
    assert_eq!(r.header("x-ratelimit-resource"), "core");
    assert_eq!(r.header("x-ratelimit-limit"), "5000");
    assert_eq!(gh.violations(), Vec::<String>::new());
    assert_eq!(gh.comments(n).len(), 1);
    assert_eq!(gh.issue(n)["comments"], 1);
    let listed = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/issues/{n}/comments"),
    ))
    .await;
    assert_eq!(listed.body[0]["id"], r.body["id"]);
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_pull_request_without_head_is_a_violation_answered_422() {
    let gh = start().await;
    let r = send(
        req(&gh, "POST", &format!("/repos/{REPO}/pulls"))
            .json(&json!({"title": "Fix", "base": "main"})),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid request."));
    let v = gh.violations();
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].contains("POST /repos/acme/widgets/pulls") && v[0].contains("`head`"),
        "{v:#?}"
    );
    assert!(gh.pulls().is_empty());
}

#[tokio::test]
async fn pull_requests_share_the_issue_numbers_and_refuse_duplicates_and_empty_branches() {
    let gh = start().await;
    let issue = gh.add_issue("Fix the widget", "", "alice");
    let open = |head: &str| {
        req(&gh, "POST", &format!("/repos/{REPO}/pulls")).json(
            &json!({"title": "Fix", "head": head, "base": "main", "body": "Closes #1", "draft": false}),
        )
    };
    let r = send(open("picogent/issue-1")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["number"], issue + 1);
    assert_eq!(r.body["head"]["ref"], "picogent/issue-1");
    assert_eq!(r.body["state"], "open");
    let again = send(open("acme:picogent/issue-1")).await;
    assert_eq!(again.status, 422);
    assert_eq!(
        again.body["errors"][0]["message"],
        "A pull request already exists for acme:picogent/issue-1."
    );
    gh.no_commits_for("empty");
    let empty = send(open("empty")).await;
    assert_eq!(empty.status, 422);
    assert_eq!(
        empty.body["errors"][0]["message"],
        "No commits between main and empty"
    );
    let issues = send(req(&gh, "GET", &format!("/repos/{REPO}/issues?state=all"))).await;
    let numbers: Vec<(u64, bool)> = issues
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["number"].as_u64().unwrap(),
                i.get("pull_request").is_some(),
            )
        })
        .collect();
    assert_eq!(numbers, vec![(issue + 1, true), (issue, false)]);
    // GitHub ignores a head without its owner; with it, only that branch's pull request.
    let by_head = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/pulls?head=acme:picogent/issue-1"),
    ))
    .await;
    assert_eq!(by_head.body.as_array().unwrap().len(), 1);
    let other = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/pulls?head=acme:other"),
    ))
    .await;
    assert_eq!(other.body, json!([]));
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn undeclared_query_parameters_bad_enums_and_bad_times_are_violations() {
    let gh = start().await;
    let issues = format!("/repos/{REPO}/issues");
    for (query, word) in [
        ("bogus=1", "`bogus`"),
        ("state=opened", "`state`"),
        ("since=yesterday", "`since`"),
        ("per_page=many", "`per_page`"),
    ] {
        let before = gh.violations().len();
        let r = send(req(&gh, "GET", &format!("{issues}?{query}"))).await;
        assert_eq!(r.status, 422, "{query}: {}", r.body);
        let v = gh.violations();
        assert_eq!(v.len(), before + 1, "{query}: {v:#?}");
        assert!(v[before].contains(word), "{query}: {v:#?}");
    }
    let bad_type = send(
        req(&gh, "POST", &format!("/repos/{REPO}/pulls"))
            .json(&json!({"title": "x", "head": "h", "base": "main", "draft": "yes"})),
    )
    .await;
    assert_eq!(bad_type.status, 422);
    assert!(gh.violations().last().unwrap().contains("body.draft"));
    let bad_reaction = send(
        req(&gh, "POST", &format!("/repos/{REPO}/issues/1/reactions"))
            .json(&json!({"content": "thumbsup"})),
    )
    .await;
    assert_eq!(bad_reaction.status, 422);
    assert!(gh.violations().last().unwrap().contains("thumbsup"));
}

#[tokio::test]
async fn literal_path_segments_win_over_parameters() {
    let gh = start().await;
    let n = gh.add_issue("A", "", "alice");
    gh.add_comment(n, "alice", "first");
    // `/issues/comments` is the repository's comments, not an issue numbered "comments".
    let r = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/issues/comments?sort=created&direction=desc"),
    ))
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body[0]["body"], "first");
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_conditional_get_is_answered_304_and_costs_no_rate_limit() {
    let gh = start().await;
    let n = gh.add_issue("A", "", "alice");
    let path = format!("/repos/{REPO}/issues");
    let first = send(req(&gh, "GET", &path)).await;
    let etag = first.header("etag");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag:?}");
    let again = send(req(&gh, "GET", &path).header("if-none-match", &etag)).await;
    assert_eq!(again.status, 304);
    assert_eq!(again.body, Value::Null);
    assert_eq!(
        again.header("x-ratelimit-remaining"),
        first.header("x-ratelimit-remaining")
    );
    assert_eq!(gh.not_modified_count(), 1);
    gh.add_comment(n, "bob", "news");
    let changed = send(req(&gh, "GET", &path).header("if-none-match", &etag)).await;
    assert_eq!(changed.status, 200);
    assert_ne!(changed.header("etag"), etag);
    assert_eq!(gh.not_modified_count(), 1);
}

#[tokio::test]
async fn requests_without_credentials_or_user_agent_are_refused() {
    let gh = start().await;
    let url = &format!("{}/repos/{REPO}/issues", gh.url());
    let anonymous = send(reqwest::Client::new().get(url).header("user-agent", "t")).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.body["message"], "Bad credentials");
    let wrong = send(
        reqwest::Client::new()
            .get(url)
            .header("user-agent", "t")
            .bearer_auth("nope"),
    )
    .await;
    assert_eq!(wrong.status, 401);
    let token_scheme = send(
        reqwest::Client::new()
            .get(url)
            .header("user-agent", "t")
            .header("authorization", format!("token {TOKEN}")),
    )
    .await;
    assert_eq!(token_scheme.status, 200);
    assert_eq!(gh.violations(), Vec::<String>::new());
    let no_agent = send(reqwest::Client::new().get(url).bearer_auth(TOKEN)).await;
    assert_eq!(no_agent.status, 403);
    assert!(
        gh.violations()[0].contains("User-Agent"),
        "{:?}",
        gh.violations()
    );
}

#[tokio::test]
async fn unknown_paths_are_violations_and_other_repositories_are_not_found() {
    let gh = start().await;
    let r = send(req(&gh, "GET", &format!("/repos/{REPO}/tickets"))).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["message"], "Not Found");
    assert!(
        gh.violations()[0].contains("no such path"),
        "{:?}",
        gh.violations()
    );
    let wrong_method = send(req(&gh, "PUT", &format!("/repos/{REPO}/issues/comments"))).await;
    assert_eq!(wrong_method.status, 404);
    assert_eq!(gh.violations().len(), 2);
    let other = send(req(&gh, "GET", "/repos/someone/else/issues")).await;
    assert_eq!(other.status, 404);
    assert_eq!(gh.violations().len(), 2);
}

#[tokio::test]
async fn pages_link_to_the_next_one() {
    let gh = start().await;
    for t in ["a", "b", "c"] {
        gh.add_issue(t, "", "alice");
    }
    let first = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/issues?per_page=2&direction=asc"),
    ))
    .await;
    let titles: Vec<&str> = first
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["a", "b"]);
    let link = first.header("link");
    let next = link
        .split(", ")
        .find(|l| l.ends_with("rel=\"next\""))
        .unwrap_or_else(|| panic!("no next in {link:?}"));
    let next = next.trim_start_matches('<').split('>').next().unwrap();
    assert!(
        next.starts_with(&gh.url()) && next.contains("page=2"),
        "{next}"
    );
    let second = send(req(&gh, "GET", &next[gh.url().len()..])).await;
    assert_eq!(second.body.as_array().unwrap().len(), 1);
    assert_eq!(second.body[0]["title"], "c");
    assert!(!second.header("link").contains("rel=\"next\""));
}

#[tokio::test]
async fn since_keeps_what_changed_at_or_after_it() {
    let gh = start().await;
    let n = gh.add_issue("A", "", "alice");
    let updated = gh.issue(n)["updated_at"].as_str().unwrap().to_string();
    assert!(
        updated.ends_with('Z') && !updated.contains('.'),
        "{updated}"
    );
    let at = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/issues?since={updated}"),
    ))
    .await;
    assert_eq!(at.body.as_array().unwrap().len(), 1);
    let later =
        chrono::DateTime::parse_from_rfc3339(&updated).unwrap() + chrono::Duration::seconds(1);
    let later = later.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let after = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/issues?since={later}"),
    ))
    .await;
    assert_eq!(after.body, json!([]));
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn faults_answer_the_next_matching_request_once() {
    let gh = start().await;
    let n = gh.add_issue("A", "", "alice");
    let path = format!("/repos/{REPO}/issues/{n}/comments");
    gh.fail_next(
        "POST",
        "/comments",
        Fault::RateLimited { reset_in_secs: 60 },
    );
    gh.fail_next(
        "POST",
        "/comments",
        Fault::Secondary {
            retry_after_secs: 7,
        },
    );
    gh.fail_next(
        "POST",
        "/comments",
        Fault::TooMany {
            retry_after_secs: 3,
        },
    );
    gh.fail_next(
        "POST",
        "/comments",
        Fault::Status(500, json!({"message": "Server Error"})),
    );
    let post = || send(req(&gh, "POST", &path).json(&json!({"body": "hi"})));
    let limited = post().await;
    assert_eq!(limited.status, 403);
    assert_eq!(limited.header("x-ratelimit-remaining"), "0");
    let reset: i64 = limited.header("x-ratelimit-reset").parse().unwrap();
    assert!(
        (reset - chrono::Utc::now().timestamp() - 60).abs() <= 2,
        "{reset}"
    );
    assert!(limited.body["message"]
        .as_str()
        .unwrap()
        .contains("API rate limit exceeded"));
    let secondary = post().await;
    assert_eq!(
        (secondary.status, secondary.header("retry-after").as_str()),
        (403, "7")
    );
    let many = post().await;
    assert_eq!(
        (many.status, many.header("retry-after").as_str()),
        (429, "3")
    );
    assert_eq!(post().await.status, 500);
    assert_eq!(post().await.status, 201);
    assert_eq!(gh.comments(n).len(), 1);
    let statuses: Vec<u16> = gh.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [403_u16, 403, 429, 500, 201]);
}

#[tokio::test]
async fn an_app_jwt_buys_the_installation_token() {
    let gh = start().await;
    let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxIn0.c2ln";
    let url = &format!("{}/app/installations/42/access_tokens", gh.url());
    let with_token = send(
        reqwest::Client::new()
            .post(url)
            .header("user-agent", "t")
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(with_token.status, 401);
    let r = send(
        reqwest::Client::new()
            .post(url)
            .header("user-agent", "t")
            .bearer_auth(jwt),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["token"], TOKEN);
    assert!(r.body["expires_at"].as_str().unwrap().ends_with('Z'));
    let app = send(
        reqwest::Client::new()
            .get(format!("{}/app", gh.url()))
            .header("user-agent", "t")
            .bearer_auth(jwt),
    )
    .await;
    assert_eq!(app.body["slug"], "picogent-bot");
    assert_eq!(gh.jwts(), [jwt, jwt]);
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn review_comment_replies_and_reactions() {
    let gh = start().await;
    let pr = gh.add_pull("Fix", "picogent/issue-1", BOT);
    let c = gh.add_review_comment(pr, "alice", "Rename this.");
    let reply = send(
        req(
            &gh,
            "POST",
            &format!("/repos/{REPO}/pulls/{pr}/comments/{c}/replies"),
        )
        .json(&json!({"body": "Done."})),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.body["in_reply_to_id"], c);
    let react = || {
        send(
            req(
                &gh,
                "POST",
                &format!("/repos/{REPO}/pulls/comments/{c}/reactions"),
            )
            .json(&json!({"content": "eyes"})),
        )
    };
    assert_eq!(react().await.status, 201);
    assert_eq!(react().await.status, 200);
    let reactions = gh.reactions();
    assert_eq!(reactions.len(), 1);
    assert_eq!(
        reactions[0]["target"],
        json!({"kind": "review_comment", "id": c})
    );
    assert_eq!(gh.review_comments(pr)[0]["reactions"]["eyes"], 1);
    let listed = send(req(
        &gh,
        "GET",
        &format!("/repos/{REPO}/pulls/comments?since=2000-01-01T00:00:00Z"),
    ))
    .await;
    assert_eq!(listed.body.as_array().unwrap().len(), 2);
    assert_eq!(gh.violations(), Vec::<String>::new());
}

#[test]
fn webhook_signatures_match_githubs_documented_example() {
    // From GitHub's "Validating webhook deliveries".
    assert_eq!(
        github::sign("It's a Secret to Everybody", b"Hello, World!"),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
}

#[test]
fn webhook_examples_are_real_payloads_pointed_at_the_fake() {
    let mut comment = github::example("issue_comment", "created");
    github::retarget(&mut comment, REPO, 7);
    assert_eq!(comment["action"], "created");
    assert_eq!(comment["repository"]["full_name"], REPO);
    assert_eq!(comment["repository"]["owner"]["login"], "acme");
    assert_eq!(comment["issue"]["number"], 7);
    assert!(comment["comment"]["body"].is_string());
    let mut review = github::example("pull_request_review_comment", "created");
    github::retarget(&mut review, REPO, 8);
    assert_eq!(review["pull_request"]["number"], 8);
    assert!(review["pull_request"]["head"]["ref"].is_string());
    assert!(github::example("issues", "unassigned")["assignee"]["login"].is_string());
    assert!(github::example("issues", "labeled")["label"]["name"].is_string());
    assert!(github::example("ping", "")["zen"].is_string());
}

/// What a stand-in webhook receiver saw: each delivery's headers and body.
type Seen = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

#[tokio::test]
async fn deliveries_carry_githubs_headers_and_signature() {
    let seen: Seen = Arc::default();
    let keep = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push((h, body.to_vec()));
                axum::Json(json!({"ok": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let payload = github::example("ping", "");
    let (status, answer) = github::deliver(&url, "ping", "d-1", Some("s3cret"), &payload).await;
    assert_eq!((status, answer), (200, json!({"ok": true})));
    let (h, body) = seen.lock().unwrap()[0].clone();
    let header = |k: &str| {
        h.get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(header("x-github-event"), "ping");
    assert_eq!(header("x-github-delivery"), "d-1");
    assert!(header("user-agent").starts_with("GitHub-Hookshot/"));
    assert_eq!(header("x-hub-signature-256"), github::sign("s3cret", &body));
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), payload);
    let (status, _) = github::deliver_raw(
        &url,
        &[("content-type", "application/json")],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(seen.lock().unwrap()[1]
        .0
        .get("x-hub-signature-256")
        .is_none());
}
