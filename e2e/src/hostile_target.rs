//! A "target cluster" that answers whatever a test tells it to: a loopback HTTPS server
//! with its own CA, for the hostile-target tests. It speaks just enough HTTP/1.1 for a
//! client to send one request per connection and read the answer; what it answers
//! (status code, body, possibly echoing the request's headers) is the test's choice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::certs::Ca;
use crate::error::{Context, PlaneError, Result};

/// Longest request head read; Hearth's requests are a few hundred bytes.
const MAX_HEAD: usize = 64 * 1024;

/// What the server saw of a request.
#[derive(Debug, Clone)]
pub struct Asked {
    /// Path and query, as sent.
    pub path: String,
    /// Header lines, as sent (`Name: value`).
    pub headers: Vec<String>,
}

/// One answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Arc<Vec<u8>>,
}

impl Answer {
    pub fn json(code: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            code,
            content_type: "application/json",
            body: Arc::new(body.into()),
        }
    }

    pub fn text(code: u16, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            code,
            content_type: "text/plain",
            body: Arc::new(body.into()),
        }
    }

    /// A plausible `/version`.
    pub fn version() -> Answer {
        Answer::json(
            200,
            r#"{"major":"1","minor":"36","gitVersion":"v1.36.3","platform":"linux/amd64"}"#,
        )
    }
}

type Responder = Arc<dyn Fn(&Asked) -> Answer + Send + Sync>;

/// A running hostile target; stops when dropped.
pub struct HostileTarget {
    addr: SocketAddr,
    ca_pem: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl HostileTarget {
    /// Listens on a free loopback port and answers every request with `respond`.
    pub async fn start(respond: impl Fn(&Asked) -> Answer + Send + Sync + 'static) -> Result<Self> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            // Another part of the process may have installed one already.
            let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        });
        let ca = Ca::new("hostile-target-ca")?;
        let serving = ca.serving("hostile-target", &["127.0.0.1", "localhost"])?;
        let certs = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| PlaneError::Invalid(format!("hostile target certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())
            .map_err(|e| PlaneError::Invalid(format!("hostile target key: {e}")))?;
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| PlaneError::Invalid(format!("hostile target TLS: {e}")))?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context(|| "binding a hostile target".into())?;
        let addr = listener
            .local_addr()
            .context(|| "reading the hostile target's address".into())?;
        let respond: Responder = Arc::new(respond);
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, respond, counter) =
                    (acceptor.clone(), respond.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Some(asked) = read_head(&mut tls).await else {
                        return;
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                    let answer = respond(&asked);
                    let head = format!(
                        "HTTP/1.1 {} Hostile\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        answer.code,
                        answer.content_type,
                        answer.body.len()
                    );
                    // The client may hang up early (a cap reached): not an error here.
                    if tls.write_all(head.as_bytes()).await.is_ok()
                        && tls.write_all(&answer.body).await.is_ok()
                    {
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        Ok(HostileTarget {
            addr,
            ca_pem: ca.cert_pem().to_owned(),
            requests,
            task,
        })
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig's `server`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The CA that signed the server's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for HostileTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_head(
    tls: &mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> Option<Asked> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tls.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    Some(Asked { path, headers })
}
