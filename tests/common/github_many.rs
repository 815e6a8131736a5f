//! Many repositories behind one API URL, as GitHub serves them: a proxy in front of a
//! fake GitHub per repository (each checks every request against GitHub's OpenAPI
//! description). `/repos/{owner}/{name}/…` goes to that repository's fake; the lists
//! of repositories (`/user/repos`, `/installation/repositories`) are every fake's
//! together; anything else goes to the first.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::github::FakeGithub;

pub struct ManyGithub {
    pub addr: SocketAddr,
    fakes: Arc<Vec<(String, FakeGithub)>>,
}

impl ManyGithub {
    pub async fn start(repos: &[&str], login: &str, token: &str) -> ManyGithub {
        let mut fakes = Vec::new();
        for r in repos {
            fakes.push((r.to_string(), FakeGithub::start(r, login, token).await));
        }
        let fakes = Arc::new(fakes);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(fakes.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        ManyGithub { addr, fakes }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fake of `repo`.
    pub fn repo(&self, repo: &str) -> &FakeGithub {
        &self
            .fakes
            .iter()
            .find(|(r, _)| r.eq_ignore_ascii_case(repo))
            .unwrap()
            .1
    }

    /// Every fake's requests GitHub's description refuses.
    pub fn violations(&self) -> Vec<String> {
        self.fakes
            .iter()
            .flat_map(|(_, f)| f.violations())
            .collect()
    }
}

async fn send(
    fake: &FakeGithub,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> reqwest::Response {
    let url = format!(
        "{}{}",
        fake.url(),
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut req = reqwest::Client::new()
        .request(method.clone(), url)
        .body(body);
    for (k, v) in headers {
        if k != "host" && k != "content-length" {
            req = req.header(k, v);
        }
    }
    req.send().await.unwrap()
}

async fn forward(
    State(fakes): State<Arc<Vec<(String, FakeGithub)>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    if method == Method::GET && (path == "/user/repos" || path == "/installation/repositories") {
        let mut all = Vec::new();
        for (_, f) in fakes.iter() {
            let answer: Value = send(f, &method, &uri, &headers, body.clone())
                .await
                .json()
                .await
                .unwrap();
            match answer {
                Value::Array(items) => all.extend(items),
                o => all.extend(o["repositories"].as_array().cloned().unwrap_or_default()),
            }
        }
        let body = if path == "/user/repos" {
            json!(all)
        } else {
            json!({"total_count": all.len(), "repositories": all})
        };
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    let target = path
        .strip_prefix("/repos/")
        .and_then(|rest| {
            let mut parts = rest.splitn(3, '/');
            Some(format!("{}/{}", parts.next()?, parts.next()?))
        })
        .and_then(|repo| fakes.iter().find(|(r, _)| r.eq_ignore_ascii_case(&repo)))
        .unwrap_or(&fakes[0]);
    let answer = send(&target.1, &method, &uri, &headers, body).await;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    let mut out = HeaderMap::new();
    for (k, v) in answer.headers() {
        if k != "content-length" && k != "transfer-encoding" {
            out.insert(k.clone(), v.clone());
        }
    }
    let bytes = answer.bytes().await.unwrap();
    (status, out, bytes).into_response()
}
