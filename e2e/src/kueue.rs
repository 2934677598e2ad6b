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
//! - the module's Validating/MutatingWebhookConfigurations (`config/components/webhook/
//!   manifests.yaml`, copied into the tool cache by `build.sh`) are registered as Kueue's
//!   kustomization registers them, with each `service` client config turned into a `url` on
//!   the manager's loopback port (the plane has no kube-proxy to route a Service) and the
//!   plane's CA as `caBundle` ([`register_webhooks`]): a webhook refusal is what users see,
//!   so the tests see it too;
//! - feature gate `VisibilityOnDemand=false` (it would serve an aggregated API and write
//!   certificates under `/visibility`);
//! - WaitForPodsReady is a deliberate choice of [`WaitForPodsReady`].
//!
//! The version is chosen by [`KUEUE_VERSION_ENV`] ([`KueueVersion`]): v0.19.2 by default,
//! or v0.16.x, the upstream base of the Red Hat build of Kueue (1.3), pinned in
//! `e2e/tools/kueue-0.16`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::certs::{Ca, write_private};
use crate::error::{Context, PlaneError, Result};
use crate::pods_ready::WaitForPodsReady;
use crate::process::{self, Managed, Spawn};
use crate::resources::{apply, read_yaml_documents};
use crate::tools::Tools;
pub use crate::tools::{KUEUE_VERSION_ENV, KueueVersion};

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
    // On 0.16 the absence of `waitForPodsReady` is what turns it off, and 0.19 defaults an
    // absent one to on; the feature gate ([`feature_gates`]) turns 0.19's off.
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

fn feature_gates(version: KueueVersion, wfpr: WaitForPodsReady) -> String {
    let mut gates = vec!["VisibilityOnDemand=false"];
    if wfpr == WaitForPodsReady::Disabled && version.waits_for_pods_ready_by_default() {
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
        tools: &Tools,
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
        let gates = feature_gates(tools.kueue_version, wfpr);
        let spawn = Spawn::new("kueue", &tools.kueue, log)
            .arg(format!("--config={}", config_path.display()))
            .arg(format!("--feature-gates={gates}"))
            .env("KUBECONFIG", kubeconfig.display().to_string());
        let mut kueue = Kueue {
            process: process::spawn(spawn)?,
            health_addr,
            webhook_addr,
            config_path,
        };
        kueue
            .process
            .wait_until("Kueue", timeout, || async move {
                matches!(
                    process::http_get(health_addr, "/readyz").await,
                    Ok((200, _))
                )
                .then_some(())
            })
            .await?;
        Ok(kueue)
    }
}

/// Registers Kueue's webhook configurations from `manifests` (the pinned module's
/// `config/components/webhook/manifests.yaml`) so that the apiserver calls the manager at
/// `webhook` over TLS signed by `ca_pem`. Call it once the manager is ready: every webhook
/// fails closed, so registered before, it would refuse every Kueue object.
pub async fn register_webhooks(
    client: &kube::Client,
    manifests: &Path,
    webhook: SocketAddr,
    ca_pem: &str,
) -> Result<()> {
    for doc in read_yaml_documents(manifests)? {
        apply(client, &webhook_configuration(doc, webhook, ca_pem)?).await?;
    }
    Ok(())
}

/// Namespaces whose Pods, Jobs and Deployments Kueue's framework webhooks leave alone, as
/// its kustomization (`config/components/webhook/kustomization.yaml`) makes them.
const UNMANAGED_NAMESPACES: [&str; 2] = ["kube-system", KUEUE_NAMESPACE];

/// One webhook configuration as Kueue's kustomization renders it (`kueue-` name prefix, the
/// framework webhooks' namespace selector), pointed at `webhook` by URL.
fn webhook_configuration(
    mut doc: serde_json::Value,
    webhook: SocketAddr,
    ca_pem: &str,
) -> Result<serde_json::Value> {
    use base64::Engine as _;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    doc["metadata"]["name"] = json!(format!("kueue-{name}"));
    let hooks = doc["webhooks"].as_array_mut().ok_or_else(|| {
        PlaneError::Invalid(format!(
            "Kueue webhook configuration {name} has no webhooks"
        ))
    })?;
    for hook in hooks {
        let path = hook["clientConfig"]["service"]["path"]
            .as_str()
            .ok_or_else(|| PlaneError::Invalid(format!("webhook {} has no path", hook["name"])))?
            .to_string();
        hook["clientConfig"] =
            json!({ "url": format!("https://{webhook}{path}"), "caBundle": ca_bundle });
        let on_kueue_objects = hook["rules"].as_array().is_some_and(|rules| {
            rules
                .iter()
                .all(|r| r["apiGroups"] == json!(["kueue.x-k8s.io"]))
        });
        if !on_kueue_objects {
            hook["namespaceSelector"] = json!({ "matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": UNMANAGED_NAMESPACES,
            }]});
        }
    }
    Ok(doc)
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
        let gates = |v, w| feature_gates(v, w);
        assert!(
            gates(KueueVersion::V0_19, WaitForPodsReady::Disabled)
                .contains("DisableWaitForPodsReady=true")
        );
        assert!(
            !gates(KueueVersion::V0_19, WaitForPodsReady::KueueDefault)
                .contains("DisableWaitForPodsReady")
        );
        // 0.16 has no such gate and would refuse to start with it.
        assert!(
            !gates(KueueVersion::V0_16, WaitForPodsReady::Disabled)
                .contains("DisableWaitForPodsReady")
        );
    }

    #[test]
    fn parses_the_version_setting() {
        assert_eq!("0.16".parse(), Ok(KueueVersion::V0_16));
        assert_eq!("v0.19".parse(), Ok(KueueVersion::V0_19));
        assert!("0.18".parse::<KueueVersion>().is_err());
    }

    #[test]
    fn webhooks_are_called_by_url_with_the_plane_ca() {
        let doc = json!({
            "kind": "ValidatingWebhookConfiguration",
            "metadata": { "name": "validating-webhook-configuration" },
            "webhooks": [
                { "name": "vclusterqueue.kb.io",
                  "clientConfig": { "service": { "name": "webhook-service", "namespace": "system",
                                                 "path": "/validate-kueue-x-k8s-io-v1beta2-clusterqueue" } },
                  "rules": [{ "apiGroups": ["kueue.x-k8s.io"] }] },
                { "name": "vjob.kb.io",
                  "clientConfig": { "service": { "path": "/validate-batch-v1-job" } },
                  "rules": [{ "apiGroups": ["batch"] }] },
            ],
        });
        let addr: SocketAddr = "127.0.0.1:9443".parse().unwrap();
        let out = webhook_configuration(doc, addr, "PEM").unwrap();
        assert_eq!(
            out["metadata"]["name"],
            "kueue-validating-webhook-configuration"
        );
        let cq = &out["webhooks"][0];
        assert_eq!(
            cq["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate-kueue-x-k8s-io-v1beta2-clusterqueue"
        );
        assert_eq!(cq["clientConfig"]["caBundle"], "UEVN");
        assert!(cq.get("namespaceSelector").is_none());
        let job = &out["webhooks"][1];
        assert_eq!(
            job["namespaceSelector"]["matchExpressions"][0]["values"],
            json!(["kube-system", "kueue-system"])
        );
    }
}
