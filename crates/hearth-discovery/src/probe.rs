//! The I/O of one probe: build a client from a validated kubeconfig, `GET /version`,
//! then list the target's nodes in pages and count their GPUs, all under one deadline.
//!
//! Nothing that comes back from a target reaches status, Events or logs unfiltered:
//! transport failures become messages written here, and what a target says (its
//! version, the message of a 403) is bounded, stripped of control characters, and has
//! the kubeconfig's token and key removed in case a hostile or confused server echoes
//! them.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use hearth_api::text::{bounded, quoted};
use http_body_util::BodyExt as _;
use kube::api::ListParams;
use secrecy::ExposeSecret as _;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use crate::gpus::{GpuTally, MAX_GPU_MODELS};
use crate::kubeconfig::{Auth, KubeconfigError, ValidatedKubeconfig, client_config};
use crate::node_page::{PageError, decode_page};
use crate::status::{NodeListing, ProbeOutcome};

/// Nodes per page of the node list.
pub const PAGE_SIZE: u32 = 100;
/// Pages listed at most (`PAGE_SIZE × MAX_PAGES` = 20,000 nodes, four times the
/// largest cluster Kubernetes supports), so a target cannot keep a probe paging forever.
pub const MAX_PAGES: u32 = 200;
/// Longest text taken from a target into a message.
const MAX_SERVER_TEXT: usize = 300;
/// Largest answer read from a target: one page of [`PAGE_SIZE`] nodes. A real Node is
/// 5–20 KiB of JSON (GPU Feature Discovery's ~60 labels, up to 50 image entries,
/// OpenShift's annotations), so 100 of them take 0.5–2 MiB; 4 MiB leaves 40 KiB per
/// node. A page is held at most once per running probe while it is decoded, so
/// `HEARTH_DISCOVERY_CONCURRENCY` (8) × 4 MiB bounds what targets can make discovery
/// hold, well inside the chart's 128 Mi limit.
pub const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes read of an error answer: enough for a Kubernetes `Status`, whose message is
/// all Hearth quotes.
const MAX_ERROR_BYTES: usize = 16 * 1024;

/// Node pages read at once when nothing else is said: `HEARTH_DISCOVERY_CONCURRENCY`'s
/// default.
pub const PAGES_AT_ONCE: usize = 8;

/// How a probe runs.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Deadline of the whole probe: connect, TLS, `/version` and every page.
    pub timeout: Duration,
    pub page_size: u32,
    pub max_pages: u32,
    /// Permits to hold a node page (up to [`MAX_PAGE_BYTES`]) while it is read and
    /// decoded, shared by every probe: what protects discovery's memory from targets.
    /// Connecting, TLS and `GET /version` need none, so a target that never answers
    /// holds no permit and delays no other probe.
    pub pages: Arc<Semaphore>,
}

impl ProbeSettings {
    pub fn new(timeout: Duration) -> Self {
        Self::with_pages_at_once(timeout, PAGES_AT_ONCE)
    }

    pub fn with_pages_at_once(timeout: Duration, pages: usize) -> Self {
        Self {
            timeout,
            page_size: PAGE_SIZE,
            max_pages: MAX_PAGES,
            pages: Arc::new(Semaphore::new(pages.max(1))),
        }
    }
}

/// A 401: the target's own words add nothing to it.
const UNAUTHORIZED: ProbeOutcome = ProbeOutcome::Unauthorized {
    detail: String::new(),
};

