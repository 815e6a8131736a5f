//! A local task board for trying agent mode without a tracker of your own: it speaks
//! the tracker protocol (`docs/tracker-protocol.md`) as the tests' fake tracker does,
//! takes tasks from its standard input, and prints what the agent reports back.
//!
//! ```sh
//! cargo run --example board                      # serves http://127.0.0.1:8100
//! AGENT_TOKEN=tracker-token cargo run --release -- ./agents/coder/   # another terminal
//! ```
//!
//! Then type `assign Add a README section on testing` at the board. Commands:
//! `assign TITLE [| DESCRIPTION]`, `say TASK MESSAGE` (a chat message on a task; TASK
//! is the number the board gave it, `1`, or its whole id), `cancel TASK`, `tasks`,
//! `help`. `--port N` serves another port (0: any free one; an agent then needs
//! `TRACKER_URL` set to the address the board prints).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use picogent_testkit::tracker;

use std::time::Duration;

use serde_json::{json, Value};

const HELP: &str =
    "commands: assign TITLE [| DESCRIPTION] · say TASK MESSAGE · cancel TASK · tasks · help";

#[tokio::main]
async fn main() {
    let port = std::env::args()
        .skip_while(|a| a != "--port")
        .nth(1)
        .map(|p| p.parse::<u16>().expect("--port takes a port number"))
        .unwrap_or(8100);
    let board = tracker::FakeTracker::start_on(&format!("127.0.0.1:{port}")).await;
    println!("board on {}", board.url());
    println!(
        "an agent needs tracker_url {} and the token {} (AGENT_TOKEN); for example:",
        board.url(),
        tracker::TOKEN
    );
    // The example agent's tracker_url is port 8100's; on another port it needs telling.
    let url = if port == 8100 {
        String::new()
    } else {
        format!("TRACKER_URL={} ", board.url())
    };
    println!(
        "  {url}AGENT_TOKEN={} cargo run --release -- ./agents/coder/",
        tracker::TOKEN
    );
    println!("{HELP}");
    tokio::spawn(report(board.clone()));
    // Standard input is read on a thread of its own (the example keeps tokio's
    // default features).
    let (tx, mut lines) = tokio::sync::mpsc::channel::<String>(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    // Ids unique to this board's start: an agent remembers the events and tasks it saw
    // (a restarted board must not look like a redelivery).
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % 100_000);
    let mut next_task = 1;
    let mut next_event = 1;
    while let Some(line) = lines.recv().await {
        let (cmd, rest) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        let event = match (cmd, rest.trim()) {
            ("", _) => continue,
            ("assign", _) if board.registration().is_none() => {
                println!("no agent has registered yet; start one, then try again");
                continue;
            }
            ("assign", text) if !text.is_empty() => {
                let (title, description) = text.split_once('|').unwrap_or((text, ""));
                let task = format!("t{run}-{next_task}");
                next_task += 1;
                println!("{task}: assigned \"{}\"", title.trim());
                json!({"type": "task.assigned", "data": {"task": {"id": task,
                    "title": title.trim(), "description": description.trim(), "status": "todo"}}})
            }
            ("say", text) if text.contains(' ') => {
                let (task, message) = text.split_once(' ').unwrap_or_default();
                let task = task_id(task, run);
                json!({"type": "chat.message", "data": {"task_id": task, "message": {
                    "id": format!("m{run}_{next_event}"), "content": message.trim(),
                    "author": {"id": "u_local", "name": "you"}}}})
            }
            ("cancel", task) if !task.is_empty() => {
                let task = task_id(task, run);
                json!({"type": "task.cancelled", "data": {"task_id": task, "reason": "cancelled at the board"}})
            }
            ("tasks", _) => {
                list(&board, run, next_task);
                continue;
            }
            _ => {
                println!("{HELP}");
                continue;
            }
        };
        let mut event = event;
        event["id"] = json!(format!("evt_{run}_{next_event}"));
        event["created_at"] = json!("2026-12-01T00:00:00Z");
        next_event += 1;
        send(&board, &event).await;
    }
}

/// Delivers an event as the agent registered for: to its callback URL, or over its
/// WebSocket (queued until it connects).
async fn send(board: &tracker::FakeTracker, event: &Value) {
    let callback = board
        .registration()
        .and_then(|r| r["callback_url"].as_str().map(str::to_string));
    match callback {
        Some(url) => match board.deliver(&url, event).await {
            (0, body) => println!("the agent does not answer at {url}: {}", body["error"]),
            (status, body) if status >= 300 => {
                println!("the agent refused the event ({status}): {body}")
            }
            (_, body) if body["duplicate"] == true => {
                println!("the agent had this event already")
            }
            _ => {}
        },
        None if board.registration().is_some() => board.ws_send(event.clone()),
        None => println!("no agent has registered yet; start one, then try again"),
    }
}

/// A task as typed: its number alone (`1`) or its whole id (`t41234-1`).
fn task_id(typed: &str, run: u64) -> String {
    match typed.parse::<u64>() {
        Ok(n) => format!("t{run}-{n}"),
        Err(_) => typed.to_string(),
    }
}

/// Each task so far, with its latest status.
fn list(board: &tracker::FakeTracker, run: u64, next_task: usize) {
    if next_task == 1 {
        println!("no tasks yet: assign TITLE gives one");
    }
    for n in 1..next_task {
        let task = format!("t{run}-{n}");
        let status = board
            .timeline(&task)
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix("status:").map(str::to_string))
            .unwrap_or_else(|| "todo".into());
        println!("{task}: {status}");
    }
}

/// Prints what the agent does, as it does it (heartbeats only once).
async fn report(board: tracker::FakeTracker) {
    let mut seen = 0;
    let mut heartbeat = false;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let calls = board.calls();
        for c in calls.iter().skip(seen) {
            if c.status >= 300 {
                println!("(answered {} to {} {})", c.status, c.method, c.path);
                continue;
            }
            let task = c.path.strip_prefix("/api/v1/tasks/").unwrap_or_default();
            match c.path.as_str() {
                "/api/v1/agents/register" => println!(
                    "agent {} registered ({})",
                    c.body["name"].as_str().unwrap_or("?"),
                    c.body["callback_url"]
                        .as_str()
                        .map_or("over a WebSocket".to_string(), |u| format!("events to {u}"))
                ),
                "/api/v1/agents/heartbeat" if !heartbeat => {
                    heartbeat = true;
                    println!("agent heartbeats arrive");
                }
                _ if task.ends_with("/comments") => println!(
                    "{}: comment:\n{}",
                    task.trim_end_matches("/comments"),
                    indent(c.body["content"].as_str().unwrap_or(""))
                ),
                _ if !task.is_empty() => println!(
                    "{task}: status {}",
                    c.body["status"].as_str().unwrap_or("?")
                ),
                _ => {}
            }
        }
        seen = calls.len();
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
