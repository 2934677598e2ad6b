//! Hearth's own controllers as processes on a plane, configured for one test's scope.
//!
//! A thin layer over [`ControlPlane::start_controller`]: the binaries run as children
//! of the plane's supervisor (so they die with it), get the test's namespaces and
//! ClusterQueue through [`Scope::controller_env`](crate::Scope::controller_env), leader
//! election off unless the test asks for it, and a fast resync so tests never wait a
//! production interval.
//!
//! They run **as the chart's ServiceAccounts**, never as admin: for each test scope the
//! chart's ServiceAccounts and RBAC are rendered by `helm template` with that scope's
//! namespaces and ClusterQueue and applied to the management apiserver, and each
//! controller gets a kubeconfig holding its own ServiceAccount's token. A rule missing
//! from the chart fails the test that needs it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::error::{PlaneError, Result};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};
use crate::plane::{ControlPlane, Isolated, hearth_binary};
use crate::protocol::ControllerState;
use crate::resources::{apply, parse_yaml_documents};
use crate::tools::Tools;

/// Kinds of the chart that grant identity and rights; the Deployments never run here
/// (there is no kubelet), the controllers run as processes instead.
const RBAC_KINDS: &[&str] = &[
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
];

/// One of the three Hearth binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Discovery,
    KueueSync,
    LockManager,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Self::Discovery, Self::KueueSync, Self::LockManager];

    /// The binary's name (also its field manager and Lease name).
    pub fn binary(self) -> &'static str {
        match self {
            Self::Discovery => hearth_api::names::controllers::DISCOVERY,
            Self::KueueSync => hearth_api::names::controllers::KUEUE_SYNC,
            Self::LockManager => hearth_api::names::controllers::LOCK_MANAGER,
        }
    }
}

/// A running controller: its name on the plane (for stop/kill), admin address and log.
#[derive(Clone, Debug)]
pub struct Running {
    pub controller: Controller,
    pub state: ControllerState,
}

impl Running {
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// `http://<admin address>` for `/healthz`, `/readyz`, `/metrics`.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.state.admin_addr)
    }

    /// Everything the controller has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.state.log).unwrap_or_default()
    }

    pub async fn stop(&self, plane: &ControlPlane) -> Result<()> {
        plane.stop_controller(self.name()).await
    }

    /// SIGKILL, as a crash at an arbitrary instant.
    pub async fn kill(&self, plane: &ControlPlane) -> Result<()> {
        plane.kill_controller(self.name()).await
    }
}