/// Probes the target of `kubeconfig`. Never fails: every failure is an outcome.
/// Every string in the outcome that came from the target (its version, the message
/// of an error, GPU model names) has passed the kubeconfig's [`Redactor`] where it was
/// read; the rest is Hearth's own words.
pub async fn probe(kubeconfig: &ValidatedKubeconfig, settings: &ProbeSettings) -> ProbeOutcome {
    let redactor = &Redactor::new(kubeconfig);
    let deadline = Instant::now() + settings.timeout;
    // Built per probe from the validated fields alone (see kubeconfig::client_config);
    // it may fail only on TLS material the TLS stack refuses.
    let client = match target_client(&client_config(kubeconfig, settings.timeout)) {
        Ok(client) => client,
        Err(_) => return ProbeOutcome::Invalid(KubeconfigError::ClientSetup),
    };
    let seconds = settings.timeout.as_secs();

    let unreachable = |detail| ProbeOutcome::Unreachable { detail };
    let server_version = match timeout_at(deadline, server_version(&client, redactor)).await {
        Err(_) => return unreachable(format!("no answer within {seconds}s")),
        Ok(Ok(version)) => version,
        Ok(Err(Failure::Http { code: 401, .. })) => return UNAUTHORIZED,
        // Authenticated, merely not allowed to read the version: go on.
        Ok(Err(Failure::Http { code: 403, .. })) => None,
        Ok(Err(Failure::Http { code, message })) => {
            return unreachable(format!(
                "the server answered HTTP {code} ({}) to GET /version{}; is the server URL a Kubernetes API server?",
                status_class(code),
                excerpt(&message)
            ));
        }
        Ok(Err(Failure::Transport(detail))) => return unreachable(detail),
        Ok(Err(Failure::Decode)) => {
            return unreachable(
                "the server's answer to GET /version is not a Kubernetes version; is the \
                 server URL a Kubernetes API server?"
                    .into(),
            );
        }
    };

    let nodes = match timeout_at(deadline, count_nodes(&client, settings, redactor)).await {
        Err(_) => Err(NodeFailure::Failed(format!(
            "the probe did not finish within {seconds}s"
        ))),
        Ok(result) => result,
    };
    let nodes = match nodes {
        Ok(tally) if tally.too_many_models() => NodeListing::Failed {
            detail: format!(
                "the target reports more than {MAX_GPU_MODELS} GPU models; Hearth publishes at most \
                 {MAX_GPU_MODELS} per cluster (each is a resource of the shared ClusterQueue): check the \
                 nodes' GPU product labels"
            ),
        },
        Ok(tally) => {
            NodeListing::Counted(tally.finish_refusing(|model| redactor.holds_secret(model)))
        }
        Err(NodeFailure::Unauthorized) => return UNAUTHORIZED,
        Err(NodeFailure::Forbidden(message)) => NodeListing::Forbidden { detail: message },
        Err(NodeFailure::Failed(detail)) => NodeListing::Failed { detail },
    };
    ProbeOutcome::Reached {
        server_version,
        nodes,
    }
}

/// `gitVersion` of `GET /version`, or `None` when the server states none.
async fn server_version(
    client: &kube::Client,
    redactor: &Redactor,
) -> Result<Option<String>, Failure> {
    #[derive(serde::Deserialize)]
    struct Info {
        #[serde(rename = "gitVersion")]
        git_version: Option<String>,
    }
    let request = http::Request::get("/version")
        .body(Vec::new())
        .map_err(|_| Failure::Decode)?;
    let body = get(client, request, MAX_ERROR_BYTES, redactor).await?;
    let info: Info = serde_json::from_reader(body).map_err(|_| Failure::Decode)?;
    Ok(info
        .git_version
        .map(|v| redactor.clean(&v))
        .filter(|v| !v.is_empty()))
}

/// A client for a target, from a configuration made by
/// [`client_config`](crate::kubeconfig::client_config): TLS and credentials from the
/// configuration, its connect, read and write timeouts, answers capped at
/// [`MAX_PAGE_BYTES`]. Unlike
/// `kube::Client::try_from`, no HTTP trace layer: a target that is down is an outcome
/// reported in status, not an error line per request in the controller's log.
pub fn target_client(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    use tower::ServiceBuilder;

    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    // Each read and write on the connection is bounded too, so a target that trickles
    // bytes is cut per read even before the probe's overall deadline. The TCP connect
    // is bounded above; the TLS handshake by the probe's deadline, which says so.
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    timed.set_reset_reader_on_write(config.reset_reader_on_write);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(timed);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_response(|response: http::Response<_>| {
            response.map(|body| http_body_util::Limited::new(body, MAX_PAGE_BYTES))
        })
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, "default"))
}

