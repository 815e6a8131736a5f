//! The fake GitHub's front door: every request is checked against the OpenAPI
//! description, then refused as GitHub would refuse it (404, 403, 401, 400/422, a queued
//! fault) or answered, with GitHub's rate-limit, ETag and request-id headers.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::endpoints::route;
use super::{error, hash, not_found, openapi, Answer, Fault, Request, St, LIMIT, Q};

/// A `Date` header as GitHub (and RFC 7231) writes it.
fn http_date(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .unwrap_or_default()
}

fn fault(f: Fault, now: i64) -> Answer {
    let limits = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api";
    match f {
        Fault::Status(status, body) => Answer::json(status, body),
        Fault::RateLimited { reset_in_secs } => {
            let mut a = Answer::json(
                403,
                json!({"message": "API rate limit exceeded for user ID 1.",
                       "documentation_url": format!("{limits}#about-the-primary-rate-limit")}),
            );
            a.exhausted_until = Some(now + reset_in_secs as i64);
            a
        }
        Fault::Secondary { retry_after_secs } => Answer::json(
            403,
            json!({"message": "You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later.",
                   "documentation_url": format!("{limits}#about-secondary-rate-limits")}),
        )
        .with("retry-after", retry_after_secs.to_string()),
        Fault::TooMany { retry_after_secs } => Answer::json(
            429,
            json!({"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                   "documentation_url": format!("{limits}#about-secondary-rate-limits")}),
        )
        .with("retry-after", retry_after_secs.to_string()),
        Fault::Raw {
            status,
            content_type,
            body,
        } => {
            let mut a = Answer::json(status, Value::Null);
            a.raw = Some((content_type, body));
            a
        }
        Fault::AfterDoing(status) => error(status, "Server Error"),
    }
}

/// Why GitHub would refuse a JWT's times on the fake's clock (`now`): issued in the
/// future, expired, or living over ten minutes. Claims it lacks are not checked.
fn jwt_times(cred: &str, now: i64) -> Option<&'static str> {
    use base64::Engine as _;
    let claims = cred.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims)
        .ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    let (iat, exp) = (claims["iat"].as_i64(), claims["exp"].as_i64());
    if iat.is_some_and(|t| t > now) {
        return Some(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past.",
        );
    }
    if exp.is_some_and(|t| t <= now) || iat.zip(exp).is_some_and(|(i, e)| e - i > 600) {
        return Some("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires.");
    }
    None
}

