//! GitHub mode when GitHub's clock and the local one disagree: the fake GitHub's clock
//! (its times, its `Date` header, its rate-limit resets) is set off the real one, as a
//! local clock ahead of GitHub's would be. Whatever is compared with GitHub's times
//! must be read on GitHub's clock.

use std::time::Duration;

use serde_json::json;

use super::github::{fixer, World, BOT, REPO, TOKEN};
use crate::common::github::{FakeGithub, Fault};
use crate::common::*;

/// The local clock ten minutes ahead: polling's first `since` is GitHub's time, so an
/// issue assigned after the start is found by the next poll, not ten minutes later.
#[tokio::test]
async fn polling_finds_a_new_assignment_when_the_local_clock_is_ahead() {
    let w = World::new(fixer()).await;
    w.gh.set_clock_ahead(-600);
    let n = w.gh.add_issue("Later", "Fix it.", "alice");
    let d = w
        .daemon(json!({"webhook_secret": null, "poll_interval_sec": 1}))
        .await;
    w.gh.assign(n, BOT);
    w.gh.wait_for(30, "the polled assignment's progress comment", |g| {
        g.comments(n).iter().any(|c| c["user"]["login"] == BOT)
    })
    .await;
    d.stop().await.unwrap();
    w.assert_valid();
}

/// The local clock ten minutes ahead: `x-ratelimit-reset` is an epoch time on GitHub's
/// clock, so picogent waits until it (three seconds), not the one second a reset
/// already past by the local clock would give.
#[tokio::test]
async fn a_rate_limit_reset_is_waited_for_on_githubs_clock() {
    let w = World::new(fixer()).await;
    w.gh.set_clock_ahead(-600);
    let n = w.gh.add_issue("Limits", "", "alice");
    w.gh.assign(n, BOT);
    w.gh.fail_next("POST", "/pulls", Fault::RateLimited { reset_in_secs: 3 });
    let d = w.daemon(json!({})).await;
    w.gh.wait_for(60, "the pull request after the limit", |g| {
        !g.pulls().is_empty()
    })
    .await;
    let reqs = w.gh.requests();
    let limited = reqs.iter().find(|r| r.status == 403).unwrap();
    let next = reqs.iter().find(|r| r.at > limited.at).unwrap();
    let gap = next.at.duration_since(limited.at);
    assert!(
        gap >= Duration::from_millis(1900),
        "{} {} went out {gap:?} after a limit that reset three seconds later",
        next.method,
        next.path
    );
    d.stop().await.unwrap();
    w.assert_valid();
}

/// The local clock three minutes ahead, and GitHub's answer to a reply lost after GitHub
/// made it: the retry looks for the copy from a time on GitHub's clock, finds it, and
/// posts nothing twice.
#[tokio::test]
async fn a_reply_whose_answer_was_lost_is_not_posted_twice_when_the_local_clock_is_ahead() {
    let mut turns = fixer();
    turns.push(text("Nothing else to do."));
    let w = World::new(turns).await;
    w.gh.set_clock_ahead(-180);
    let n = w.gh.add_issue("Widget", "It is broken.", "alice");
    let d = w.daemon(json!({})).await;
    let c =
        w.gh.add_comment(n, "alice", "@picogent-bot can you fix this?");
    assert_eq!(w.comment_event(n, c, "r-1").await.0, 202);
    w.gh.wait_for(60, "the finished progress comment", |g| {
        g.comments(n).iter().any(|c| {
            c["body"]
                .as_str()
                .is_some_and(|b| b.contains("picogent finished"))
        })
    })
    .await;
    // The reply is made, and its answer is a 502.
    w.gh.fail_next(
        "POST",
        &format!("/issues/{n}/comments"),
        Fault::AfterDoing(502),
    );
    let follow =
        w.gh.add_comment(n, "alice", "Thanks! Now polish it please.");
    assert_eq!(w.comment_event(n, follow, "r-2").await.0, 202);
    let replies = |g: &FakeGithub, what: &str| {
        g.comments(n)
            .iter()
            .filter(|c| {
                c["user"]["login"] == BOT && c["body"].as_str().is_some_and(|b| b.contains(what))
            })
            .count()
    };
    w.gh.wait_for(60, "the reply", |g| replies(g, "Polished it") >= 1)
        .await;
    // The task's next reply goes out only once the first one's delivery ended.
    let again = w.gh.add_comment(n, "alice", "Anything else?");
    assert_eq!(w.comment_event(n, again, "r-3").await.0, 202);
    w.gh.wait_for(60, "the second reply", |g| replies(g, "Nothing else") == 1)
        .await;
    assert!(w.gh.requests().iter().any(|r| r.status == 502));
    assert_eq!(replies(&w.gh, "Polished it"), 1, "{:#?}", w.bot_comments(n));
    d.stop().await.unwrap();
    w.assert_valid();
}

/// A GitHub App with the local clock ten minutes ahead: GitHub refuses a JWT issued in
/// its future, so once its answer tells its clock, the JWT is dated by GitHub's.
#[tokio::test]
async fn a_github_apps_jwt_is_dated_by_githubs_clock() {
    let mut w = World::new(fixer()).await;
    w.gh = FakeGithub::start(REPO, "picogent-app[bot]", TOKEN).await;
    w.gh.set_clock_ahead(-600);
    w.gh.set_association("alice", "COLLABORATOR");
    let n = w.gh.add_issue("App work", "", "alice");
    w.gh.add_label(n, "picogent");
    let d = w.app_daemon();
    w.gh.wait_for(60, "the App's pull request", |g| {
        !g.pulls().is_empty()
            || g.requests().len() > 2 && g.requests().iter().all(|r| r.status == 401)
    })
    .await;
    assert_eq!(w.gh.pulls().len(), 1, "{:#?}", w.gh.requests());
    d.stop().await.unwrap();
    w.assert_valid();
}