enum NodeFailure {
    Unauthorized,
    /// With the server's message (it names the identity and what it may not do).
    Forbidden(String),
    Failed(String),
}

async fn count_nodes(
    client: &kube::Client,
    settings: &ProbeSettings,
    redactor: &Redactor,
) -> Result<GpuTally, NodeFailure> {
    let nodes = kube::core::Request::new("/api/v1/nodes");
    let mut tally = GpuTally::default();
    let mut continue_token: Option<String> = None;
    for page in 0..settings.max_pages {
        let number = page + 1;
        let mut params = ListParams::default().limit(settings.page_size);
        if let Some(token) = &continue_token {
            params = params.continue_token(token);
        }
        let request = nodes.list(&params).map_err(|_| {
            NodeFailure::Failed("the target's continue token cannot be sent back".into())
        })?;
        // Held until the page is decoded and dropped (end of this iteration). The
        // semaphore is never closed, so the permit always comes.
        let _page = settings.pages.acquire().await;
        let body = get(client, request, MAX_PAGE_BYTES, redactor)
            .await
            .map_err(|failure| match failure {
                Failure::Http { code: 401, .. } => NodeFailure::Unauthorized,
                Failure::Http { code: 403, message } => NodeFailure::Forbidden(message),
                Failure::Http { code: 410, .. } => NodeFailure::Failed(
                    "the node list changed too much while it was paged through (HTTP 410); the next probe starts over"
                        .into(),
                ),
                Failure::Http { code, message } => NodeFailure::Failed(format!(
                    "HTTP {code} ({}) on page {number}{}",
                    status_class(code),
                    excerpt(&message)
                )),
                Failure::Transport(detail) => {
                    NodeFailure::Failed(format!("{detail} (page {number})"))
                }
                Failure::Decode => NodeFailure::Failed(format!(
                    "page {number} of the node list is not a list of Nodes"
                )),
            })?;
        let list = decode_page(body, settings.page_size).map_err(|e| {
            NodeFailure::Failed(match e {
                PageError::NotANodeList => {
                    format!("page {number} of the node list is not a list of Nodes")
                }
                refused => format!("page {number} of the node list is refused: {refused}"),
            })
        })?;
        tally.add_all(&list.nodes);
        match list.continue_token {
            Some(token) => continue_token = Some(token),
            None => return Ok(tally),
        }
    }
    Err(NodeFailure::Failed(format!(
        "the target has more than {} nodes ({} pages of {}); Hearth counts at most that many",
        u64::from(settings.max_pages) * u64::from(settings.page_size),
        settings.max_pages,
        settings.page_size
    )))
}

/// The body of a successful `GET`, at most `cap` bytes, as a reader over the chunks as
/// they arrived (never copied into one buffer). An error answer becomes
/// [`Failure::Http`] with the message of its `Status`, read no further than
/// [`MAX_ERROR_BYTES`]. The request goes out through `Client::send` alone: kube's
/// decoding helpers log a body they cannot parse, and a target's body is its own words.
async fn get(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    cap: usize,
    redactor: &Redactor,
) -> Result<Chunks, Failure> {
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(|e| Failure::Transport(describe_transport(&e)))?;
    let code = response.status();
    let body = response.into_body();
    if code.is_success() {
        return match read_capped(body, cap).await {
            Ok((chunks, false)) => Ok(chunks),
            Ok((_, true)) => Err(Failure::Transport(too_large(cap))),
            Err(e) => Err(Failure::Transport(describe_transport(&e))),
        };
    }
    // Whatever the error body holds, the code alone is a usable answer.
    let message = match read_capped(body, MAX_ERROR_BYTES).await {
        Ok((chunks, _)) => error_message(chunks, redactor),
        Err(_) => String::new(),
    };
    Err(Failure::Http {
        code: code.as_u16(),
        message,
    })
}

/// Reads `body` until it ends or passes `cap`; `true` when it was cut there.
async fn read_capped(
    mut body: kube::client::Body,
    cap: usize,
) -> Result<(Chunks, bool), kube::Error> {
    let mut chunks = Chunks::default();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        chunks.len += data.len();
        chunks.parts.push_back(data);
        if chunks.len > cap {
            return Ok((chunks, true));
        }
    }
    Ok((chunks, false))
}

