//! The real kube-controller-manager (same pinned Kubernetes module as kube-apiserver) for
//! the management cluster of planes that ask for it ([`PlaneOptions::controller_manager`]
//! (crate::PlaneOptions::controller_manager)). It runs only what Hearth's tests need of a
//! cluster, and no kubelet runs the Pods it makes (they stay `Pending`):
//! - **garbage collector**: owner-reference cascades (Fournos relies on them: it never
//!   deletes a lockOnly job's Workload itself);
//! - **deployment** and **replicaset**: a chart's Deployments become Pods, so Pod admission
//!   (Pod Security) is exercised;
//! - **job**: Jobs get their Pods (Fournos's resolve Job);
//! - **namespace**: a deleted namespace is emptied and goes;
//! - **serviceaccount** and **serviceaccount-token**: every namespace gets its `default`
//!   ServiceAccount, and token Secrets are signed with the key whose public half the
//!   apiserver verifies (`--service-account-key-file`).
//!
//! It connects as `system:kube-controller-manager` with a client certificate from the
//! cluster's CA, and each controller then uses its own ServiceAccount's token
//! (`--use-service-account-credentials`, as kubeadm runs it), so each runs with exactly the
//! bootstrap RBAC role Kubernetes gives it. No serving port: readiness is what it does
//! (the `default` ServiceAccount appears in `default`).
//!
//! Opt-in because it costs: it adds to a plane's start and its garbage collector watches
//! every resource type (measured in `bench-results/2026-11-25/plane-start.md`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::Api;

use crate::apiserver::ApiServer;
use crate::certs::write_private;
use crate::error::{Context, Result};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};
use crate::process::{self, Managed, Spawn};

/// The user Kubernetes' bootstrap RBAC grants what the controller manager itself needs
/// (reading its controllers' ServiceAccounts and requesting their tokens).
pub const USER: &str = "system:kube-controller-manager";

/// The controllers run (names as `--controllers` takes them).
pub const CONTROLLERS: &[&str] = &[
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
];

#[derive(Debug)]
pub struct ControllerManager {
    pub process: Managed,
}

impl ControllerManager {
    /// Starts it against `server` (whose files are in `pki_dir`: `ca.crt`, `sa.key`) and
    /// waits until its controllers work.
    pub async fn start(
        bin: &Path,
        server: &ApiServer,
        pki_dir: &Path,
        log: PathBuf,
        timeout: Duration,
    ) -> Result<ControllerManager> {
        if !bin.exists() {
            return Err(crate::error::PlaneError::Tools(format!(
                "{} does not exist; run {}",
                bin.display(),
                crate::tools::build_script().display()
            )));
        }
        let dir = pki_dir.join("controller-manager");
        std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        let identity = server.ca.client(USER, &[])?;
        let kubeconfig = dir.join("kubeconfig");
        write_private(
            &kubeconfig,
            &kubeconfig_yaml(
                &server.name,
                &server.url(),
                &server.ca_pem,
                USER,
                &Credentials::ClientCert(identity),
            ),
        )?;
        let file = |name: &str| pki_dir.join(name).display().to_string();
        let spawn = Spawn::new("kube-controller-manager", bin, &log)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--controllers={}", CONTROLLERS.join(",")))
            .arg("--use-service-account-credentials=true")
            // The same key pair the apiserver signs and verifies ServiceAccount tokens with.
            .arg(format!(
                "--service-account-private-key-file={}",
                file("sa.key")
            ))
            .arg(format!("--root-ca-file={}", file("ca.crt")))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            // A plane's objects change in bursts; the defaults (20 QPS) slow the garbage
            // collector's discovery of Kueue's and Hearth's many resource types.
            .arg("--kube-api-qps=100")
            .arg("--kube-api-burst=200")
            .arg("--v=1");
        let mut manager = ControllerManager {
            process: process::spawn(spawn)?,
        };
        manager.wait_working(server, timeout).await?;
        Ok(manager)
    }

    /// Ready when the serviceaccount controller has made `default/default`: by then the
    /// shared informers run (the garbage collector syncs its own monitors a little later,
    /// and tests wait for its effects with a deadline anyway).
    async fn wait_working(&mut self, server: &ApiServer, timeout: Duration) -> Result<()> {
        let client = server.admin_client().await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
        self.process
            .wait_until("kube-controller-manager", timeout, || {
                let accounts = accounts.clone();
                async move { accounts.get_opt("default").await.ok().flatten().map(drop) }
            })
            .await
    }
}
