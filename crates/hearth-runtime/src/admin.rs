//! The admin HTTP server: `/healthz`, `/readyz` and `/metrics` on their own address,
//! so probes and scrapes never share a port (or a failure mode) with anything else.
//!
//! It runs on a thread of its own ([`AdminServer::spawn`]), not on the controller's
//! one-thread runtime: decoding a large watch event or validating a 1 MiB kubeconfig
//! holds that thread for tens of milliseconds (more in a debug build, and seconds on a
//! starved node), and a kubelet probe waits one second. Measured before the move, with
//! six busy processes on two cores: discovery answered `/healthz` in up to 1.55 s while
//! it validated the hostile e2e suite's kubeconfigs, kueue-sync in 63 ms. Liveness still
//! says whether the controller runs: its runtime beats [`Liveness`] every second, and
//! `/healthz` fails once the beats stop for [`STALLED_AFTER`].

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    metrics::{Metrics, OPENMETRICS_CONTENT_TYPE},
    mutex::lock,
    readiness::Readiness,
};

/// Open connections at most. Probes and scrapes are few, so this only binds when someone
/// holds connections open without using them; see [`Connections`] for what happens then.
const MAX_CONNECTIONS: usize = 64;
/// A client that has not sent its request headers by then is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the controller's runtime may go without a [`Liveness`] beat before
/// `/healthz` fails. Far above any step the runtime takes at once (a second on a starved
/// node, in a debug build), far below what a person would wait for a stuck controller:
/// with the chart's probe (every 10 s, 3 failures) the kubelet restarts it within a
/// minute.
pub const STALLED_AFTER: Duration = Duration::from_secs(30);

/// How often the controller's runtime beats.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the admin server's thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Whether the controller's runtime still runs: it [`beat`](Self::beat)s, the admin
/// thread reads when it last did. Cheap to clone; clones share it.
#[derive(Clone, Debug)]
pub struct Liveness {
    inner: Arc<Beats>,
}

#[derive(Debug)]
struct Beats {
    started: Instant,
    /// Milliseconds from `started` to the last beat.
    last: AtomicU64,
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    /// Live as of now.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Beats {
                started: Instant::now(),
                last: AtomicU64::new(0),
            }),
        }
    }

    /// The runtime ran just now.
    pub fn beat(&self) {
        self.beat_at(Instant::now());
    }

    fn beat_at(&self, at: Instant) {
        let ms = u64::try_from(at.saturating_duration_since(self.inner.started).as_millis())
            .unwrap_or(u64::MAX);
        self.inner.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// Beats every [`BEAT_EVERY`] on the runtime that awaits it, until `stop`.
    pub async fn beat_until(self, stop: CancellationToken) {
        loop {
            self.beat();
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(BEAT_EVERY) => {}
            }
        }
    }

    /// `Err(how long)` when the last beat is more than [`STALLED_AFTER`] before `now`.
    fn check_at(&self, now: Instant) -> Result<(), Duration> {
        let last =
            self.inner.started + Duration::from_millis(self.inner.last.load(Ordering::Relaxed));
        match now.saturating_duration_since(last) {
            silent if silent > STALLED_AFTER => Err(silent),
            _ => Ok(()),
        }
    }
}

/// A bound (listening) admin server; [`AdminServer::spawn`] answers requests on a
/// thread of its own ([`AdminServer::serve`] on the caller's runtime).
#[derive(Debug)]
pub struct AdminServer {
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    readiness: Readiness,
    metrics: Metrics,
    liveness: Liveness,
}

/// The admin server's thread; [`AdminThread::stopped`] waits for it to end.
#[derive(Debug)]
pub struct AdminThread {
    done: tokio::sync::oneshot::Receiver<()>,
}

impl AdminThread {
    /// Waits until the server has stopped (after its shutdown token is cancelled).
    pub async fn stopped(self) {
        // An error means the thread ended without saying so: it is gone either way.
        let _ = self.done.await;
    }
}