/// Checks the credentials: the configured token on the API, an App's JWT (any
/// three-part token whose times GitHub would take, recorded) on the App's own
/// endpoints. `Some` is the refusal.
fn authenticate(s: &mut St, template: &str, h: &HeaderMap) -> Option<Answer> {
    let auth = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (scheme, cred) = auth.split_once(' ').unwrap_or(("", ""));
    let cred = cred.trim();
    if template == "/app" || template.starts_with("/app/") {
        let jwt = scheme.eq_ignore_ascii_case("bearer")
            && cred.split('.').count() == 3
            && cred.split('.').all(|p| !p.is_empty());
        if jwt {
            s.jwts.push(cred.to_string());
            return jwt_times(cred, s.now()).map(|why| error(401, why));
        }
        return Some(error(401, "A JSON web token could not be decoded"));
    }
    let known = (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        && cred == s.token;
    (!known).then(|| error(401, "Bad credentials"))
}

/// Checks a request against GitHub's description, then answers it (or refuses it as
/// GitHub would: 404, 403 without a User-Agent, 401, 400/422, a queued fault).
fn answer(s: &mut St, m: &str, path: &str, q: &Q, h: &HeaderMap, body: &[u8]) -> Answer {
    let c = openapi::check(m, path, &q.pairs, body);
    let op = if c.operation.is_empty() {
        String::new()
    } else {
        format!(" ({})", c.operation)
    };
    for p in &c.problems {
        s.violations.push(format!("{m} {path}{op}: {p}"));
    }
    let agent = h
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if agent.is_empty() {
        s.violations.push(format!(
            "{m} {path}: no User-Agent header (GitHub refuses such requests with 403)"
        ));
    }
    let Some(template) = c.template.filter(|_| c.method_known) else {
        return not_found();
    };
    if agent.is_empty() {
        return error(403, "Request forbidden by administrative rules. Please make sure your request has a User-Agent header.");
    }
    if let Some(refused) = authenticate(s, template, h) {
        return refused;
    }
    if c.bad_json {
        return error(400, "Problems parsing JSON");
    }
    if !c.problems.is_empty() {
        return error(422, &format!("Invalid request. {}", c.problems.join("; ")));
    }
    let matching = s
        .faults
        .iter()
        .position(|(fm, fp, _)| fm.eq_ignore_ascii_case(m) && path.contains(fp.as_str()));
    let fault_now = matching.and_then(|i| s.faults.remove(i));
    if let Some((_, _, f)) = fault_now
        .clone()
        .filter(|(_, _, f)| !matches!(f, Fault::AfterDoing(_)))
    {
        return fault(f, s.now());
    }
    if template.starts_with("/repos/{owner}/{repo}") {
        let named = format!("{}/{}", c.params["owner"], c.params["repo"]);
        if !named.eq_ignore_ascii_case(&s.repo) {
            return not_found();
        }
    }
    let json = serde_json::from_slice(body).unwrap_or(Value::Null);
    let done = route(s, m, template, &c.params, q, &json, path);
    match fault_now {
        Some((_, _, f)) => fault(f, s.now()),
        None => done,
    }
}

/// Puts GitHub's headers on an answer: rate limit (a 304 costs nothing, as on GitHub),
/// ETag on a GET's 200 (turned into 304 when If-None-Match has it).
fn finish(s: &mut St, m: &str, h: &HeaderMap, a: Answer) -> (u16, Response) {
    let text = match &a.raw {
        Some((_, raw)) => Some(raw.clone()),
        None => a.body.as_ref().map(Value::to_string),
    };
    let kind = a
        .raw
        .as_ref()
        .map_or("application/json; charset=utf-8", |r| r.0);
    let mut status = a.status;
    let etag = text
        .as_ref()
        .filter(|_| m == "GET" && status == 200 && a.raw.is_none())
        .map(|t| format!("\"{:016x}\"", hash(t)));
    if let Some(tag) = &etag {
        let given = h
            .get_all("if-none-match")
            .iter()
            .filter_map(|v| v.to_str().ok());
        if given
            .flat_map(|v| v.split(','))
            .any(|v| v.trim() == "*" || v.trim().trim_start_matches("W/") == tag.as_str())
        {
            status = 304;
            s.not_modified += 1;
        }
    }
    if status != 304 {
        s.used += 1;
    }
    let (remaining, reset) = match a.exhausted_until {
        Some(r) => (0, r),
        None => (LIMIT.saturating_sub(s.used), s.reset),
    };
    let code = StatusCode::from_u16(status).expect("a valid status");
    let mut resp = match text {
        Some(t) if status != 304 => (code, [(header::CONTENT_TYPE, kind)], t).into_response(),
        _ => code.into_response(),
    };
    let mut headers: Vec<(&'static str, String)> = vec![
        ("x-ratelimit-limit", LIMIT.to_string()),
        ("x-ratelimit-remaining", remaining.to_string()),
        ("x-ratelimit-reset", reset.to_string()),
        ("x-ratelimit-used", (LIMIT - remaining).to_string()),
        ("x-ratelimit-resource", "core".into()),
        ("x-github-api-version-selected", "2022-11-28".into()),
        ("x-github-media-type", "github.v3; format=json".into()),
        ("date", http_date(s.now())),
        (
            "x-github-request-id",
            format!("FAKE:{:X}", s.requests.len()),
        ),
    ];
    headers.extend(etag.map(|t| ("etag", t)));
    headers.extend(a.headers);
    for (k, v) in headers {
        resp.headers_mut().insert(
            HeaderName::from_static(k),
            HeaderValue::from_str(&v).expect("a header value"),
        );
    }
    (status, resp)
}

pub(super) async fn handle(
    State(st): State<Arc<Mutex<St>>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let q = Q {
        pairs,
        raw: uri.query().unwrap_or("").to_string(),
    };
    let (resp, stalled) = respond(&st, method.as_str(), uri.path(), q, &h, &body);
    if stalled {
        tokio::time::sleep(std::time::Duration::from_secs(120)).await;
    }
    resp
}

/// Answers (and records) a request; whether its answer is to be stalled.
fn respond(
    st: &Mutex<St>,
    m: &str,
    path: &str,
    q: Q,
    h: &HeaderMap,
    body: &Bytes,
) -> (Response, bool) {
    let mut s = st.lock().unwrap();
    let a = answer(&mut s, m, path, &q, h, body);
    let (status, resp) = finish(&mut s, m, h, a);
    let recorded = (!body.is_empty()).then(|| {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    });
    s.requests.push(Request {
        method: m.to_string(),
        path: path.to_string(),
        query: q.raw,
        body: recorded,
        headers: h
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        at: Instant::now(),
        status,
    });
    let stall = s
        .stalls
        .iter()
        .position(|(sm, sp)| sm == m && path.contains(sp.as_str()) && status < 300);
    if let Some(i) = stall {
        s.stalls.remove(i);
        s.stalled += 1;
    }
    (resp, stall.is_some())
}
