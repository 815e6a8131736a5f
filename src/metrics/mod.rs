//! Prometheus metrics (`GET /metrics` on the agent-mode and chat servers): what runs,
//! model calls, tools and the daemon's queues are doing. One registry per process;
//! the places that count call the functions here. `exposition` writes them in the
//! format a scraper asks for, with the standard `process_*` metrics.

mod exposition;
mod fleet;

pub(crate) use fleet::set_fleet;

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

struct Metrics {
    registry: Registry,
    runs_started: Counter,
    runs_finished: Family<Labels, Counter>,
    steps: Counter,
    tool_calls: Family<Labels, Counter>,
    model_calls: Family<Labels, Counter>,
    tokens: Family<Labels, Counter>,
    model_seconds: Histogram,
    first_token_seconds: Histogram,
    queued: Gauge,
    running: Gauge,
    outbox: Gauge,
    dead_letters: Gauge,
    ws_reconnects: Counter,
    build_info: Family<Labels, Gauge>,
    fleet: fleet::Gauges,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("picogent");
    let m = Metrics {
        runs_started: Counter::default(),
        runs_finished: Family::default(),
        steps: Counter::default(),
        tool_calls: Family::default(),
        model_calls: Family::default(),
        tokens: Family::default(),
        model_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
        first_token_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 12)),
        queued: Gauge::default(),
        running: Gauge::default(),
        outbox: Gauge::default(),
        dead_letters: Gauge::default(),
        ws_reconnects: Counter::default(),
        build_info: Family::default(),
        fleet: fleet::Gauges::default(),
        registry: Registry::default(),
    };
    m.fleet.register(&mut registry);
    m.build_info
        .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_string())])
        .set(1);
    registry.register(
        "build_info",
        "picogent's version (always 1)",
        m.build_info.clone(),
    );
    registry.register("runs_started", "Runs started", m.runs_started.clone());
    registry.register(
        "runs_finished",
        "Runs ended, by outcome and failure kind",
        m.runs_finished.clone(),
    );
    registry.register("steps", "Model turns taken by runs", m.steps.clone());
    registry.register(
        "tool_calls",
        "Tool calls, by tool and result",
        m.tool_calls.clone(),
    );
    registry.register(
        "model_calls",
        "Model calls, by provider and result",
        m.model_calls.clone(),
    );
    registry.register(
        "tokens",
        "Tokens, by direction (input, output, cache_read, cache_write)",
        m.tokens.clone(),
    );
    registry.register(
        "model_call_seconds",
        "Model call duration",
        m.model_seconds.clone(),
    );
    registry.register(
        "model_first_token_seconds",
        "Time to the first streamed token",
        m.first_token_seconds.clone(),
    );
    registry.register(
        "queued_jobs",
        "Agent mode: jobs waiting for a slot",
        m.queued.clone(),
    );
    registry.register("running_jobs", "Agent mode: runs going", m.running.clone());
    registry.register(
        "outbox_reports",
        "Agent mode: reports not yet delivered to the tracker",
        m.outbox.clone(),
    );
    registry.register(
        "dead_letter_reports",
        "Agent mode: reports the tracker refused for good, kept in state/dead-letter.jsonl",
        m.dead_letters.clone(),
    );
    registry.register(
        "ws_reconnects",
        "Agent mode: WebSocket reconnections to the tracker",
        m.ws_reconnects.clone(),
    );
    Metrics { registry, ..m }
});

pub(crate) fn run_started() {
    METRICS.runs_started.inc();
}

/// A run ended: `outcome` is completed, failed or cancelled; `kind` the failure's.
pub(crate) fn run_finished(outcome: &str, kind: Option<&str>, steps: u32) {
    let labels = vec![
        ("outcome", outcome.to_string()),
        ("kind", kind.unwrap_or("none").to_string()),
    ];
    METRICS.runs_finished.get_or_create(&labels).inc();
    METRICS.steps.inc_by(u64::from(steps));
}

/// A tool name as a label: names come from the model, so only tool-like names of a
/// bounded length pass (the exposition format does not escape label values).
fn tool_label(tool: &str) -> String {
    let ok = !tool.is_empty()
        && tool.len() <= 64
        && tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        tool.to_string()
    } else {
        "other".into()
    }
}

/// A tool call ended; `known`: the tool exists (an invented name counts as `unknown`,
/// so a model cannot grow the label set).
pub(crate) fn tool_call(tool: &str, known: bool, is_error: bool) {
    let tool = if known {
        tool_label(tool)
    } else {
        "unknown".into()
    };
    let labels = vec![
        ("tool", tool),
        ("result", if is_error { "error" } else { "ok" }.to_string()),
    ];
    METRICS.tool_calls.get_or_create(&labels).inc();
}

/// A model call ended; its duration and tokens when it succeeded.
pub(crate) fn model_call(
    provider: &str,
    ok: bool,
    took: Duration,
    first_token: Option<Duration>,
    usage: Option<&crate::message::Usage>,
) {
    let labels = vec![
        ("provider", provider.to_string()),
        ("result", if ok { "ok" } else { "error" }.to_string()),
    ];
    METRICS.model_calls.get_or_create(&labels).inc();
    if ok {
        METRICS.model_seconds.observe(took.as_secs_f64());
    }
    if let Some(t) = first_token {
        METRICS.first_token_seconds.observe(t.as_secs_f64());
    }
    if let Some(u) = usage {
        for (dir, n) in [
            ("input", u.input),
            ("output", u.output),
            ("cache_read", u.cache_read),
            ("cache_write", u.cache_write),
        ] {
            METRICS
                .tokens
                .get_or_create(&vec![("direction", dir.to_string())])
                .inc_by(n);
        }
    }
}

pub(crate) fn ws_reconnect() {
    METRICS.ws_reconnects.inc();
}

/// Agent mode's queues, read when metrics are scraped.
pub(crate) fn set_load(queued: usize, running: usize, outbox: usize) {
    let g = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    METRICS.queued.set(g(queued));
    METRICS.running.set(g(running));
    METRICS.outbox.set(g(outbox));
}

pub(crate) fn set_dead_letters(n: usize) {
    METRICS
        .dead_letters
        .set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// The OpenMetrics text: picogent's families, then the process's, then `# EOF`.
pub(crate) fn render() -> String {
    let mut out = String::new();
    if encode(&mut out, &METRICS.registry).is_err() {
        out.clear();
    }
    let body = out.strip_suffix("# EOF\n").unwrap_or(&out).to_string();
    format!("{body}{}# EOF\n", exposition::process_metrics())
}

/// The `/metrics` response in the format `accept` asks for: OpenMetrics when it names
/// it, else Prometheus text 0.0.4.
pub(crate) fn response(accept: Option<&str>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let open = render();
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            open,
        )
            .into_response()
    } else {
        (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            exposition::to_prometheus_text(&open),
        )
            .into_response()
    }
}