impl AdminServer {
    /// Binds now, so a taken port fails startup instead of a background task.
    pub fn bind(
        addr: SocketAddr,
        readiness: Readiness,
        metrics: Metrics,
        liveness: Liveness,
    ) -> Result<Self, AdminError> {
        let bind_error = |source| AdminError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(Self {
            listener,
            local_addr,
            state: Arc::new(State {
                readiness,
                metrics,
                liveness,
            }),
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves on a thread of its own, with a one-thread runtime of its own (see the
    /// module docs), until `shutdown` is cancelled.
    pub fn spawn(self, shutdown: CancellationToken) -> Result<AdminThread, AdminError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AdminError::Thread)?;
        let (done_tx, done) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("hearth-admin".to_owned())
            .spawn(move || {
                runtime.block_on(self.serve(shutdown));
                let _ = done_tx.send(());
            })
            .map_err(AdminError::Thread)?;
        Ok(AdminThread { done })
    }

    /// Serves on the caller's runtime until `shutdown` is cancelled; open connections
    /// then finish their current request and close.
    pub async fn serve(self, shutdown: CancellationToken) {
        let listener = match TcpListener::from_std(self.listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "admin server cannot listen");
                return;
            }
        };
        let connections = Arc::new(Mutex::new(Connections::default()));
        tracing::info!(addr = %self.local_addr, "admin server listening");
        loop {
            // Always accept: a full server makes room (below) instead of leaving a
            // kubelet probe in the listen queue behind idle connections.
            let (stream, peer) = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Usually EMFILE: back off instead of spinning on accept.
                        tracing::warn!(%error, "admin server cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let slot = lock(&connections).open(MAX_CONNECTIONS);
            let state = self.state.clone();
            let shutdown = shutdown.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                let _open = Registered {
                    id: slot.id,
                    connections,
                };
                let served = slot.served;
                let service = service_fn(move |request| {
                    served.store(true, Ordering::Relaxed);
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(route(&request, &state)) }
                });
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                let result = tokio::select! {
                    result = connection.as_mut() => result,
                    () = slot.evicted.cancelled() => {
                        tracing::debug!(%peer, "admin connection closed to make room");
                        return;
                    }
                    () = shutdown.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "admin connection ended with an error");
                }
            });
        }
        tracing::debug!("admin server stopped");
    }
}

/// The open connections, oldest first. At [`MAX_CONNECTIONS`] a new connection closes an
/// old one rather than wait for a slot: a cap that makes new connections wait lets
/// anyone who can reach the port hold every slot with connections that send nothing,
/// and the kubelet, whose probes time out after a second, restarts the controller. The
/// one closed is the oldest that has not sent a request (a Prometheus that keeps its
/// connection open loses it only to other clients that sent one), else the oldest. A
/// probe sends its request as soon as it connects, so it is answered unless
/// [`MAX_CONNECTIONS`] connections arrive after it before its request does. Memory and
/// sockets stay bounded by the cap; an evicted task ends at its next poll. (A separate
/// port for probes would need its own cap, and the same answer when that one fills.)
#[derive(Debug, Default)]
struct Connections {
    next_id: u64,
    open: BTreeMap<u64, Open>,
}

#[derive(Debug)]
struct Open {
    served: Arc<AtomicBool>,
    evicted: CancellationToken,
}

/// What a connection's task needs from [`Connections::open`].
struct Slot {
    id: u64,
    served: Arc<AtomicBool>,
    evicted: CancellationToken,
}

impl Connections {
    /// Registers a new connection, closing one first when `max` are open.
    fn open(&mut self, max: usize) -> Slot {
        if self.open.len() >= max {
            let victim = self
                .open
                .iter()
                .find(|(_, open)| !open.served.load(Ordering::Relaxed))
                .or_else(|| self.open.iter().next())
                .map(|(id, _)| *id);
            if let Some(open) = victim.and_then(|id| self.open.remove(&id)) {
                open.evicted.cancel();
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let slot = Slot {
            id,
            served: Arc::new(AtomicBool::new(false)),
            evicted: CancellationToken::new(),
        };
        self.open.insert(
            id,
            Open {
                served: slot.served.clone(),
                evicted: slot.evicted.clone(),
            },
        );
        slot
    }
}

/// Takes a connection off [`Connections`] when its task ends, however it ends.
struct Registered {
    id: u64,
    connections: Arc<Mutex<Connections>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.connections).open.remove(&self.id);
    }
}

