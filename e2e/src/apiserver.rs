//! kube-apiserver processes: the management cluster and the targets. Each has its own CA,
//! serving certificate, admin client certificate (`system:masters`) and ServiceAccount
//! signing key, so that credentials of one are worthless on another, as with real clusters.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::certs::{Ca, CertPair, service_account_key, write_private};
use crate::error::{Context, PlaneError, Result};
use crate::kubeconfig::{Credentials, client_from_yaml, kubeconfig_yaml};
use crate::layout::{AUDIT_LOG_FILE, AUDIT_POLICY_FILE};
use crate::process::{self, Managed, Spawn};

/// The admin user of every apiserver (its client certificate's CN).
pub const ADMIN_USER: &str = "hearth-e2e-admin";

/// Audit policy of the management apiserver: metadata of every request, no bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

#[derive(Debug)]
pub struct ApiServer {
    pub name: String,
    pub port: u16,
    pub ca_pem: String,
    /// Signs this server's certificates; the management CA also signs Kueue's.
    pub ca: Ca,
    /// Admin kubeconfig (inline credentials), also written to `admin_kubeconfig_path`.
    pub admin_kubeconfig: String,
    pub admin_kubeconfig_path: PathBuf,
    pub process: Option<Managed>,
    bin: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    etcd_url: String,
    admin: CertPair,
}

impl ApiServer {
    /// Generates certificates and keys under `dir`; does not start anything.
    pub fn prepare(
        name: &str,
        bin: &Path,
        dir: PathBuf,
        log: PathBuf,
        etcd_url: &str,
    ) -> Result<ApiServer> {
        std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        let ca = Ca::new(&format!("hearth-e2e {name} CA"))?;
        write_private(&dir.join("ca.crt"), ca.cert_pem())?;
        ca.serving(
            "kube-apiserver",
            &["127.0.0.1", "localhost", "kubernetes.default.svc"],
        )?
        .write(&dir, "serving")?;
        let admin = ca.client(ADMIN_USER, &["system:masters"])?;
        let (sa_private, sa_public) = service_account_key()?;
        write_private(&dir.join("sa.key"), &sa_private)?;
        write_private(&dir.join("sa.pub"), &sa_public)?;
        write_private(&dir.join(AUDIT_POLICY_FILE), AUDIT_POLICY)?;
        let mut server = ApiServer {
            name: name.to_string(),
            port: 0,
            ca_pem: ca.cert_pem().to_string(),
            ca,
            admin_kubeconfig: String::new(),
            admin_kubeconfig_path: dir.join("admin.kubeconfig"),
            process: None,
            bin: bin.to_path_buf(),
            dir,
            log,
            etcd_url: etcd_url.to_string(),
            admin,
        };
        server.assign_port()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Picks a new port and rewrites the admin kubeconfig for it.
    fn assign_port(&mut self) -> Result<()> {
        self.port = process::free_port()?;
        self.admin_kubeconfig = kubeconfig_yaml(
            &self.name,
            &self.url(),
            &self.ca_pem,
            ADMIN_USER,
            &Credentials::ClientCert(self.admin.clone()),
        );
        write_private(&self.admin_kubeconfig_path, &self.admin_kubeconfig)
    }

    fn spawn_spec(&self) -> Spawn {
        let dir = &self.dir;
        let file = |name: &str| dir.join(name).display().to_string();
        let mut spawn = Spawn::new(format!("apiserver-{}", self.name), &self.bin, &self.log)
            .arg(format!("--etcd-servers={}", self.etcd_url))
            .arg(format!("--etcd-prefix=/{}", self.name))
            .arg(format!("--cert-dir={}", file("generated")))
            .arg(format!("--tls-cert-file={}", file("serving.crt")))
            .arg(format!("--tls-private-key-file={}", file("serving.key")))
            .arg(format!("--client-ca-file={}", file("ca.crt")))
            .arg(format!("--secure-port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--allow-privileged=true")
            // No kubelet mounts tokens into pods, so the admission plugin would only add volumes
            // nobody mounts and refuse pods whose ServiceAccount does not exist yet (also with
            // kube-controller-manager: Pod Security judges the pod spec as written).
            // Kubernetes' own integration tests disable it the same way.
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--authorization-mode=RBAC")
            .arg(format!("--service-account-issuer={}/", self.url()))
            .arg(format!("--service-account-key-file={}", file("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                file("sa.key")
            ))
            // A single apiserver per cluster and no Service traffic: nothing to reconcile.
            .arg("--endpoint-reconciler-type=none");
        if self.name == crate::layout::MANAGEMENT
            && std::env::var_os(crate::layout::env::AUDIT).is_some()
        {
            spawn = spawn
                .arg(format!("--audit-policy-file={}", file(AUDIT_POLICY_FILE)))
                .arg(format!("--audit-log-path={}", self.audit_log().display()))
                .arg("--audit-log-format=json")
                .arg("--audit-log-maxbackup=0");
        }
        spawn
    }

    /// The audit log (JSON lines) of the management apiserver, written when the plane was
    /// started with [`env::AUDIT`](crate::layout::env::AUDIT) set.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(AUDIT_LOG_FILE)
    }

    /// Starts the process (after [`stop`](Self::stop) too: same port, same data).
    pub fn spawn(&mut self) -> Result<()> {
        if self.process.is_none() {
            self.process = Some(process::spawn(self.spawn_spec())?);
        }
        Ok(())
    }

    /// Starts and waits for `/readyz`; if another process took the port meanwhile, retries
    /// on a fresh one (only before the first successful start: a restart keeps its URL).
    pub async fn start(&mut self, timeout: Duration) -> Result<()> {
        for attempt in 1..=3 {
            self.spawn()?;
            match self.wait_ready(timeout).await {
                Err(PlaneError::Exited { .. })
                    if attempt < 3
                        && crate::error::tail(&self.log, 50).contains("address already in use") =>
                {
                    tracing::warn!(name = %self.name, port = self.port, "port taken; retrying on another");
                    self.process = None;
                    self.assign_port()?;
                }
                other => return other,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Waits until `/readyz` answers `ok` (all post-start hooks done, including RBAC
    /// bootstrap), failing at once if the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let client = self.admin_client().await?;
        let what = format!("kube-apiserver {}", self.name);
        let process = self
            .process
            .as_mut()
            .ok_or_else(|| PlaneError::Invalid(format!("{what} is not running")))?;
        process
            .wait_until(&what, timeout, || {
                let client = client.clone();
                async move {
                    let request = http::Request::get("/readyz")
                        .body(Vec::new())
                        .expect("a valid request");
                    match client.request_text(request).await {
                        Ok(body) if body.trim() == "ok" => Some(()),
                        _ => None,
                    }
                }
            })
            .await
    }

    pub async fn admin_client(&self) -> Result<kube::Client> {
        client_from_yaml(&self.admin_kubeconfig).await
    }

    pub async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(Duration::from_secs(15)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid)
    }
}
