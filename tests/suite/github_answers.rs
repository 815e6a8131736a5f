//! GitHub answers that are not what they seem, and what happened while picogent was
//! down: an answer that is not GitHub's JSON is no success, a pull request GitHub
//! refuses is said on the issue (with the branch that has the work), an issue closed
//! meanwhile has its progress comment say work stopped, and a comment written
//! meanwhile is answered once.

use serde_json::{json, Value};

use super::github::{fixer, World, BOT};
use crate::common::github::{FakeGithub, Fault};
use crate::common::*;

const HTML: &str = "<!DOCTYPE html><html><body><h1>Unicorn!</h1>This page is taking too long to load.</body></html>";

fn html() -> Fault {
    Fault::Raw {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: HTML.into(),
    }
}

/// picogent's progress comment on issue `n`, once one says `what`.
async fn progress_saying(w: &World, n: u64, what: &str) -> String {
    let says = |g: &FakeGithub| {
        g.comments(n).into_iter().find_map(|c| {
            let b = c["body"].as_str().unwrap_or_default().to_string();
            (c["user"]["login"] == BOT && b.contains(what)).then_some(b)
        })
    };
    w.gh.wait_for(60, what, |g| says(g).is_some()).await;
    says(&w.gh).unwrap()
}

/// Starts the task of a new assigned issue through the webhook; its number.
async fn assigned(w: &World, title: &str) -> u64 {
    let n = w.gh.add_issue(title, "Fix the widget.", "alice");
    w.gh.assign(n, BOT);
    assert_eq!(w.issue_event("assigned", n, &format!("a-{n}")).await.0, 202);
    n
}

fn dead_letters(w: &World) -> String {
    std::fs::read_to_string(w.sb.home.join("state/dead-letter.jsonl")).unwrap_or_default()
}

/// A proxy's HTML page answered 200 to `POST /pulls` (GitHub never opened it): no
/// success; tried again, the pull request is opened, once.
#[tokio::test]
async fn an_html_page_answering_the_pull_request_is_tried_again() {
    let w = World::new(fixer()).await;
    let d = w.daemon(json!({})).await;
    w.gh.fail_next("POST", "/pulls", html());
    let n = assigned(&w, "Proxy").await;
    let comment = progress_saying(&w, n, "picogent finished").await;
    let pulls = w.gh.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr = pulls[0]["number"].as_u64().unwrap();
    assert!(
        comment.contains(&format!("pull request #{pr}")),
        "{comment}"
    );
    assert!(dead_letters(&w).is_empty(), "{}", dead_letters(&w));
    d.stop().await.unwrap();
    w.assert_valid();
}

/// GitHub refuses the pull request (422): the report is kept in the dead-letter file,
/// and the progress comment says the pull request could not be opened, why, and which
/// branch has the work, not that picogent finished.
#[tokio::test]
async fn a_refused_pull_request_is_said_on_the_issue_with_its_branch() {
    let w = World::new(fixer()).await;
    let d = w.daemon(json!({})).await;
    w.gh.fail_next(
        "POST",
        "/pulls",
        Fault::Status(
            422,
            json!({"message": "Validation Failed", "status": "422",
                   "errors": [{"resource": "PullRequest", "code": "custom", "message": "The base branch is protected"}]}),
        ),
    );
    let n = assigned(&w, "Refused").await;
    let comment = progress_saying(&w, n, "could not be opened").await;
    assert!(
        comment.contains(&format!("`picogent/issue-{n}`")),
        "{comment}"
    );
    assert!(
        comment.contains("The base branch is protected"),
        "{comment}"
    );
    assert!(comment.contains("Fixed the widget"), "{comment}");
    assert!(!comment.contains("✅"), "{comment}");
    assert!(w.gh.pulls().is_empty());
    assert!(dead_letters(&w).contains("The base branch is protected"));
    d.stop().await.unwrap();
    w.assert_valid();
}

/// Every answer to `POST /pulls` is an HTML page: tried for a bounded time, then kept
/// in the dead-letter file naming what came back; the issue says so.
#[tokio::test]
async fn an_answer_that_is_never_json_is_given_up_with_what_it_was() {
    let w = World::new(fixer()).await;
    let d = w.daemon(json!({})).await;
    for _ in 0..500 {
        w.gh.fail_next("POST", "/pulls", html());
    }
    let n = assigned(&w, "Always HTML").await;
    let comment = progress_saying(&w, n, "could not be opened").await;
    assert!(
        comment.contains(&format!("`picogent/issue-{n}`")),
        "{comment}"
    );
    assert!(comment.contains("not the JSON"), "{comment}");
    let posts =
        w.gh.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/pulls"))
            .count();
    assert!(posts > 1, "tried once only");
    let dead = dead_letters(&w);
    assert!(
        dead.contains("not the JSON") && dead.contains("text/html"),
        "{dead}"
    );
    let health: Value = reqwest::get(format!("http://127.0.0.1:{}/healthz", w.port()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(health.to_string().contains("dead_letters"), "{health}");
    d.stop().await.unwrap();
    w.assert_valid();
}

/// The issue is closed while picogent is down in the middle of its run: after the
/// restart the progress comment says work stopped, and why.
#[tokio::test]
async fn an_issue_closed_while_picogent_was_down_says_work_stopped() {
    let gate = ModelGate::new();
    let w = World::new(vec![
        tool("bash", json!({"command": "echo half > widget.txt"})),
        Turn::Held(gate.clone(), "never seen".into()),
    ])
    .await;
    let d = w.daemon(json!({})).await;
    let n = assigned(&w, "Closed meanwhile").await;
    w.llm.wait_requests(2).await;
    progress_saying(&w, n, "is working on this issue").await;
    d.stop().await.unwrap();
    w.gh.close_issue(n);
    let d = w.daemon(json!({})).await;
    // Stopped in the run's place, or cancelled just before the resumed run began:
    // either way the comment says why, and no longer that work goes on.
    let comment = progress_saying(&w, n, "the issue was closed").await;
    assert!(!comment.contains("is working"), "{comment}");
    assert_eq!(w.bot_comments(n).len(), 1);
    assert!(w.gh.pulls().is_empty());
    d.stop().await.unwrap();
    gate.open();
    w.assert_valid();
}

/// Webhook mode: a comment written while picogent was down gets no delivery; the
/// start-up sweep reads it and it is answered, once (its late delivery is a duplicate).
#[tokio::test]
async fn a_comment_written_while_picogent_was_down_is_answered_once() {
    let w = World::new(fixer()).await;
    let d = w.daemon(json!({})).await;
    let n = assigned(&w, "Follow up").await;
    progress_saying(&w, n, "picogent finished").await;
    d.stop().await.unwrap();
    let c = w.gh.add_comment(n, "alice", "Now polish it please.");
    let d = w.daemon(json!({})).await;
    let replies = |g: &FakeGithub| {
        g.comments(n)
            .iter()
            .filter(|c| {
                c["user"]["login"] == BOT
                    && c["body"]
                        .as_str()
                        .is_some_and(|b| b.contains("Polished it"))
            })
            .count()
    };
    w.gh.wait_for(60, "the answer to the comment written meanwhile", |g| {
        replies(g) == 1
    })
    .await;
    let (status, body) = w.comment_event(n, c, "late-1").await;
    assert_eq!((status, &body["duplicate"]), (200, &json!(true)), "{body}");
    d.stop().await.unwrap();
    assert_eq!(replies(&w.gh), 1, "{:#?}", w.bot_comments(n));
    w.assert_valid();
}
