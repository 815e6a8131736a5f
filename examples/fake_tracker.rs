//! The tests' fake Team Board tracker as a standalone program, for benchmarks:
//! `fake_tracker` prints `listening on ADDR` and serves the agent API until killed.
//! `GET /_stats` answers how many REST calls it received, by path kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use picogent_testkit::tracker;

#[tokio::main]
async fn main() {
    let t = tracker::FakeTracker::start().await;
    println!("listening on {}", t.addr);
    let stats = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let t = t.clone();
            async move {
                let calls = t.calls();
                let count = |p: &str| calls.iter().filter(|c| c.path.contains(p)).count();
                axum::Json(serde_json::json!({
                    "register": count("/register"),
                    "heartbeat": count("/heartbeat"),
                    "comments": count("/comments"),
                    "reviews": calls.iter().filter(|c| c.body["status"] == "review").count(),
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("stats on {}", listener.local_addr().unwrap());
    axum::serve(listener, stats).await.unwrap();
}