/// The `message` of a Kubernetes `Status`, or else the start of the body as text;
/// bounded, one line, without the kubeconfig's secrets.
fn error_message(mut body: Chunks, redactor: &Redactor) -> String {
    #[derive(serde::Deserialize)]
    struct Status {
        message: Option<String>,
    }
    let mut text = Vec::with_capacity(body.len.min(MAX_ERROR_BYTES));
    if body.read_to_end(&mut text).is_err() {
        return String::new();
    }
    match serde_json::from_slice::<Status>(&text) {
        Ok(Status {
            message: Some(message),
        }) => redactor.clean(&message),
        _ => redactor.clean(&String::from_utf8_lossy(&text)),
    }
}

/// "the server's answer is larger than 4 MiB" (or KiB, for the small answers).
fn too_large(cap: usize) -> String {
    const MIB: usize = 1024 * 1024;
    let size = if cap >= MIB && cap.is_multiple_of(MIB) {
        format!("{} MiB", cap / MIB)
    } else {
        format!("{} KiB", cap.div_ceil(1024))
    };
    format!("the server's answer is larger than {size}")
}

/// What kind of failure an HTTP status code is, in words.
fn status_class(code: u16) -> &'static str {
    match code {
        400 => "bad request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not found",
        410 => "expired",
        429 => "too many requests",
        c if (400..500).contains(&c) => "client error",
        c if (500..600).contains(&c) => "server error",
        _ => "not a success",
    }
}

/// `: "<text>"` for a non-empty excerpt, nothing otherwise.
fn excerpt(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {}", quoted(text, MAX_SERVER_TEXT))
    }
}

/// A body as the chunks it arrived in.
#[derive(Default)]
struct Chunks {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(front) = self.parts.front_mut() {
            if front.is_empty() {
                self.parts.pop_front();
                continue;
            }
            let n = front.len().min(buf.len());
            front.copy_to_slice(&mut buf[..n]);
            return Ok(n);
        }
        Ok(0)
    }
}

/// A failed request, in words chosen here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The server answered with an error status; `message` is its own words, bounded.
    Http { code: u16, message: String },
    /// No usable answer: connection, TLS, timeout.
    Transport(String),
    /// An answer that is not what a Kubernetes API server sends.
    Decode,
}

/// A transport failure in words a person can act on. Only kinds of failure are named,
/// never the library's own text.
pub fn describe_transport(error: &(dyn std::error::Error + 'static)) -> String {
    let mut dns = false;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.is::<http_body_util::LengthLimitError>() {
            return too_large(MAX_PAGE_BYTES);
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return describe_tls(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                return describe_tls(tls);
            }
            if let Some(text) = describe_io(io.kind()) {
                return text.to_owned();
            }
        }
        // hyper-util's resolver error has no public type; its text is fixed.
        if e.to_string().starts_with("dns error") {
            dns = true;
        }
        current = e.source();
    }
    if dns {
        "the server's host name does not resolve".into()
    } else {
        "the connection to the server failed".into()
    }
}

fn describe_io(kind: std::io::ErrorKind) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    Some(match kind {
        K::ConnectionRefused => "connection refused: nothing listens at the server's address",
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
            "the server closed the connection"
        }
        K::TimedOut => "timed out waiting for the server",
        K::HostUnreachable | K::NetworkUnreachable => "no network route to the server",
        K::UnexpectedEof => "the server closed the connection during the TLS handshake",
        _ => return None,
    })
}

fn describe_tls(error: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(cert) => match cert {
            C::UnknownIssuer | C::BadSignature => {
                "TLS: the server's certificate is not signed by the kubeconfig's certificate-authority-data"
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "TLS: the server's certificate is not valid for the server's host name (set tls-server-name?)"
            }
            C::Expired | C::ExpiredContext { .. } => "TLS: the server's certificate has expired",
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "TLS: the server's certificate is not valid yet"
            }
            C::Revoked => "TLS: the server's certificate is revoked",
            _ => "TLS: the server's certificate is not acceptable",
        }
        .into(),
        rustls::Error::AlertReceived(alert) => {
            format!("TLS: the server refused the handshake ({alert:?})")
        }
        _ => "TLS: the handshake with the server failed".into(),
    }
}

