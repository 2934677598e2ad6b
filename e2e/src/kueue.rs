//! Kueue's controller manager, run out of cluster against the management apiserver.
//!
//! Configuration, and why (verified against Kueue v0.19.2's `cmd/kueue/main.go`):
//! - leader election off: a single replica, and no Lease churn in tests;
//! - metrics server off (`bindAddress: "0"`), health probes on a free loopback port;
//! - webhook server on a free loopback port with a serving certificate made by the harness
//!   in `certDir`, and **internal cert management off**: on, it would wait for a mounted
//!   Secret and for conversion-webhook client configs on five CRDs. Off, Kueue reads
//!   `/etc/kueue/metrics/certs/tls.{crt,key}` unconditionally at start (even with metrics
//!   off) and exits without them, so the harness writes a pair there if none exists
//!   (this needs write access to `/etc/kueue`, i.e. root or a prepared directory);
//! - no webhook configurations are registered, so nothing ever calls the webhooks: Kueue's
//!   controllers and scheduler still reconcile and admit, only webhook-only validation is
//!   skipped;
//! - feature gate `VisibilityOnDemand=false` (it would serve an aggregated API and write
//!   certificates under `/visibility`);
//! - WaitForPodsReady is a deliberate choice of [`WaitForPodsReady`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::certs::{Ca, write_private};
use crate::error::{Context, PlaneError, Result};
use crate::etcd::with_log;
use crate::pods_ready::WaitForPodsReady;
use crate::process::{self, Managed, Spawn};

/// Kueue's namespace (for Events it records about itself).
pub const KUEUE_NAMESPACE: &str = "kueue-system";
/// Where Kueue reads its metrics serving certificate when internal cert management is off.
pub const METRICS_CERT_DIR: &str = "/etc/kueue/metrics/certs";

#[derive(Debug)]
pub struct Kueue {
    pub process: Managed,
    pub health_addr: SocketAddr,
    pub webhook_addr: SocketAddr,
    pub config_path: PathBuf,
}

/// The `config.kueue.x-k8s.io/v1beta2` Configuration the harness runs Kueue with.
pub fn configuration(
    health: SocketAddr,
    webhook: SocketAddr,
    cert_dir: &Path,
    wfpr: WaitForPodsReady,
) -> serde_json::Value {
    let mut config = json!({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "leaderElection": { "leaderElect": false },
        "health": { "healthProbeBindAddress": health.to_string() },
        "metrics": { "bindAddress": "0" },
        "webhook": { "host": webhook.ip().to_string(), "port": webhook.port(), "certDir": cert_dir.display().to_string() },
        "internalCertManagement": { "enable": false },
        "integrations": { "frameworks": ["batch/job"] },
    });
    if let WaitForPodsReady::Timeout(secs) = wfpr {
        config["waitForPodsReady"] = json!({ "timeout": format!("{secs}s") });
    }
    config
}

fn feature_gates(wfpr: WaitForPodsReady) -> String {
    let mut gates = vec!["VisibilityOnDemand=false"];
    if wfpr == WaitForPodsReady::Disabled {
        gates.push("DisableWaitForPodsReady=true");
    }
    gates.join(",")
}

/// Writes a metrics serving pair to [`METRICS_CERT_DIR`] unless one is there. An existing
/// pair is kept (another plane may be using it; metrics are off, so any valid pair does).
/// The key is written before the certificate, and the certificate is the completeness
/// marker, so a concurrent start never sees a certificate without its key.
fn ensure_metrics_certs(ca: &Ca) -> Result<()> {
    let dir = Path::new(METRICS_CERT_DIR);
    if dir.join("tls.crt").exists() && dir.join("tls.key").exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        PlaneError::Invalid(format!(
            "Kueue (internal cert management off) needs {METRICS_CERT_DIR}/tls.{{crt,key}} and \
         creating {METRICS_CERT_DIR} failed ({e}): run as root once, or create the directory \
         writable by this user"
        ))
    })?;
    let pair = ca.serving("kueue-metrics", &["127.0.0.1", "localhost"])?;
    write_private(&dir.join("tls.key"), &pair.key_pem)?;
    write_private(&dir.join("tls.crt"), &pair.cert_pem)
}

impl Kueue {
    /// Starts Kueue against the apiserver of `kubeconfig` and waits for its `/readyz`
    /// (which includes the webhook server being up).
    pub async fn start(
        bin: &Path,
        dir: &Path,
        log: PathBuf,
        kubeconfig: &Path,
        ca: &Ca,
        wfpr: WaitForPodsReady,
        timeout: Duration,
    ) -> Result<Kueue> {
        let cert_dir = dir.join("webhook-certs");
        std::fs::create_dir_all(&cert_dir)
            .context(|| format!("creating {}", cert_dir.display()))?;
        ca.serving("kueue-webhook", &["127.0.0.1", "localhost"])?
            .write(&cert_dir, "tls")?;
        ensure_metrics_certs(ca)?;
        let health_addr = SocketAddr::from(([127, 0, 0, 1], process::free_port()?));
        let webhook_addr = SocketAddr::from(([127, 0, 0, 1], process::free_port()?));
        let config_path = dir.join("kueue-config.yaml");
        let config = configuration(health_addr, webhook_addr, &cert_dir, wfpr);
        write_private(&config_path, &crate::resources::to_yaml(&config))?;
        let spawn = Spawn::new("kueue", bin, log)
            .arg(format!("--config={}", config_path.display()))
            .arg(format!("--feature-gates={}", feature_gates(wfpr)))
            .env("KUBECONFIG", kubeconfig.display().to_string());
        let mut kueue = Kueue {
            process: process::spawn(spawn)?,
            health_addr,
            webhook_addr,
            config_path,
        };
        let log = kueue.process.spec.log.clone();
        let process = &mut kueue.process;
        process::poll("Kueue", timeout, || {
            let running = process.check_running();
            async move {
                running?;
                Ok(match process::http_get(health_addr, "/readyz").await {
                    Ok((200, _)) => Some(()),
                    _ => None,
                })
            }
        })
        .await
        .map_err(|e| with_log(e, log))?;
        Ok(kueue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_follows_the_choice() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let c = configuration(addr, addr, Path::new("/x"), WaitForPodsReady::KueueDefault);
        assert!(c.get("waitForPodsReady").is_none());
        let c = configuration(addr, addr, Path::new("/x"), WaitForPodsReady::Timeout(30));
        assert_eq!(c["waitForPodsReady"]["timeout"], "30s");
        assert!(feature_gates(WaitForPodsReady::Disabled).contains("DisableWaitForPodsReady=true"));
        assert!(!feature_gates(WaitForPodsReady::KueueDefault).contains("DisableWaitForPodsReady"));
    }
}
