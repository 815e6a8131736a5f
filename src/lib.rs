//! picogent: an agent daemon. The library holds everything but the command line:
//! configuration, the agent and its engines, providers, tools and their sandbox,
//! sessions, and the chat and tracker front doors; `main.rs` is the command-line edge
//! that drives it. ARCHITECTURE.md maps the modules and the data flows. Every `unsafe`
//! block lives in the sandbox crate (process control, the few plain system calls).
#![forbid(unsafe_code)]

pub mod acp;
pub mod agent;
pub mod chat;
pub mod config;
pub mod mcp;
/// Provider-neutral messages, serialised exactly as pi's session messages.
pub use picogent_protocol::message;
pub mod memory;
mod metrics;
mod net;
pub mod provider;
/// The sandbox crate: confinement, path checks, picogent's own git, every child's
/// supervision.
pub use picogent_sandbox as sandbox;
pub mod session;
mod store;
pub mod tools;
pub mod tracker;
pub mod util;
