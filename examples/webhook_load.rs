//! Concurrent GitHub webhook load for the fleet benchmark: S senders, each on its own
//! keep-alive connection, post signed `issues` `assigned` deliveries (one issue each,
//! assigned to the login given: each becomes a task, journaled before its 202) as fast
//! as they are acknowledged, T in all. Prints one JSON line: the ack latencies'
//! p50/p99/max and the wall time.
//!
//! Usage: `webhook_load PORT SECRET REPO LOGIN [SENDERS] [TOTAL] [FIRST_ISSUE]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

fn sign(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn delivery(repo: &str, login: &str, n: usize) -> serde_json::Value {
    let (owner, _) = repo.split_once('/').unwrap();
    let user = |l: &str| serde_json::json!({"login": l, "id": 1, "type": "User"});
    serde_json::json!({
        "action": "assigned",
        "issue": {"number": n, "title": format!("Task {n}"), "body": "Do it.", "state": "open",
                  "user": user(owner), "author_association": "OWNER",
                  "assignees": [user(login)], "labels": []},
        "assignee": user(login),
        "repository": {"full_name": repo, "name": repo.split('/').nth(1).unwrap(), "owner": user(owner)},
        "sender": user(owner)
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).expect("PORT");
    let secret = args.get(2).cloned().expect("SECRET");
    let repo = args.get(3).cloned().expect("REPO");
    let login = args.get(4).cloned().expect("LOGIN");
    let senders: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(50);
    let total: usize = args.get(6).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let first: usize = args.get(7).and_then(|s| s.parse().ok()).unwrap_or(1);
    let url = format!("http://127.0.0.1:{port}/github/webhook");
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..senders {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let (url, secret, repo, login) = (url.clone(), secret.clone(), repo.clone(), login.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for i in (k..total).step_by(senders) {
                let body = serde_json::to_vec(&delivery(&repo, &login, first + i)).unwrap();
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("X-GitHub-Event", "issues")
                    .header("X-GitHub-Delivery", format!("d-{first}-{i}"))
                    .header("X-Hub-Signature-256", sign(&secret, &body))
                    .header("Content-Type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let answer = r.text().await.unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                assert!(status == 202, "delivery {i}: HTTP {status}: {answer}");
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let wall = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "{}",
        serde_json::json!({"events": lat.len(), "wall_s": wall, "p50_ms": pct(0.5),
            "p99_ms": pct(0.99), "max_ms": lat.last().copied().unwrap_or(0.0)})
    );
}
