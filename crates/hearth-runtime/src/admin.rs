//! The admin HTTP server: `/healthz`, `/readyz` and `/metrics` on their own address,
//! so probes and scrapes never share a port (or a failure mode) with anything else.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    metrics::{Metrics, OPENMETRICS_CONTENT_TYPE},
    readiness::Readiness,
};

/// Open connections at most. Probes and scrapes are few, so this only binds when someone
/// holds connections open without using them; see [`Connections`] for what happens then.
const MAX_CONNECTIONS: usize = 64;
/// A client that has not sent its request headers by then is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A bound (listening) admin server; [`AdminServer::serve`] answers requests.
#[derive(Debug)]
pub struct AdminServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    readiness: Readiness,
    metrics: Metrics,
}

impl AdminServer {
    /// Binds now, so a taken port fails startup instead of a background task.
    pub async fn bind(
        addr: SocketAddr,
        readiness: Readiness,
        metrics: Metrics,
    ) -> Result<Self, AdminError> {
        let bind_error = |source| AdminError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        Ok(Self {
            listener,
            local_addr,
            state: Arc::new(State { readiness, metrics }),
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` is cancelled; open connections then finish their
    /// current request and close.
    pub async fn serve(self, shutdown: CancellationToken) {
        let connections = Arc::new(Mutex::new(Connections::default()));
        tracing::info!(addr = %self.local_addr, "admin server listening");
        loop {
            // Always accept: a full server makes room (below) instead of leaving a
            // kubelet probe in the listen queue behind idle connections.
            let (stream, peer) = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
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

fn lock(connections: &Mutex<Connections>) -> std::sync::MutexGuard<'_, Connections> {
    // Nothing panics while holding it; a poisoned map is still a consistent map.
    connections
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn route<B>(request: &Request<B>, state: &State) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n"),
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

    async fn start(readiness: Readiness, metrics: Metrics) -> (SocketAddr, CancellationToken) {
        let server = AdminServer::bind("127.0.0.1:0".parse().unwrap(), readiness, metrics)
            .await
            .unwrap();
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        tokio::spawn(server.serve(shutdown.clone()));
        (addr, shutdown)
    }

    #[tokio::test]
    async fn healthz_is_ok_while_running() {
        let (addr, shutdown) = start(Readiness::new(), Metrics::new("hearth-test")).await;
        let reply = get(addr, "/healthz").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "ok\n");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn readyz_waits_for_every_gate() {
        let readiness = Readiness::new();
        let clusters = readiness.gate("fournosclusters");
        let secrets = readiness.gate("secrets");
        let (addr, shutdown) = start(readiness, Metrics::new("hearth-test")).await;

        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.body, "not ready: fournosclusters, secrets\n");

        clusters.ready();
        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.body, "not ready: secrets\n");

        secrets.ready();
        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "ready\n");
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
        let server = AdminServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            Readiness::new(),
            Metrics::new("hearth-test"),
        )
        .await
        .unwrap();
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
        let error = AdminServer::bind(addr, Readiness::new(), Metrics::new("hearth-test"))
            .await
            .unwrap_err();
        assert!(error.to_string().contains(&addr.to_string()), "{error}");
    }
}
