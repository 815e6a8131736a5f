//! What `picogent run` is asked: its task (the words, standard input for `-`, or input
//! piped in before the words), and `picogent -p` read as `picogent run -p`.

use anyhow::Context;

/// `picogent -p TASK …` (or `--print`), as `claude -p` is typed: `picogent run -p TASK …`.
pub(crate) fn print_is_run(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let first = args.get(1).and_then(|a| a.to_str());
    if first.is_some_and(|a| {
        a == "-p" || a == "--print" || (a.starts_with("-p") && !a.starts_with("--"))
    }) {
        args.insert(1, "run".into());
    }
    args
}

/// Standard input piped in (not a terminal) is read at most up to this.
const MAX_STDIN: u64 = 8 << 20;
/// How long piped standard input may take to end before the run goes on without it.
const STDIN_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The task: its words joined, or standard input for `-`; with words and standard
/// input piped in (not a terminal), the input first and the words after it, as pi
/// does (`git diff | picogent run -p "review this"`); never empty.
pub(crate) fn read_task(words: &[String]) -> anyhow::Result<String> {
    use std::io::{IsTerminal, Read};
    fn read_stdin() -> anyhow::Result<String> {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_STDIN + 1)
            .read_to_end(&mut bytes)
            .context("cannot read standard input")?;
        if bytes.len() as u64 > MAX_STDIN {
            anyhow::bail!(
                "standard input is over {} MiB: too long for a prompt",
                MAX_STDIN >> 20
            );
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
    let prompt = if words.len() == 1 && words[0] == "-" {
        read_stdin()?
    } else if !std::io::stdin().is_terminal() && stdin_piped() {
        // A pipe a parent left open and never writes to is not input: after a while
        // without its end, the run goes on without it (as `claude -p` does).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_stdin());
        });
        let input = match rx.recv_timeout(STDIN_WAIT) {
            Ok(read) => read?,
            Err(_) => {
                eprintln!(
                    "picogent: standard input did not end in {} s; going on without it (`< /dev/null` skips the wait)",
                    STDIN_WAIT.as_secs()
                );
                String::new()
            }
        };
        let task = words.join(" ");
        if input.trim().is_empty() {
            task
        } else {
            format!("{}\n\n{task}", input.trim_end())
        }
    } else {
        words.join(" ")
    };
    if prompt.trim().is_empty() {
        anyhow::bail!("the task is empty");
    }
    Ok(prompt)
}

/// Whether standard input is a pipe or a file (not a terminal, a socket, /dev/null).
fn stdin_piped() -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata("/proc/self/fd/0") else {
        return false;
    };
    let t = meta.file_type();
    t.is_fifo() || (t.is_file() && meta.len() > 0)
}