/// Removes a kubeconfig's secrets from text that came back from its target.
pub struct Redactor {
    secrets: Vec<String>,
}

const REDACTED: &str = "[REDACTED]";

impl Redactor {
    pub fn new(kubeconfig: &ValidatedKubeconfig) -> Self {
        let mut secrets = Vec::new();
        match kubeconfig.auth() {
            Auth::Token(token) => secrets.push(token.expose_secret().to_owned()),
            Auth::ClientCert { key_pem, .. } => {
                let pem = String::from_utf8_lossy(key_pem.expose_secret());
                // The key's base64 lines; a fragment of one is useless and harmless.
                secrets.extend(
                    pem.lines()
                        .map(str::trim)
                        .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
                        .map(str::to_owned),
                );
            }
        }
        secrets.retain(|s| !s.is_empty());
        Self { secrets }
    }

    /// Whether `text` holds one of the secrets.
    pub fn holds_secret(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `text` bounded, one line, printable, without any of the secrets.
    pub fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        bounded(out.trim(), MAX_SERVER_TEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeconfig::validate;
    use crate::test_support::{TOKEN, b64, cert, https_cluster, kubeconfig, token_user};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "library words")
    }

    #[derive(Debug)]
    struct Wrapped(Box<dyn std::error::Error + Send + Sync>);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn transport_failures_are_described_in_our_words() {
        let refused = Wrapped(Box::new(io(std::io::ErrorKind::ConnectionRefused)));
        assert_eq!(
            describe_transport(&refused),
            "connection refused: nothing listens at the server's address"
        );
        let timeout = Wrapped(Box::new(io(std::io::ErrorKind::TimedOut)));
        assert_eq!(
            describe_transport(&timeout),
            "timed out waiting for the server"
        );
        let tls = Wrapped(Box::new(std::io::Error::other(
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        )));
        assert_eq!(
            describe_transport(&tls),
            "TLS: the server's certificate is not signed by the kubeconfig's certificate-authority-data"
        );
        let direct = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        assert_eq!(
            describe_transport(&direct),
            "TLS: the server's certificate has expired"
        );
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        assert_eq!(
            describe_transport(&alert),
            "TLS: the server refused the handshake (HandshakeFailure)"
        );
        let other = Wrapped(Box::new(io(std::io::ErrorKind::Other)));
        assert_eq!(
            describe_transport(&other),
            "the connection to the server failed"
        );
    }