/// Starts `controller` for the test scope `iso`, with `extra` environment on top
/// (later entries win). `instance` distinguishes several replicas of one controller
/// in one test ("0", "1", …). Returns once its `/readyz` answers 200 (caches synced).
pub async fn start(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    instance: &str,
    extra: &[(&str, &str)],
) -> Result<Running> {
    let program = hearth_binary(controller.binary())?;
    let kubeconfig = service_account_kubeconfig(plane, iso, controller).await?;
    let mut env = iso.controller_env();
    env.extend(
        [
            ("HEARTH_LEADER_ELECTION", "false"),
            ("HEARTH_RECONCILE_INTERVAL_SEC", "2"),
            (
                "HEARTH_LOG_LEVEL",
                "debug,kube=info,hyper=info,tower=info,rustls=info",
            ),
            (
                "HEARTH_POD_NAME",
                &format!("{}-{instance}", controller.binary()),
            ),
            // The chart's Lease RBAC is in the release namespace: the test's namespace.
            ("HEARTH_LEASE_NAMESPACE", &iso.namespace),
            ("KUBECONFIG", &kubeconfig.display().to_string()),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let name = format!("{}-{}-{instance}", controller.binary(), iso.id);
    let state = plane.start_controller(&name, &program, env).await?;
    let running = Running { controller, state };
    // The plane returns once the admin server answers; a test wants the caches synced.
    let addr: std::net::SocketAddr = running
        .state
        .admin_addr
        .parse()
        .map_err(|e| PlaneError::Invalid(format!("admin address of {name}: {e}")))?;
    crate::process::poll(
        &format!("{name} /readyz to answer 200"),
        std::time::Duration::from_secs(60),
        || async move {
            Ok(matches!(
                crate::process::http_get(addr, "/readyz").await,
                Ok((200, _))
            )
            .then_some(()))
        },
    )
    .await?;
    Ok(running)
}

/// The chart's directory in this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/hearth")
}

/// `helm template` of the chart for `iso`'s scope: release namespace = the test's
/// FournosCluster namespace, and the test's secrets/execution namespaces and queue.
pub fn render_chart(iso: &Isolated, extra: &[(&str, &str)]) -> Result<Vec<serde_json::Value>> {
    let mut set = vec![
        format!("config.namespace={}", iso.namespace),
        format!("config.secretsNamespace={}", iso.secrets_namespace),
        format!("config.executionNamespace={}", iso.execution_namespace),
        format!("config.clusterQueueName={}", iso.cluster_queue),
        format!("config.localQueueName={}", iso.local_queue),
        "config.sentinel=workload".to_owned(),
    ];
    set.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
    helm_template(&iso.namespace, &set)
}

/// `helm template hearth <chart> --namespace <namespace> --set <each of set>`, parsed.
pub fn helm_template(namespace: &str, set: &[String]) -> Result<Vec<serde_json::Value>> {
    let tools = Tools::locate()?;
    let mut cmd = std::process::Command::new(&tools.helm);
    cmd.args(["template", "hearth"]).arg(chart_dir()).args([
        "--namespace",
        namespace,
        "--kube-version",
        "1.36.3",
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd
        .output()
        .map_err(|e| PlaneError::Tools(format!("running helm: {e}")))?;
    if !out.status.success() {
        return Err(PlaneError::Tools(format!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    parse_yaml_documents(&String::from_utf8_lossy(&out.stdout), "helm template")
}

/// Applies the chart's ServiceAccounts and RBAC for `iso` (once per scope) and returns
/// a kubeconfig file for `controller`'s ServiceAccount.
pub async fn service_account_kubeconfig(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
) -> Result<PathBuf> {
    static INSTALLED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let client = plane.management_client().await?;
    let installed = INSTALLED
        .lock()
        .expect("poisoned")
        .get_or_insert_with(HashSet::new)
        .contains(&iso.id);
    if !installed {
        for doc in render_chart(iso, &[])? {
            if RBAC_KINDS.contains(&doc["kind"].as_str().unwrap_or_default()) {
                apply(&client, &doc).await?;
            }
        }
        INSTALLED
            .lock()
            .expect("poisoned")
            .get_or_insert_with(HashSet::new)
            .insert(iso.id.clone());
    }

    service_account_token_kubeconfig(plane, &iso.namespace, controller.binary()).await
}

/// A kubeconfig file on the management apiserver for the existing ServiceAccount
/// `namespace/sa`, holding a TokenRequest token valid for a day: a test's non-admin user.
pub async fn service_account_token_kubeconfig(
    plane: &ControlPlane,
    namespace: &str,
    sa: &str,
) -> Result<PathBuf> {
    let client = plane.management_client().await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client, namespace)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .map_err(|e| PlaneError::Invalid(format!("token for {namespace}/{sa}: {e}")))?
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| PlaneError::Invalid(format!("no token for {namespace}/{sa}")))?;
    let state = plane.state();
    let yaml = kubeconfig_yaml(
        "management",
        &state.management.server,
        &state.management.ca_pem,
        sa,
        &Credentials::Token(token),
    );
    let dir = plane.state_dir().join("kubeconfigs");
    std::fs::create_dir_all(&dir)
        .map_err(|e| PlaneError::Invalid(format!("creating {}: {e}", dir.display())))?;
    let path = dir.join(format!("{sa}-{namespace}.yaml"));
    std::fs::write(&path, yaml)
        .map_err(|e| PlaneError::Invalid(format!("writing {}: {e}", path.display())))?;
    Ok(path)
}
