//! Hostile input from outside: a tracker, a browser, the file system, the environment
//! and an engine's output that try to make picogent panic, misroute or allocate
//! without bound. Each answer is a clear error, never a crash.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::tracker::{deliver_raw, FakeTracker, TOKEN};
use crate::common::*;

fn ctx(sb: &Sandbox) -> ToolContext {
    sb.tool_ctx(
        PathSandbox::new(std::slice::from_ref(&sb.work), &[], &[]),
        Duration::from_secs(20),
    )
}

#[tokio::test]
async fn task_ids_that_are_not_one_path_segment_are_refused() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let d = sb.daemon(&llm, &tracker, json!({}));
    let cb = tracker.callback_url().await;
    for (n, id) in ["", ".", "..", "a/b", "x?y"].iter().enumerate() {
        for body in [
            json!({"id": format!("ea{n}"), "type": "task.assigned", "data": {"task": {"id": id, "title": "t"}}}),
            json!({"id": format!("ec{n}"), "type": "task.cancelled", "data": {"task_id": id}}),
            json!({"id": format!("em{n}"), "type": "chat.message", "data": {"task_id": id, "message": {"id": "m", "content": "hi"}}}),
        ] {
            let (status, b) = deliver_raw(&cb, Some(TOKEN), body.to_string().into_bytes()).await;
            assert_eq!(status, 400, "{body}: {b}");
            assert!(
                b["error"]["message"].as_str().unwrap().contains("task"),
                "{b}"
            );
        }
    }
    d.stop().await.unwrap();
    assert!(
        tracker
            .calls()
            .iter()
            .all(|c| !c.path.contains("/tasks/") && !c.path.contains("/comments")),
        "a report went out for a refused event"
    );
}

#[tokio::test]
async fn a_handshake_with_two_or_unreadable_origins_is_refused() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let listener = picogent::chat::bind("127.0.0.1", 0, None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    tokio::spawn(picogent::chat::serve(agent, listener, stop.clone()));
    let own = format!("http://{addr}");
    for origins in [
        vec![own.as_bytes().to_vec(), b"http://evil.example".to_vec()],
        vec![b"http://evil.example".to_vec(), own.as_bytes().to_vec()],
        vec![b"http://caf\xe9.example".to_vec()],
    ] {
        let mut req = format!(
            "GET /ws HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        )
        .into_bytes();
        for o in &origins {
            req.extend_from_slice(b"Origin: ");
            req.extend_from_slice(o);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"\r\n");
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut s, &req)
            .await
            .unwrap();
        let mut head = vec![0u8; 64];
        let n = tokio::io::AsyncReadExt::read(&mut s, &mut head)
            .await
            .unwrap();
        let head = String::from_utf8_lossy(&head[..n]);
        assert!(head.starts_with("HTTP/1.1 403"), "{origins:?}: {head}");
    }
    stop.cancel();
}

#[tokio::test]
async fn names_with_newlines_are_listed_as_one_line() {
    let sb = Sandbox::new();
    sb.write("evil\nsecret.txt", "needle\n");
    let c = ctx(&sb);
    let r = execute("ls", &json!({}), &c).await;
    assert_eq!(r.text, "evil\\nsecret.txt", "{r:?}");
    let r = execute("find", &json!({"pattern": "*"}), &c).await;
    assert!(
        r.text.contains("evil\\nsecret.txt") && r.text.lines().count() == 1,
        "{r:?}"
    );
    let r = execute("grep", &json!({"pattern": "needle"}), &c).await;
    assert!(r.text.starts_with("evil\\nsecret.txt:1:"), "{r:?}");
}

#[tokio::test]
async fn a_file_of_one_endless_line_is_read_within_the_caps() {
    let sb = Sandbox::new();
    // 32 MiB without a newline.
    let long = sb.work.join("long.txt");
    let mut f = std::fs::File::create(&long).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..32 {
        std::io::Write::write_all(&mut f, &chunk).unwrap();
    }
    drop(f);
    let r = execute("read", &json!({"path": "long.txt"}), &ctx(&sb)).await;
    assert!(!r.is_error, "{}", &r.text[..200.min(r.text.len())]);
    assert!(r.text.len() < 4096, "{} bytes returned", r.text.len());
    assert!(r.text.contains("more bytes"), "{}", r.text);
}

