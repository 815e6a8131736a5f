//! Concurrent `/events` load for the agent-mode benchmark: S senders, each on its own
//! keep-alive connection, post `task.cancelled` events (journaled and synced before the
//! answer; then, as the protocol asks, a comment is queued and posted to the tracker; no
//! run starts) as fast as they are acknowledged, T events in all. Prints one JSON line:
//! every ack latency's p50/p99/max and the wall time. A compiled client, so the figure
//! is the server's: a Python client's threads share one interpreter lock and time each
//! other's waits.
//!
//! Usage: `events_load PORT TOKEN [SENDERS] [TOTAL] [PREFIX]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).expect("PORT");
    let token = args.get(2).cloned().expect("TOKEN");
    let senders: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(50);
    let total: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let prefix = args.get(5).cloned().unwrap_or_else(|| "load".into());
    let url = format!("http://127.0.0.1:{port}/events");
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..senders {
        // One client per sender: its own connection, as separate trackers' workers have.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let (url, token, prefix) = (url.clone(), token.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for i in (k..total).step_by(senders) {
                let body = serde_json::json!({"id": format!("{prefix}_{i}"), "type": "task.cancelled",
                    "data": {"task_id": format!("none_{i}")}});
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                r.bytes().await.unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                assert!(status == 200 || status == 202, "event {i}: HTTP {status}");
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