    #[derive(Debug)]
    struct Dns;
    impl std::fmt::Display for Dns {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("dns error")
        }
    }
    impl std::error::Error for Dns {}

    #[test]
    fn dns_failures_are_named() {
        let e = Wrapped(Box::new(Dns));
        assert_eq!(
            describe_transport(&e),
            "the server's host name does not resolve"
        );
    }

    fn chunks(parts: &[&[u8]]) -> Chunks {
        Chunks {
            parts: parts.iter().map(|p| Bytes::copy_from_slice(p)).collect(),
            len: parts.iter().map(|p| p.len()).sum(),
        }
    }

    #[test]
    fn error_bodies_become_a_bounded_one_line_excerpt() {
        let status = json!({ "kind": "Status", "code": 403, "message": "x\n".repeat(400) });
        let text = status.to_string();
        let (head, tail) = text.as_bytes().split_at(10);
        let r = token_redactor();
        let message = error_message(chunks(&[head, tail]), &r);
        assert!(message.starts_with("x x"), "{message}");
        assert!(!message.contains('\n'));
        assert!(message.chars().count() <= MAX_SERVER_TEXT + 1);
        // Not a Status: the start of the text, whatever it is.
        let html = format!("<html>\n{}</html>", "y".repeat(10_000));
        let message = error_message(chunks(&[html.as_bytes()]), &r);
        assert!(message.starts_with("<html> yyy"), "{message}");
        assert!(message.chars().count() <= MAX_SERVER_TEXT + 1);
        assert_eq!(
            error_message(chunks(&[b"\xff\xfe"]), &r),
            "\u{fffd}\u{fffd}"
        );
        assert_eq!(error_message(chunks(&[]), &r), "");
        assert_eq!(excerpt(""), "");
        // A quote in the server's words cannot end the excerpt early.
        assert_eq!(excerpt("say \"ok\""), r#": "say \"ok\"""#);
        assert_eq!(status_class(503), "server error");
        assert_eq!(status_class(418), "client error");
        assert_eq!(
            too_large(MAX_PAGE_BYTES),
            "the server's answer is larger than 4 MiB"
        );
        assert_eq!(
            too_large(MAX_ERROR_BYTES),
            "the server's answer is larger than 16 KiB"
        );
    }

    fn token_redactor() -> Redactor {
        let kc = validate(
            kubeconfig(https_cluster(), token_user())
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        Redactor::new(&kc)
    }

    #[test]
    fn error_excerpts_and_models_lose_the_secrets() {
        let r = token_redactor();
        let echo = format!("Authorization: Bearer {TOKEN}");
        let status = json!({ "kind": "Status", "message": echo }).to_string();
        for body in [status.as_str(), echo.as_str()] {
            let message = error_message(chunks(&[body.as_bytes()]), &r);
            assert!(!message.contains(TOKEN), "{message}");
            assert!(message.contains(REDACTED), "{message}");
        }
        assert!(r.holds_secret(&format!("GPU-{TOKEN}")));
        assert!(!r.holds_secret("NVIDIA-A100-SXM4-80GB"));
    }

    #[test]
    fn tokens_echoed_by_a_server_are_removed() {
        let r = token_redactor();
        let echoed = format!("nodes is forbidden: bearer {TOKEN} may not");
        assert_eq!(
            r.clean(&echoed),
            "nodes is forbidden: bearer [REDACTED] may not"
        );
    }

    #[test]
    fn key_material_echoed_by_a_server_is_removed() {
        let c = cert();
        let user = json!({
            "client-certificate-data": b64(&c.cert_pem),
            "client-key-data": b64(&c.key_pem),
        });
        let kc = validate(kubeconfig(https_cluster(), user).to_string().as_bytes()).unwrap();
        let r = Redactor::new(&kc);
        let line = c.key_pem.lines().find(|l| !l.starts_with("-----")).unwrap();
        let cleaned = r.clean(&format!("echo {line}"));
        assert!(!cleaned.contains(line), "{cleaned}");
        assert!(cleaned.contains(REDACTED));
    }

    /// A server that accepts TCP and never answers: the probe ends at its deadline and
    /// says so, without waiting for the OS's TCP timeouts.
    #[tokio::test]
    async fn a_silent_server_is_unreachable_within_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let cluster = json!({
            "server": format!("https://{addr}"),
            "certificate-authority-data": b64(cert().cert_pem),
        });
        let kc = validate(kubeconfig(cluster, token_user()).to_string().as_bytes()).unwrap();
        let started = std::time::Instant::now();
        let outcome = probe(&kc, &ProbeSettings::new(Duration::from_millis(500))).await;
        let elapsed = started.elapsed();
        drop(listener);
        assert!(
            matches!(&outcome, ProbeOutcome::Unreachable { .. }),
            "{outcome:?}"
        );
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    }

    #[tokio::test]
    async fn a_closed_port_is_connection_refused() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let cluster = json!({
            "server": format!("https://127.0.0.1:{port}"),
            "certificate-authority-data": b64(cert().cert_pem),
        });
        let kc = validate(kubeconfig(cluster, token_user()).to_string().as_bytes()).unwrap();
        let outcome = probe(&kc, &ProbeSettings::new(Duration::from_secs(5))).await;
        assert_eq!(
            outcome,
            ProbeOutcome::Unreachable {
                detail: "connection refused: nothing listens at the server's address".into()
            }
        );
    }
}
