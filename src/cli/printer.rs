//! How `picogent run` shows a run: the answer on stdout, steps and notices on stderr,
//! or every event as a JSON line (`--json`).

use std::io::Write;

use picogent::agent::{AgentEvent, Outcome};

/// Prints run events for a person (or as JSON lines with --json).
pub(crate) struct Printer {
    json: bool,
    /// The last thing printed to stdout did not end with a newline.
    mid_line: bool,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Printer {
            json,
            mid_line: false,
        }
    }

    fn line_break(&mut self, out: &mut impl Write) {
        if self.mid_line {
            let _ = writeln!(out);
            self.mid_line = false;
        }
    }

    pub(crate) fn print(&mut self, ev: &AgentEvent) {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        if self.json {
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
