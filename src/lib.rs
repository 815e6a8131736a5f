//! picogent: an agent daemon. The library holds the engine (configuration, the agent
//! loop, providers, tools); `main.rs` is the command-line edge that drives it.

pub mod agent;
pub mod config;
pub mod daemon;
pub mod message;
pub mod provider;
pub mod router;
pub mod tools;
pub mod tracker;
pub mod transport;
pub mod util;
