//! Chat-mode load for the benchmarks: starts the scripted model in-process and
//! `picogent` (chat mode) as a child, then opens N WebSocket sessions at once, each
//! asking for a 3-turn answer (read, ls, then text). Prints one JSON line of results.
//!
//! Usage: `chat_load PICOGENT_BINARY [N] [--checkpoints] [--workers=K] [--settle=SECS]`:
//! N sessions, K clients at a time (default all N at once), checkpoints off unless
//! asked for; RSS is then followed for SECS seconds (default 1), one sample a second.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use picogent_testkit::llm;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn rss_field_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// What the command line asks for: `chat_load PICOGENT_BINARY [N] [--checkpoints]
/// [--workers=K] [--settle=SECS]`.
struct Args {
    bin: String,
    n: usize,
    /// Checkpoints on (chat mode's default); off measures the chat path alone.
    checkpoints: bool,
    /// Clients at a time (N: one burst; fewer: tasks one after another per client).
    workers: usize,
    /// How long RSS is followed after the last task, sampled each second.
    settle: u64,
}

fn args() -> Args {
    let mut a = Args {
        bin: String::new(),
        n: 200,
        checkpoints: false,
        workers: 0,
        settle: 1,
    };
    for (i, arg) in std::env::args().skip(1).enumerate() {
        if arg == "--checkpoints" {
            a.checkpoints = true;
        } else if let Some(k) = arg.strip_prefix("--workers=") {
            a.workers = k.parse().expect("--workers=K");
        } else if let Some(s) = arg.strip_prefix("--settle=") {
            a.settle = s.parse().expect("--settle=SECS");
        } else if i == 0 {
            a.bin = arg;
        } else {
            a.n = arg.parse().expect("N, the number of sessions");
        }
    }
    assert!(
        !a.bin.is_empty(),
        "usage: chat_load PICOGENT_BINARY [N] [--checkpoints] [--workers=K] [--settle=SECS]"
    );
    if a.workers == 0 {
        a.workers = a.n;
    }
    a
}

/// One session's request: whether it got its full answer, the time from its last text
/// frame to `done`, and when `done` came.
async fn one(port: u16, i: usize) -> (bool, Duration, Instant) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws"))
        .await
        .unwrap();
    let frame = json!({"id": format!("m{i}"), "content": format!("What is here? ({i})"), "sessionId": format!("load-{i}")});
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    let (mut last_text, mut tools, mut ok) = (None, 0, true);
    loop {
        let Some(Ok(Message::Text(t))) = ws.next().await else {
            panic!("connection lost")
        };
        let f: Value = serde_json::from_str(&t).unwrap();
        match f["type"].as_str().unwrap_or("") {
            "text" => last_text = Some(Instant::now()),
            "tool_use" => tools += 1,
            "error" | "tool_result" => ok = false,
            "done" => {
                let done = Instant::now();
                // A client that leaves says so (the server then drops the request's log).
                let _ = ws.close(None).await;
                return (
                    ok && tools == 2,
                    done.duration_since(last_text.unwrap_or(done)),
                    done,
                );
            }
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() {
    let Args {
        bin,
        n,
        checkpoints,
        workers,
        settle,
    } = args();
    let server = llm::ScriptedLlm::start(Vec::new()).await;
    server.light();
    server.per_conversation(vec![
        llm::tool("read", json!({"path": "notes.txt"})),
        llm::tool("ls", json!({})),
        llm::text("The folder holds notes.txt, which says hello. That is all there is to it."),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "hello\n").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let bin = std::fs::canonicalize(&bin).expect("the picogent binary");
    let mut child = tokio::process::Command::new(&bin)
        .current_dir(tmp.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", tmp.path())
        .env("RUST_LOG", "warn")
        .env("PICOGENT_PROVIDER", "anthropic")
        .env("PICOGENT_BASE_URL", server.base_url(llm::Wire::Anthropic))
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("PICOGENT_PORT", port.to_string())
        .env(
            "PICOGENT_CHECKPOINTS",
            if checkpoints { "on" } else { "off" },
        )
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "picogent did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_rss = rss_field_mb(pid, "VmRSS:");

    let started = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..workers.min(n))
        .map(|_| {
            let next = next.clone();
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return done;
                    }
                    // A run that never ends counts as failed rather than hanging the bench.
                    match tokio::time::timeout(Duration::from_secs(300), one(port, i)).await {
                        Ok(r) => done.push(r),
                        Err(_) => done.push((false, Duration::ZERO, Instant::now())),
                    }
                }
            })
        })
        .collect();
    let mut tail = Vec::with_capacity(n);
    let mut all_ok = true;
    let mut last_done = started;
    for c in clients {
        for (ok, after_text, done) in c.await.unwrap() {
            all_ok &= ok;
            tail.push(after_text.as_secs_f64() * 1000.0);
            last_done = last_done.max(done);
        }
    }
    let wall = last_done.duration_since(started).as_secs_f64();
    tail.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| tail[((q * tail.len() as f64) as usize).min(tail.len() - 1)];
    let peak = rss_field_mb(pid, "VmHWM:");
    // The footprint left once the work is over, each second after the last `done`.
    let mut settled = Vec::new();
    for s in 1..=settle {
        tokio::time::sleep_until((last_done + Duration::from_secs(s)).into()).await;
        settled.push((rss_field_mb(pid, "VmRSS:") * 10.0).round() / 10.0);
    }
    let after = settled.first().copied().unwrap_or(f64::NAN);
    child.kill().await.unwrap();
    println!(
        "{}",
        json!({"sessions": n, "all_ok": all_ok, "wall_s": wall, "idle_rss_mb": idle_rss, "peak_rss_mb": peak,
               "rss_after_mb": after, "rss_each_second_mb": settled, "workers": workers, "checkpoints": checkpoints,
               "last_text_to_done_p50_ms": pct(0.5), "last_text_to_done_p99_ms": pct(0.99), "model_calls": 3 * n})
    );
}
