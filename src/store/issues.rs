//! GitHub mode's record of one issue (`Entry`), as both stores keep it: the book file
//! on one machine (`state/github.json`), a `github_issues` row in a fleet's store.

use serde::{Deserialize, Serialize};

pub(crate) use picogent_protocol::tracker::By;

/// One issue's entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// It is a task now: later comments are chat, and later triggers do nothing.
    pub(crate) active: bool,
    /// How many times it became a task.
    pub(crate) generation: u32,
    /// The pull request its branch became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pull: Option<u64>,
    /// What made it a task this time: it ends when that no longer holds.
    #[serde(default)]
    pub(crate) by: By,
    /// Its progress comment says picogent is working: a task let go without a run to
    /// report (its issue closed while picogent was down) must still say it stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) working: bool,
    /// Why GitHub would not open the pull request of its branch (the progress comment
    /// says so, not "finished"), until one is opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unproposed: Option<String>,
}
