//! Resources a command can exhaust must not take picogent down: a huge tree left in
//! its temporary folder, output without end, a state disk filling up.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::common::*;

/// 41-byte lines, `n` of them.
fn lines_command(n: usize) -> String {
    format!("yes 0123456789012345678901234567890123456789 | head -n {n}")
}

fn ctx(output_dir: PathBuf, work: &Path, max_saved_output: u64) -> ToolContext {
    ToolContext {
        work_dir: work.to_path_buf(),
        sandbox: Arc::new(PathSandbox::default()),
        step_timeout: Duration::from_secs(30),
        command_timeout_max: Duration::from_secs(30),
        cancel: CancellationToken::new(),
        output_dir,
        max_saved_output,
        on_output: None,
    }
}

async fn bash(ctx: &ToolContext, command: &str) -> ToolOutput {
    execute("bash", &json!({ "command": command }), ctx).await
}

/// The note closing a result whose output was cut, and the saved file it names.
fn note_and_file(out: &ToolOutput) -> (String, Option<PathBuf>) {
    let note = out.text.lines().last().unwrap_or_default().to_string();
    let file = out.details.as_ref().unwrap()["full_output_path"]
        .as_str()
        .map(PathBuf::from);
    (note, file)
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Removes a folder with `rm -rf` (which does not recurse on the stack) on drop.
struct RmRf(PathBuf);

impl Drop for RmRf {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&self.0)
            .status();
    }
}

