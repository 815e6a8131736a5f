//! picogent: an agent daemon. The library holds the engine (configuration, the agent
//! loop, providers, tools); `main.rs` is the command-line edge that drives it.

pub mod agent;
pub mod chat;
pub mod config;
pub mod message;
pub mod net;
pub mod provider;
pub mod session;
pub mod tools;
pub mod tracker;
pub mod util;
