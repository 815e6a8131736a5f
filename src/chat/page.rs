//! The browser client, served as built into the binary: `client.html` at `/` and its
//! classic scripts and styles under `/client/` (the same files a person may open from
//! disk beside it). Only the files listed here are served.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};

const CLIENT_HTML: &str = include_str!("../../client.html");

/// The page's files, by name under `/client/`, with their types.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../client/style.css"),
    ),
    ("state.js", JS, include_str!("../../client/state.js")),
    ("markdown.js", JS, include_str!("../../client/markdown.js")),
    ("steps.js", JS, include_str!("../../client/steps.js")),
    ("verdicts.js", JS, include_str!("../../client/verdicts.js")),
    ("stream.js", JS, include_str!("../../client/stream.js")),
    ("thread.js", JS, include_str!("../../client/thread.js")),
    ("sessions.js", JS, include_str!("../../client/sessions.js")),
    ("dialogs.js", JS, include_str!("../../client/dialogs.js")),
    (
        "connection.js",
        JS,
        include_str!("../../client/connection.js"),
    ),
    ("app.js", JS, include_str!("../../client/app.js")),
];
const JS: &str = "text/javascript; charset=utf-8";

/// The page; another origin may not frame it and drive its buttons.
pub(super) fn index() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, "frame-ancestors 'self'"),
            (header::X_FRAME_OPTIONS, "SAMEORIGIN"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Html(CLIENT_HTML),
    )
        .into_response()
}

/// `/client/{name}`: one of the page's files. `no-cache`: a browser asks again (and
/// gets the new files) after picogent is upgraded.
pub(super) async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, kind, body)) => (
            [
                (header::CONTENT_TYPE, *kind),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file of the page").into_response(),
    }
}

#[cfg(test)]
mod tests {
    /// Every script the page loads is served, and nothing it does not load.
    #[test]
    fn the_page_loads_exactly_the_served_files() {
        let loaded: Vec<&str> = super::CLIENT_HTML
            .split("\"client/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        let served: Vec<&str> = super::ASSETS.iter().map(|(n, _, _)| *n).collect();
        let mut a = loaded.clone();
        let mut b = served.clone();
        a.sort();
        b.sort();
        assert_eq!(
            a, b,
            "client.html loads {loaded:?}, the server serves {served:?}"
        );
    }
}