fn route<B>(request: &Request<B>, state: &State) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/healthz" | "/livez" => match state.liveness.check_at(Instant::now()) {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(silent) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not live: the controller's runtime has not run for {} s\n",
                    silent.as_secs()
                ),
            ),
        },
        "/readyz" => match state.readiness.check() {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(not_ready) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {}\n", not_ready.join(", ")),
            ),
        },
        "/metrics" => match state.metrics.encode() {
            Ok(body) => response(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, body),
            Err(error) => {
                tracing::error!(%error, "cannot encode metrics");
                text(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n")
            }
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    response(status, "text/plain; charset=utf-8", body)
}

fn response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    struct Reply {
        status: StatusCode,
        content_type: String,
        body: String,
    }

    async fn request(addr: SocketAddr, method: Method, path: &str) -> Reply {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            content_type,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> Reply {
        request(addr, Method::GET, path).await
    }

    /// Asserts the status and body a GET of `path` is answered with.
    async fn assert_get(addr: SocketAddr, path: &str, status: StatusCode, body: &str) {
        let reply = get(addr, path).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (status, body),
            "{path}"
        );
    }

    /// A server on a free loopback port, live.
    fn bound(readiness: Readiness, metrics: Metrics) -> AdminServer {
        AdminServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            readiness,
            metrics,
            Liveness::new(),
        )
        .unwrap()
    }

    async fn start(readiness: Readiness, metrics: Metrics) -> (SocketAddr, CancellationToken) {
        let server = bound(readiness, metrics);
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        tokio::spawn(server.serve(shutdown.clone()));
        (addr, shutdown)
    }

    #[tokio::test]
    async fn healthz_is_ok_while_running() {
        let (addr, shutdown) = start(Readiness::new(), Metrics::new("hearth-test")).await;
        assert_get(addr, "/healthz", StatusCode::OK, "ok\n").await;
        shutdown.cancel();
    }

    #[tokio::test]
    async fn readyz_waits_for_every_gate() {
        let readiness = Readiness::new();
        let clusters = readiness.gate("fournosclusters");
        let secrets = readiness.gate("secrets");
        let (addr, shutdown) = start(readiness, Metrics::new("hearth-test")).await;

        assert_get(
            addr,
            "/readyz",
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: fournosclusters, secrets\n",
        )
        .await;

        clusters.ready();
        assert_get(
            addr,
            "/readyz",
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: secrets\n",
        )
        .await;

        secrets.ready();
        assert_get(addr, "/readyz", StatusCode::OK, "ready\n").await;
        shutdown.cancel();
    }

    #[tokio::test]
    async fn readiness_ignores_leadership() {
        let metrics = Metrics::new("hearth-test");
        metrics.set_leader(false);
        let (addr, shutdown) = start(Readiness::new(), metrics).await;
        assert_eq!(get(addr, "/readyz").await.status, StatusCode::OK);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text() {
        let metrics = Metrics::new("hearth-test");
        let (addr, shutdown) = start(Readiness::new(), metrics.clone()).await;

        let reply = get(addr, "/metrics").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.content_type,
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert!(
            reply.body.contains("# TYPE hearth_leader gauge\n"),
            "{}",
            reply.body
        );
        assert!(reply.body.contains("hearth_leader 0\n"), "{}", reply.body);
        assert!(reply.body.contains("hearth_build_info{"), "{}", reply.body);

        metrics.set_leader(true);
        assert!(
            get(addr, "/metrics")
                .await
                .body
                .contains("hearth_leader 1\n")
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_are_refused() {
        let (addr, shutdown) = start(Readiness::new(), Metrics::new("hearth-test")).await;
        assert_eq!(get(addr, "/").await.status, StatusCode::NOT_FOUND);
        assert_eq!(get(addr, "/healthz/x").await.status, StatusCode::NOT_FOUND);
        assert_eq!(
            request(addr, Method::POST, "/healthz").await.status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            get(addr, "/healthz?verbose=1").await.status,
            StatusCode::OK,
            "query strings are ignored"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn stops_accepting_after_shutdown() {
        let server = bound(Readiness::new(), Metrics::new("hearth-test"));
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn(server.serve(shutdown.clone()));
        assert_eq!(get(addr, "/healthz").await.status, StatusCode::OK);

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("serve returns once shutdown is cancelled")
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "listener is closed"
        );
    }

    /// Connections that send nothing, or half a request line, and stay open.
    async fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
        let mut held = Vec::with_capacity(n);
        for i in 0..n {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            if i % 2 == 1 {
                stream.write_all(b"GET /heal").await.unwrap();
            }
            held.push(stream);
        }
        held
    }

    #[tokio::test]
    async fn probes_are_answered_while_idle_connections_hold_every_slot() {
        let (addr, shutdown) = start(Readiness::new(), Metrics::new("hearth-test")).await;
        let mut held = idle_connections(addr, MAX_CONNECTIONS + 36).await;
        for path in ["/healthz", "/readyz", "/healthz"] {
            let reply = tokio::time::timeout(Duration::from_secs(1), get(addr, path))
                .await
                .unwrap_or_else(|_| panic!("{path} not answered within a second"));
            assert_eq!(reply.status, StatusCode::OK, "{path}");
            held.extend(idle_connections(addr, 16).await);
        }

        // Bounded: all but the newest MAX_CONNECTIONS were closed, oldest first.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let closed = held.len() - MAX_CONNECTIONS;
        for (i, stream) in held.iter_mut().take(closed).enumerate() {
            let mut buf = [0; 64];
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => {}
                Ok(Ok(n)) => panic!("idle connection {i} got {n} bytes"),
                Err(_) => panic!("idle connection {i} of {} is still open", held.len()),
            }
        }
        shutdown.cancel();
    }

    #[test]
    fn a_full_server_closes_the_oldest_connection_that_sent_nothing() {
        let mut connections = Connections::default();
        let first = connections.open(3);
        let second = connections.open(3);
        let third = connections.open(3);
        first.served.store(true, Ordering::Relaxed);

        let fourth = connections.open(3);
        assert!(!first.evicted.is_cancelled(), "it sent a request");
        assert!(second.evicted.is_cancelled());
        assert_eq!(connections.open.len(), 3);

        third.served.store(true, Ordering::Relaxed);
        fourth.served.store(true, Ordering::Relaxed);
        connections.open(3);
        assert!(
            first.evicted.is_cancelled(),
            "the oldest, when all sent one"
        );
        assert!(!third.evicted.is_cancelled() && !fourth.evicted.is_cancelled());
        assert_eq!(connections.open.len(), 3);
    }

    #[tokio::test]
    async fn bind_reports_a_taken_port() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let error = AdminServer::bind(
            addr,
            Readiness::new(),
            Metrics::new("hearth-test"),
            Liveness::new(),
        )
        .unwrap_err();
        assert!(error.to_string().contains(&addr.to_string()), "{error}");
    }

    /// A plain HTTP/1.0 GET from a thread of its own: status line's code and body.
    fn blocking_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Ok((code, body.to_owned()))
    }

    /// The controller's runtime has one thread; while it is held (here: blocked until
    /// the probe is answered, which never happens if the server shares that thread),
    /// probes, readiness and scrapes are still answered from the admin thread.
    #[test]
    fn probes_are_answered_while_the_controllers_runtime_is_held() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = bound(Readiness::new(), Metrics::new("hearth-test"));
            let addr = server.local_addr();
            let shutdown = CancellationToken::new();
            let admin = server.spawn(shutdown.clone()).unwrap();

            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for path in ["/healthz", "/readyz", "/metrics"] {
                    let _ = tx.send((path, blocking_get(addr, path)));
                }
            });
            for _ in 0..3 {
                // Blocks the runtime's only thread until the answer arrives.
                let (path, answer) = rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("answered while the runtime is held");
                let (code, _) = answer.unwrap();
                assert_eq!(code, 200, "{path}");
            }

            shutdown.cancel();
            tokio::time::timeout(Duration::from_secs(5), admin.stopped())
                .await
                .expect("the admin thread ends once shutdown is cancelled");
            assert!(
                std::net::TcpStream::connect(addr).is_err(),
                "listener is closed"
            );
        });
    }

    #[test]
    fn liveness_fails_once_the_beats_stop_for_long() {
        let liveness = Liveness::new();
        let t0 = liveness.inner.started + Duration::from_secs(100);
        liveness.beat_at(t0);
        assert_eq!(liveness.check_at(t0), Ok(()));
        assert_eq!(liveness.check_at(t0 + STALLED_AFTER), Ok(()));
        let late = t0 + STALLED_AFTER + Duration::from_secs(1);
        assert_eq!(
            liveness.check_at(late),
            Err(STALLED_AFTER + Duration::from_secs(1))
        );
        // A beat seen late (an older instant) never moves the last beat back.
        liveness.beat_at(t0 - Duration::from_secs(50));
        assert!(liveness.check_at(late).is_err());
        liveness.beat_at(late);
        assert_eq!(liveness.check_at(late), Ok(()));
    }

    #[tokio::test]
    async fn a_stalled_runtime_fails_healthz_with_a_reason() {
        let stale = Liveness {
            inner: Arc::new(Beats {
                started: Instant::now()
                    .checked_sub(STALLED_AFTER + Duration::from_secs(5))
                    .unwrap(),
                last: AtomicU64::new(0),
            }),
        };
        let state = State {
            readiness: Readiness::new(),
            metrics: Metrics::new("hearth-test"),
            liveness: stale,
        };
        let reply = route(&Request::get("/healthz").body(()).unwrap(), &state);
        assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = reply.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "not live: the controller's runtime has not run for 35 s\n"
        );
    }
}
