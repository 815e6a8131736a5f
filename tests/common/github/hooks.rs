//! GitHub's side of webhooks: the `X-Hub-Signature-256` signature, real payloads from
//! `@octokit/webhooks-examples` pointed at the fake's repository, and delivery with the
//! headers GitHub sends.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};

pub const EXAMPLES_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/github/node_modules/@octokit/webhooks-examples/api.github.com/index.json"
);

/// `sha256=<hex>`: the HMAC-SHA256 of the body under the secret, as GitHub signs.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let mut out = String::from("sha256=");
    for b in ring::hmac::sign(&key, body).as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The examples file: an array of `{name, actions: [..], examples: [payload, ..]}`, one
/// per event.
fn events() -> &'static [Value] {
    static EVENTS: OnceLock<Value> = OnceLock::new();
    EVENTS
        .get_or_init(|| {
            let bytes = std::fs::read(EXAMPLES_FILE).unwrap_or_else(|e| {
                panic!(
                    "GitHub's webhook examples are missing ({EXAMPLES_FILE}: {e}); install them \
                     with `bash scripts/test.sh` or `(cd tests/github && npm ci)`"
                )
            });
            serde_json::from_slice(&bytes).expect("the webhook examples are not JSON")
        })
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A real payload GitHub sent for `event` (`issues`, `issue_comment`,
/// `pull_request_review_comment`, `ping`, …) with `action`: the first example with that
/// action; `""` for `ping`, whose payloads have none.
pub fn example(event: &str, action: &str) -> Value {
    let Some(ev) = events().iter().find(|e| e["name"] == event) else {
        let names: Vec<&str> = events().iter().filter_map(|e| e["name"].as_str()).collect();
        panic!("no webhook event {event:?} in the examples; they have {names:?}");
    };
    let list = ev["examples"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let action_of = |x: &Value| x["action"].as_str().unwrap_or("").to_string();
    if let Some(x) = list.iter().find(|x| action_of(x) == action) {
        return x.clone();
    }
    let declared = ev["actions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == action));
    let mut have: Vec<String> = list.iter().map(action_of).collect();
    have.dedup();
    assert!(
        declared && !list.is_empty(),
        "no {event} example with action {action:?}; the examples have {have:?}"
    );
    // An action GitHub sends but this package has no example of (7.6.1 has one for every
    // action of issues, issue_comment and pull_request_review_comment): another payload
    // of the event with the action set, and the object such an action carries.
    let mut x = list[0].clone();
    x["action"] = action.into();
    match action {
        "assigned" | "unassigned" => x["assignee"] = x["sender"].clone(),
        "labeled" | "unlabeled" => {
            x["label"] = json!({
                "id": 1_362_934_389, "node_id": "MDU6TGFiZWwxMzYyOTM0Mzg5",
                "url": "https://api.github.com/repos/Codertocat/Hello-World/labels/bug",
                "name": "bug", "color": "d73a4a", "default": true,
                "description": "Something isn't working"
            });
        }
        _ => {}
    }
    x
}

/// Points a payload at `repo` ("owner/name") and issue or pull request `issue`: the
/// repository's names, the numbers, and the URLs naming them (github.com and
/// api.github.com ones, as GitHub sends: a client builds its API calls from its own
/// API URL, not from these).
pub fn retarget(payload: &mut Value, repo: &str, issue: u64) {
    let (owner, name) = repo.split_once('/').expect("repo is owner/name");
    let api = format!("https://api.github.com/repos/{repo}");
    let web = format!("https://github.com/{repo}");
    if let Some(r) = payload.get_mut("repository").filter(|r| r.is_object()) {
        r["full_name"] = repo.into();
        r["name"] = name.into();
        r["html_url"] = web.clone().into();
        r["url"] = api.clone().into();
        if r["owner"].is_object() {
            r["owner"]["login"] = owner.into();
        }
    }
    let is_pull = payload.get("pull_request").is_some_and(Value::is_object)
        || payload["issue"].get("pull_request").is_some();
    let kind = if is_pull { "pull" } else { "issues" };
    if let Some(i) = payload.get_mut("issue").filter(|i| i.is_object()) {
        i["number"] = issue.into();
        i["url"] = format!("{api}/issues/{issue}").into();
        i["html_url"] = format!("{web}/{kind}/{issue}").into();
        i["repository_url"] = api.clone().into();
    }
    if let Some(p) = payload.get_mut("pull_request").filter(|p| p.is_object()) {
        p["number"] = issue.into();
        p["url"] = format!("{api}/pulls/{issue}").into();
        p["html_url"] = format!("{web}/pull/{issue}").into();
        p["issue_url"] = format!("{api}/issues/{issue}").into();
    }
    if payload.get("number").is_some() {
        payload["number"] = issue.into();
    }
    if let Some(c) = payload.get_mut("comment").filter(|c| c.is_object()) {
        let id = c["id"].clone();
        if c.get("pull_request_url").is_some() {
            c["pull_request_url"] = format!("{api}/pulls/{issue}").into();
            c["html_url"] = format!("{web}/pull/{issue}#discussion_r{id}").into();
        } else {
            c["issue_url"] = format!("{api}/issues/{issue}").into();
            c["html_url"] = format!("{web}/{kind}/{issue}#issuecomment-{id}").into();
        }
    }
}

/// Delivers `body` as GitHub does: POST with the event, delivery id, signature (when
/// there is a secret) and Hookshot's User-Agent. Returns the status and the JSON answer
/// (Null when it is not JSON; status 0 when nobody answered).
pub async fn deliver(
    url: &str,
    event: &str,
    delivery: &str,
    secret: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let signature = secret.map(|s| sign(s, &bytes));
    let mut headers = vec![
        ("X-GitHub-Event", event),
        ("X-GitHub-Delivery", delivery),
        ("X-GitHub-Hook-ID", "1"),
        ("X-GitHub-Hook-Installation-Target-Type", "repository"),
        ("X-GitHub-Hook-Installation-Target-ID", "1"),
        ("Content-Type", "application/json"),
        ("User-Agent", "GitHub-Hookshot/abc123"),
    ];
    if let Some(s) = &signature {
        headers.push(("X-Hub-Signature-256", s.as_str()));
    }
    deliver_raw(url, &headers, bytes).await
}

/// POSTs exactly these headers and bytes (a tampered or unsigned delivery).
pub async fn deliver_raw(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .timeout(Duration::from_secs(30))
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return (0, json!({"error": e.to_string()})),
    };
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (status, body)
}
