//! The Team Board tracker, from the agent's side (docs/tracker-protocol.md): protocol
//! types, the REST client, registration and heartbeats, the durable event journal and
//! the durable outbox of reports.

pub mod client;
pub mod journal;
pub mod outbox;
pub mod registration;
pub mod types;

pub use client::{TrackerClient, TrackerError};
