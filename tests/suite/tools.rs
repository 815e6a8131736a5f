//! Each tool's behaviour and edge cases, called the way the loop calls them.

use std::time::{Duration, Instant};

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::Sandbox;

fn ctx(sb: &Sandbox) -> ToolContext {
    sb.tool_ctx(PathSandbox::default(), Duration::from_secs(10))
}

async fn call(ctx: &ToolContext, name: &str, args: Value) -> ToolOutput {
    execute(name, &args, ctx).await
}

#[tokio::test]
async fn read_pages_with_offset_and_limit() {
    let sb = Sandbox::new();
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    sb.write("f.txt", &body);
    let c = ctx(&sb);
    let out = call(
        &c,
        "read",
        json!({"path": "f.txt", "offset": 3, "limit": 2}),
    )
    .await;
    assert_eq!(
        out.text,
        "line 3\nline 4\n\n[6 more lines in the file. Use offset=5 to continue.]"
    );
    let out = call(&c, "read", json!({"path": "f.txt", "offset": 9})).await;
    assert_eq!(out.text, "line 9\nline 10\n");
    assert_eq!(
        out.details.unwrap(),
        json!({"path": sb.work.join("f.txt"), "first_line": 9, "last_line": 10, "total_lines": 10})
    );
    let out = call(&c, "read", json!({"path": "f.txt", "offset": 11})).await;
    assert!(out.is_error && out.text.contains("past the end"), "{out:?}");
}

#[tokio::test]
async fn read_caps_lines_and_cuts_long_lines() {
    let sb = Sandbox::new();
    let body: String = (1..=2500).map(|i| format!("{i}\n")).collect();
    sb.write("big.txt", &body);
    sb.write("wide.txt", &format!("{}\n", "y".repeat(700)));
    let c = ctx(&sb);
    let out = call(&c, "read", json!({"path": "big.txt"})).await;
    assert!(
        out.text
            .ends_with("[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"),
        "{}",
        &out.text[out.text.len() - 100..]
    );
    let out = call(&c, "read", json!({"path": "wide.txt"})).await;
    assert_eq!(
        out.text,
        format!("{} [… 200 more characters]\n", "y".repeat(500))
    );
    // 50 KB cap: 200 lines of 400 bytes = 80 KB.
    let body: String = (0..200).map(|_| format!("{}\n", "z".repeat(400))).collect();
    sb.write("heavy.txt", &body);
    let out = call(&c, "read", json!({"path": "heavy.txt"})).await;
    assert!(out.text.len() <= 51 * 1024);
    assert!(out.text.contains("[Showing lines 1-"), "cap note missing");
}

#[tokio::test]
async fn read_refuses_folders_binaries_and_missing_files() {
    let sb = Sandbox::new();
    std::fs::write(sb.work.join("bin"), [0u8, 1, 2, 3]).unwrap();
    let c = ctx(&sb);
    assert!(call(&c, "read", json!({"path": "bin"}))
        .await
        .text
        .contains("binary"));
    assert!(call(&c, "read", json!({"path": "."}))
        .await
        .text
        .contains("folder"));
    let out = call(&c, "read", json!({"path": "nope.txt"})).await;
    assert!(out.is_error && out.text.contains("nope.txt"), "{out:?}");
    let out = call(&c, "read", json!({"pathh": "x"})).await;
    assert!(
        out.is_error && out.text.contains("invalid arguments for read"),
        "{out:?}"
    );
}

#[tokio::test]
async fn write_creates_parents_and_replaces() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let out = call(&c, "write", json!({"path": "a/b/c.txt", "content": "one"})).await;
    assert!(!out.is_error && out.text.starts_with("Created"), "{out:?}");
    let out = call(&c, "write", json!({"path": "a/b/c.txt", "content": "two"})).await;
    assert!(out.text.starts_with("Replaced"));
    assert_eq!(sb.read("a/b/c.txt"), "two");
}

