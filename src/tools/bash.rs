//! `bash`: one command line under `/bin/bash -c` in the working folder.
//!
//! The child gets its own process group, a closed stdin, one pipe for stdout and stderr
//! (so their interleaving is kept), no secret variables, and a parent-death signal. On
//! timeout or cancellation the whole group is killed. When the command exits, its
//! group is killed too: a background grandchild (`sleep 1000 &`) would otherwise hold
//! the pipe open and hang the run, or outlive it unnoticed. Output is kept to the tail
//! within the caps; when cut, the full output is saved to a file the result names
//! (within its own limits, see `capture`). The command's private temporary folder is
//! removed afterwards without recursion, whatever tree the command left there.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;

use super::registry::{Limit, Tool};
use super::truncate::tail;
use super::{arg, ToolContext, ToolError, ToolOutput, MAX_BYTES};
use capture::Capture;
use live::Live;

pub(crate) mod capture;
pub(crate) mod live;

/// Run a bash command in the working folder. stdout and stderr are merged; output keeps the last 2000 lines or 50 KB, and the full output is saved to a file when cut.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Args {
    /// The command line
    command: String,
    /// Seconds before the command is killed (default and maximum: the configured limit, 120 s unless set otherwise)
    #[schemars(with = "Option<u64>")]
    timeout: Option<f64>,
}

pub(crate) struct BashTool;

impl Tool for BashTool {
    type Args = Args;
    const NAME: &'static str = "bash";
    const LABEL: &'static str = "Bash";
    const LIMIT: Limit = Limit::Own;
    const STREAMS: bool = true;

    fn detail(args: &Value) -> String {
        arg(args, "command").to_string()
    }

    async fn run(a: Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let cwd = ctx.sandbox.check_work_dir(&ctx.work_dir)?;
        let timeout = command_timeout(a.timeout, ctx);
        // A process whose sandbox level is not known yet runs its first command as if
        // namespaces work: when they do (the usual case), that is the answer, and the probe
        // never costs a helper run of its own. When the helper could not build them, the
        // probe decides, and the command runs again only if the level is Landlock's.
        let optimistic = !ctx.sandbox.level_settled();
        let (cap, saved, end) = run_command(&a.command, &cwd, timeout, ctx, optimistic).await?;
        if refused_for_now(&cap, &end) {
            tracing::warn!(
                level = "namespaces",
                "sandbox: a command was refused, its namespaces cannot be made right now (the count of this user's namespaces is full); the level is not lowered"
            );
        }
        if optimistic {
            if refused_by_helper(&cap, &end) {
                ctx.sandbox.settle().await;
                if !ctx.sandbox.namespaces_now() {
                    ctx.sandbox.say_level();
                    let (cap, saved, end) =
                        run_command(&a.command, &cwd, timeout, ctx, false).await?;
                    return Ok(report(&cap, saved, &end, timeout));
                }
            } else if matches!(end, End::Exited(_)) {
                // It ran to its end inside the namespaces the helper built (a timeout or a
                // cancel proves nothing: the next command tries again).
                ctx.sandbox.namespaces_proven();
            }
            ctx.sandbox.say_level();
        }
        Ok(report(&cap, saved, &end, timeout))
    }
}

/// How the sandbox helper's own messages start.
const HELPER_REFUSAL: &str = "picogent sandbox: ";

/// Once the command has exited, how long its leftover children may keep the pipe open.
const DRAIN: Duration = Duration::from_millis(300);

/// Removes the command's temporary folder however the call ends: awaited at the end
/// of a call, else (the call failed or was dropped) handed to a blocking thread. The
/// command may have left any tree there (a 15,000-deep chain overflowed the stack of
/// the recursive `remove_dir_all`), so the removal never runs on the caller's thread.
struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    async fn remove(mut self) {
        if let Some(p) = self.0.take() {
            crate::util::remove_tree_blocking(p, "a bash command's temporary folder").await;
        }
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let Some(p) = self.0.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || remove_tmp(&p));
            }
            Err(_) => remove_tmp(&p),
        }
    }
}

fn remove_tmp(p: &std::path::Path) {
    if let Err(e) = crate::util::remove_tree(p) {
        tracing::warn!("a bash command's temporary folder: {e}");
    }
}