/// A command leaving a 15,000-deep folder chain in its temporary folder: removing it
/// recursively overflowed a worker's stack and aborted the whole process. Run as the
/// real binary so that such a crash is a failed test, not a dead test runner.
#[tokio::test]
async fn a_deep_folder_chain_left_in_tmp_is_removed_without_a_crash() {
    let sb = Sandbox::new();
    // `cd` in bash is slow on paths this long; perl makes the chain in well under a
    // second. The sleep leaves time to see the chain in the folder picogent removes.
    let command = "case \"$TMPDIR\" in */picogent-tmp-*) ;; *) exit 3 ;; esac; cd \"$TMPDIR\" && perl -e 'for (1..15000) { mkdir \"d\" and chdir \"d\" or die \"$_: $!\" }' && echo made && sleep 2";
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": command })),
        text("done"),
    ])
    .await;
    // Without confinement `TMPDIR` names the temporary folder by its real path (under
    // namespaces it is mounted at /tmp); the removal is picogent's either way.
    sb.write_config(&llm, Wire::Anthropic, json!({ "sandbox": "off" }));
    // An old run's folder with a chain a crashed picogent left: swept at start.
    let old = sb.home.join("state/outputs/old/picogent-tmp-0");
    let _old_leftovers = RmRf(old.clone());
    deep_chain(&old, 15_000);
    let week_ago = std::process::Command::new("touch")
        .args(["-d", "8 days ago"])
        .arg(old.parent().unwrap())
        .status();
    assert!(week_ago.unwrap().success());
    let mut child = sb
        .run_command(std::path::Path::new(env!("CARGO_BIN_EXE_picogent")), "go")
        .args(["--session", "deep"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let outputs = sb.home.join("state/outputs/deep");
    // Should picogent leave the chain, the test's own clean-up must not recurse into it.
    let _leftovers = RmRf(outputs.clone());
    // The chain is made in the command's temporary folder, the one picogent removes.
    let started = Instant::now();
    let tmp = loop {
        let found = names_in(&outputs)
            .into_iter()
            .find(|n| n.starts_with("picogent-tmp-"))
            .map(|n| outputs.join(n))
            .filter(|t| t.join("d/d/d").is_dir());
        if let Some(t) = found {
            break t;
        }
        if started.elapsed() > Duration::from_secs(30) || child.try_wait().unwrap().is_some() {
            let _ = child.start_kill();
            let out = child.wait_with_output().await.unwrap();
            panic!(
                "no chain appeared in a temporary folder under {outputs:?}: {:?}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("picogent did not finish in 90 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    let result = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "tool_result")
        .unwrap();
    assert_eq!(result["output"], "made", "{result}");
    assert!(!tmp.exists(), "{tmp:?} is still there");
    assert_eq!(names_in(&outputs), Vec::<String>::new());
    assert_eq!(names_in(&sb.home.join("state/outputs")), vec!["deep"]);
}

/// A chain of `depth` folders named `d` in `base`, made with perl: fast, and with
/// relative steps only (the path is far longer than `PATH_MAX`).
fn deep_chain(base: &Path, depth: usize) {
    std::fs::create_dir_all(base).unwrap();
    let made = std::process::Command::new("perl")
        .arg("-e")
        .arg(format!(
            "for (1..{depth}) {{ mkdir 'd' and chdir 'd' or die \"$_: $!\" }}"
        ))
        .current_dir(base)
        .status();
    assert!(made.unwrap().success());
}

/// A saved full output stops at `max_saved_output_mb`, and the result says so; the
/// tail still shows the output's last lines.
#[tokio::test]
async fn saved_output_is_cut_at_the_configured_size() {
    let sb = Sandbox::new();
    let llm = ScriptedLlm::start(vec![
        tool("bash", json!({ "command": lines_command(60_000) })),
        text("done"),
    ])
    .await;
    assert_eq!(
        sb.config(&llm, Wire::Anthropic, json!({}))
            .limits
            .max_saved_output,
        64 << 20
    );
    let agent = sb.agent(&llm, Wire::Anthropic, json!({ "max_saved_output_mb": 1 }));
    assert_eq!(agent.config().limits.max_saved_output, 1 << 20);
    let (events, _) = run(&agent, "go", "cap").await;
    let results = tool_results(&events);
    let (_, is_error, output) = &results[0];
    assert!(!is_error, "{output}");
    let note = output.lines().last().unwrap_or_default();
    let path = note
        .split_once(" lines of 60000. Full output: ")
        .and_then(|(_, rest)| rest.split_once(". The saved output"))
        .map(|(path, _)| PathBuf::from(path))
        .unwrap_or_else(|| panic!("{note}"));
    assert!(
        note.ends_with(
            ". The saved output was cut at 1 MB (max_saved_output_mb); the lines shown \
             above are the output's end.]"
        ),
        "{note}"
    );
    let saved = std::fs::read(&path).unwrap();
    assert_eq!(saved.len(), 1 << 20);
    assert!(saved.starts_with(b"0123456789012345678901234567890123456789\n"));
    // The tail shows the output's end, which the saved file lacks.
    let shown = output.lines().filter(|l| l.starts_with("0123")).count();
    assert!(note.starts_with(&format!("[Showing the last {shown} lines of 60000.")));
}

/// Saving stops before the state disk's last free space, kept for the session journals
/// and the tracker outbox — and never starts when that space is already reached. The
/// command itself runs to the end either way.
#[tokio::test]
async fn saved_output_stops_before_the_disk_reserve() {
    let sb = Sandbox::new();
    let state = sb.base().join("small-state");
    // 80 MiB: the reserve is its 64 MiB floor, leaving about 15 MiB for outputs.
    let Some(_mounted) = Tmpfs::mount(&state, "80m") else {
        return skip("cannot mount a small tmpfs here (needs root)");
    };
    let c = ctx(state.join("outputs/s1"), &sb.work, 64 << 20);
    // About 33 MB of output, twice what fits above the reserve.
    let out = bash(&c, &lines_command(800_000)).await;
    assert!(!out.is_error, "{}", out.text);
    let (note, file) = note_and_file(&out);
    let file = file.unwrap_or_else(|| panic!("{note}"));
    let saved = std::fs::metadata(&file).unwrap().len();
    assert!(
        (13 << 20..=16 << 20).contains(&saved),
        "{saved} bytes saved"
    );
    assert!(
        note.ends_with(
            "MB: picogent's state disk is down to the 64 MB kept free for session \
             journals and tracker reports.]"
        ),
        "{note}"
    );
    assert_eq!(
        out.details.as_ref().unwrap()["full_output_cut"]
            .as_str()
            .map(|c| c.starts_with("The saved output was cut at ")),
        Some(true)
    );
    // Now under the reserve: the next long output is not saved at all.
    let out = bash(&c, &format!("{}; echo end", lines_command(5000))).await;
    let (note, file) = note_and_file(&out);
    assert_eq!(file, None);
    let shown = out.text.lines().count() - 2;
    assert_eq!(
        note,
        format!(
            "[Showing the last {shown} lines of 5001. The full output was not saved: \
             picogent's state disk is down to the 64 MB kept free for session journals and \
             tracker reports.]"
        )
    );
    assert!(out.text.contains("\nend\n"), "the command ran to its end");
    let logs: Vec<String> = names_in(&state.join("outputs/s1"));
    assert_eq!(logs.len(), 1, "{logs:?}");
}
