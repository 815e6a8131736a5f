//! GitHub's token on its way to git (issue 37): through a descriptor only, to GitHub's
//! host only. No process picogent starts holds it in its environment or arguments,
//! where another task's command could read it (`/proc/<pid>/environ`, `cmdline`).

use serde_json::json;

use super::github::{fixer, World, BOT, TOKEN};
use crate::common::git_https::GitHttps;
use crate::common::*;

/// GitHub's Basic credentials for the token, as a header would carry them.
fn basic() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN}"))
}

/// Every process below `root`, found by the parents `/proc` names.
fn descendants(root: u32) -> Vec<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}

/// Pushed over HTTPS to a server that challenges first, as GitHub does: git asks
/// picogent's helper, the token reaches the server as Basic credentials, and while the
/// push is in flight no process below picogent (git, git-remote-https, what they
/// started) has it in its environment or arguments. A header the clone's configuration
/// sets for the host (a CI checkout's) is not sent.
#[tokio::test]
async fn the_token_reaches_github_and_no_process_shows_it_while_pushing() {
    let w = World::new(fixer()).await;
    let server = GitHttps::start(&w.sb.base(), TOKEN).await;
    server.trust_in(&w.sb.user_home);
    let stale = "basic c3RhbGU=";
    git(
        &w.sb.work,
        &[
            "config",
            &format!("http.{}.extraheader", server.origin()),
            &format!("AUTHORIZATION: {stale}"),
        ],
    );
    let mut held = server.hold_push();
    let n = w.gh.add_issue("Push it", "", "alice");
    w.gh.assign(n, BOT);
    w.sb.write_config(
        &w.llm,
        Wire::Anthropic,
        w.config(json!({"remote_url": server.url("remote.git")})),
    );
    let mut d = w.spawn();
    held.reached().await;
    let below = descendants(d.id().unwrap());
    let (token, basic) = (TOKEN.as_bytes(), basic());
    let holds = |bytes: &[u8]| {
        let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        has(token) || has(basic.as_bytes())
    };
    let mut programs = Vec::new();
    for pid in &below {
        for part in ["environ", "cmdline"] {
            let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{part}")) else {
                continue;
            };
            let shown = String::from_utf8_lossy(&bytes).replace('\0', " ");
            assert!(!holds(&bytes), "the token is in {part} of {pid}: {shown}");
            if part == "cmdline" {
                programs.push(shown);
            }
        }
    }
    // The push was in flight: looked at while git talked to the server.
    assert!(
        programs.iter().any(|p| p.contains("remote-https")),
        "{programs:#?}"
    );
    held.release();
    w.gh.wait_for(60, "the pull request", |g| !g.pulls().is_empty())
        .await;
    d.kill().await.unwrap();
    assert_eq!(
        w.remote_file(&format!("picogent/issue-{n}"), "widget.txt"),
        "fixed"
    );
    let seen = server.seen();
    let wanted = format!("Basic {basic}");
    assert!(
        seen.iter()
            .any(|r| r.status == 401 && r.authorization.is_none()),
        "{seen:#?}"
    );
    assert!(
        seen.iter().any(|r| r.path.ends_with("/git-receive-pack")
            && r.status == 200
            && r.authorization.as_deref() == Some(wanted.as_str())),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .all(|r| r.authorization.as_deref() != Some(stale)),
        "{seen:#?}"
    );
    w.assert_valid();
}

/// The token reaches git through a descriptor for GitHub's host only: a credential
/// helper scoped to that URL in git's settings, the header the repository could set
/// there dropped, no redirect followed; never in any git's environment, on a command
/// line, in a file, or in a log.
#[tokio::test]
async fn the_push_gets_the_token_through_a_descriptor_only() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new(fixer()).await;
    let spy = w.sb.base().join("spy");
    std::fs::create_dir_all(&spy).unwrap();
    let real = git_program();
    // Every git's arguments are logged; a push logs its environment too, and fails
    // (no network here) before it asks for a credential.
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {d}/args.log\nfor a in \"$@\"; do [ \"$a\" = push ] && {{ env > {d}/push-env.log; exit 1; }}; done\nexec {real} \"$@\"\n",
        d = spy.display()
    );
    std::fs::write(spy.join("git"), script).unwrap();
    std::fs::set_permissions(spy.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let n = w.gh.add_issue("Push it", "", "alice");
    w.gh.assign(n, BOT);
    w.sb.write_config(
        &w.llm,
        Wire::Anthropic,
        // GitHub's host is the API's (here the fake's, on loopback); nothing listens on
        // port 9.
        w.config(json!({"remote_url": "https://127.0.0.1:9/acme/widgets.git"})),
    );
    let path = format!(
        "{}:{}",
        spy.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut d = w.spawn_with_git(&path, spy.join("git").to_str().unwrap());
    w.gh.wait_for(60, "the outcome", |g| {
        g.comments(n)
            .iter()
            .any(|c| c["body"].as_str().is_some_and(|b| b.contains("push to")))
    })
    .await;
    d.kill().await.unwrap();
    let env = std::fs::read_to_string(spy.join("push-env.log")).unwrap();
    let basic = basic();
    // GIT_CONFIG_KEY_n/VALUE_n, or GIT_CONFIG_PARAMETERS on a git before 2.31.
    for setting in [
        "credential.https://127.0.0.1:9/.helper",
        "http.https://127.0.0.1:9/.extraHeader",
        "http.followRedirects",
    ] {
        assert!(env.contains(setting), "{setting} in {env}");
    }
    assert!(!env.contains(TOKEN) && !env.contains(&basic), "{env}");
    // Nowhere else: not in any git's arguments, not in any file picogent or git wrote.
    let args = std::fs::read_to_string(spy.join("args.log")).unwrap();
    assert!(!args.contains(TOKEN) && !args.contains(&basic), "{args}");
    let mut stack = vec![w.sb.base()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains(TOKEN) && !text.contains(&basic),
                    "the token is in {}",
                    p.display()
                );
            }
        }
    }
    w.assert_valid();
}
