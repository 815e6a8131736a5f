//! The HTTP transport's server: `POST /events` (bearer-checked, at most 1 MiB, answered
//! only after the event is journaled) and `GET /healthz`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::json;

use crate::tracker::router::{AcceptError, Accepted, Router};
use crate::tracker::types::Envelope;

/// Events larger than this are refused with 413.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

struct Ctx {
    token: String,
    router: Router,
}

pub fn app(token: String, router: Router) -> axum::Router {
    axum::Router::new()
        .route("/events", post(events))
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(MAX_EVENT_BYTES))
        .with_state(Arc::new(Ctx { token, router }))
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

async fn events(State(ctx): State<Arc<Ctx>>, headers: HeaderMap, body: Bytes) -> Response {
    let given = crate::util::bearer(headers.get("authorization").and_then(|v| v.to_str().ok()));
    if !given.is_some_and(|t| crate::util::constant_time_eq(t.as_bytes(), ctx.token.as_bytes())) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
    }
    let env = match Envelope::from_slice(&body) {
        Ok(e) => e,
        Err(msg) => return error(StatusCode::BAD_REQUEST, "invalid_event", &msg),
    };
    match ctx.router.accept(env).await {
        Ok(Accepted::New) => {
            (StatusCode::ACCEPTED, Json(json!({"accepted": true}))).into_response()
        }
        Ok(Accepted::Duplicate) => {
            (StatusCode::OK, Json(json!({"duplicate": true}))).into_response()
        }
        Ok(Accepted::Ignored) => (StatusCode::OK, Json(json!({"ignored": true}))).into_response(),
        Err(AcceptError::Invalid(msg)) => error(StatusCode::BAD_REQUEST, "invalid_event", &msg),
        Err(e @ AcceptError::ShuttingDown) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            &e.to_string(),
        ),
        Err(e @ AcceptError::Journal(_)) => {
            tracing::error!("{e}");
            error(StatusCode::INTERNAL_SERVER_ERROR, "journal", &e.to_string())
        }
    }
}

async fn healthz(State(ctx): State<Arc<Ctx>>) -> Response {
    let load = ctx.router.load();
    Json(json!({"status": "ok", "busy": load.status == "busy", "running": load.active_tasks.len(), "queued": load.queued}))
        .into_response()
}
