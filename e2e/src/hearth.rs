//! Hearth's own controllers as processes on a plane, configured for one test's scope.
//!
//! The e2e kit's controller under test: [`start`] builds the binaries once per test
//! process ([`ensure_built`]), starts one in a test's scope and returns once it is ready;
//! [`Running`] scrapes its `/metrics`, tails its log and waits with that log in the
//! time-out error ([`Running::until`]). Every e2e test file starts controllers this way.
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

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::error::tail;
use crate::error::{Context as _, PlaneError, Result};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};
use crate::plane::{ControlPlane, Isolated, hearth_binary};
use crate::process::{http_get, until};
use crate::protocol::ControllerState;
use crate::resources::apply;

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

/// `e` with the last lines of each controller's log appended: what a failed wait shows.
pub fn with_logs(e: anyhow::Error, controllers: &[Running]) -> anyhow::Error {
    let logs: Vec<String> = controllers.iter().map(|c| c.log_tail(40)).collect();
    anyhow::anyhow!("{e:#}\n{}", logs.join("\n"))
}

/// The sum of every sample of metric `name` (all label sets) in a `/metrics` text.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the one sample `sample` (name and labels exactly as exported).
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// Builds the controllers' binaries (and `kubectl-fournos`) once per test process, with
/// this test binary's profile, so that a test never runs a stale binary; [`start`] calls
/// it. `HEARTH_E2E_NO_BUILD=1` skips it (binaries built beforehand).
pub async fn ensure_built() -> Result<()> {
    static BUILT: tokio::sync::OnceCell<std::result::Result<(), String>> =
        tokio::sync::OnceCell::const_new();
    BUILT
        .get_or_init(|| async {
            if std::env::var_os("HEARTH_E2E_NO_BUILD").is_some() {
                return Ok(());
            }
            tokio::task::spawn_blocking(build_binaries)
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        })
        .await
        .clone()
        .map_err(|e| PlaneError::Tools(format!("cannot build Hearth's binaries: {e}")))
}

/// `cargo build` of the three controllers and the plugin; checks cargo built the very
/// files [`hearth_binary`] finds.
fn build_binaries() -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = std::process::Command::new(cargo);
    // Cargo gives this test process the variables it sets for a package's build
    // (CARGO_PKG_NAME=hearth-e2e, …); build scripts that watch them (ring's do) would
    // rebuild, and make the next ordinary build rebuild again.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_CFG_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .iter()
        .any(|prefix| key.starts_with(prefix))
        {
            command.env_remove(key.as_ref());
        }
    }
    command.arg("build");
    for c in Controller::ALL {
        command.args(["-p", c.binary(), "--bin", c.binary()]);
    }
    command.args(["-p", PLUGIN, "--bin", PLUGIN]);
    let release = std::env::current_exe()
        .map(|exe| exe.components().any(|c| c.as_os_str() == "release"))
        .unwrap_or(false);
    if release {
        command.arg("--release");
    }
    let output = command
        .arg("--message-format=json-render-diagnostics")
        .current_dir(&workspace)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| PlaneError::Tools(format!("running cargo build: {e}")))?;
    if !output.status.success() {
        return Err(PlaneError::Tools(format!(
            "cargo build failed ({})",
            output.status
        )));
    }
    let built: Vec<(String, PathBuf)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| {
            let name = m["target"]["name"].as_str()?.to_owned();
            Some((name, PathBuf::from(m["executable"].as_str()?)))
        })
        .collect();
    for name in Controller::ALL
        .map(Controller::binary)
        .into_iter()
        .chain([PLUGIN])
    {
        let (_, exe) = built.iter().find(|(n, _)| n == name).ok_or_else(|| {
            PlaneError::Tools(format!("cargo did not report the {name} executable"))
        })?;
        let used = hearth_binary(name)?;
        let same = exe
            .canonicalize()
            .ok()
            .is_some_and(|b| Some(b) == used.canonicalize().ok());
        if !same {
            return Err(PlaneError::Tools(format!(
                "built {} but the tests run {}",
                exe.display(),
                used.display()
            )));
        }
    }
    Ok(())
}

/// The `kubectl fournos` plugin's binary.
pub const PLUGIN: &str = "kubectl-fournos";

