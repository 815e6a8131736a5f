//! How `picogent run` shows a run: the answer on stdout, steps and notices on stderr,
//! every event as a JSON line (`--json`), or only the final answer (`--print`, as
//! `claude -p` and `pi -p`: the run's final answer, once it ended).

use std::io::Write;

use picogent::agent::{AgentEvent, Outcome};

/// How a run is shown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    /// The answer as it streams, steps and notices on stderr.
    Person,
    /// Every event as a JSON line.
    Json,
    /// Only the final answer, once the run ended; failures on stderr.
    Print,
}

/// Prints run events for a person (or as JSON lines with --json).
pub(crate) struct Printer {
    shown: Shown,
    /// The last thing printed to stdout did not end with a newline.
    mid_line: bool,
}

impl Printer {
    pub(crate) fn new(shown: Shown) -> Self {
        Printer {
            shown,
            mid_line: false,
        }
    }

    /// `--print`: nothing while the run goes; once it completed, its final answer (the
    /// engine's own, so narration, a retried attempt's text or a nudged turn's never
    /// shows); a failure on stderr.
    fn print_mode(&mut self, ev: &AgentEvent) {
        match ev {
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                ..
            } => say!("[retry {attempt} in {delay_ms} ms: {reason}]"),
            AgentEvent::Finished {
                outcome: Outcome::Completed { text, .. },
            } => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
                let _ = out.flush();
            }
            AgentEvent::Finished {
                outcome: Outcome::Failed { error, .. },
            } => say!("error: {error}"),
            AgentEvent::Finished {
                outcome: Outcome::Cancelled { .. },
            } => say!("cancelled"),
            _ => {}
        }
    }

    fn line_break(&mut self, out: &mut impl Write) {
        if self.mid_line {
            let _ = writeln!(out);
            self.mid_line = false;
        }
    }

    pub(crate) fn print(&mut self, ev: &AgentEvent) {
        if self.shown == Shown::Print {
            return self.print_mode(ev);
        }
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        if self.shown == Shown::Json {
            if let Ok(line) = serde_json::to_string(ev) {
                let _ = writeln!(out, "{line}");
            }
            return;
        }
        match ev {
            AgentEvent::TextDelta { text } => {
                let _ = write!(out, "{text}");
                self.mid_line = !text.ends_with('\n');
            }
            // Steps go to stderr: stdout carries only the answer.
            AgentEvent::ToolCall { summary, .. } => {
                self.line_break(&mut out);
                say!("→ {summary}");
            }
            AgentEvent::ToolResult {
                is_error: true,
                output,
                ..
            } => {
                self.line_break(&mut out);
                let first = output
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                say!("  ✗ {}", picogent::util::one_line(first, 160));
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                ..
            } => {
                self.line_break(&mut out);
                say!("[retry {attempt} in {delay_ms} ms: {reason}]");
            }
            AgentEvent::Compacted { tokens_before, .. } => {
                say!("[compacted the conversation at about {tokens_before} tokens]");
            }
            AgentEvent::Notice { message } => {
                self.line_break(&mut out);
                say!("[{message}]");
            }
            AgentEvent::Finished { outcome } => {
                self.line_break(&mut out);
                match outcome {
                    Outcome::Completed { steps, usage, .. } => say!(
                        "done: {steps} steps, {} input ({} read from cache, {} written to cache) / {} output tokens",
                        usage.input + usage.cache_read + usage.cache_write,
                        usage.cache_read,
                        usage.cache_write,
                        usage.output
                    ),
                    Outcome::Failed { error, .. } => say!("error: {error}"),
                    Outcome::Cancelled { .. } => say!("cancelled"),
                }
            }
            _ => {}
        }
        let _ = out.flush();
    }
}
