//! `write` and `edit` within their bounds (issue 24, item 8): inputs over
//! `MAX_FILE_BYTES` are refused with an error that says what to do instead, and the diff
//! they answer with — display only — finishes within the step's deadline, off the
//! runtime's threads, with the file written right whatever happens to it. And `grep`
//! within its memory (issue 37): read line by line, a few calls of a turn at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput, MAX_FILE_BYTES};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::Sandbox;

fn ctx(sb: &Sandbox, step_timeout: Duration) -> ToolContext {
    sb.tool_ctx(PathSandbox::default(), step_timeout)
}

async fn call(ctx: &ToolContext, name: &str, args: Value) -> ToolOutput {
    execute(name, &args, ctx).await
}

/// A text and the same with every other line changed: a worst case for Myers' diff,
/// quadratic in the lines (20,000 lines took ~40 s in a debug build, 40,000 took 9–24 s
/// in a release one), where the diff has no deadline.
fn alternating(lines: usize) -> (String, String) {
    let old = (0..lines).map(|i| format!("line {i}\n")).collect();
    let new = (0..lines)
        .map(|i| {
            if i % 2 == 0 {
                format!("changed {i}\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect();
    (old, new)
}

const LINES: usize = 20_000;

#[tokio::test]
async fn edit_refuses_a_file_over_the_limit_before_reading_it() {
    let sb = Sandbox::new();
    // Sparse: 64 MiB long, nothing on disk. Read whole, it would be 64 MiB of memory (a
    // 2.5 GB file ended the daemon).
    let path = sb.write("huge.log", "");
    let size = 4 * MAX_FILE_BYTES;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size)
        .unwrap();
    let c = ctx(&sb, Duration::from_secs(10));
    let out = call(
        &c,
        "edit",
        json!({"path": "huge.log", "oldText": "needle", "newText": "thread"}),
    )
    .await;
    assert_eq!(
        (out.is_error, out.text.as_str()),
        (
            true,
            "huge.log is 64 MiB (67108864 bytes), over the 16 MiB limit of edit; edit reads \
             files whole; change a file this large with bash instead (e.g. \
             `sed -i 's/old/new/' FILE`, or a script)"
        )
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
}

#[tokio::test]
async fn write_refuses_content_over_the_limit() {
    let sb = Sandbox::new();
    let c = ctx(&sb, Duration::from_secs(10));
    let content = "x".repeat(MAX_FILE_BYTES as usize + 1);
    let out = call(&c, "write", json!({"path": "big.txt", "content": content})).await;
    assert_eq!(
        (out.is_error, out.text.as_str()),
        (
            true,
            "the content for big.txt is 16.0 MiB (16777217 bytes), over the 16 MiB limit of \
             write; write it in parts (the first with write, the rest appended with bash \
             `cat >> FILE`) or generate it with a command"
        )
    );
    assert!(!sb.work.join("big.txt").exists());
}

#[tokio::test]
async fn write_with_a_quadratic_diff_answers_within_the_step_deadline() {
    let sb = Sandbox::new();
    let (old, new) = alternating(LINES);
    sb.write("big.txt", &old);
    let step = Duration::from_secs(2);
    let c = ctx(&sb, step);
    let started = Instant::now();
    let out = call(&c, "write", json!({"path": "big.txt", "content": new})).await;
    let took = started.elapsed();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(sb.read("big.txt"), new);
    // Before the step's timeout, with some slack for a loaded machine; without a
    // deadline the diff ran for tens of seconds.
    assert!(took < step + Duration::from_secs(1), "took {took:?}");
    // A diff, or a note saying why there is none.
    let details = out.details.unwrap();
    assert!(
        details["diff"].is_string() || details["diffNote"].is_string(),
        "{details}"
    );
}

#[tokio::test]
async fn edit_with_a_quadratic_diff_answers_within_the_step_deadline() {
    let sb = Sandbox::new();
    let (old, new) = alternating(LINES);
    sb.write("big.txt", &format!("head\n{old}"));
    let step = Duration::from_secs(2);
    let c = ctx(&sb, step);
    let started = Instant::now();
    let out = call(
        &c,
        "edit",
        json!({"path": "big.txt", "oldText": old, "newText": new}),
    )
    .await;
    let took = started.elapsed();
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(sb.read("big.txt"), format!("head\n{new}"));
    assert!(took < step + Duration::from_secs(1), "took {took:?}");
    let details = out.details.unwrap();
    assert_eq!(details["firstChangedLine"], 2, "{details}");
}

/// On a single-threaded runtime (what `#[tokio::test]` gives), a ticking task must keep
/// ticking while the diff runs: computed on the runtime's thread, it stalled every other
/// task of the daemon (three writes held `/healthz` for 35 s).
#[tokio::test]
async fn a_diff_does_not_block_the_runtime() {
    let sb = Sandbox::new();
    let (old, new) = alternating(LINES);
    sb.write("big.txt", &old);
    let c = ctx(&sb, Duration::from_secs(10));
    let done = AtomicBool::new(false);
    let work = async {
        let out = call(&c, "write", json!({"path": "big.txt", "content": new})).await;
        done.store(true, Ordering::SeqCst);
        out
    };
    let ticker = async {
        let (mut last, mut worst) = (Instant::now(), Duration::ZERO);
        while !done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            worst = worst.max(last.elapsed());
            last = Instant::now();
        }
        worst
    };
    let (out, worst) = tokio::join!(work, ticker);
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(sb.read("big.txt"), new);
    assert!(
        worst < Duration::from_secs(1),
        "the runtime was blocked for {worst:?}"
    );
}

/// Only the changed region is diffed, yet the lines are numbered in the whole file.
#[tokio::test]
async fn a_small_edit_of_a_large_file_is_numbered_in_the_whole_file() {
    let sb = Sandbox::new();
    let body: String = (1..=200_000).map(|i| format!("l{i}\n")).collect();
    sb.write("long.txt", &body);
    let c = ctx(&sb, Duration::from_secs(10));
    let out = call(
        &c,
        "edit",
        json!({"path": "long.txt", "oldText": "l150000\n", "newText": "L150000\n"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.text);
    let context = |lines: std::ops::RangeInclusive<usize>| {
        lines
            .map(|n| format!(" {n:>6} l{n}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let numbered = format!(
        "        ...\n{}\n-150000 l150000\n+150000 L150000\n{}\n        ...",
        context(149_996..=149_999),
        context(150_001..=150_004)
    );
    let details = out.details.unwrap();
    assert_eq!(
        details,
        json!({"path": sb.work.join("long.txt"), "diff": numbered, "firstChangedLine": 150_000})
    );
    assert_eq!(
        out.text,
        "Edited long.txt (1 edit)\n--- long.txt\n+++ long.txt\n@@ -149997,7 +149997,7 @@\n \
         l149997\n l149998\n l149999\n-l150000\n+L150000\n l150001\n l150002\n l150003\n"
    );
}

/// What front doors get in `details` (and sessions store) is capped, and says so.
#[tokio::test]
async fn a_long_diff_is_cut_in_the_details_with_a_note() {
    let sb = Sandbox::new();
    let c = ctx(&sb, Duration::from_secs(10));
    let content: String = (0..40_000).map(|i| format!("{i:>49}\n")).collect();
    let out = call(&c, "write", json!({"path": "new.txt", "content": content})).await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(sb.read("new.txt"), content);
    let details = out.details.unwrap();
    let diff = details["diff"].as_str().unwrap();
    assert!(diff.len() <= 256 * 1024, "{} bytes", diff.len());
    assert!(diff.starts_with("--- new.txt\n+++ new.txt\n@@ -0,0 +1,40000 @@\n+"));
    assert_eq!(details["diffNote"], "diff cut at 256 KiB");
}

/// Six `grep "^"` calls in one turn over a 32 MiB file of empty lines (issue 37): each
/// is read line by line, at most four run at once, so `picogent run` finishes within a
/// 3 GiB address space (it aborted there, each call holding ~800 MB), and each answer
/// is cut where a tool's output is cut.
#[tokio::test]
async fn a_turn_of_greps_over_a_huge_file_stays_within_its_memory() {
    use crate::common::{llm, text, ScriptedLlm, Turn, Wire};
    let sb = Sandbox::new();
    let big = std::fs::File::create(sb.work.join("big.txt")).unwrap();
    big.set_len(0).unwrap();
    std::io::Write::write_all(&mut &big, &vec![b'\n'; 32 << 20]).unwrap();
    // Six different calls (the same one repeated would stop the run).
    let greps = (0..6)
        .map(|n| {
            let args =
                json!({"pattern": "^", "path": "big.txt", "limit": 10_000_000, "context": n});
            ("grep".to_string(), args)
        })
        .collect();
    let llm = ScriptedLlm::start(vec![Turn::Tools(String::new(), greps), text("Searched.")]).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_picogent"));
    cmd.args(["run", "--dir", &sb.work.display().to_string(), "Search"])
        .current_dir(sb.base())
        .env("HOME", &sb.user_home)
        .env("PICOGENT_PROVIDER", Wire::Anthropic.provider())
        .env("PICOGENT_BASE_URL", llm.base_url(Wire::Anthropic))
        .env("PICOGENT_API_KEY", llm::API_KEY)
        .env("PICOGENT_MODEL", "scripted");
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 3 << 30,
                rlim_max: 3 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("picogent did not finish in 120 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Searched.\n");
    // Every answer is cut where a tool's output is cut, whatever `limit` said.
    let body = &llm.requests()[1].body;
    let results: Vec<String> = body["messages"][2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["content"].to_string())
        .collect();
    assert_eq!(results.len(), 6);
    for r in &results {
        let tail = &r[r.len().saturating_sub(200)..];
        assert!(r.len() < 80_000 && tail.contains("Output cut"), "{tail}");
    }
}