#[tokio::test]
async fn edit_applies_several_edits_and_answers_with_a_diff() {
    let sb = Sandbox::new();
    sb.write("m.rs", "fn a() {}\nfn b() {}\nfn c() {}\n");
    let c = ctx(&sb);
    let out = call(
        &c,
        "edit",
        json!({"path": "m.rs", "edits": [
            {"oldText": "fn c() {}", "newText": "fn c2() {}"},
            {"oldText": "fn a() {}", "newText": "fn a2() {}"}
        ]}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(sb.read("m.rs"), "fn a2() {}\nfn b() {}\nfn c2() {}\n");
    assert!(out.text.contains("-fn a() {}\n+fn a2() {}"), "{}", out.text);
    assert_eq!(out.details.as_ref().unwrap()["firstChangedLine"], 1);
    // The flat form works too.
    let out = call(
        &c,
        "edit",
        json!({"path": "m.rs", "oldText": "fn b() {}", "newText": "fn b2() {}"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.details.unwrap()["firstChangedLine"], 2);
}

/// The details carry the diff as pi renders it; the expected strings come from pi's own
/// `generateDiffString` (coding-agent, diff 8) run on the same texts.
#[tokio::test]
async fn edit_details_are_the_numbered_diff_pi_renders() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let lines = |n: usize| (1..=n).map(|i| format!("l{i}\n")).collect::<String>();
    let cases: [(String, Value, &str, u64); 3] = [
        (
            lines(12),
            json!({"oldText": "l7\n", "newText": "L7\n"}),
            "    ...\n  3 l3\n  4 l4\n  5 l5\n  6 l6\n- 7 l7\n+ 7 L7\n  8 l8\n  9 l9\n 10 l10\n 11 l11\n    ...",
            7,
        ),
        (
            lines(30),
            json!({"edits": [
                {"oldText": "l2\nl3\n", "newText": "l2\nX\nY\n"},
                {"oldText": "l19\nl20\n", "newText": "l19\n"},
                {"oldText": "l25", "newText": "Z"}
            ]}),
            "  1 l1\n  2 l2\n- 3 l3\n+ 3 X\n+ 4 Y\n  4 l4\n  5 l5\n  6 l6\n  7 l7\n  8 l8\n  9 l9\n 10 l10\n 11 l11\n 12 l12\n 13 l13\n 14 l14\n 15 l15\n 16 l16\n 17 l17\n 18 l18\n 19 l19\n-20 l20\n 21 l21\n 22 l22\n 23 l23\n 24 l24\n-25 l25\n+25 Z\n 26 l26\n 27 l27\n 28 l28\n 29 l29\n    ...",
            3,
        ),
        (
            "a\nb\nc".into(),
            json!({"edits": [
                {"oldText": "a\nb\nc", "newText": "start\na\nb"}
            ]}),
            "+1 start\n 1 a\n-2 b\n-3 c\n+3 b",
            1,
        ),
    ];
    for (i, (old, edit, want, first)) in cases.into_iter().enumerate() {
        let path = format!("pi{i}.txt");
        sb.write(&path, &old);
        let mut args = edit;
        args["path"] = json!(path);
        let out = call(&c, "edit", args).await;
        assert!(!out.is_error, "{out:?}");
        let d = out.details.expect("details");
        assert_eq!(d["diff"], want, "case {i}");
        assert_eq!(d["firstChangedLine"], first, "case {i}");
    }
}

#[tokio::test]
async fn edit_refuses_missing_ambiguous_and_overlapping_edits() {
    let sb = Sandbox::new();
    sb.write("t.txt", "abc abc\nxyz\n");
    let c = ctx(&sb);
    let out = call(
        &c,
        "edit",
        json!({"path": "t.txt", "edits": [{"oldText": "nope", "newText": "x"}]}),
    )
    .await;
    assert!(
        out.is_error && out.text.contains("edit 1: oldText was not found"),
        "{out:?}"
    );
    let out = call(&c, "edit", json!({"path": "t.txt", "edits": [{"oldText": "xyz", "newText": "q"}, {"oldText": "abc", "newText": "x"}]})).await;
    assert!(
        out.is_error && out.text.contains("edit 2: oldText occurs 2 times"),
        "{out:?}"
    );
    let out = call(&c, "edit", json!({"path": "t.txt", "edits": [{"oldText": "abc abc", "newText": "1"}, {"oldText": "c abc\nx", "newText": "2"}]})).await;
    assert!(
        out.is_error && out.text.contains("edits 1 and 2 overlap"),
        "{out:?}"
    );
    // Nothing was written by the failed calls.
    assert_eq!(sb.read("t.txt"), "abc abc\nxyz\n");
}

#[tokio::test]
async fn edit_keeps_crlf_line_endings_and_the_bom() {
    let sb = Sandbox::new();
    sb.write("w.txt", "\u{feff}one\r\ntwo\r\nthree\r\n");
    let c = ctx(&sb);
    let out = call(
        &c,
        "edit",
        json!({"path": "w.txt", "edits": [{"oldText": "one\ntwo", "newText": "uno\ndos"}]}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(sb.read("w.txt"), "\u{feff}uno\r\ndos\r\nthree\r\n");
}

#[tokio::test]
async fn bash_merges_output_and_reports_exit_codes() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let out = call(
        &c,
        "bash",
        json!({"command": "echo out; echo err >&2; pwd"}),
    )
    .await;
    assert_eq!(out.text, format!("out\nerr\n{}", sb.work.display()));
    assert!(!out.is_error);
    let out = call(&c, "bash", json!({"command": "echo failing; exit 3"})).await;
    assert!(out.is_error);
    assert_eq!(out.text, "failing\n\nCommand exited with code 3");
    assert_eq!(out.details.unwrap()["exit_code"], 3);
}

#[tokio::test]
async fn bash_timeout_kills_a_background_grandchild() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let marker = sb.base().join("marker");
    let started = Instant::now();
    let cmd = format!("(sleep 1000; touch {}) & sleep 1000", marker.display());
    let out = call(&c, "bash", json!({"command": cmd, "timeout": 1})).await;
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(
        out.is_error && out.text.contains("timed out after 1 seconds"),
        "{out:?}"
    );
    // No process of that group survives.
    let ps = std::process::Command::new("pgrep")
        .args(["-f", "sleep 1000"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&ps.stdout).trim().to_string();
    assert!(left.is_empty(), "leftover processes: {left}");
}

#[tokio::test]
async fn bash_does_not_hang_on_a_background_child_holding_the_pipe() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let started = Instant::now();
    let out = call(&c, "bash", json!({"command": "sleep 999 & echo started"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "hung on the grandchild"
    );
    assert_eq!(out.text, "started");
    assert!(!out.is_error);
}

#[tokio::test]
async fn bash_keeps_the_tail_and_saves_the_full_output() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let out = call(&c, "bash", json!({"command": "seq 1 5000"})).await;
    assert!(out.text.starts_with("3001\n"), "{}", &out.text[..50]);
    let note = out.text.lines().last().unwrap();
    assert!(
        note.starts_with("[Showing the last 2000 lines of 5000. Full output: "),
        "{note}"
    );
    let path = note
        .trim_start_matches("[Showing the last 2000 lines of 5000. Full output: ")
        .trim_end_matches(']');
    let full = std::fs::read_to_string(path).unwrap();
    assert_eq!(full.lines().count(), 5000);
    assert!(full.starts_with("1\n2\n"));
}

#[tokio::test]
async fn bash_cancellation_kills_the_command() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let cancel = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let out = call(&c, "bash", json!({"command": "sleep 60"})).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.is_error && out.text.contains("aborted"), "{out:?}");
}

#[tokio::test]
async fn grep_respects_gitignore_context_and_limits() {
    let sb = Sandbox::new();
    sb.write(".gitignore", "target/\n");
    sb.write("src/a.rs", "fn main() {\n    let needle = 1;\n}\n");
    sb.write("src/b.txt", "Needle here\n");
    sb.write("target/gen.rs", "needle in ignored\n");
    sb.write(".git/config", "needle in git\n");
    let c = ctx(&sb);
    let out = call(&c, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(out.text, "src/a.rs:2:     let needle = 1;\n");
    let out = call(
        &c,
        "grep",
        json!({"pattern": "needle", "ignoreCase": true, "glob": "*.txt"}),
    )
    .await;
    assert_eq!(out.text, "src/b.txt:1: Needle here\n");
    let out = call(
        &c,
        "grep",
        json!({"pattern": "needle", "context": 1, "path": "src"}),
    )
    .await;
    assert_eq!(
        out.text,
        "a.rs-1- fn main() {\na.rs:2:     let needle = 1;\na.rs-3- }\n"
    );
    let out = call(&c, "grep", json!({"pattern": "(", "literal": true})).await;
    assert!(
        out.text.starts_with("src/a.rs:1: fn main() {"),
        "{}",
        out.text
    );
    let out = call(&c, "grep", json!({"pattern": "("})).await;
    assert!(out.is_error && out.text.contains("bad regular expression"));
    let out = call(&c, "grep", json!({"pattern": "e", "limit": 1})).await;
    assert!(out.text.contains("[Stopped at 1 matches"), "{}", out.text);
    let out = call(&c, "grep", json!({"pattern": "absent-word"})).await;
    assert!(!out.is_error && out.text.starts_with("No matches"));
}

#[tokio::test]
async fn find_matches_globs_and_respects_gitignore() {
    let sb = Sandbox::new();
    sb.write(".gitignore", "*.log\n");
    sb.write("src/a.rs", "");
    sb.write("src/deep/b.rs", "");
    sb.write("notes.md", "");
    sb.write("run.log", "");
    let c = ctx(&sb);
    let out = call(&c, "find", json!({"pattern": "*.rs"})).await;
    assert_eq!(out.text, "src/a.rs\nsrc/deep/b.rs");
    let out = call(&c, "find", json!({"pattern": "src/*.rs"})).await;
    assert_eq!(out.text, "src/a.rs");
    let out = call(&c, "find", json!({"pattern": "**/*.log"})).await;
    assert!(out.text.starts_with("No files match"));
    let out = call(&c, "find", json!({"pattern": "*", "limit": 2})).await;
    assert!(out.text.contains("[Stopped at 2 results"), "{}", out.text);
}

#[tokio::test]
async fn ls_lists_one_folder_sorted_with_dotfiles() {
    let sb = Sandbox::new();
    sb.write("b.txt", "");
    sb.write(".hidden", "");
    sb.write("a/x.txt", "");
    let c = ctx(&sb);
    let out = call(&c, "ls", json!({})).await;
    assert_eq!(out.text, ".hidden\na/\nb.txt");
    let out = call(&c, "ls", json!({"path": "missing"})).await;
    assert!(
        out.is_error && out.text.contains("missing: no such folder"),
        "{out:?}"
    );
    let out = call(&c, "ls", json!({"limit": 1})).await;
    assert_eq!(
        out.text,
        ".hidden\n[Showing 1 of 3 entries. Raise limit to see more.]"
    );
}

#[tokio::test]
async fn unknown_tools_and_broken_json_are_tool_errors() {
    let sb = Sandbox::new();
    let c = ctx(&sb);
    let out = call(&c, "rm", json!({})).await;
    assert!(out.is_error && out.text.contains("unknown tool"));
    let out = call(&c, "read", json!({"_raw": "{\"path\": "})).await;
    assert!(out.is_error && out.text.contains("not valid JSON"));
}
