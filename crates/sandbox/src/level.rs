//! What the sandbox tells about its level: whether it is known, what it is (waiting
//! for the probe, or without waiting), why commands are refused for now, and saying it.

use super::confine::{self, Confinement, Namespaces};
use super::{probe, Sandbox};

impl Sandbox {
    /// Says the level commands run at and why, once it is known (see
    /// [`Confinement::say_level`]); off is said where the sandbox is made.
    pub fn say_level(&self) {
        let files = ["unrestricted", "allowed paths only"][usize::from(self.is_restricted())];
        if let Some(c) = self.confinement.as_ref().filter(|c| c.settled()) {
            c.say_level(files);
        }
    }

    /// Whether the level commands run at is known without waiting.
    pub fn level_settled(&self) -> bool {
        self.confinement.as_ref().is_none_or(Confinement::settled)
    }

    /// Whether commands run in their own namespaces (waits for the probe).
    pub fn namespaces(&self) -> bool {
        self.confinement
            .as_ref()
            .is_some_and(Confinement::namespaces)
    }

    /// A command ran in namespaces the helper built: they work here, whatever a probe
    /// would have said.
    pub fn namespaces_proven(&self) {
        if matches!(
            self.confinement.as_ref().map(|c| &c.choice),
            Some(Namespaces::Probed(_))
        ) {
            let deny = self.confinement.as_ref().is_some_and(|c| c.deny_network);
            probe::proven(deny);
        }
    }

    /// Waits (off the runtime's threads) until the sandbox level is known.
    pub async fn settle(&self) {
        if let Some(c) = &self.confinement {
            c.settle().await;
        }
    }

    /// The level commands run at (`off` without kernel confinement).
    pub fn level(&self) -> confine::LevelInForce {
        self.confinement
            .as_ref()
            .map_or(confine::LevelInForce::Off, Confinement::level)
    }

    /// The level commands run at, without waiting: after `settle`, the answer; while a
    /// passing refusal keeps it unsettled, namespaces (the level is never lowered for it).
    pub fn level_now(&self) -> confine::LevelInForce {
        match &self.confinement {
            None => confine::LevelInForce::Off,
            Some(c) if c.namespaces_now() => confine::LevelInForce::Namespaces,
            Some(_) => confine::LevelInForce::Landlock,
        }
    }

    /// Whether commands run in their own namespaces, without waiting (see `level_now`).
    pub fn namespaces_now(&self) -> bool {
        self.level_now() == confine::LevelInForce::Namespaces
    }

    /// Why commands are refused for now, when the probe lately found the namespaces
    /// impossible for the moment (for health to say).
    pub fn refusing_lately(&self) -> Option<String> {
        let c = self.confinement.as_ref()?;
        matches!(c.choice, Namespaces::Probed(_))
            .then(|| probe::refusing_lately(c.deny_network))
            .flatten()
    }
}
