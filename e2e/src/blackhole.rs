//! A TCP endpoint that accepts connections and never answers: what a firewalled or hung
//! apiserver looks like to a client (the TLS handshake never completes), as opposed to a
//! stopped one (connection refused).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::error::{Context, Result};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};

#[derive(Debug)]
pub struct BlackHole {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BlackHole {
    /// Listens on a free loopback port. Runs on a thread of its own, so it works from any
    /// (or no) async runtime.
    pub fn start() -> Result<BlackHole> {
        let listener =
            TcpListener::bind("127.0.0.1:0").context(|| "binding a black hole".into())?;
        let addr = listener
            .local_addr()
            .context(|| "reading the black hole's address".into())?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("black-hole".into())
            .spawn(move || {
                // Held, never read or written, until the black hole is dropped.
                let mut held: Vec<TcpStream> = Vec::new();
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        held.push(stream);
                    }
                }
            })
            .context(|| "starting the black hole thread".into())?;
        Ok(BlackHole {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig's `server`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// A kubeconfig that sends a token to the hole, trusting `ca_pem` (a real target's CA,
    /// so that only the silence can fail it).
    pub fn kubeconfig(&self, ca_pem: &str) -> String {
        kubeconfig_yaml(
            "hole",
            &self.url(),
            ca_pem,
            "u",
            &Credentials::Token("t".into()),
        )
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
