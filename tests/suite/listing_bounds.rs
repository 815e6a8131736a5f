//! `ls`, `find`, `grep`'s walk and `read` within their bounds (issue 37, item 1): what
//! the model controls (a folder's size, `limit`, `offset`, the ignore files) costs at
//! most what the answer shows, and never waits on a FIFO. Each call has a step timeout
//! so a hang on old code fails the test instead of stalling it, and what a hung call
//! waits on is released afterwards so the test's runtime can end.

use std::path::Path;
use std::time::Duration;

use picogent::sandbox::Sandbox as PathSandbox;
use picogent::tools::{execute, ToolContext, ToolOutput};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::{mkfifo, Sandbox};

/// Long enough for a debug build on a loaded machine; a call that hangs fails here.
const STEP: Duration = Duration::from_secs(60);

fn ctx(sb: &Sandbox) -> ToolContext {
    sb.tool_ctx(PathSandbox::default(), STEP)
}

/// For calls that hung on old code: shorter, so such a test fails sooner.
fn short_ctx(sb: &Sandbox) -> ToolContext {
    sb.tool_ctx(PathSandbox::default(), Duration::from_secs(20))
}

async fn call(ctx: &ToolContext, name: &str, args: Value) -> ToolOutput {
    execute(name, &args, ctx).await
}

const ENTRIES: usize = 200_000;

/// `work/many`: `ENTRIES` empty files `f000000`…, a folder `g` sorting after them all
/// (so in the walk's second window of the folder), and a `.gitignore` there.
fn many(sb: &Sandbox) {
    let dir = sb.work.join("many");
    std::fs::create_dir_all(dir.join("g")).unwrap();
    for i in 0..ENTRIES {
        std::fs::File::create(dir.join(format!("f{i:06}"))).unwrap();
    }
    std::fs::write(dir.join("g/inner.txt"), "").unwrap();
    std::fs::write(dir.join(".gitignore"), "f19999*\n").unwrap();
}

#[tokio::test]
async fn ls_of_a_huge_folder_shows_the_first_names_and_the_count() {
    let sb = Sandbox::new();
    many(&sb);
    let c = ctx(&sb);
    let total = ENTRIES + 2;
    let out = call(&c, "ls", json!({"path": "many"})).await;
    let lines: Vec<&str> = out.text.lines().collect();
    assert_eq!(lines.len(), 501, "{}", &out.text[..200]);
    assert_eq!(&lines[..3], [".gitignore", "f000000", "f000001"]);
    assert_eq!(lines[499], "f000498");
    assert_eq!(
        lines[500],
        format!("[Showing 500 of {total} entries. Raise limit to see more.]")
    );
    // A huge limit keeps what 50 KB shows: ".gitignore" (11 bytes with its newline)
    // and 6,398 names of 8.
    let out = call(&c, "ls", json!({"path": "many", "limit": 1_000_000_000u64})).await;
    let (names, note) = out.text.rsplit_once('\n').unwrap();
    assert!(names.len() <= 50 * 1024, "{}", names.len());
    let names: Vec<&str> = names.lines().collect();
    assert_eq!(names.len(), 6399);
    assert_eq!(names[6398], "f006397");
    assert_eq!(
        note,
        format!(
            "[Showing 6399 of {total} entries: output cut at 50 KB. Use find with a pattern \
             to see others.]"
        )
    );
}

#[tokio::test]
async fn find_over_a_huge_folder_is_whole_sorted_and_stops_at_the_cut() {
    let sb = Sandbox::new();
    many(&sb);
    let c = ctx(&sb);
    // The folder's last names, past its first window, with its .gitignore applied.
    let out = call(&c, "find", json!({"pattern": "f1999*"})).await;
    let want: Vec<String> = (199_900..199_990).map(|i| format!("many/f{i}")).collect();
    assert_eq!(out.text, want.join("\n"));
    let out = call(&c, "find", json!({"pattern": "*.txt"})).await;
    assert_eq!(out.text, "many/g/inner.txt");
    // A limit of a billion stops where the output is cut, and says after how many.
    let out = call(
        &c,
        "find",
        json!({"pattern": "*", "limit": 1_000_000_000u64}),
    )
    .await;
    let (paths, note) = out.text.rsplit_once('\n').unwrap();
    let paths: Vec<&str> = paths.lines().collect();
    let n = paths.len();
    assert!(n > 3000, "{n}");
    assert_eq!(&paths[..2], ["many/.gitignore", "many/f000000"]);
    assert_eq!(paths[n - 1], format!("many/f{:06}", n - 2));
    assert_eq!(
        note,
        format!("[Output cut at 50 KB after {n} results; more files match. Narrow the pattern.]")
    );
}

