//! Fault points: named instants where a crash test kills picogent exactly, rather
//! than by timing luck. `PICOGENT_FAULT=<name>` makes the process kill itself with
//! SIGKILL when it reaches that point; unset (always, outside tests), nothing happens.

use std::sync::OnceLock;

/// The fault point this process dies at, read once.
fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            std::env::var("PICOGENT_FAULT")
                .ok()
                .filter(|v| !v.is_empty())
        })
        .as_deref()
}

/// Dies here (SIGKILL, as `kill -9` would) when this point is the one armed.
pub(crate) fn point(name: &str) {
    if armed() == Some(name) {
        tracing::warn!(point = name, "fault point reached: killing picogent");
        crate::sandbox::sys::kill_self();
    }
}