#[tokio::test]
async fn a_variable_that_is_not_utf8_does_not_stop_picogent() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![text("fine")]).await;
    sb.write_config(&llm, Wire::Anthropic, json!({}));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["run", "--agent"])
        .arg(&sb.home)
        .arg("hi")
        .env("HOME", &sb.user_home)
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env(
            std::ffi::OsStr::from_bytes(b"ODD_VALUE"),
            std::ffi::OsStr::from_bytes(b"\xff\xfe"),
        )
        .env(
            std::ffi::OsStr::from_bytes(b"ODD_\xffNAME"),
            std::ffi::OsStr::from_bytes(b"x"),
        )
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("fine"));
}

#[tokio::test]
async fn an_engine_that_writes_broken_text_to_stderr_is_a_clear_failure() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let fake = sb.base().join("fake-claude");
    // 20 KB of two-byte characters on stderr, cut anywhere, then a failure.
    std::fs::write(
        &fake,
        "#!/bin/sh\ni=0\nwhile [ $i -lt 2000 ]; do printf 'ééééé' >&2; i=$((i+1)); done\necho >&2\nexit 3\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"provider": "claude-code", "claude_code_path": fake}),
    );
    let (_, outcome) = run(&agent, "hi", "cc-stderr").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Engine);
    assert!(failure(&outcome).contains("é"), "{outcome:?}");
}

/// A one-shot HTTP server on loopback that answers every request with `head` and then
/// whatever `body` writes; counts the requests.
async fn raw_server<F, Fut>(
    head: &'static str,
    body: F,
) -> (String, Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (c, body) = (count.clone(), Arc::new(body));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                // Read the request head and body (small JSON), then answer.
                let mut req = vec![0u8; 1 << 20];
                let _ = tokio::time::timeout(Duration::from_millis(300), s.read(&mut req)).await;
                let _ = s.write_all(head.as_bytes()).await;
                body(s).await;
            });
        }
    });
    (format!("http://{addr}"), count)
}

fn agent_at(sb: &Sandbox, base_url: &str, step_timeout: u64) -> picogent::agent::Agent {
    let llm_dir = sb.home.join("agent.json");
    std::fs::write(
        &llm_dir,
        json!({"provider": "anthropic", "base_url": base_url, "model": "m", "step_timeout_sec": step_timeout, "work_dir": sb.work})
            .to_string(),
    )
    .unwrap();
    let config = picogent::config::Config::load(Some(&sb.home), &sb.env(), &sb.base()).unwrap();
    agent_from(config)
}

