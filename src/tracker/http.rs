//! The HTTP transport's server: `POST /events` (bearer-checked from the headers before
//! any of the body is read, at most 1 MiB, read within `BODY_TIMEOUT`, at most
//! `MAX_IN_FLIGHT` at once, answered only after the event is journaled) and
//! `GET /healthz`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::json;

use crate::tracker::router::{AcceptError, Accepted, Router};
use crate::tracker::types::{Arrival, Envelope, LoadStatus};

/// Events larger than this are refused with 413.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// How long an authenticated sender has to deliver an event's body.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Event requests handled at once; more get 503 (a tracker retries).
const MAX_IN_FLIGHT: usize = 64;

struct Ctx {
    token: String,
    router: Router,
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// An `/events` request's place among the `MAX_IN_FLIGHT`, held until its event is
/// journaled and scheduled, even when the tracker stops waiting for the answer.
#[derive(Clone)]
struct Slot {
    _permit: Arc<tokio::sync::OwnedSemaphorePermit>,
}

fn ctx(token: String, router: Router) -> Arc<Ctx> {
    Arc::new(Ctx {
        token,
        router,
        in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
    })
}

/// `/events`, the HTTP transport's way in (bearer-checked).
pub(crate) fn events_route(token: String, router: Router) -> axum::Router {
    let ctx = ctx(token, router);
    axum::Router::new()
        .route(
            "/events",
            post(events).layer(axum::middleware::from_fn_with_state(
                ctx.clone(),
                authorized,
            )),
        )
        .layer(DefaultBodyLimit::max(MAX_EVENT_BYTES))
        .with_state(ctx)
}

/// The health app every transport serves: `/healthz`, `/livez` and `/metrics`
/// (bearer-checked).
pub(crate) fn app(token: String, router: Router) -> axum::Router {
    let ctx = ctx(token, router);
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route(
            "/metrics",
            get(metrics).layer(axum::middleware::from_fn_with_state(
                ctx.clone(),
                authorized,
            )),
        )
        .layer(DefaultBodyLimit::max(MAX_EVENT_BYTES))
        .with_state(ctx)
}

/// The bearer token, checked from the headers: nobody without it makes picogent read
/// (or hold memory for) a body.
async fn authorized(
    State(ctx): State<Arc<Ctx>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let given = crate::util::bearer(
        req.headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
    );
    if !given.is_some_and(|t| crate::util::constant_time_eq(t.as_bytes(), ctx.token.as_bytes())) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
    }
    let Ok(permit) = ctx.in_flight.clone().try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "too many event requests at once; retry",
        );
    };
    let mut req = req;
    req.extensions_mut().insert(Slot {
        _permit: Arc::new(permit),
    });
    next.run(req).await
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

async fn events(
    State(ctx): State<Arc<Ctx>>,
    slot: Option<axum::Extension<Slot>>,
    body: axum::body::Body,
) -> Response {
    let body: Bytes =
        match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_EVENT_BYTES)).await
        {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                // axum's limit error says "length limit exceeded"; there is no typed kind.
                let too_big = format!("{e:?}").contains("LengthLimit")
                    || e.to_string().contains("length limit");
                return if too_big {
                    error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        "the event is larger than 1 MiB",
                    )
                } else {
                    error(
                        StatusCode::BAD_REQUEST,
                        "invalid_event",
                        &format!("cannot read the body: {e}"),
                    )
                };
            }
            Err(_) => {
                return error(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    "the body did not arrive in time",
                )
            }
        };
    let arrival = match Envelope::from_slice(&body).and_then(|e| Arrival::from_board(&e)) {
        Ok(Some(a)) => a,
        Ok(None) => return (StatusCode::OK, Json(json!({"ignored": true}))).into_response(),
        Err(msg) => return error(StatusCode::BAD_REQUEST, "invalid_event", &msg),
    };
    match ctx.router.accept(arrival, slot).await {
        Ok(Accepted::New) => {
            (StatusCode::ACCEPTED, Json(json!({"accepted": true}))).into_response()
        }
        Ok(Accepted::Duplicate) => {
            (StatusCode::OK, Json(json!({"duplicate": true}))).into_response()
        }
        Ok(Accepted::Ignored) => (StatusCode::OK, Json(json!({"ignored": true}))).into_response(),
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

/// Prometheus metrics, behind the same token as `/events`.
async fn metrics(State(ctx): State<Arc<Ctx>>, headers: axum::http::HeaderMap) -> Response {
    let load = ctx.router.load();
    crate::metrics::set_load(load.queued, load.active_tasks.len(), ctx.router.backlog());
    if let Some(f) = ctx.router.fleet() {
        let reached = f.status.as_ref().filter(|_| f.failing.is_none());
        crate::metrics::set_fleet(reached, f.held, f.round_trip.map(|d| d.as_secs_f64()));
    }
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    crate::metrics::response(accept)
}

/// The process answers: what a liveness probe asks. A degraded `/healthz` (a full disk,
/// a tracker outage) is not mended by a restart, which would only cut running tasks.
async fn livez() -> Response {
    Json(json!({"status": "alive"})).into_response()
}

async fn healthz(State(ctx): State<Arc<Ctx>>) -> Response {
    ctx.router.settle_sandbox().await;
    let load = ctx.router.load();
    let mut body = json!({"status": "ok", "busy": load.status == LoadStatus::Busy, "running": load.active_tasks.len(), "queued": load.queued, "sandbox": ctx.router.sandbox_level()});
    if let Some(why) = ctx.router.sandbox_refusing() {
        body["sandbox_refusing"] = json!(why);
    }
    let (dead, file) = ctx.router.dead_letters();
    if dead > 0 {
        body["dead_letters"] = json!({"reports": dead, "file": file});
    }
    if let Some(f) = ctx.router.fleet() {
        body["fleet"] = super::health::fleet_json(&f);
    }
    if ctx.router.draining() {
        // Shutting down: a load balancer or a readiness probe sends nothing new here.
        body["status"] = json!("draining");
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let health = super::health::assess(&ctx.router);
    // Not reasons to restart picogent (the answer stays 200), but for a person to read.
    if !health.warnings.is_empty() {
        let words: Vec<&str> = health.warnings.iter().map(|w| w.message.as_str()).collect();
        body["warnings"] = json!(words);
        body["warning_details"] = json!(health.warnings);
    }
    if !health.degraded.is_empty() {
        // Still answering, but not keeping every promise: a supervisor should look.
        let words: Vec<&str> = health.degraded.iter().map(|d| d.message.as_str()).collect();
        body["status"] = json!("degraded");
        body["reason"] = json!(words.join("; "));
        body["reasons"] = json!(health.degraded);
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    Json(body).into_response()
}