/// What one run of the plugin printed.
#[derive(Debug)]
pub struct PluginRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the built `kubectl-fournos <args>` as a person does: with `kubeconfig` (nothing from
/// the environment's `KUBECONFIG`), in `scope`'s namespaces.
pub async fn run_plugin(kubeconfig: &Path, scope: &Isolated, args: &[&str]) -> Result<PluginRun> {
    ensure_built().await?;
    let out = tokio::process::Command::new(hearth_binary(PLUGIN)?)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("HEARTH_NAMESPACE", &scope.namespace)
        .env("HEARTH_EXECUTION_NAMESPACE", &scope.execution_namespace)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .context(|| "running kubectl-fournos (cargo build --workspace --bins first)".into())?;
    Ok(PluginRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `kubectl fournos doctor` as the administrator, with `scope`'s values and workload
/// sentinels (what [`service_account_kubeconfig`] grants): its exit code and what it
/// printed.
pub async fn doctor_in_scope(plane: &ControlPlane, scope: &Isolated) -> Result<(i32, String)> {
    let run = run_plugin(
        &plane.management_kubeconfig(),
        scope,
        &[
            "doctor",
            "-n",
            &scope.namespace,
            "--secrets-namespace",
            &scope.secrets_namespace,
            "--execution-namespace",
            &scope.execution_namespace,
            "--cluster-queue",
            &scope.cluster_queue,
            "--sentinel",
            "workload",
            "--local-queue",
            &scope.local_queue,
        ],
    )
    .await?;
    Ok((run.code, format!("{}{}", run.stdout, run.stderr)))
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

    /// The admin server's address (`/healthz`, `/readyz`, `/metrics`).
    pub fn admin_addr(&self) -> Result<SocketAddr> {
        self.state
            .admin_addr
            .parse()
            .map_err(|e| PlaneError::Invalid(format!("admin address of {}: {e}", self.state.name)))
    }

    /// The text of `/metrics`; an error unless it answers 200.
    pub async fn metrics(&self) -> Result<String> {
        match http_get(self.admin_addr()?, "/metrics").await {
            Ok((200, body)) => Ok(body),
            Ok((code, body)) => Err(PlaneError::Invalid(format!(
                "{} /metrics answered {code}: {body}",
                self.name()
            ))),
            Err(e) => Err(PlaneError::Invalid(format!(
                "{} /metrics: {e}",
                self.name()
            ))),
        }
    }

    /// The sum of every sample of metric `name` (all label sets) now.
    pub async fn metric_sum(&self, name: &str) -> Result<f64> {
        Ok(metric_sum(&self.metrics().await?, name))
    }

    /// The value of the one sample `sample` (a name with its labels, if any); 0 when
    /// absent, as Prometheus treats a counter not yet incremented.
    pub async fn metric(&self, sample: &str) -> Result<f64> {
        Ok(metric(&self.metrics().await?, sample).unwrap_or(0.0))
    }

    /// The last `lines` lines of its log, headed by its name, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        format!(
            "--- {} ({}) ---\n{}",
            self.name(),
            self.state.log.display(),
            tail(&self.state.log, lines)
        )
    }

    /// [`until`] with the tail of this controller's log in the time-out error.
    pub async fn until<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        probe: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<std::result::Result<T, String>>>,
    {
        until(what, timeout, probe)
            .await
            .map_err(|e| with_logs(e, std::slice::from_ref(self)))
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

    /// [`stop`](Self::stop), then checks it said it stopped and without an error.
    pub async fn stop_cleanly(&self, plane: &ControlPlane) -> Result<()> {
        self.stop(plane).await?;
        let log = self.log();
        if log.contains("hearth_runtime: stopped") && !log.contains("stopped with an error") {
            Ok(())
        } else {
            Err(PlaneError::Invalid(format!(
                "{} did not stop cleanly:\n{}",
                self.name(),
                self.log_tail(30)
            )))
        }
    }

    /// Waits until its `/readyz` answers 200: the plane returns once the admin server
    /// answers, and a test wants the caches synced.
    async fn ready_within(&self, timeout: Duration) -> Result<()> {
        let addr = self.admin_addr()?;
        crate::process::poll(
            &format!("{} /readyz to answer 200", self.name()),
            timeout,
            || async move { Ok(matches!(http_get(addr, "/readyz").await, Ok((200, _))).then_some(())) },
        )
        .await
    }

    /// Its process id on `plane`, from the plane's pid file.
    pub fn pid(&self, plane: &ControlPlane) -> Result<u32> {
        let path = plane.state_dir().join(crate::layout::PIDS_FILE);
        let text = std::fs::read(&path).context(|| format!("reading {}", path.display()))?;
        let pids: crate::protocol::Pids = serde_json::from_slice(&text)
            .map_err(|e| PlaneError::Invalid(format!("{}: {e}", path.display())))?;
        pids.processes
            .iter()
            .find(|p| p.name == self.name())
            .map(|p| p.pid)
            .ok_or_else(|| {
                PlaneError::Invalid(format!("{} is not in {}", self.name(), path.display()))
            })
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
    start_within(plane, iso, controller, instance, extra, READY_WITHIN).await
}

/// How long [`start`] waits for a controller's caches to be synced.
pub const READY_WITHIN: Duration = Duration::from_secs(60);

/// [`start`], waiting up to `ready_within` for the caches to be synced: for a test that
/// fills the apiserver with more than it serves in a minute.
pub async fn start_within(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    instance: &str,
    extra: &[(&str, &str)],
    ready_within: Duration,
) -> Result<Running> {
    ensure_built().await?;
    let program = hearth_binary(controller.binary())?;
    let running = start_unready(plane, iso, controller, instance, &program, extra).await?;
    running.ready_within(ready_within).await?;
    Ok(running)
}

/// [`start`] with `program` run instead of the workspace's binary: e.g. a launcher that
/// runs the controller from an image's filesystem. `program` gets the same environment
/// (the kubeconfig of `controller`'s ServiceAccount in `KUBECONFIG`, unless `extra` says
/// otherwise) and the same readiness wait.
pub async fn start_program(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    instance: &str,
    program: &Path,
    extra: &[(&str, &str)],
) -> Result<Running> {
    let running = start_unready(plane, iso, controller, instance, program, extra).await?;
    running.ready_within(READY_WITHIN).await?;
    Ok(running)
}

/// [`start_program`] without the wait for readiness.
async fn start_unready(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    instance: &str,
    program: &Path,
    extra: &[(&str, &str)],
) -> Result<Running> {
    let mut env = iso.controller_env();
    // The sentinel kind it runs with decides lock-manager's rights in the chart.
    // (the plane's default is `workload`).
    let sentinel = extra
        .iter()
        .rev()
        .find(|(k, _)| *k == "HEARTH_SENTINEL")
        .map_or("workload", |(_, v)| *v);
    let kubeconfig = service_account_kubeconfig_for(plane, iso, controller, sentinel).await?;
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
    let state = plane.start_controller(&name, program, env).await?;
    Ok(Running { controller, state })
}

/// Applies the chart's ServiceAccounts and RBAC for `iso` (once per scope) with
/// `config.sentinel=workload` and returns a kubeconfig file for `controller`'s
/// ServiceAccount.
pub async fn service_account_kubeconfig(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
) -> Result<PathBuf> {
    service_account_kubeconfig_for(plane, iso, controller, "workload").await
}

/// [`service_account_kubeconfig`] for lock sentinels of kind `sentinel` (`workload` or
/// `fournosjob`): the chart grants lock-manager that kind's rights only, so the RBAC is
/// applied again when a scope's controllers change kind.
pub async fn service_account_kubeconfig_for(
    plane: &ControlPlane,
    iso: &Isolated,
    controller: Controller,
    sentinel: &str,
) -> Result<PathBuf> {
    static INSTALLED: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);
    let client = plane.management_client().await?;
    let installed = INSTALLED
        .lock()
        .expect("poisoned")
        .get_or_insert_with(HashMap::new)
        .get(&iso.id)
        .is_some_and(|kind| kind == sentinel);
    if !installed {
        for doc in crate::chart::render_chart(iso, &[("config.sentinel", sentinel)])? {
            if RBAC_KINDS.contains(&doc["kind"].as_str().unwrap_or_default()) {
                apply(&client, &doc).await?;
            }
        }
        INSTALLED
            .lock()
            .expect("poisoned")
            .get_or_insert_with(HashMap::new)
            .insert(iso.id.clone(), sentinel.to_owned());
    }

    service_account_token_kubeconfig(plane, &iso.namespace, controller.binary()).await
}

/// A client for ServiceAccount `namespace/sa` holding exactly `rules` in `namespace`
/// (see [`kubeconfig_with_rules`]): a person with those rights and no more, as the attacks
/// run.
pub async fn client_with_rules(
    plane: &ControlPlane,
    namespace: &str,
    sa: &str,
    rules: serde_json::Value,
) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let path = kubeconfig_with_rules(plane, namespace, sa, rules).await?;
    let yaml =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(crate::kubeconfig::client_from_yaml(&yaml).await?)
}

/// A client for a lock user of the FournosClusters in `namespace`: read and patch them
/// and nothing else, the rights `docs/plugin.md` grants to lock, unlock and cordon.
pub async fn lock_user(plane: &ControlPlane, namespace: &str) -> anyhow::Result<kube::Client> {
    let rules = serde_json::json!([{"apiGroups": ["fournos.dev"], "resources": ["fournosclusters"],
        "verbs": ["get", "list", "watch", "patch"]}]);
    client_with_rules(plane, namespace, "lock-user", rules).await
}

/// A kubeconfig file for ServiceAccount `namespace/sa` holding exactly `rules` in
/// `namespace`: the ServiceAccount, a Role and its binding, made as admin.
pub async fn kubeconfig_with_rules(
    plane: &ControlPlane,
    namespace: &str,
    sa: &str,
    rules: serde_json::Value,
) -> anyhow::Result<PathBuf> {
    let admin = plane.management_client().await?;
    for doc in [
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": sa, "namespace": namespace}}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": sa, "namespace": namespace}, "rules": rules}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": sa, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]}),
    ] {
        crate::resources::apply(&admin, &doc).await?;
    }
    Ok(service_account_token_kubeconfig(plane, namespace, sa).await?)
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
