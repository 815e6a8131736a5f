//! Keeping a long session's memory flat: a writer drops the messages before the newest
//! compaction's first kept entry (they are out of the model's context) and remembers
//! only where each is in the file, to read it back when a rollback or a branch reaches
//! it. Readers (exports, branch views) load the whole file themselves.

use super::file::parse_entry;
use super::{Body, Known, Session};
use crate::message::Message;

impl Session {
    /// Drops from memory the messages of entries older (in file order) than `id`, which
    /// a compaction kept as its first entry: the model's context no longer needs them,
    /// and readers (exports, branch views) load the file themselves.
    pub(super) fn evict_before(&mut self, id: &str) {
        let Some(&end) = self.index.get(id) else {
            return;
        };
        for i in self.evicted_to..end {
            let (Some(e), Some(&(offset, len))) = (self.entries.get_mut(i), self.spans.get(i))
            else {
                break;
            };
            if matches!(e.body, Body::Known(Known::Message { .. })) {
                e.body = Body::Evicted { offset, len };
            }
        }
        self.evicted_to = self.evicted_to.max(end);
    }

    /// An evicted message, read back from the file; `None` (logged) if that fails.
    pub(super) fn read_back(&self, offset: u64, len: usize) -> Option<Message> {
        use std::os::unix::fs::FileExt;
        let written = self
            .writer
            .as_ref()
            .is_none_or(|w| w.written_up_to(offset + len as u64));
        let mut buf = vec![0u8; len];
        let read = match written {
            true => self.file.read_exact_at(&mut buf, offset),
            false => Err(std::io::Error::other("the entry was never written")),
        };
        let entry = read
            .ok()
            .and_then(|()| parse_entry(&String::from_utf8_lossy(&buf)));
        match entry.map(|e| e.body) {
            Some(Body::Known(Known::Message { message })) => Some(message),
            _ => {
                tracing::warn!(
                    "session file {}: cannot read back the entry at byte {offset}",
                    self.path.display()
                );
                None
            }
        }
    }
}
