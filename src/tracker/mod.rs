//! Agent mode, the tracker front door (docs/tracker-protocol.md): `daemon` starts it;
//! events arrive over `http` (callbacks to `/events`) or `ws` (an outbound WebSocket),
//! are made durable in the `journal` and scheduled by the `router` onto the agent; the
//! outcome becomes reports (`delivery`) queued in the durable `outbox`, delivered by
//! the REST `client`; `registration` and heartbeats keep the tracker informed; `types`
//! are the protocol.

pub mod client;
pub mod daemon;
mod delivery;
pub mod http;
pub mod journal;
pub mod outbox;
pub mod registration;
pub mod router;
pub mod types;
pub(crate) mod worktree;
pub mod ws;

pub use client::{TrackerClient, TrackerError};
