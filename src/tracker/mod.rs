//! Agent mode, the tracker front door (docs/tracker-protocol.md): `daemon` runs it for
//! every tracker kind, each behind the one `seam` (`Tracker`: reports and hooks) and a
//! door of its own (`board`, `github`). Team Board's events arrive over `http`
//! (callbacks to `/events`) or `ws` (an outbound WebSocket),
//! are made durable in the `journal` (through its `journal_writer` thread) and scheduled by the `router` onto the agent (a
//! chat message for a task whose run is going is passed into that run instead); the
//! outcome becomes reports (`delivery`) queued in the durable `outbox`, delivered by
//! the REST `client`; `registration` and heartbeats keep the tracker informed; `types`
//! are the protocol. `github` is the second tracker: GitHub's issues and pull
//! requests behind the same router, journal and outbox.

mod base;
mod board;
mod client;
pub mod daemon;
mod dead_letter;
mod defuse;
mod delivery;
mod door;
mod fleet_ws;
mod github;
mod health;
mod http;
mod journal;
mod journal_writer;
mod link;
mod outbox;
mod registration;
mod room;
mod router;
mod seam;
mod state_lock;
pub mod types;
mod worktree;
mod ws;

pub(crate) use client::{TrackerClient, TrackerError};
