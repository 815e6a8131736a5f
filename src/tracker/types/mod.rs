//! The trackers' protocol types (`picogent_protocol::tracker`), and the agent's
//! description built from its configuration.

pub use picogent_protocol::tracker::*;

use crate::config::{Config, Transport};

/// The agent's description at registration.
pub(crate) fn describe(config: &Config, callback_url: Option<String>) -> AgentDescription {
    AgentDescription {
        name: config.name.clone(),
        slug: config.slug.clone(),
        capabilities: config.capabilities.clone(),
        // A fleet says what the whole fleet takes, when it is bounded.
        max_concurrent_tasks: config
            .store
            .fleet_max_tasks
            .filter(|_| config.store.postgres.is_some())
            .unwrap_or(config.limits.max_concurrent_tasks),
        transport: match config.transport {
            Transport::Http => "http",
            Transport::Ws => "ws",
        },
        callback_url,
        version: env!("CARGO_PKG_VERSION"),
    }
}