/// Opens `fifo` for writing and closes it, so a reader blocked opening it (old code)
/// gets its end and its thread can finish.
fn release(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}

/// Old code opened the FIFO and waited for a writer: each call timed out, leaving its
/// thread blocked until `release`.
#[tokio::test]
async fn a_fifo_named_gitignore_is_skipped_not_waited_on() {
    let sb = Sandbox::new();
    sb.write("a.txt", "needle\n");
    sb.write("sub/b.txt", "needle\n");
    sb.write("sub/skip.txt", "needle\n");
    // A folder below still has its (regular) rules applied.
    sb.write("sub/.gitignore", "skip.txt\n");
    let fifo = sb.work.join(".gitignore");
    mkfifo(&fifo);
    let c = short_ctx(&sb);
    let note = "[Ignore rules not applied, so files they would skip may be listed: \
                .gitignore (not a regular file).]";
    let found = call(&c, "find", json!({"pattern": "*.txt"})).await;
    release(&fifo);
    let grepped = call(&c, "grep", json!({"pattern": "needle"})).await;
    release(&fifo);
    let read = call(&c, "read", json!({"path": ".gitignore"})).await;
    assert_eq!(found.text, format!("a.txt\nsub/b.txt\n{note}"));
    assert_eq!(
        grepped.text,
        format!("a.txt:1: needle\nsub/b.txt:1: needle\n{note}")
    );
    assert_eq!(
        (read.is_error, read.text.as_str()),
        (
            true,
            ".gitignore is a FIFO; the file tools open regular files only"
        )
    );
}

#[tokio::test]
async fn rules_past_the_budget_are_not_applied_and_the_walk_says_so() {
    let sb = Sandbox::new();
    // 80 KiB of ignore file: a rule, comments, and a last rule past the 64 KiB held.
    let mut text = String::from("early.txt\n");
    while text.len() < 80 << 10 {
        text.push_str("# a comment line, still rule text the walk holds\n");
    }
    text.push_str("late.txt\n");
    sb.write(".gitignore", &text);
    for f in ["early.txt", "late.txt", "kept.txt"] {
        sb.write(f, "");
    }
    let c = ctx(&sb);
    let out = call(&c, "find", json!({"pattern": "*.txt"})).await;
    assert_eq!(
        out.text,
        "kept.txt\nlate.txt\n[Ignore rules not applied, so files they would skip may be \
         listed: .gitignore past the 64 KiB of ignore rules a search holds.]"
    );
}

/// 1 TiB: 16 KB of text, then a hole (nothing on disk). Read to the end it would take
/// hours, and a step's timeout would leave the scan running.
fn sparse(sb: &Sandbox) -> std::path::PathBuf {
    let text: String = (1..=256).map(|i| format!("line {i:058}\n")).collect();
    let path = sb.write("huge.log", &text);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    path
}

#[tokio::test]
async fn read_with_a_huge_offset_stops_at_its_scan_bound() {
    let sb = Sandbox::new();
    let path = sparse(&sb);
    let c = ctx(&sb);
    let out = call(
        &c,
        "read",
        json!({"path": "huge.log", "offset": 1_000_000_000_000u64}),
    )
    .await;
    // Old code scans on after its step timed out: cut the file so that scan ends.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0));
    // 256 lines, then the hole as one line cut at the bound.
    assert_eq!(
        (out.is_error, out.text.as_str()),
        (
            true,
            "offset 1000000000000 lies past what read scans of huge.log: read looks at the \
             first 1 GiB only (257 lines there). Use bash for what lies beyond (e.g. `tail -c +N`)"
        )
    );
}

#[tokio::test]
async fn read_of_a_page_of_a_huge_file_says_the_count_is_partial() {
    let sb = Sandbox::new();
    let path = sparse(&sb);
    let c = ctx(&sb);
    let out = call(&c, "read", json!({"path": "huge.log", "limit": 2})).await;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0));
    assert_eq!(
        out.text,
        format!(
            "line {:058}\nline {:058}\n\n[Showing lines 1-2 of at least 257 (read counts the \
             first 1 GiB only). Use offset=3 to continue.]",
            1, 2
        )
    );
    assert_eq!(out.details.unwrap()["total_known"], false);
}
