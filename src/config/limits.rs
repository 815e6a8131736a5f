//! The limits of a load: how many tasks at once, how many steps, the timeouts, and
//! the sizes of the model's context and answer, each checked against its bounds.

use super::load::Sources;
use super::types::ProviderKind;
use super::ConfigError;

/// The limits of a run and of the daemon.
pub(super) struct Limits {
    pub(super) max_concurrent_tasks: usize,
    pub(super) heartbeat_interval_sec: u64,
    pub(super) max_steps: u32,
    pub(super) step_timeout_sec: u64,
    pub(super) command_timeout_max_sec: u64,
    pub(super) shutdown_grace_sec: u64,
    pub(super) git_timeout_sec: u64,
    /// In bytes, from `max_saved_output_mb`.
    pub(super) max_saved_output: u64,
    pub(super) context_window: u64,
    pub(super) max_tokens: u32,
}

impl Limits {
    /// The limits as the configuration keeps them (durations, not seconds).
    pub(super) fn resolved(&self) -> super::Limits {
        use std::time::Duration;
        super::Limits {
            max_concurrent_tasks: self.max_concurrent_tasks,
            heartbeat_interval_sec: self.heartbeat_interval_sec,
            max_steps: self.max_steps,
            step_timeout: Duration::from_secs(self.step_timeout_sec),
            command_timeout_max: Duration::from_secs(self.command_timeout_max_sec),
            max_saved_output: self.max_saved_output,
            context_window: self.context_window,
            max_tokens: self.max_tokens,
            shutdown_grace: Duration::from_secs(self.shutdown_grace_sec),
        }
    }
}

impl Sources<'_> {
    /// The limits from the file, checked; the context window's default is the provider's.
    pub(super) fn limits(&self, provider: ProviderKind) -> Result<Limits, ConfigError> {
        let f = &self.file;
        // A year at most: a duration past that is a mistake, and one large enough
        // overflows the clock's arithmetic (a deadline `now + grace`).
        const MAX_SECS: u64 = 365 * 86_400;
        let at_most_a_year = |field: &str, v: u64| -> Result<u64, ConfigError> {
            if v > MAX_SECS {
                Err(self.field_error(field, format!("must be at most {MAX_SECS} (a year)")))
            } else {
                Ok(v)
            }
        };
        let positive = |field: &str, v: u64| -> Result<u64, ConfigError> {
            if v == 0 {
                Err(self.field_error(field, "must be greater than 0".into()))
            } else {
                Ok(v)
            }
        };
        let seconds =
            |field: &str, v: u64| positive(field, v).and_then(|v| at_most_a_year(field, v));
        let step_timeout_sec = seconds("step_timeout_sec", f.step_timeout_sec.unwrap_or(120))?;
        let default_window = match provider {
            ProviderKind::Anthropic => 200_000,
            ProviderKind::Openai => 128_000,
            ProviderKind::Ollama => 32_768,
        };
        let limits = Limits {
            max_concurrent_tasks: positive(
                "max_concurrent_tasks",
                f.max_concurrent_tasks.unwrap_or(2) as u64,
            )? as usize,
            heartbeat_interval_sec: seconds(
                "heartbeat_interval_sec",
                f.heartbeat_interval_sec.unwrap_or(30),
            )?,
            max_steps: positive("max_steps", u64::from(f.max_steps.unwrap_or(50)))? as u32,
            step_timeout_sec,
            command_timeout_max_sec: seconds(
                "command_timeout_max_sec",
                f.command_timeout_max_sec.unwrap_or(step_timeout_sec),
            )?,
            shutdown_grace_sec: at_most_a_year(
                "shutdown_grace_sec",
                f.shutdown_grace_sec.unwrap_or(30),
            )?,
            // 0 was always taken as 1.
            git_timeout_sec: at_most_a_year("git_timeout_sec", f.git_timeout_sec.unwrap_or(300))?
                .max(1),
            max_saved_output: f
                .max_saved_output_mb
                .unwrap_or(64)
                .checked_mul(1 << 20)
                .ok_or_else(|| self.field_error("max_saved_output_mb", "is too large".into()))?,
            context_window: positive("context_window", f.context_window.unwrap_or(default_window))?,
            max_tokens: positive("max_tokens", u64::from(f.max_tokens.unwrap_or(8192)))? as u32,
        };
        if u64::from(limits.max_tokens) * 2 > limits.context_window {
            return Err(self.field_error(
                "max_tokens",
                format!(
                    "{} leaves too little of context_window {} for the conversation",
                    limits.max_tokens, limits.context_window
                ),
            ));
        }
        Ok(limits)
    }
}
