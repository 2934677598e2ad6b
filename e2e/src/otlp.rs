//! The smallest OTLP/HTTP receiver, for tests that check what a controller exports:
//! it answers 200 to every request and records each request's path and body.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub body: Vec<u8>,
}

/// A receiver on a free loopback port, running until the test's runtime ends.
#[derive(Clone, Debug)]
pub struct Receiver {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    pub async fn start() -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, record.clone()));
            }
        });
        Ok(Receiver { addr, requests })
    }

    /// `http://<addr>`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("requests").clone()
    }
}

/// HTTP/1.1 with keep-alive: request line, headers, a `content-length` body, reply 200.
async fn serve(stream: tokio::net::TcpStream, record: Arc<Mutex<Vec<Request>>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if stream.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        record
            .lock()
            .expect("requests")
            .push(Request { path, body });
        let reply =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.get_mut().write_all(reply).await.is_err() {
            return;
        }
    }
}
