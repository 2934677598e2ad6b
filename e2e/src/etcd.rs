//! One etcd for every apiserver of the plane (each apiserver has its own `--etcd-prefix`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Result;
use crate::process::{self, Managed, Spawn};

#[derive(Debug)]
pub struct Etcd {
    pub process: Managed,
    pub client_url: String,
    pub data_dir: PathBuf,
    client_addr: SocketAddr,
}

impl Etcd {
    /// Starts etcd with its data in `data_dir` and waits until it is healthy.
    pub async fn start(
        bin: &Path,
        data_dir: PathBuf,
        log: PathBuf,
        timeout: Duration,
    ) -> Result<Etcd> {
        let client_port = process::free_port()?;
        let peer_port = process::free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let spawn = Spawn::new("etcd", bin, log)
            .arg("--name=hearth-e2e")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=hearth-e2e={peer_url}"))
            // Durability buys nothing for a throw-away plane and fsync dominates its latency.
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        let mut etcd = Etcd {
            process: process::spawn(spawn)?,
            client_url,
            data_dir,
            client_addr: SocketAddr::from(([127, 0, 0, 1], client_port)),
        };
        etcd.wait_healthy(timeout).await?;
        Ok(etcd)
    }

    async fn wait_healthy(&mut self, timeout: Duration) -> Result<()> {
        let addr = self.client_addr;
        self.process
            .wait_until("etcd", timeout, || async move {
                match process::http_get(addr, "/health").await {
                    Ok((200, body)) if body.contains("\"health\":\"true\"") => Some(()),
                    _ => None,
                }
            })
            .await
    }
}