enum End {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
}

/// Creates a folder (and its parents) only picogent's user can enter.
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// What one command run left: its output, the saved full output, how it ended.
type Ran = (Capture, (Option<PathBuf>, Option<String>), End);

/// `probe`: a refusal of the sandbox helper is not shown live (the command then runs
/// again, or its result says so).
async fn run_command(
    command: &str,
    cwd: &std::path::Path,
    timeout: Duration,
    ctx: &ToolContext,
    probe: bool,
) -> Result<Ran, ToolError> {
    // A private temporary folder per command (under namespaces its /tmp is a tmpfs of
    // its own instead), removed afterwards.
    let tmp = ctx
        .output_dir
        .join(format!("picogent-tmp-{}", crate::util::random_hex(12)));
    private_dir(&tmp).map_err(|e| ToolError::io(&tmp, e))?;
    let cleanup = RemoveOnDrop(Some(tmp.clone()));
    let (mut child, mut rx) = spawn(command, cwd, &tmp, ctx)?;
    let pgid = child.id().map(|p| p as i32);

    let mut cap = Capture::new(ctx.output_dir.clone(), ctx.max_saved_output);
    let mut live = Live::new(ctx.on_output.clone());
    if probe {
        live = live.holding(HELPER_REFUSAL.as_bytes());
    }
    let out = Out {
        cap: &mut cap,
        live: &mut live,
    };
    let (end, exited) = watch(&mut child, &mut rx, out, timeout, ctx).await?;
    // What came since the last piece: watchers see the end of the output too.
    live.release(!(probe && refused_by_helper(&cap, &end)));
    if let Some(pgid) = pgid {
        crate::sandbox::kill_group(pgid);
    }
    if !exited {
        let _ = child.wait().await;
    }
    let saved = cap.finish().await;
    cleanup.remove().await;
    Ok((cap, saved, end))
}

/// Whether the sandbox helper refused before the command started (its own message,
/// and nothing else, with its status): then nothing of the command ran.
fn refused_by_helper(cap: &Capture, end: &End) -> bool {
    let text = String::from_utf8_lossy(&cap.tail);
    let passing = i32::from(crate::sandbox::PASSING_STATUS);
    matches!(end, End::Exited(st) if st.code() == Some(126) || st.code() == Some(passing))
        && text.starts_with(HELPER_REFUSAL)
        && text.trim_end().ends_with("the command was not run")
}

/// Whether the helper refused because namespaces cannot be made right now.
fn refused_for_now(cap: &Capture, end: &End) -> bool {
    let passing = i32::from(crate::sandbox::PASSING_STATUS);
    refused_by_helper(cap, end) && matches!(end, End::Exited(st) if st.code() == Some(passing))
}

/// The model's own timeout, within the configured maximum.
fn command_timeout(asked: Option<f64>, ctx: &ToolContext) -> Duration {
    match asked {
        Some(t) if t > 0.0 && t.is_finite() => Duration::try_from_secs_f64(t)
            .unwrap_or(ctx.command_timeout_max)
            .min(ctx.command_timeout_max),
        _ => ctx.step_timeout.min(ctx.command_timeout_max),
    }
}

/// Starts the command in its own group with one pipe for stdout and stderr; returns
/// the child and the pipe's read end.
fn spawn(
    command: &str,
    cwd: &std::path::Path,
    tmp: &std::path::Path,
    ctx: &ToolContext,
) -> Result<(tokio::process::Child, Receiver), ToolError> {
    let (reader, writer) =
        std::io::pipe().map_err(|e| ToolError::Failed(format!("cannot create a pipe: {e}")))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| ToolError::Failed(format!("cannot duplicate a pipe: {e}")))?;
    let mut cmd = ctx.sandbox.bash_command(command, tmp)?;
    cmd.current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2));
    crate::sandbox::supervise(&mut cmd);
    let child = cmd
        .spawn()
        .map_err(|e| ToolError::Failed(format!("cannot start /bin/bash: {e}")))?;
    // The parent's copies of the write end must close, or EOF never comes.
    drop(cmd);
    let rx = Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(|e| ToolError::Failed(format!("cannot read the command's output: {e}")))?;
    Ok((child, rx))
}

