//! A git server over HTTPS that wants GitHub's credentials the way GitHub does: a
//! request without them gets 401 and a `WWW-Authenticate: Basic` challenge (git then
//! asks its credential helpers), one with `Authorization: Basic x-access-token:<token>`
//! is served by the real `git http-backend` (smart HTTP) from the bare repositories in
//! a folder. A push can be held as its pack arrives, to look at what runs meanwhile.
//! Its certificate is [`CERT`] (for 127.0.0.1): a client must be told to trust it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State as Shared;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use tokio::sync::oneshot;
use tokio_rustls::rustls;

/// The server's certificate (self-signed, for IP 127.0.0.1, valid until 2126).
pub const CERT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/git-https-test-cert.pem"
);
const KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/git-https-test-key.pem"
);

/// One request the server answered.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path and query.
    pub path: String,
    pub authorization: Option<String>,
    pub status: u16,
}

pub struct GitHttps {
    addr: SocketAddr,
    state: Arc<State>,
}

struct State {
    root: PathBuf,
    /// The one `Authorization` value served.
    wanted: String,
    seen: Mutex<Vec<Seen>>,
    /// The next push's pack waits here: told it arrived, it waits to be let go.
    hold: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

/// A push held by [`GitHttps::hold_push`].
pub struct Held {
    reached: Option<oneshot::Receiver<()>>,
    go: Option<oneshot::Sender<()>>,
}

impl Held {
    /// Returns once the push's pack arrived (and is being held).
    pub async fn reached(&mut self) {
        let reached = self.reached.take().expect("reached once");
        tokio::time::timeout(Duration::from_secs(60), reached)
            .await
            .expect("the push never arrived")
            .expect("the server dropped the push");
    }

    /// Lets the push go on (dropping the `Held` does too).
    pub fn release(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }
}

impl GitHttps {
    /// Serves the bare repositories under `root` to whoever sends GitHub's Basic
    /// credentials for `token`.
    pub async fn start(root: &Path, token: &str) -> GitHttps {
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        let state = Arc::new(State {
            root: root.to_path_buf(),
            wanted: format!("Basic {basic}"),
            seen: Mutex::new(Vec::new()),
            hold: Mutex::new(None),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(state.clone());
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let listener = Tls {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_config())),
        };
        tokio::spawn(async move { axum::serve(listener, app).await });
        GitHttps { addr, state }
    }

    /// The URL of the repository at `name` under the root.
    pub fn url(&self, name: &str) -> String {
        format!("https://{}/{name}", self.addr)
    }

    /// The server's origin, as git's `http.<url>.*` settings name it.
    pub fn origin(&self) -> String {
        format!("https://{}/", self.addr)
    }

    /// Makes git with `HOME` at `home` trust the server's certificate.
    pub fn trust_in(&self, home: &Path) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.join(".gitconfig"))
            .unwrap();
        writeln!(f, "[http \"{}\"]\n\tsslCAInfo = {CERT}", self.origin()).unwrap();
    }

    /// Holds the next push as its pack arrives, until [`Held::release`].
    pub fn hold_push(&self) -> Held {
        let (reached, reached_rx) = oneshot::channel();
        let (go, go_rx) = oneshot::channel();
        *self.state.hold.lock().unwrap() = Some((reached, go_rx));
        Held {
            reached: Some(reached_rx),
            go: Some(go),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }
}

fn server_config() -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(CERT)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// TCP connections, each after its TLS handshake.
struct Tls {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for Tls {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

async fn answer(
    Shared(s): Shared<Arc<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = header(&headers, "authorization");
    let response = if authorization.as_deref() != Some(s.wanted.as_str()) {
        Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Basic realm=\"GitHub\"")
            .body(Body::empty())
            .unwrap()
    } else {
        if method == Method::POST && uri.path().ends_with("/git-receive-pack") {
            let held = s.hold.lock().unwrap().take();
            if let Some((reached, go)) = held {
                let _ = reached.send(());
                let _ = go.await;
            }
        }
        backend(&s, &method, &uri, &headers, body).await
    };
    s.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        authorization,
        status: response.status().as_u16(),
    });
    response
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The request answered by `git http-backend`, as a CGI.
async fn backend(
    s: &State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| header(headers, name);
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(super::git_program());
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &s.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        // Authenticated: receive-pack is served.
        .env("REMOTE_USER", "x-access-token")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if let Some(e) = header("content-encoding") {
        cmd.env("HTTP_CONTENT_ENCODING", e);
    }
    if let Some(p) = header("git-protocol") {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.unwrap();
    let _ = feed.await;
    cgi_response(&out.stdout)
}

/// A CGI's output as an HTTP response: its headers (`Status:` the status), a blank
/// line, the body.
fn cgi_response(out: &[u8]) -> Response {
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            out.windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        })
        .unwrap_or((out.len(), out.len()));
    let head = String::from_utf8_lossy(&out[..split.0]);
    let mut response = Response::builder();
    let mut status = 200;
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            status = value
                .split(' ')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(500);
        } else {
            response = response.header(name, value);
        }
    }
    response
        .status(status)
        .body(Body::from(out[split.1..].to_vec()))
        .unwrap()
}
