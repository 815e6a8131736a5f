//! A request's replay log: the frames after any `seq` a client saw, so a client that
//! connects late, reconnects or falls behind gets the whole answer. Streamed text (and
//! thinking) comes as thousands of small pieces; the log keeps consecutive pieces as one
//! string with where each piece ends, so a long answer costs its own size rather than a
//! frame's overhead per piece, and a client catching up gets them joined into a few
//! large frames (a lagging reader is sent less, not dropped). Only past `MAX_LOG_BYTES`
//! are the oldest frames let go, and a replay from before them starts with a `gap`
//! frame saying so. A running command's live output (`tool_progress`) is kept only
//! until its step's `tool_output` arrives, which carries the output itself.

use std::collections::VecDeque;

use axum::extract::ws::Utf8Bytes;

use super::protocol::ServerFrame;

/// Entries kept per request (a joined run of pieces is one).
const MAX_ENTRIES: usize = 20_000;
/// Bytes kept per request, whatever their number.
const MAX_LOG_BYTES: usize = 16 << 20;
/// Pieces are joined until the text reaches this size, then a new entry starts.
const JOIN_UP_TO: usize = 32 << 10;
/// What a frame's JSON adds to its text, roughly (ids, seq, session).
const FRAME_OVERHEAD: usize = 160;

/// One frame as a connection is sent it.
#[derive(Clone)]
pub(super) struct Logged {
    pub(super) seq: u64,
    /// The request's `done`, its last frame.
    pub(super) last: bool,
    pub(super) text: Utf8Bytes,
}

enum Entry {
    Frame(Logged),
    /// A piece of tool call `call`'s live output, let go once the call has ended.
    Progress {
        call: String,
        frame: Logged,
    },
    /// Text (or thinking) pieces `first`, `first + 1`, ... as one string; `ends[i]` is
    /// where piece `first + i` ends in it.
    Pieces {
        thinking: bool,
        first: u64,
        content: String,
        ends: Vec<u32>,
    },
}

impl Entry {
    fn last_seq(&self) -> u64 {
        match self {
            Entry::Frame(f) | Entry::Progress { frame: f, .. } => f.seq,
            Entry::Pieces { first, ends, .. } => first + ends.len().saturating_sub(1) as u64,
        }
    }

    fn size(&self) -> usize {
        match self {
            Entry::Frame(f) => f.text.len(),
            Entry::Progress { call, frame } => call.len() + frame.text.len(),
            Entry::Pieces { content, ends, .. } => content.len() + 4 * ends.len() + FRAME_OVERHEAD,
        }
    }
}

#[derive(Default)]
pub(super) struct Replay {
    seq: u64,
    entries: VecDeque<Entry>,
    bytes: usize,
    /// The last `seq` let go (0: none).
    dropped_through: u64,
}

impl Replay {
    /// The `seq` of the next frame.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The last `seq` so far.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Keeps frame `seq`: `text` is how the live stream sent it.
    pub(super) fn keep(&mut self, seq: u64, frame: &ServerFrame, text: Utf8Bytes) {
        let piece = match frame {
            ServerFrame::Text { content } => Some((false, content)),
            ServerFrame::Thinking { content } => Some((true, content)),
            _ => None,
        };
        let entry = match piece {
            Some((thinking, piece)) => {
                if self.join(seq, thinking, piece) {
                    self.trim();
                    return;
                }
                Entry::Pieces {
                    thinking,
                    first: seq,
                    content: piece.clone(),
                    ends: vec![u32::try_from(piece.len()).unwrap_or(u32::MAX)],
                }
            }
            None => {
                let logged = Logged {
                    seq,
                    last: frame.is_done(),
                    text,
                };
                match frame {
                    ServerFrame::ToolProgress { call_id, .. } => Entry::Progress {
                        call: call_id.clone(),
                        frame: logged,
                    },
                    ServerFrame::ToolOutput { call_id, .. } => {
                        self.forget_progress(call_id);
                        Entry::Frame(logged)
                    }
                    _ => Entry::Frame(logged),
                }
            }
        };
        self.bytes += entry.size();
        self.entries.push_back(entry);
        self.trim();
    }

    /// Adds a piece to the last entry when it continues it; false when it does not.
    fn join(&mut self, seq: u64, thinking: bool, piece: &str) -> bool {
        let Some(Entry::Pieces {
            thinking: t,
            first,
            content,
            ends,
        }) = self.entries.back_mut()
        else {
            return false;
        };
        let follows = *first + ends.len() as u64 == seq;
        if *t != thinking || !follows || content.len() + piece.len() > JOIN_UP_TO {
            return false;
        }
        content.push_str(piece);
        ends.push(u32::try_from(content.len()).unwrap_or(u32::MAX));
        self.bytes += piece.len() + 4;
        true
    }

