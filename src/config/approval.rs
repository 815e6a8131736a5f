//! `approval`: which kinds of tool call wait for a person's yes before they run.
//! `"never"` (the default), `"ask"` (every call), or per kind
//! (`{"execute": "ask", "edit": "ask"}`, the kinds not named never ask);
//! `PICOGENT_APPROVAL` says the same as `never`, `ask` or `execute=ask,edit=ask`.

use serde::Deserialize;

use super::types::Engine;
use super::ConfigError;
pub use picogent_protocol::agent::ToolKind;

/// Whether calls of a kind wait for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ask {
    #[default]
    Never,
    Ask,
}

/// The approval policy: one answer per tool kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Approval {
    asks: [Ask; ToolKind::ALL.len()],
}

/// `approval` as written in agent.json.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum FileApproval {
    All(Ask),
    PerKind(PerKind),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PerKind {
    read: Option<Ask>,
    search: Option<Ask>,
    edit: Option<Ask>,
    execute: Option<Ask>,
    mcp: Option<Ask>,
}

fn slot(kind: ToolKind) -> usize {
    ToolKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl Approval {
    /// Every kind the same.
    pub fn all(ask: Ask) -> Approval {
        Approval {
            asks: [ask; ToolKind::ALL.len()],
        }
    }

    /// Whether a call of `kind` waits for a person.
    pub fn asks(&self, kind: ToolKind) -> bool {
        self.asks[slot(kind)] == Ask::Ask
    }

    /// Whether any kind asks (then someone must be there to answer).
    pub fn asks_any(&self) -> bool {
        self.asks.contains(&Ask::Ask)
    }

    /// The kinds that ask, by name ("execute, edit"), or "nothing".
    pub fn describe(&self) -> String {
        let asking: Vec<&str> = ToolKind::ALL
            .iter()
            .filter(|k| self.asks(**k))
            .map(|k| k.as_str())
            .collect();
        if asking.is_empty() {
            "nothing".into()
        } else {
            asking.join(", ")
        }
    }

    pub(super) fn from_file(f: &FileApproval) -> Approval {
        match f {
            FileApproval::All(a) => Approval::all(*a),
            FileApproval::PerKind(p) => {
                let mut out = Approval::default();
                for (kind, ask) in [
                    (ToolKind::Read, p.read),
                    (ToolKind::Search, p.search),
                    (ToolKind::Edit, p.edit),
                    (ToolKind::Execute, p.execute),
                    (ToolKind::Mcp, p.mcp),
                ] {
                    out.asks[slot(kind)] = ask.unwrap_or_default();
                }
                out
            }
        }
    }

    /// `PICOGENT_APPROVAL`: `never`, `ask`, or `kind=ask|never` pairs split by commas.
    pub(super) fn from_env(value: &str) -> Result<Approval, ConfigError> {
        let bad = |message: String| ConfigError::Env {
            var: "PICOGENT_APPROVAL".into(),
            message,
        };
        let word = |w: &str| match w.trim() {
            "never" => Ok(Ask::Never),
            "ask" => Ok(Ask::Ask),
            other => Err(bad(format!("{other:?} is neither `ask` nor `never`"))),
        };
        if !value.contains('=') {
            return Ok(Approval::all(word(value)?));
        }
        let mut out = Approval::default();
        for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((kind, ask)) = pair.split_once('=') else {
                return Err(bad(format!("{pair:?} is not kind=ask or kind=never")));
            };
            let kind = ToolKind::ALL
                .into_iter()
                .find(|k| k.as_str() == kind.trim())
                .ok_or_else(|| {
                    bad(format!(
                        "no tool kind {:?} (read, search, edit, execute, mcp)",
                        kind.trim()
                    ))
                })?;
            out.asks[slot(kind)] = word(ask)?;
        }
        Ok(out)
    }
}

impl super::load::Sources<'_> {
    /// `approval` (PICOGENT_APPROVAL over the file's): refused where no person could
    /// answer (agent mode) or the engine runs its own tools (claude-code).
    pub(super) fn approval(
        &self,
        agent_mode: bool,
        engine: Engine,
    ) -> Result<super::approval::Approval, ConfigError> {
        let (approval, from_env) = match self.env.get("PICOGENT_APPROVAL") {
            Some(v) => (Approval::from_env(v)?, true),
            None => (
                self.file
                    .approval
                    .as_ref()
                    .map(Approval::from_file)
                    .unwrap_or_default(),
                false,
            ),
        };
        let refuse = |message: &str| {
            if from_env {
                ConfigError::Env {
                    var: "PICOGENT_APPROVAL".into(),
                    message: message.into(),
                }
            } else {
                self.field_error("approval", message.into())
            }
        };
        if approval.asks_any() && agent_mode {
            return Err(refuse("agent mode has no person to ask: approvals are for the chat, `picogent run` on a terminal and editors (`picogent acp`)"));
        }
        if approval.asks_any() && engine == Engine::ClaudeCode {
            return Err(refuse("the claude-code engine runs its own tools: use Claude Code's own permission settings"));
        }
        Ok(approval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_says_all_or_per_kind_and_names_what_is_wrong() {
        assert!(Approval::from_env("ask").is_ok_and(|a| a.asks(ToolKind::Read)));
        let a = Approval::from_env("execute=ask, edit=ask").unwrap_or_default();
        assert!(a.asks(ToolKind::Execute) && a.asks(ToolKind::Edit));
        assert!(!a.asks(ToolKind::Read) && !a.asks(ToolKind::Mcp));
        assert_eq!(a.describe(), "edit, execute");
        for bad in ["sometimes", "bash=ask", "edit=maybe", "edit"] {
            let e = Approval::from_env(bad).err().map(|e| e.to_string());
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.contains("PICOGENT_APPROVAL")),
                "{bad}: {e:?}"
            );
        }
    }
}