/// Where the command's output goes: the result's capture, and people watching.
struct Out<'a> {
    cap: &'a mut Capture,
    live: &'a mut Live,
}

/// Captures output until the command has exited and its output ended (or `DRAIN`
/// after it exited), the timeout passed, or the run was cancelled. Returns how it
/// ended and whether the child was already reaped.
async fn watch(
    child: &mut tokio::process::Child,
    rx: &mut Receiver,
    out: Out<'_>,
    timeout: Duration,
    ctx: &ToolContext,
) -> Result<(End, bool), ToolError> {
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let drain = tokio::time::sleep(Duration::from_secs(0));
    tokio::pin!(drain);
    let mut exited: Option<std::process::ExitStatus> = None;
    let mut eof = false;
    let mut every = tokio::time::interval(live::EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        if let (Some(st), true) = (exited, eof) {
            break End::Exited(st);
        }
        tokio::select! {
            n = rx.read(&mut buf), if !eof => match n {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    let got = buf.get(..n).unwrap_or_default();
                    out.cap.push(got).await;
                    out.live.push(got);
                }
            },
            _ = every.tick(), if out.live.waiting() => out.live.flush(),
            st = child.wait(), if exited.is_none() => {
                match st {
                    Ok(st) => exited = Some(st),
                    Err(e) => return Err(ToolError::Failed(format!("waiting for bash failed: {e}"))),
                }
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN);
            }
            _ = &mut drain, if exited.is_some() && !eof => {
                // Background children still hold the pipe; they end with the command.
                if let Some(st) = exited { break End::Exited(st); }
            }
            _ = &mut deadline => break End::TimedOut,
            _ = ctx.cancel.cancelled() => break End::Cancelled,
        }
    };
    Ok((end, exited.is_some()))
}

/// The result: the output's tail, where the full output went, and how it ended.
fn report(
    cap: &Capture,
    (full_path, cut): (Option<PathBuf>, Option<String>),
    end: &End,
    timeout: Duration,
) -> ToolOutput {
    let text = String::from_utf8_lossy(&cap.tail);
    let (kept, n, _) = tail(&text);
    let total = cap.total_lines();
    let mut out = if kept.is_empty() {
        "(no output)".to_string()
    } else {
        kept
    };
    if n < total || cap.total_bytes > MAX_BYTES {
        out.push_str(&format!("\n\n[Showing the last {n} lines of {total}."));
        if let Some(p) = &full_path {
            out.push_str(&format!(" Full output: {}", p.display()));
        }
        if let Some(cut) = &cut {
            out.push_str(&format!(
                "{} {cut}",
                if full_path.is_some() { "." } else { "" }
            ));
        }
        out.push(']');
    }
    let (note, exit_code) = end_note(end, timeout);
    let mut output = match note {
        Some(note) => {
            out.push_str(&note);
            ToolOutput::error(out)
        }
        None => ToolOutput::ok(out),
    };
    output.details = Some(json!({
        "exit_code": exit_code,
        "full_output_path": full_path,
        "full_output_cut": cut,
        "timed_out": matches!(end, End::TimedOut),
    }));
    output
}

/// What to append when the command did not succeed (its absence means success), and
/// its exit code if it exited.
fn end_note(end: &End, timeout: Duration) -> (Option<String>, Option<i32>) {
    match end {
        End::Exited(st) => match st.code() {
            Some(0) => (None, Some(0)),
            Some(c) => (Some(format!("\n\nCommand exited with code {c}")), Some(c)),
            None => {
                use std::os::unix::process::ExitStatusExt;
                let signal = st.signal().unwrap_or(0);
                (
                    Some(format!("\n\nCommand was killed by signal {signal}")),
                    None,
                )
            }
        },
        End::TimedOut => (
            Some(format!(
                "\n\nCommand timed out after {} seconds; its process group was killed",
                timeout.as_secs_f64()
            )),
            None,
        ),
        End::Cancelled => (
            Some("\n\nCommand aborted: the run was cancelled".to_string()),
            None,
        ),
    }
}
