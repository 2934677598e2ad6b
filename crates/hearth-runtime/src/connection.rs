//! The connection to the management apiserver: HTTP/2 over TLS, as client-go talks, so that
//! a controller's concurrent requests are streams of one connection.
//!
//! kube's own client stack offers only HTTP/1.1, where every request in flight needs a TLS
//! connection of its own. In a burst (32 reconciles, 32 creates, Event writers, the
//! watches) that was dozens of connections per controller, each with its read and write
//! buffers and dispatch channel, kept by the pool after the burst, and a TLS handshake
//! each for the apiserver. Here the TLS config, the server name and the request layers are
//! still kube's (`ConfigExt`); only the connector offers `h2` by ALPN, with `http/1.1` for
//! an apiserver that does not speak HTTP/2.

use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt as _, RustlsTlsError};

/// With nothing read for this long, the connection is pinged; and a ping not answered
/// within [`PING_TIMEOUT`] closes it, failing its requests and watches, which start over
/// on a new connection. Without that, a connection whose peer vanished without a reset
/// (a node gone, a partition) would hold every watch silent and time out every write
/// until the kernel gave up on it, many minutes later. The values are client-go's
/// (`ReadIdleTimeout` 30 s, `PingTimeout` 15 s): a healthy apiserver sees the ping traffic
/// it sees from any Kubernetes client, one ping per half minute of silence.
const PING_AFTER_SILENCE: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// One pooled HTTP client: over HTTP/2, one connection per apiserver, shared by every
/// service stack built on a clone of it.
pub(crate) type Connection = Client<TimeoutConnector<HttpsConnector<HttpConnector>>, Body>;

