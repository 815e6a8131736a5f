//! `POST /github/webhook`: GitHub's deliveries. The body is read (at most
//! `MAX_BODY`, within `BODY_TIMEOUT`, at most `MAX_IN_FLIGHT` at once), its
//! `X-Hub-Signature-256` checked in constant time against the webhook secret before
//! anything in it is believed (401 otherwise), and the delivery answered within
//! GitHub's ten seconds: 202 once its event is journaled, 200 for a duplicate or for
//! what picogent does not act on, 503 when the journal did not answer in time (a
//! redelivery is then recognised if it did get through).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};

use super::desks::Desks;
use super::payload;
use crate::tracker::router::{AcceptError, Accepted, Router};

/// GitHub caps payloads at 25 MB; an issue's or comment's is far smaller (a body is at
/// most 65,536 characters), and an unsigned sender must not make picogent hold more:
/// `MAX_IN_FLIGHT` bodies at most, 64 MiB in all.
const MAX_BODY: usize = 1 << 20;
/// GitHub sends a delivery at once; a sender that trickles holds a place only this long.
const BODY_TIMEOUT: Duration = Duration::from_secs(4);
const MAX_IN_FLIGHT: usize = 64;
/// Every delivery is answered within this, from its first byte: GitHub waits ten seconds.
const ANSWER_WITHIN: Duration = Duration::from_secs(9);

struct Ctx {
    desks: Arc<Desks>,
    router: Router,
    key: ring::hmac::Key,
    in_flight: Arc<tokio::sync::Semaphore>,
}

pub(crate) fn routes(desks: Arc<Desks>, router: Router, secret: &str) -> axum::Router {
    let ctx = Arc::new(Ctx {
        desks,
        router,
        key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes()),
        in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
    });
    axum::Router::new()
        .route("/github/webhook", post(webhook))
        .with_state(ctx)
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    answer(status, json!({"error": {"code": code, "message": message}}))
}

/// Whether `header` (`sha256=<hex>`) is the body's HMAC under the key.
pub(crate) fn signed(key: &ring::hmac::Key, header: Option<&str>, body: &[u8]) -> bool {
    let Some(hex) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Some(tag) = decode_hex(hex) else {
        return false;
    };
    ring::hmac::verify(key, body, &tag).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// A delivery that passed the checks: its event, delivery id and payload.
struct Delivery {
    event: String,
    id: String,
    payload: Value,
}

/// Reads the body and checks the delivery: its signature first, then its headers and
/// JSON; the answer to give when it is refused.
async fn verified(
    ctx: &Ctx,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Delivery, Response> {
    let read = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await;
    let body: Bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            let why = "the delivery is larger than 1 MiB";
            return Err(refuse(StatusCode::PAYLOAD_TOO_LARGE, "too_large", why));
        }
        Err(_) => {
            let why = "the body did not arrive in time";
            return Err(refuse(StatusCode::REQUEST_TIMEOUT, "timeout", why));
        }
    };
    if !signed(&ctx.key, header(headers, "x-hub-signature-256"), &body) {
        tracing::warn!("refused a webhook delivery: missing or wrong X-Hub-Signature-256");
        let why = "missing or wrong X-Hub-Signature-256";
        return Err(refuse(StatusCode::UNAUTHORIZED, "unauthorized", why));
    }
    let invalid = |why: &str| refuse(StatusCode::BAD_REQUEST, "invalid_delivery", why);
    let (Some(event), Some(id)) = (
        header(headers, "x-github-event"),
        header(headers, "x-github-delivery"),
    ) else {
        return Err(invalid("X-GitHub-Event and X-GitHub-Delivery are required"));
    };
    let usable = |c: char| c.is_ascii_alphanumeric() || c == '-';
    if id.is_empty() || id.len() > 100 || !id.chars().all(usable) {
        return Err(invalid("X-GitHub-Delivery is not a delivery id"));
    }
    let payload: Value = serde_json::from_slice(&body)
        .map_err(|e| invalid(&format!("the body is not JSON: {e}")))?;
    Ok(Delivery {
        event: event.to_string(),
        id: id.to_string(),
        payload,
    })
}

