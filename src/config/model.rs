//! The model settings of a load: the provider and engine, the model, where the model
//! is reached and with which key, and where each of them was set (so an error about
//! one can name it).

use super::load::{check_url, choice, Sources};
use super::types::{Engine, ProviderKind};
use super::{resolve_model, ConfigError};

/// The model settings: which provider and engine, which model, where, with which key.
pub(super) struct ModelSettings {
    pub(super) provider: ProviderKind,
    pub(super) engine: Engine,
    pub(super) model: String,
    pub(super) base_url: String,
    pub(super) api_key: Option<String>,
    pub(super) auth_token: Option<String>,
    pub(super) temperature: Option<f64>,
    pub(super) origins: super::ModelOrigins,
    pub(super) openai_account: super::OpenaiAccount,
}

impl Sources<'_> {
    pub(super) fn provider_and_engine(&self) -> Result<(ProviderKind, Engine), ConfigError> {
        let expected = r#"expected "anthropic", "openai", "ollama" or "claude-code""#;
        let (provider, alias) = match (self.env.get("PICOGENT_PROVIDER"), &self.file.provider) {
            (Some(v), _) => ProviderKind::parse(v).ok_or_else(|| ConfigError::Env {
                var: "PICOGENT_PROVIDER".into(),
                message: format!("{expected}, got {v:?}"),
            })?,
            (None, Some(v)) => ProviderKind::parse(v)
                .ok_or_else(|| self.field_error("provider", format!("{expected}, got {v:?}")))?,
            // Nothing chosen: Anthropic, unless only OpenAI's key is there (as the
            // OpenAI SDK's users have it), then OpenAI.
            (None, None) if self.only_openai_key() => (ProviderKind::Openai, None),
            (None, None) => (ProviderKind::Anthropic, None),
        };
        let engines = [
            ("native", Engine::Native),
            ("claude-code", Engine::ClaudeCode),
        ];
        let engine = choice(
            self.env,
            "PICOGENT_ENGINE",
            &engines,
            self.file.engine.or(alias),
            Engine::Native,
        )?;
        if engine == Engine::ClaudeCode && provider != ProviderKind::Anthropic {
            return Err(self.field_error(
                "engine",
                format!(
                    "the claude-code engine speaks to Anthropic's API; provider {:?} cannot be used with it",
                    provider.as_str()
                ),
            ));
        }
        Ok((provider, engine))
    }

    pub(super) fn model_settings(&self) -> Result<ModelSettings, ConfigError> {
        let (provider, engine) = self.provider_and_engine()?;
        let (model, model_origin) = self.model(provider)?;
        let (base_url, base_url_origin) = self.base_url(provider)?;
        let (api_key, auth_token, api_key_origin) = self.credentials(provider);
        let temperature = match self.file.temperature {
            Some(t) if !(0.0..=2.0).contains(&t) => {
                return Err(self.field_error(
                    "temperature",
                    format!("expected a number from 0 to 2, got {t}"),
                ))
            }
            t => t,
        };
        // Ollama takes a duration ("5m", "-1") or a number of seconds; null means unset.
        if let Some(v) = &self.file.keep_alive {
            if !(v.is_null() || v.is_string() || v.is_number()) {
                return Err(self.field_error(
                    "keep_alive",
                    format!("expected a duration such as \"5m\" or a number of seconds, got {v}"),
                ));
            }
        }
        Ok(ModelSettings {
            provider,
            engine,
            model,
            base_url,
            api_key,
            auth_token,
            temperature,
            origins: super::ModelOrigins {
                model: model_origin,
                base_url: base_url_origin,
                api_key: api_key_origin,
            },
            openai_account: self.openai_account(provider),
        })
    }

    /// OPENAI_API_KEY is set, and nothing says Anthropic: no key, token, model or URL of
    /// Anthropic's or picogent's own, no engine (Claude Code's works with its login and
    /// no key), no key, URL or engine in the file.
    fn only_openai_key(&self) -> bool {
        let set = |v: &str| self.env.get(v).is_some_and(|x| !x.is_empty());
        let anthropic = [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "PICOGENT_API_KEY",
            "PICOGENT_BASE_URL",
            "PICOGENT_ENGINE",
        ];
        set("OPENAI_API_KEY")
            && !anthropic.iter().any(|v| set(v))
            && self.file.api_key.is_none()
            && self.file.base_url.is_none()
            && self.file.engine.is_none()
    }

    /// OpenAI's organization and project, from the variables the OpenAI SDK reads.
    fn openai_account(&self, provider: ProviderKind) -> super::OpenaiAccount {
        let var = |v: &str| {
            self.env
                .get(v)
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_string)
        };
        match provider {
            ProviderKind::Openai => super::OpenaiAccount {
                organization: var("OPENAI_ORG_ID"),
                project: var("OPENAI_PROJECT_ID"),
            },
            _ => super::OpenaiAccount::default(),
        }
    }

    /// The model, resolved from its alias, and where it was set in words.
    fn model(&self, provider: ProviderKind) -> Result<(String, String), ConfigError> {
        let env = self.env;
        let anthropic = provider == ProviderKind::Anthropic;
        // The Anthropic client's own variable counts for Anthropic, after the file; the
        // other providers have no sensible default model.
        let model = self
            .setting(&["PICOGENT_MODEL"], "model", &self.file.model)
            .or_else(|| {
                anthropic
                    .then(|| env.get("ANTHROPIC_MODEL"))
                    .flatten()
                    .map(|m| (m.to_string(), "ANTHROPIC_MODEL".to_string()))
            });
        let origin = model.as_ref().map_or("the default".into(), |(_, o)| {
            o.replace("PICOGENT_MODEL", "PICOGENT_MODEL (or --model)")
        });
        let model = model.map(|(m, _)| m);
        let model = match model {
            Some(m) if !m.trim().is_empty() => resolve_model(&m),
            _ if provider == ProviderKind::Anthropic => resolve_model("sonnet"),
            _ => {
                let example = match provider {
                    ProviderKind::Ollama => "qwen3:8b",
                    _ => "gpt-4.1",
                };
                return Err(self.field_error(
                    "model",
                    format!(
                        "provider {} needs a model: set `model` or PICOGENT_MODEL (for example {example:?})",
                        provider.as_str()
                    ),
                ));
            }
        };
        Ok((model, origin))
    }

    /// The provider's URL, checked, and where it was set in words.
    fn base_url(&self, provider: ProviderKind) -> Result<(String, String), ConfigError> {
        let (base_url, origin) = self
            .setting(
                &["PICOGENT_BASE_URL", provider.base_url_var()],
                "base_url",
                &self.file.base_url,
            )
            .unwrap_or_else(|| {
                let default = provider.default_base_url().to_string();
                (default, "the provider's default".into())
            });
        let base_url = if provider == ProviderKind::Ollama {
            ollama_url(&base_url)
        } else {
            base_url
        };
        let base_url = check_url(&base_url, "base_url", &self.origin)?;
        Ok((base_url, origin))
    }

    /// The API key, Anthropic's bearer token, and where the one in use was set in words.
    fn credentials(&self, provider: ProviderKind) -> (Option<String>, Option<String>, String) {
        let key_vars: Vec<&str> = std::iter::once("PICOGENT_API_KEY")
            .chain(provider.api_key_var())
            .collect();
        let api_key = self.setting(&key_vars, "api_key", &self.file.api_key);
        // Anthropic's client sends ANTHROPIC_AUTH_TOKEN as a bearer token instead of a key.
        let auth_token = (provider == ProviderKind::Anthropic)
            .then(|| self.env.get("ANTHROPIC_AUTH_TOKEN").map(str::to_string))
            .flatten()
            .filter(|t| !t.is_empty());
        let origin = match (&api_key, &auth_token) {
            (Some((_, origin)), _) => origin.clone(),
            (None, Some(_)) => "ANTHROPIC_AUTH_TOKEN".into(),
            (None, None) => "no setting (none was given)".into(),
        };
        (api_key.map(|(k, _)| k), auth_token, origin)
    }

    /// The first of `vars` that is set, else the file's `field`: its value, and where
    /// it was set in words for errors (the variable, or the field and the file).
    fn setting(
        &self,
        vars: &[&str],
        field: &str,
        from_file: &Option<String>,
    ) -> Option<(String, String)> {
        vars.iter()
            .find_map(|v| {
                self.env
                    .get(v)
                    .map(|value| (value.to_string(), v.to_string()))
            })
            .or_else(|| {
                from_file
                    .clone()
                    .map(|value| (value, format!("`{field}` in {}", self.origin)))
            })
    }
}

/// An Ollama host as the Ollama client reads `OLLAMA_HOST`: no scheme means `http` and
/// port 11434 when none is given (`http://` and `https://` keep their usual ports);
/// `:11434` alone means this machine.
fn ollama_url(raw: &str) -> String {
    let raw = raw.trim().trim_end_matches('/');
    let (scheme, rest, explicit) = match raw.split_once("://") {
        Some((s, r)) => (s, r, true),
        None => ("http", raw, false),
    };
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = if hostport.is_empty() || hostport.starts_with(':') {
        format!("127.0.0.1{hostport}")
    } else {
        hostport.to_string()
    };
    // An IPv6 literal's colons are not a port.
    let has_port = match host.rfind(']') {
        Some(end) => host.get(end..).is_some_and(|t| t.contains(':')),
        None => host.contains(':'),
    };
    let port = if has_port || explicit { "" } else { ":11434" };
    format!("{scheme}://{host}{port}{path}")
}
