//! Who picogent is to GitHub: a token as given, or a GitHub App's installation token,
//! minted with a JWT (RS256, signed by the App's private key) and minted again five
//! minutes before it expires. The current token is also what a push sends, so it is
//! kept where the push (a blocking git command) can read it.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde_json::json;

use crate::util::lock;

/// An installation token is minted again this long before it expires.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    #[error("github.app.private_key_file {path}: {message}")]
    Key { path: String, message: String },
    #[error("cannot sign the GitHub App's JWT: {0}")]
    Sign(String),
}

/// A GitHub App's key and its last installation token.
pub(crate) struct App {
    pub(crate) app_id: u64,
    pub(crate) installation_id: u64,
    key: RsaKeyPair,
    /// The installation token and when it expires, on the monotonic clock (GitHub's
    /// `expires_at` read with GitHub's clock, so a wrong local clock does not matter).
    minted: Mutex<Option<(String, Instant)>>,
}

pub(crate) enum Auth {
    Token(String),
    App(Box<App>),
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The DER inside a PEM file (`RSA PRIVATE KEY`, PKCS#1, as GitHub hands it out, or
/// `PRIVATE KEY`, PKCS#8).
fn read_key(path: &Path) -> Result<RsaKeyPair, AuthError> {
    let fail = |message: String| AuthError::Key {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let pkcs8 = text.contains("BEGIN PRIVATE KEY");
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.as_bytes())
        .map_err(|e| fail(format!("not a PEM file: {e}")))?;
    let key = if pkcs8 {
        RsaKeyPair::from_pkcs8(&der)
    } else {
        RsaKeyPair::from_der(&der)
    };
    key.map_err(|e| fail(format!("not an RSA private key: {e}")))
}

impl Auth {
    /// What names the token's rate limit in a fleet's store: the App's installation,
    /// or a hash of the token (never the token itself).
    pub(crate) fn budget_key(&self) -> String {
        match self {
            Auth::App(app) => format!("app-{}-installation-{}", app.app_id, app.installation_id),
            Auth::Token(t) => {
                let digest = ring::digest::digest(&ring::digest::SHA256, t.as_bytes());
                let hex: String = digest.as_ref()[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("token-{hex}")
            }
        }
    }

    pub(crate) fn from_config(auth: &crate::config::GithubAuth) -> Result<Auth, AuthError> {
        Ok(match auth {
            crate::config::GithubAuth::Token(t) => Auth::Token(t.clone()),
            crate::config::GithubAuth::App {
                app_id,
                private_key_file,
                installation_id,
            } => Auth::App(Box::new(App {
                app_id: *app_id,
                installation_id: *installation_id,
                key: read_key(private_key_file)?,
                minted: Mutex::new(None),
            })),
        })
    }

    /// The token to send now, when it is known and fresh (a token as given always is;
    /// an installation token until five minutes before it expires).
    pub(crate) fn current(&self) -> Option<String> {
        match self {
            Auth::Token(t) => Some(t.clone()),
            Auth::App(app) => lock(&app.minted)
                .as_ref()
                .filter(|(_, exp)| {
                    exp.checked_duration_since(Instant::now())
                        .is_some_and(|left| left > REFRESH_BEFORE)
                })
                .map(|(t, _)| t.clone()),
        }
    }
}

impl App {
    /// A JWT for the App itself (`iss` its id), valid for nine minutes from a minute
    /// ago (GitHub allows ten, and clocks drift); `now` is GitHub's time (seconds since
    /// the epoch), which GitHub checks the JWT against.
    pub(crate) fn jwt(&self, now: u64) -> Result<String, AuthError> {
        let header = b64url(json!({"alg": "RS256", "typ": "JWT"}).to_string().as_bytes());
        let claims = json!({"iat": now.saturating_sub(60), "exp": now + 540, "iss": self.app_id.to_string()});
        let payload = b64url(claims.to_string().as_bytes());
        let message = format!("{header}.{payload}");
        let mut sig = vec![0u8; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                message.as_bytes(),
                &mut sig,
            )
            .map_err(|e| AuthError::Sign(e.to_string()))?;
        Ok(format!("{message}.{}", b64url(&sig)))
    }

    /// Keeps a minted installation token; `expires_at` as GitHub writes it (RFC 3339),
    /// read with GitHub's clock.
    pub(crate) fn keep(&self, token: String, expires_at: &str, clock: &super::clock::Clock) {
        let left = chrono::DateTime::parse_from_rfc3339(expires_at)
            .ok()
            .map(|t| clock.until(t.with_timezone(&chrono::Utc)))
            // An answer without a usable time: an hour, as GitHub's tokens last.
            .unwrap_or(Duration::from_secs(3600));
        *lock(&self.minted) = Some((token, Instant::now() + left));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bad_key_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key.pem");
        std::fs::write(
            &p,
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let err = match super::read_key(&p) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        assert!(err.contains("key.pem") && err.contains("RSA"), "{err}");
    }
}
