//! A running command's output for the people watching it (the chat page's step view):
//! sent in pieces at most every [`EVERY`] or [`CHUNK`] bytes, cut only between UTF-8
//! characters, and no more than [`MAX_LIVE`] bytes per command, so a command printing
//! without end cannot flood a run's event queue. The model never sees these pieces; it
//! gets the command's result as before.

use std::sync::Arc;
use std::time::Duration;

/// Where the pieces go (the agent loop turns them into events for its call).
pub type OnOutput = Arc<dyn Fn(String) + Send + Sync>;

/// How often pending output is sent.
pub(super) const EVERY: Duration = Duration::from_millis(100);
/// Pending output this long is sent at once.
const CHUNK: usize = 16 * 1024;
/// Held output longer than this is let go whatever it starts with.
const HOLD_AT_MOST: usize = 4096;
/// The most of one command's output sent live.
const MAX_LIVE: usize = 256 * 1024;

pub(super) struct Live {
    on: Option<OnOutput>,
    pending: Vec<u8>,
    sent: usize,
    /// Output past `MAX_LIVE` arrived; `noted` once the watcher was told so.
    over: bool,
    noted: bool,
    /// Output that starts with this is held back until the caller knows what it is
    /// (the sandbox helper's own refusal is not the command's output).
    hold: Option<&'static [u8]>,
}

impl Live {
    pub(super) fn new(on: Option<OnOutput>) -> Live {
        Live {
            on,
            pending: Vec::new(),
            sent: 0,
            over: false,
            noted: false,
            hold: None,
        }
    }

    /// Holds back output that starts with `prefix` until [`Live::release`].
    pub(super) fn holding(mut self, prefix: &'static [u8]) -> Live {
        self.hold = Some(prefix);
        self
    }

    /// The command ended: what was held is sent, or dropped when `keep` is false.
    pub(super) fn release(&mut self, keep: bool) {
        self.hold = None;
        if keep {
            self.flush();
            // The output's very end: a character cut short there never completes.
            if let (Some(on), false) = (&self.on, self.pending.is_empty()) {
                self.sent += self.pending.len();
                on(String::from_utf8_lossy(&self.pending).into_owned());
            }
        }
        self.pending.clear();
    }

    /// Whether output is held back now (it starts with the held prefix, or may).
    fn held(&mut self) -> bool {
        let Some(prefix) = self.hold else {
            return false;
        };
        let n = self.pending.len().min(prefix.len());
        // A refusal is one short line: output longer than this is the command's.
        if self.pending.len() <= HOLD_AT_MOST && self.pending.get(..n) == prefix.get(..n) {
            return true;
        }
        self.hold = None;
        false
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        if self.on.is_none() || self.over {
            return;
        }
        let room = MAX_LIVE.saturating_sub(self.sent + self.pending.len());
        let take = bytes.len().min(room);
        self.pending
            .extend_from_slice(bytes.get(..take).unwrap_or_default());
        self.over = take < bytes.len();
        // Output that cannot be the held prefix ends the hold at once.
        if self.held() {
            return;
        }
        if self.pending.len() >= CHUNK {
            self.flush();
        }
    }

    /// Something is waiting to be sent.
    pub(super) fn waiting(&self) -> bool {
        self.on.is_some()
            && self.hold.is_none()
            && (!self.pending.is_empty() || (self.over && !self.noted))
    }

    /// Sends what is pending, keeping back only the start of a character cut in two.
    pub(super) fn flush(&mut self) {
        if self.on.is_none() || self.held() {
            return;
        }
        let Some(on) = &self.on else {
            return;
        };
        // An incomplete character at the end waits for its other bytes (past the limit
        // they never come: it is dropped); anything invalid before it is shown
        // replaced, as the result shows it.
        let whole = complete_up_to(&self.pending);
        let incomplete = whole < self.pending.len();
        if whole > 0 {
            let piece: Vec<u8> = self.pending.drain(..whole).collect();
            self.sent += piece.len();
            on(String::from_utf8_lossy(&piece).into_owned());
        }
        if incomplete && self.over {
            self.pending.clear();
        }
        if self.over && self.pending.is_empty() && !self.noted {
            self.noted = true;
            on(format!(
                "\n… (live output stops after {} KB; the rest comes with the result)\n",
                MAX_LIVE / 1024
            ));
        }
    }
}

/// Where `b` ends but for a character cut short at its end.
fn complete_up_to(b: &[u8]) -> usize {
    // A UTF-8 character is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=b.len().min(3) {
        let at = b.len() - back;
        let Some(&byte) = b.get(at) else { break };
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: its lead is further back
        }
        let needs = match byte {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needs > back { at } else { b.len() };
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn collecting() -> (OnOutput, Arc<Mutex<Vec<String>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let on: OnOutput = Arc::new(move |s| sink.lock().unwrap().push(s));
        (on, got)
    }

    #[test]
    fn a_character_cut_in_two_waits_for_its_other_half() {
        let (on, got) = collecting();
        let mut live = Live::new(Some(on));
        let e = "é".as_bytes();
        live.push(&[b'a', e[0]]);
        live.flush();
        live.push(&[e[1], b'b']);
        live.flush();
        assert_eq!(*got.lock().unwrap(), ["a", "éb"]);
        assert!(!live.waiting());
    }

    #[test]
    fn output_past_the_limit_is_not_sent_and_the_watcher_is_told_once() {
        let (on, got) = collecting();
        let mut live = Live::new(Some(on));
        for _ in 0..100 {
            live.push(&[b'x'; 8 * 1024]);
        }
        while live.waiting() {
            live.flush();
        }
        let got = got.lock().unwrap();
        let bytes: usize = got
            .iter()
            .filter(|s| s.starts_with('x'))
            .map(String::len)
            .sum();
        assert_eq!(bytes, MAX_LIVE);
        assert_eq!(
            got.iter()
                .filter(|s| s.contains("live output stops"))
                .count(),
            1
        );
    }

    #[test]
    fn output_that_may_be_the_helpers_refusal_waits_for_the_verdict() {
        let (on, got) = collecting();
        let mut live = Live::new(Some(on.clone())).holding(b"picogent sandbox: ");
        live.push(b"picogent sand");
        live.flush();
        live.push(b"box: cannot create the namespaces\n");
        live.flush();
        assert!(got.lock().unwrap().is_empty());
        live.release(false);
        assert!(got.lock().unwrap().is_empty(), "a refusal is dropped");

        let mut live = Live::new(Some(on)).holding(b"picogent sandbox: ");
        live.push(b"pico");
        live.flush();
        live.push(b"-de-gallo\n");
        live.flush();
        assert_eq!(
            *got.lock().unwrap(),
            ["pico-de-gallo\n"],
            "other output flows"
        );
    }

    #[test]
    fn only_a_cut_character_at_the_end_waits() {
        let e = "é".as_bytes();
        assert_eq!(complete_up_to(b"abc"), 3);
        assert_eq!(complete_up_to(&[b'a', e[0]]), 1);
        assert_eq!(complete_up_to(&[b'a', e[0], e[1]]), 3);
        // An invalid byte earlier does not stop the cut being found.
        assert_eq!(complete_up_to(&[0xFF, b'a', 0xE2, 0x82]), 2);
        assert_eq!(complete_up_to(&[0x80, 0x80, 0x80]), 3);
        assert_eq!(complete_up_to(&[]), 0);
    }

    #[test]
    fn without_a_watcher_nothing_is_kept() {
        let mut live = Live::new(None);
        live.push(b"hello");
        assert!(!live.waiting() && live.pending.is_empty());
    }
}
