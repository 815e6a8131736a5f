//! `model_change` entries, written as pi writes them when a session goes on with
//! another model than the one it last used.

use super::{Body, Known, Session, SessionError};
use crate::message::Message;

impl Session {
    /// The provider and model the session last used on the way to the leaf: its last
    /// `model_change`, or else (a file without one) its last assistant turn's.
    fn last_model(&self) -> Option<(String, String, bool)> {
        let path = self.path_to_leaf();
        let change = path.iter().rev().find_map(|e| match &e.body {
            Body::Known(Known::ModelChange { provider, model_id }) => {
                Some((provider.clone(), model_id.clone(), true))
            }
            _ => None,
        });
        change.or_else(|| {
            path.iter().rev().find_map(|e| match &e.body {
                Body::Known(Known::Message {
                    message: Message::Assistant(a),
                }) if !a.model.is_empty() => Some((a.provider.clone(), a.model.clone(), false)),
                _ => None,
            })
        })
    }

    /// Appends a `model_change`, as pi does, when a session starts and when it goes on
    /// with another provider or model than before. Without an earlier `model_change`
    /// an assistant turn tells, and it names the model the API answered with, which may
    /// be the dated form of the configured name.
    pub(crate) fn note_model(&mut self, provider: &str, model: &str) -> Result<(), SessionError> {
        let changed = match self.last_model() {
            None => true,
            Some((p, m, true)) => p != provider || m != model,
            Some((p, m, false)) => {
                p != provider || !(m.starts_with(model) || model.starts_with(&m))
            }
        };
        if changed {
            self.append(Known::ModelChange {
                provider: provider.to_string(),
                model_id: model.to_string(),
            })?;
        }
        Ok(())
    }
}