#[tokio::test]
async fn a_web_page_instead_of_a_stream_is_named_and_not_retried() {
    let sb = Sandbox::new();
    let (url, count) = raw_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 21\r\n\r\n<html>sign in</html>\n",
        |_s| async {},
    )
    .await;
    let (_, outcome) = run(&agent_at(&sb, &url, 10), "hi", "html").await;
    assert_eq!(failure_kind(&outcome), picogent::agent::FailureKind::Model);
    assert!(failure(&outcome).contains("text/html"), "{outcome:?}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_of_nothing_but_pings_times_out() {
    let sb = Sandbox::new();
    let (url, _) = raw_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        |mut s| async move {
            use tokio::io::AsyncWriteExt;
            for _ in 0..600 {
                let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n: keep-alive\n\n";
                if s.write_all(ping.as_bytes()).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    let started = std::time::Instant::now();
    let (_, outcome) = run(&agent_at(&sb, &url, 1), "hi", "pings").await;
    assert!(
        failure(&outcome).contains("1 s") || failure(&outcome).contains("sent nothing"),
        "{outcome:?}"
    );
    // The pings alone would have lasted 30 s; the run gave up after its retries.
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_endless_stream_line_is_refused_at_its_bound() {
    let sb = Sandbox::new();
    let (url, _) = raw_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        |mut s| async move {
            use tokio::io::AsyncWriteExt;
            let _ = s.write_all(b"data: ").await;
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..40 {
                if s.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        },
    )
    .await;
    let (_, outcome) = run(&agent_at(&sb, &url, 10), "hi", "long").await;
    assert!(
        failure(&outcome).contains("longer than 32 MiB"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_bash_timeout_is_kept_within_the_configured_maximum() {
    let sb = Sandbox::new();
    let c = ToolContext {
        command_timeout_max: Duration::from_secs(1),
        ..ctx(&sb)
    };
    let r = execute(
        "bash",
        &json!({"command": "sleep 30", "timeout": 86400}),
        &c,
    )
    .await;
    assert!(
        r.is_error && r.text.contains("timed out after 1 seconds"),
        "{r:?}"
    );
    // The setting, from the configuration file; by default the step timeout.
    let llm = ScriptedLlm::start(vec![]).await;
    let cfg = sb.config(&llm, Wire::Anthropic, json!({"command_timeout_max_sec": 7}));
    assert_eq!(cfg.limits.command_timeout_max, Duration::from_secs(7));
    let cfg = sb.config(&llm, Wire::Anthropic, json!({}));
    assert_eq!(cfg.limits.command_timeout_max, cfg.limits.step_timeout);
}

#[tokio::test]
async fn events_without_the_token_are_refused_before_their_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let (d, cb, addr) = events_server(&sb, &llm, &tracker).await;
    let url = reqwest::Url::parse(&cb).unwrap();
    // A body of 1 MB is announced and never sent: the answer must not wait for it.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n",
            url.path()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut head))
        .await
        .expect("the server waited for the body of an unauthenticated request")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 401"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    d.stop().await.unwrap();
}

/// A connection that sends no request head (silent, or a byte at a time) is closed
/// after the head deadline on both servers; a WebSocket that is merely idle after its
/// handshake is not.
#[tokio::test]
async fn slow_or_silent_connections_are_closed_idle_websockets_are_not() {
    use futures_util::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![]).await;
    let tracker = FakeTracker::start().await;
    let (d, _, events) = events_server(&sb, &llm, &tracker).await;
    let listener = picogent::chat::bind("127.0.0.1", 0, None).await.unwrap();
    let chat = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    tokio::spawn(picogent::chat::serve(agent, listener, stop.clone()));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{chat}/ws"))
        .await
        .unwrap();

    let mut waits = Vec::new();
    for addr in [events.clone(), chat.clone()] {
        for drip in [false, true] {
            let addr = addr.clone();
            waits.push(tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
                let started = std::time::Instant::now();
                let mut buf = [0u8; 64];
                loop {
                    if drip {
                        // One byte of a request head every second, never finishing it.
                        if s.write_all(b"G").await.is_err() {
                            break;
                        }
                    }
                    match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => break,
                        _ => {}
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(40),
                        "{addr}: a connection without a request head was kept"
                    );
                }
            }));
        }
    }
    for w in waits {
        w.await.unwrap();
    }
    // The WebSocket, idle all this time, still works.
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        r#"{"type":"nonsense","id":"still-here"}"#.into(),
    ))
    .await
    .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(m.to_string().contains("still-here"), "{m}");
    stop.cancel();
    d.stop().await.unwrap();
}

/// An agent-mode daemon: it, its events URL, and the `host:port` it listens on.
async fn events_server(
    sb: &Sandbox,
    llm: &ScriptedLlm,
    tracker: &FakeTracker,
) -> (Daemon, String, String) {
    let d = sb.daemon(llm, tracker, json!({}));
    let cb = tracker.callback_url().await;
    let url = reqwest::Url::parse(&cb).unwrap();
    let addr = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    (d, cb, addr)
}