async fn webhook(
    State(ctx): State<Arc<Ctx>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let started = tokio::time::Instant::now();
    let Ok(_permit) = ctx.in_flight.clone().try_acquire_owned() else {
        let why = "too many deliveries at once; redeliver";
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "busy", why);
    };
    let d = match verified(&ctx, &headers, body).await {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    if d.event == "ping" {
        return answer(StatusCode::OK, json!({"pong": true}));
    }
    let repo = payload::repository(&d.payload);
    if !ctx.desks.our_installation(&d.payload) {
        tracing::warn!(delivery = %d.id, repository = %repo, "a delivery from another installation of the App was ignored");
        return answer(StatusCode::OK, json!({"ignored": "another installation"}));
    }
    if !ctx.desks.serves(&repo) {
        tracing::warn!(delivery = %d.id, repository = %repo, "a delivery about a repository picogent does not serve was ignored");
        return answer(StatusCode::OK, json!({"ignored": "another repository"}));
    }
    let Some(incoming) = payload::from_webhook(&d.event, &d.payload) else {
        let why = format!("{} is not acted on", d.event);
        return answer(StatusCode::OK, json!({ "ignored": why }));
    };
    // A repository a pattern of `repos` names gets its desk at its first delivery.
    let desk = match tokio::time::timeout_at(started + ANSWER_WITHIN, ctx.desks.desk(&repo)).await {
        Ok(Ok(desk)) => desk,
        Ok(Err(e)) => {
            tracing::warn!(delivery = %d.id, repository = %repo, "cannot serve the repository yet: {e}");
            let why = format!("cannot serve {repo} yet ({e}); redeliver");
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "repository", &why);
        }
        Err(_) => {
            let why = "the repository could not be looked up in time; redeliver it";
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "slow", why);
        }
    };
    let (intake, router, id) = (desk.intake.clone(), ctx.router.clone(), d.id);
    // In a task of its own: GitHub stops waiting after ten seconds, but an event that
    // reached the journal must still be scheduled and booked.
    let handled = desk.intake.spawn_owned(async move {
        let r = intake.handle(&router, incoming, Some(&id)).await;
        if r.is_ok() {
            intake.heard();
        }
        r
    });
    match tokio::time::timeout_at(started + ANSWER_WITHIN, handled).await {
        Ok(Ok(r)) => accepted(r),
        Ok(Err(e)) => accepted(Err(AcceptError::Journal(e.to_string()))),
        Err(_) => {
            let why = "the delivery could not be recorded in time; redeliver it";
            refuse(StatusCode::SERVICE_UNAVAILABLE, "slow", why)
        }
    }
}

/// The answer to a delivery the router took (or not).
fn accepted(outcome: Result<Accepted, AcceptError>) -> Response {
    match outcome {
        Ok(Accepted::New) => answer(StatusCode::ACCEPTED, json!({"accepted": true})),
        Ok(Accepted::Duplicate) => answer(StatusCode::OK, json!({"duplicate": true})),
        Ok(Accepted::Ignored) => answer(StatusCode::OK, json!({"ignored": true})),
        Err(e @ AcceptError::ShuttingDown) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            &e.to_string(),
        ),
        Err(e @ AcceptError::Journal(_)) => {
            tracing::error!("{e}");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "journal", &e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn signatures_are_checked_as_github_makes_them() {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"It's a Secret to Everybody");
        // GitHub's documented example.
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(super::signed(&key, Some(good), b"Hello, World!"));
        assert!(!super::signed(&key, Some(good), b"Hello, World?"));
        assert!(!super::signed(&key, None, b"Hello, World!"));
        assert!(!super::signed(&key, Some("sha1=abc"), b"Hello, World!"));
        assert!(!super::signed(&key, Some("sha256=zz"), b"Hello, World!"));
    }
}