    /// Lets go of call `call`'s live output: its result is in the log now.
    fn forget_progress(&mut self, call: &str) {
        let mut freed = 0;
        self.entries.retain(|e| match e {
            Entry::Progress { call: c, .. } if c == call => {
                freed += e.size();
                false
            }
            _ => true,
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn trim(&mut self) {
        while self.entries.len() > 1
            && (self.entries.len() > MAX_ENTRIES || self.bytes > MAX_LOG_BYTES)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes = self.bytes.saturating_sub(old.size());
                self.dropped_through = old.last_seq();
            }
        }
    }

    /// The frames after `after`, pieces joined; `encode` writes a frame out with its
    /// `seq`. When some of them are no longer kept, a `gap` frame saying so comes first.
    pub(super) fn since(
        &self,
        after: u64,
        encode: impl Fn(u64, ServerFrame) -> Utf8Bytes,
    ) -> Vec<Logged> {
        let mut out = Vec::new();
        if after < self.dropped_through {
            let missing = self.dropped_through - after;
            let content = format!(
                "{missing} earlier frame(s) of this answer are no longer kept for replay; the whole answer is in the session's history"
            );
            // Numbered as the last frame it stands for: a client takes it, and what
            // follows, as new.
            let seq = self.dropped_through;
            out.push(Logged {
                seq,
                last: false,
                text: encode(seq, ServerFrame::Gap { content }),
            });
        }
        for e in &self.entries {
            let last = e.last_seq();
            if last <= after {
                continue;
            }
            match e {
                Entry::Frame(f) | Entry::Progress { frame: f, .. } => out.push(f.clone()),
                Entry::Pieces {
                    thinking,
                    first,
                    content,
                    ends,
                } => {
                    // Where the pieces the client has not seen start.
                    let seen = after.saturating_sub(first.saturating_sub(1));
                    let from = usize::try_from(seen)
                        .ok()
                        .and_then(|n| n.checked_sub(1))
                        .and_then(|i| ends.get(i))
                        .map_or(0, |e| *e as usize);
                    let rest = content.get(from..).unwrap_or(content).to_string();
                    let frame = if *thinking {
                        ServerFrame::Thinking { content: rest }
                    } else {
                        ServerFrame::Text { content: rest }
                    };
                    out.push(Logged {
                        seq: last,
                        last: false,
                        text: encode(last, frame),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay_of(pieces: &[&str]) -> Replay {
        let mut r = Replay::default();
        for p in pieces {
            let seq = r.next_seq();
            let frame = ServerFrame::Text {
                content: p.to_string(),
            };
            r.keep(seq, &frame, Utf8Bytes::from(p.to_string()));
        }
        let seq = r.next_seq();
        r.keep(seq, &ServerFrame::done(), Utf8Bytes::from_static("done"));
        r
    }

    fn texts(r: &Replay, after: u64) -> Vec<(u64, String)> {
        r.since(after, |seq, f| match f {
            ServerFrame::Text { content } => Utf8Bytes::from(format!("{seq}:{content}")),
            other => Utf8Bytes::from(format!("{seq}:{other:?}")),
        })
        .into_iter()
        .map(|l| (l.seq, l.text.as_str().to_string()))
        .collect()
    }

    #[test]
    fn pieces_are_joined_and_a_replay_starts_after_the_last_seen_piece() {
        let r = replay_of(&["Hel", "lo, ", "wörld", "!"]);
        assert_eq!(
            texts(&r, 0),
            vec![(4, "4:Hello, wörld!".into()), (5, "done".into())]
        );
        assert_eq!(
            texts(&r, 2),
            vec![(4, "4:wörld!".into()), (5, "done".into())]
        );
        assert_eq!(texts(&r, 4), vec![(5, "done".into())]);
        assert!(texts(&r, 5).is_empty());
    }

    #[test]
    fn a_long_answer_is_kept_whole_and_a_replay_past_what_was_let_go_says_so() {
        // 1 MB in 3-byte pieces: 350,000 frames, far past the entry limit as frames.
        let piece = "ab ";
        let pieces = vec![piece; 350_000];
        let r = replay_of(&pieces);
        let all: String = texts(&r, 0)
            .into_iter()
            .filter(|(_, t)| t != "done")
            .map(|(_, t)| t.split_once(':').map(|x| x.1.to_string()).unwrap())
            .collect();
        assert_eq!(all.len(), 3 * 350_000);
        // Past the byte limit, the oldest go and a replay from before them says so.
        let mut big = Replay::default();
        let chunk = "x".repeat(JOIN_UP_TO);
        for _ in 0..(MAX_LOG_BYTES / JOIN_UP_TO + 8) {
            let seq = big.next_seq();
            // A tool line between pieces, so each chunk is its own entry.
            big.keep(
                seq,
                &ServerFrame::Text {
                    content: chunk.clone(),
                },
                Utf8Bytes::from_static(""),
            );
        }
        let replay = texts(&big, 0);
        assert!(
            replay[0].1.contains("no longer kept"),
            "{:?}",
            &replay[0].1[..80]
        );
        assert!(big.bytes <= MAX_LOG_BYTES);
    }

    #[test]
    fn a_commands_live_output_is_replayed_only_until_its_result() {
        let mut r = Replay::default();
        let keep = |r: &mut Replay, f: ServerFrame| {
            let seq = r.next_seq();
            r.keep(seq, &f, Utf8Bytes::from(format!("{f:?}")));
        };
        let progress = |call: &str, s: &str| ServerFrame::ToolProgress {
            content: s.into(),
            call_id: call.into(),
        };
        for i in 0..100 {
            keep(&mut r, progress("c1", &format!("line {i}\n")));
        }
        keep(&mut r, progress("c2", "another call"));
        // While c1 runs, a client that comes in sees its output so far.
        assert_eq!(r.since(0, |_, _| Utf8Bytes::from_static("")).len(), 101);
        let before = r.bytes;
        keep(
            &mut r,
            crate::chat::runs::tool_output("c1".into(), "bash".into(), false, "all", None, None),
        );
        // Its result replaces it; the other call's output stays.
        let seqs: Vec<u64> = r
            .since(0, |_, _| Utf8Bytes::from_static(""))
            .iter()
            .map(|l| l.seq)
            .collect();
        assert_eq!(seqs, [101, 102]);
        assert!(r.bytes < before / 10, "{} of {before} bytes", r.bytes);
        // A replay from the middle of what was let go has no gap: the result is there.
        assert_eq!(r.since(50, |_, _| Utf8Bytes::from_static("")).len(), 2);
    }
}