/// The client for `config`'s apiserver. Ignores `config.proxy_url` (the caller falls back
/// to kube's builder then).
pub(crate) fn connection(config: &kube::Config) -> Result<Connection, kube::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    // One connection carries every request: Nagle would hold a request's small HEADERS
    // frame back while an earlier frame waits for its acknowledgement. (Go, and so
    // client-go, sets TCP_NODELAY on every connection.)
    tcp.set_nodelay(true);
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => {
            let name = name.clone().try_into().map_err(|error| {
                kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(error))
            })?;
            tls.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => tls,
    };
    // Only the connect (TCP and TLS) is bounded here. kube's builder also bounds each
    // read and write on the connection, which on a connection shared by long-polling
    // watches would tear it down whenever the watched objects are quiet; each write has
    // its own deadline instead (`client::LeaderGuard`), and a dead connection is found by
    // the pings below.
    let mut connector =
        TimeoutConnector::new(tls.enable_http1().enable_http2().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_AFTER_SILENCE)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        // Also without a request in flight, so an unused connection is not found dead
        // only by the next write, which would then wait out its whole deadline.
        .http2_keep_alive_while_idle(true)
        // The pool counts an HTTP/2 connection idle from its last new request, even while
        // watches stream on it; expiring it would open a second connection beside the
        // one the watches keep. It ends when the apiserver closes it (its own idle timeout,
        // GOAWAY) or a ping goes unanswered. (Over the HTTP/1.1 fallback, idle connections
        // stay pooled as they did with kube's builder, which expires them only when it
        // next looks for one.)
        .pool_idle_timeout(None)
        .build(connector))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use http::{Request, Response, Version};
    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;
    use tokio::sync::{Barrier, watch};
    use tokio_rustls::TlsAcceptor;
    use tokio_rustls::rustls::ServerConfig;
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

    use super::*;
    use crate::client::{ManagementClients, management_clients};

    /// Requests in flight at once: a controller's reconciles, or its creates, in a burst.
    const AT_ONCE: usize = 32;
    /// For the whole exchange; a client that queued the held requests behind each other
    /// would never fill the barrier and fail here instead of hanging.
    const DEADLINE: Duration = Duration::from_secs(30);

    /// An HTTPS server on loopback that offers `alpn`, counts the TCP connections it
    /// accepts and the HTTP version of each request, and answers `/held` only once
    /// [`AT_ONCE`] of them are in flight together.
    struct Server {
        url: String,
        ca: CertificateDer<'static>,
        connections: Arc<AtomicUsize>,
        versions: Arc<Mutex<Vec<Version>>>,
    }

    impl Server {
        async fn start(alpn: &[&[u8]]) -> Server {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let mut tls = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
                )
                .unwrap();
            tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            let acceptor = TlsAcceptor::from(Arc::new(tls));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}", listener.local_addr().unwrap());
            let connections = Arc::new(AtomicUsize::new(0));
            let versions = Arc::new(Mutex::new(Vec::new()));
            let held = Arc::new(Barrier::new(AT_ONCE));
            let (accepted, seen) = (connections.clone(), versions.clone());
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let (acceptor, seen, held) = (acceptor.clone(), seen.clone(), held.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                        let answer =
                            hyper::service::service_fn(move |request: Request<Incoming>| {
                                seen.lock().unwrap().push(request.version());
                                let held = held.clone();
                                async move {
                                    if request.uri().path() == "/held" {
                                        held.wait().await;
                                    }
                                    Ok::<_, Infallible>(Response::new(Full::new(
                                        Bytes::from_static(b"ok"),
                                    )))
                                }
                            });
                        let io = TokioIo::new(tls);
                        // A client hanging up is no failure of the server.
                        let _ = if h2 {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, answer)
                                .await
                        } else {
                            hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, answer)
                                .await
                        };
                    });
                }
            });
            Server {
                url,
                ca: cert.der().clone(),
                connections,
                versions,
            }
        }

        fn clients(&self) -> ManagementClients {
            let mut config = kube::Config::new(self.url.parse().unwrap());
            config.root_cert = Some(vec![self.ca.to_vec()]);
            let (_, leader) = watch::channel(true);
            management_clients(
                &config,
                leader,
                Duration::from_secs(10),
                &crate::write_activity::WriteActivity::default(),
            )
            .unwrap()
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }

        fn versions(&self) -> Vec<Version> {
            self.versions.lock().unwrap().clone()
        }
    }

    async fn get(client: &kube::Client, path: &str) -> String {
        let request = Request::get(path).body(Vec::new()).unwrap();
        client.request_text(request).await.unwrap()
    }

    /// [`AT_ONCE`] requests held open together, half through each client.
    async fn all_at_once(clients: &ManagementClients) {
        let requests = (0..AT_ONCE).map(|i| {
            let client = if i % 2 == 0 {
                &clients.read
            } else {
                &clients.write
            };
            get(client, "/held")
        });
        let answers = tokio::time::timeout(DEADLINE, futures::future::join_all(requests))
            .await
            .expect("every held request answered");
        assert!(answers.iter().all(|answer| answer == "ok"), "{answers:?}");
    }

    #[tokio::test]
    async fn concurrent_requests_of_both_clients_share_one_http2_connection() {
        let server = Server::start(&[b"h2", b"http/1.1"]).await;
        let clients = server.clients();
        assert_eq!(get(&clients.read, "/warm").await, "ok");
        assert_eq!(server.connections(), 1);

        all_at_once(&clients).await;

        assert_eq!(server.connections(), 1, "one connection for all requests");
        let versions = server.versions();
        assert_eq!(versions.len(), AT_ONCE + 1);
        assert!(
            versions.iter().all(|v| *v == Version::HTTP_2),
            "{versions:?}"
        );
    }

    #[tokio::test]
    async fn without_h2_the_clients_fall_back_to_a_connection_per_request() {
        let server = Server::start(&[b"http/1.1"]).await;
        let clients = server.clients();
        assert_eq!(get(&clients.write, "/warm").await, "ok");

        all_at_once(&clients).await;

        // Each held request needed a connection of its own (the warm one, back in the
        // pool, may have served one of them).
        assert!(server.connections() >= AT_ONCE, "{}", server.connections());
        let versions = server.versions();
        assert!(
            versions.iter().all(|v| *v == Version::HTTP_11),
            "{versions:?}"
        );
    }
}
