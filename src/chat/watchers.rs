//! Which session each connection shows (the one it last asked the history of, or sent
//! a prompt in), so a request started in one tab appears in every other tab showing
//! the same session: they are told it started and follow it by its `runId`, and the
//! tabs no longer drift apart.

use std::collections::HashMap;
use std::sync::Mutex;

use super::protocol::{Outgoing, RunningRequest, ServerFrame};
use super::runs::Outbound;

#[derive(Default)]
pub(super) struct Watchers {
    shown: Mutex<HashMap<u64, (String, Outbound)>>,
}

impl Watchers {
    /// Connection `conn` shows `session` now.
    pub(super) fn watch(&self, conn: u64, session: &str, tx: &Outbound) {
        if let Ok(mut m) = self.shown.lock() {
            m.insert(conn, (session.to_string(), tx.clone()));
        }
    }

    /// Connection `conn` is gone.
    pub(super) fn leave(&self, conn: u64) {
        if let Ok(mut m) = self.shown.lock() {
            m.remove(&conn);
        }
    }

    /// A `keepAlive` request started on connection `from`: the others showing its
    /// session are told, so they can follow it.
    pub(super) fn started(&self, from: u64, session: &str, request: RunningRequest) {
        let others: Vec<Outbound> = match self.shown.lock() {
            Ok(m) => m
                .iter()
                .filter(|(c, (s, _))| **c != from && s == session)
                .map(|(_, (_, tx))| tx.clone())
                .collect(),
            Err(_) => return,
        };
        if others.is_empty() {
            return;
        }
        let frame = Outgoing::new(
            None,
            Some(session.to_string()),
            ServerFrame::Started { content: request },
        );
        for tx in others {
            tx.send(&frame);
        }
    }
}
