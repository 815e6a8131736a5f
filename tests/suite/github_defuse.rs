//! What picogent writes to GitHub carries what the issue's author and the model wrote:
//! none of it closes an issue or calls anyone in. The pushed commits, the pull
//! request's title and body, the progress comment and a reply hold every closing form
//! GitHub honours and mentions only as broken ones (they read the same); the pull
//! request keeps picogent's own `Closes #n`.

use regex::Regex;
use serde_json::json;

use super::github::{World, BOT};
use crate::common::*;

const ZWSP: char = '\u{200b}';

const TITLE: &str = "Fixes #1: closes acme/widgets#2 for @alice";

/// Every closing form and mention, and an e-mail address that is neither.
const ANSWER: &str = "Done. Fixes #1, closes: #2, RESOLVED acme/widgets#3, fixes GH-4, \
fixes https://github.com/acme/widgets/issues/5 and Resolves https://ghe.example.com/acme/widgets/issues/6; \
**Fixes** #7, `closes #8`. Thanks @alice and @acme/core-team (mail a@b.c).";

const REPLY: &str = "Polished. Closes #9 and fixes acme/widgets#10, as @bob asked.";

/// GitHub's closing keywords before an issue, as it would read them (and markdown
/// between the two, to be safe).
fn live_keywords(text: &str) -> Vec<String> {
    let re = Regex::new(concat!(
        r"(?i)(?:^|[^a-z0-9])((?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)[\s:*_~`<\[(]*",
        r"(?:#[0-9]+|gh-[0-9]+|[\w.-]+/[\w.-]+#[0-9]+|https?://\S+/issues/[0-9]+))"
    ))
    .unwrap();
    re.captures_iter(text).map(|c| c[1].to_string()).collect()
}

/// `@name` and `@org/team` where GitHub would read a mention: not after a letter,
/// digit or `_` (an e-mail address).
fn live_mentions(text: &str) -> Vec<String> {
    let re = Regex::new(r"(?:^|[^A-Za-z0-9_])(@[A-Za-z0-9][A-Za-z0-9-]*(?:/[\w-]+)?)").unwrap();
    re.captures_iter(text).map(|c| c[1].to_string()).collect()
}

/// Holds `said` once the zero-width spaces are taken out: it reads the same.
fn reads(text: &str, said: &str) -> bool {
    text.replace(ZWSP, "").contains(said)
}

#[tokio::test]
async fn nothing_picogent_writes_closes_issues_or_mentions_people() {
    let w = World::new(vec![
        tool(
            "bash",
            json!({"command": "echo 'fixed, fixes #1 for @alice' > widget.txt"}),
        ),
        text(ANSWER),
        tool("bash", json!({"command": "echo polished >> widget.txt"})),
        text(REPLY),
    ])
    .await;
    let n = w.gh.add_issue(TITLE, "It is broken, @carol says.", "alice");
    let d = w.daemon(json!({})).await;
    w.gh.assign(n, BOT);
    assert_eq!(w.issue_event("assigned", n, "d-1").await.0, 202);
    w.gh.wait_for(60, "the pull request and the finished comment", |g| {
        !g.pulls().is_empty()
            && g.comments(n).iter().any(|c| {
                c["body"]
                    .as_str()
                    .is_some_and(|b| b.contains("picogent finished"))
            })
    })
    .await;

    let pull = w.gh.pulls().remove(0);
    let title = pull["title"].as_str().unwrap();
    assert!(live_keywords(title).is_empty(), "{title:?}");
    assert!(live_mentions(title).is_empty(), "{title:?}");
    assert_eq!(title.replace(ZWSP, ""), TITLE);
    let body = pull["body"].as_str().unwrap();
    assert_eq!(
        live_keywords(body),
        vec![format!("Closes #{n}")],
        "{body:?}"
    );
    // Its own login, in the footer: no one is notified of their own mention.
    assert_eq!(live_mentions(body), vec![format!("@{BOT}")], "{body:?}");
    assert!(reads(body, ANSWER) && body.contains("a@b.c"), "{body:?}");

    let progress = w.bot_comments(n).remove(0);
    assert!(live_keywords(&progress).is_empty(), "{progress:?}");
    assert!(live_mentions(&progress).is_empty(), "{progress:?}");
    assert!(reads(&progress, ANSWER), "{progress:?}");
    // The diff and the steps say what the commit holds, as they were.
    assert!(
        reads(&progress, "+fixed, fixes #1 for @alice"),
        "{progress:?}"
    );

    // A follow-up comment: its reply, and the commit it adds.
    let c = w.gh.add_comment(n, "alice", "Now polish it please.");
    assert_eq!(w.comment_event(n, c, "d-2").await.0, 202);
    let replied = |g: &crate::common::github::FakeGithub| {
        g.comments(n).into_iter().find_map(|c| {
            let b = c["body"].as_str().unwrap_or_default().to_string();
            (c["user"]["login"] == BOT && reads(&b, "Polished.")).then_some(b)
        })
    };
    w.gh.wait_for(60, "the reply", |g| replied(g).is_some())
        .await;
    let reply = replied(&w.gh).unwrap();
    assert!(live_keywords(&reply).is_empty(), "{reply:?}");
    assert!(live_mentions(&reply).is_empty(), "{reply:?}");
    assert!(reads(&reply, REPLY), "{reply:?}");

    let branch = format!("picogent/issue-{n}");
    w.gh.wait_for(30, "the follow-up's commit", |_| {
        git(
            &w.remote,
            &["rev-list", "--count", &format!("main..{branch}")],
        ) == "2"
    })
    .await;
    let log = git(
        &w.remote,
        &["log", "--format=%B", &format!("main..{branch}")],
    );
    assert!(live_keywords(&log).is_empty(), "{log:?}");
    assert!(live_mentions(&log).is_empty(), "{log:?}");
    assert!(
        reads(&log, TITLE) && reads(&log, ANSWER) && reads(&log, REPLY),
        "{log:?}"
    );
    d.stop().await.unwrap();
    w.assert_valid();
}
