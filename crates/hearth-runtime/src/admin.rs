//! The admin HTTP server: `/healthz`, `/readyz` and `/metrics` on their own address,
//! so probes and scrapes never share a port (or a failure mode) with anything else.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{
    metrics::{Metrics, OPENMETRICS_CONTENT_TYPE},
    readiness::Readiness,
};

/// Probes and scrapes are tiny and few; anything beyond this waits to be accepted.
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
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tracing::info!(addr = %self.local_addr, "admin server listening");
        loop {
            let permit = tokio::select! {
                () = shutdown.cancelled() => break,
                permit = slots.clone().acquire_owned() => permit.expect("semaphore is never closed"),
            };
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
            let state = self.state.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = service_fn(move |request| {
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
