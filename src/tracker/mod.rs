//! Agent mode, the tracker front door (docs/tracker-protocol.md): `daemon` starts it;
//! events arrive over `http` (callbacks to `/events`) or `ws` (an outbound WebSocket),
//! are made durable in the `journal` (through its `journal_writer` thread) and scheduled by the `router` onto the agent (a
//! chat message for a task whose run is going is passed into that run instead); the
//! outcome becomes reports (`delivery`) queued in the durable `outbox`, delivered by
//! the REST `client`; `registration` and heartbeats keep the tracker informed; `types`
//! are the protocol. `github` is the second tracker: GitHub's issues and pull
//! requests behind the same router, journal and outbox.

mod base;
mod batch;
mod client;
pub mod daemon;
mod dead_letter;
mod defuse;
mod delivery;
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
mod state_lock;
pub mod types;
mod worktree;
mod ws;

pub(crate) use client::{TrackerClient, TrackerError};
