//! The test-facing handle: [`ControlPlane`] starts a supervisor (`hearth-plane run
//! --control --exit-on-stdin-eof`) and talks to it over its stdin/stdout.
//!
//! Nothing here holds resources tied to a tokio runtime (clients are built on demand, the
//! pipes are std pipes used from blocking threads), so one plane can be shared by tests
//! that each run on their own runtime.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use hearth_api::names::{KUBECONFIG_SECRET_KEY, KUBECONFIG_SECRET_LABEL, defaults};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::OnceCell;

use crate::error::{Context, PlaneError, Result};
use crate::fixtures::Scope;
use crate::fleet::{self, NodeSpec, TargetFleet};
use crate::kubeconfig::client_from_yaml;
use crate::layout::{LOGS_DIR, PIDS_FILE, PLANE_LOG, STATE_FILE, env};
use crate::node_reader;
use crate::pods_ready::WaitForPodsReady;
use crate::process;
use crate::protocol::SupervisorOptions;
use crate::protocol::{
    Command, ControllerState, Pids, PlaneState, Response, TargetState, read_json,
};
use crate::resources::FIELD_MANAGER;
use crate::tools::Tools;

/// How to start a plane.
#[derive(Debug, Clone)]
pub struct PlaneOptions {
    /// Target clusters (at least 2); the first two carry [`fleet::FLEET`].
    pub targets: usize,
    pub wait_for_pods_ready: WaitForPodsReady,
    /// Also run Hearth's three controllers from this directory.
    pub hearth_bin_dir: Option<PathBuf>,
    /// Default: a fresh directory under `$TMPDIR/hearth-e2e/`.
    pub state_dir: Option<PathBuf>,
    /// Default: `$HEARTH_E2E_BIN_DIR` or what `e2e/tools/build.sh` prints.
    pub tools_bin_dir: Option<PathBuf>,
    /// The `hearth-plane` binary. Default: `$HEARTH_PLANE_BIN`, else next to the running
    /// executable or its parent directory (where cargo puts it for this crate's tests).
    pub supervisor: Option<PathBuf>,
    /// FournosCluster CRD to install (default `manifests/crd.yaml` of this repository).
    pub fournos_cluster_crd: Option<PathBuf>,
    /// Also run the real Fournos for the base scope (`hearth-plane --fournos`).
    pub fournos: bool,
    /// Also run kube-controller-manager for the management cluster (garbage collector,
    /// Deployments, ReplicaSets, Jobs, namespaces, ServiceAccounts; no kubelet): see
    /// [`crate::controller_manager`]. Off by default: it adds no start time worth measuring
    /// (`bench-results/2026-11-25/plane-start.md`) but changes what a plane does
    /// (namespaces finish deleting, owned objects are collected).
    pub controller_manager: bool,
    /// Run Kueue without registering its admission webhooks. Only for the Python Hearth's
    /// queue, which Kueue's webhook refuses (`e2e/tests/takeover_py.rs`,
    /// `e2e/tests/migration.rs`); every other plane runs Kueue as users do, webhooks on.
    pub without_kueue_webhooks: bool,
    /// Deadline for the whole plane to be ready.
    pub start_timeout: Duration,
    /// Deadline for each component (and each control request) inside the supervisor.
    pub component_timeout: Duration,
}

impl Default for PlaneOptions {
    fn default() -> Self {
        PlaneOptions {
            targets: 2,
            wait_for_pods_ready: WaitForPodsReady::default(),
            hearth_bin_dir: None,
            state_dir: None,
            tools_bin_dir: None,
            supervisor: None,
            fournos_cluster_crd: None,
            fournos: false,
            controller_manager: false,
            without_kueue_webhooks: false,
            start_timeout: Duration::from_secs(300),
            component_timeout: Duration::from_secs(120),
        }
    }
}

impl PlaneOptions {
    /// Defaults, overridden by the [`env`] variables.
    pub fn from_env() -> Result<PlaneOptions> {
        let mut options = PlaneOptions::default();
        if let Ok(n) = std::env::var(env::TARGETS) {
            options.targets = n.parse().map_err(|_| {
                PlaneError::Invalid(format!("{}={n} is not a number", env::TARGETS))
            })?;
        }
        if let Ok(w) = std::env::var(env::WAIT_FOR_PODS_READY) {
            options.wait_for_pods_ready = w.parse().map_err(PlaneError::Invalid)?;
        }
        options.hearth_bin_dir = std::env::var_os(env::HEARTH_BIN_DIR).map(PathBuf::from);
        Ok(options)
    }
}

/// The supervisor's pipes.
struct Control {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

/// A running plane: etcd, the management apiserver with Kueue and the base fixtures, and
/// the target apiservers with the emulated fleet.
pub struct ControlPlane {
    state: Mutex<PlaneState>,
    control: Option<Arc<Mutex<Control>>>,
    request_timeout: Duration,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("state_dir", &self.state_dir())
            .finish_non_exhaustive()
    }
}

static SHARED: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();

impl ControlPlane {
    /// Starts a plane and waits until it is ready (Kueue reconciling, fixtures and fleet in
    /// place). The plane lives until [`stop`](Self::stop), until this value is dropped, or
    /// until this process exits, whichever comes first.
    pub async fn start(options: PlaneOptions) -> Result<ControlPlane> {
        tokio::task::spawn_blocking(move || start_blocking(options))
            .await
            .map_err(|e| PlaneError::Supervisor(format!("start task failed: {e}")))?
    }

    /// The plane shared by every test of this test binary, started on first use with
    /// [`PlaneOptions::from_env`] (or attached to `$HEARTH_E2E_PLANE_DIR`). It is never
    /// stopped explicitly: it goes when the test process exits, because the supervisor
    /// sees its stdin close. A failed start is remembered, so later tests fail fast.
    pub async fn shared() -> Result<&'static ControlPlane> {
        let plane = SHARED
            .get_or_init(|| async {
                let result = match std::env::var_os(env::PLANE_DIR) {
                    Some(dir) => ControlPlane::attach(Path::new(&dir)),
                    None => match PlaneOptions::from_env() {
                        Ok(options) => ControlPlane::start(options).await,
                        Err(e) => Err(e),
                    },
                };
                result.map_err(|e| e.to_string())
            })
            .await;
        plane
            .as_ref()
            .map_err(|e| PlaneError::Supervisor(format!("the shared plane failed to start: {e}")))
    }

    /// A handle on a plane someone else runs (`hearth-plane up`). Target stop/start/add
    /// need the supervisor's pipe and are refused.
    pub fn attach(state_dir: &Path) -> Result<ControlPlane> {
        let state: PlaneState = read_json(&state_dir.join(STATE_FILE))?;
        if !process::is_alive(state.supervisor_pid) {
            return Err(PlaneError::Invalid(format!(
                "the plane in {} is not running",
                state_dir.display()
            )));
        }
        Ok(ControlPlane {
            state: Mutex::new(state),
            control: None,
            request_timeout: PlaneOptions::default().component_timeout,
        })
    }

    /// A snapshot of the supervisor's state.
    pub fn state(&self) -> PlaneState {
        self.state.lock().expect("state poisoned").clone()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state().state_dir
    }

    /// All component logs (`etcd.log`, `apiserver-*.log`, `kueue.log`, `plane.log`, …).
    pub fn logs_dir(&self) -> PathBuf {
        self.state().logs_dir
    }

    /// Admin kubeconfig of the management cluster, for kubectl and the controllers.
    pub fn management_kubeconfig(&self) -> PathBuf {
        self.state().management.admin_kubeconfig
    }

    pub fn management_server(&self) -> String {
        self.state().management.server
    }

    /// A new admin client for the management cluster (a new one per call, so it belongs to
    /// the caller's runtime).
    pub async fn management_client(&self) -> Result<kube::Client> {
        client_from_file(&self.management_kubeconfig()).await
    }

    pub fn targets(&self) -> Vec<Target> {
        self.state()
            .targets
            .into_iter()
            .map(|state| Target { state })
            .collect()
    }

    pub fn target(&self, name: &str) -> Result<Target> {
        self.targets()
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| PlaneError::Invalid(format!("no target named {name}")))
    }

    /// Pids of the supervisor and every process it runs.
    pub fn pids(&self) -> Vec<u32> {
        let state = self.state();
        std::iter::once(state.supervisor_pid)
            .chain(state.processes.iter().map(|p| p.pid))
            .collect()
    }

    /// Stops a target's apiserver (an outage: connections are refused). Its data stays.
    /// Only for targets no other test uses: see the crate docs on isolation.
    pub async fn stop_target(&self, name: &str) -> Result<()> {
        self.request(Command::StopTarget { name: name.into() })
            .await
            .map(drop)
    }

    /// Starts a stopped target again, on the same URL with the same data and credentials.
    pub async fn start_target(&self, name: &str) -> Result<()> {
        self.request(Command::StartTarget { name: name.into() })
            .await
            .map(drop)
    }

    /// Restarts the management apiserver (stop, then start on the same URL and data), as
    /// in a control-plane upgrade: every watch breaks and every client must reconnect.
    pub async fn restart_management(&self) -> Result<()> {
        self.request(Command::RestartManagement).await.map(drop)
    }

    /// Starts one more target apiserver with `fleet`'s nodes and a node-reader identity.
    /// Takes seconds (a whole apiserver boots); meant for tests that change a target.
    pub async fn add_target(&self, fleet: TargetFleet) -> Result<Target> {
        let name = fleet.name.to_string();
        self.request(Command::AddTarget { fleet }).await?;
        self.target(&name)
    }

    /// Runs a Hearth controller binary (see [`hearth_binary`]) as a child of the
    /// supervisor, so it dies with the plane whatever happens to the test. It gets the admin
    /// kubeconfig, `HEARTH_ADMIN_ADDR` on a free port, `HEARTH_SENTINEL=workload`, and `env`
    /// on top (typically [`Scope::controller_env`]). Returns once its `/readyz` answers;
    /// `name` must be unique on the plane and names its log file.
    pub async fn start_controller(
        &self,
        name: &str,
        program: &Path,
        env: Vec<(String, String)>,
    ) -> Result<ControllerState> {
        let state = self
            .request(Command::StartController {
                name: name.into(),
                program: program.to_path_buf(),
                env,
            })
            .await?;
        state
            .controllers
            .into_iter()
            .find(|c| c.name == name)
            .ok_or_else(|| {
                PlaneError::Supervisor(format!("controller {name} missing from the state"))
            })
    }

    /// Stops a controller gracefully (SIGTERM, as on a rollout).
    pub async fn stop_controller(&self, name: &str) -> Result<()> {
        let command = Command::StopController {
            name: name.into(),
            kill: false,
        };
        self.request(command).await.map(drop)
    }

    /// Kills a controller with SIGKILL, as in a crash at an arbitrary instant.
    pub async fn kill_controller(&self, name: &str) -> Result<()> {
        let command = Command::StopController {
            name: name.into(),
            kill: true,
        };
        self.request(command).await.map(drop)
    }

    /// Creates a test's own namespaces and queues (see the crate docs on isolation).
    /// `test_name` becomes part of every name; a run token keeps reruns against a
    /// long-lived plane apart.
    pub async fn isolated(&self, test_name: &str) -> Result<Isolated> {
        let id = unique_id(test_name);
        let scope = Scope::isolated(&id);
        let client = self.management_client().await?;
        scope.create(&client, self.request_timeout).await?;
        Ok(Isolated { id, scope })
    }

    /// Creates or updates the kubeconfig Secret for `cluster` as an administrator would:
    /// `kubeconfig-<cluster>` in `secrets_namespace`, labeled, key `kubeconfig`.
    pub async fn create_kubeconfig_secret(
        &self,
        secrets_namespace: &str,
        cluster: &str,
        kubeconfig: &str,
    ) -> Result<Secret> {
        let client = self.management_client().await?;
        apply_kubeconfig_secret(&client, secrets_namespace, cluster, kubeconfig).await
    }

    /// [`create_kubeconfig_secret`](Self::create_kubeconfig_secret) with `target`'s
    /// node-reader kubeconfig: `cluster` onboarded onto `target`.
    pub async fn onboard_onto(
        &self,
        secrets_namespace: &str,
        cluster: &str,
        target: &Target,
    ) -> Result<Secret> {
        self.create_kubeconfig_secret(secrets_namespace, cluster, target.node_reader_kubeconfig())
            .await
    }

    /// Onboards every target under its own name into `secrets_namespace` with its
    /// node-reader kubeconfig (what `hearth-plane up` does for the base scope).
    pub async fn onboard_fleet(&self, secrets_namespace: &str) -> Result<Vec<String>> {
        let client = self.management_client().await?;
        let mut names = Vec::new();
        for target in self.targets() {
            apply_kubeconfig_secret(
                &client,
                secrets_namespace,
                target.name(),
                target.node_reader_kubeconfig(),
            )
            .await?;
            names.push(target.name().to_string());
        }
        Ok(names)
    }

    /// Stops the plane and waits until every process is gone. Returns the pids it had.
    pub async fn stop(mut self) -> Result<Vec<u32>> {
        let pids = self.pids();
        let state_dir = self.state_dir();
        let Some(control) = self.control.take() else {
            return Err(PlaneError::Invalid(
                "an attached plane is stopped with `hearth-plane down`".into(),
            ));
        };
        tokio::task::spawn_blocking(move || {
            let mut control = control.lock().expect("control poisoned");
            shut_down(&mut control, &state_dir);
        })
        .await
        .map_err(|e| PlaneError::Supervisor(format!("stop task failed: {e}")))?;
        Ok(pids)
    }

    async fn request(&self, command: Command) -> Result<PlaneState> {
        let control = self
            .control
            .clone()
            .ok_or_else(|| PlaneError::Invalid("an attached plane takes no requests".into()))?;
        let timeout = self.request_timeout + Duration::from_secs(30);
        let response = tokio::task::spawn_blocking(move || {
            let mut control = control.lock().expect("control poisoned");
            let line = serde_json::to_string(&command).expect("a command serializes");
            let stdin = control
                .stdin
                .as_mut()
                .ok_or_else(|| PlaneError::Supervisor("the plane is stopped".into()))?;
            writeln!(stdin, "{line}")
                .and_then(|_| stdin.flush())
                .context(|| "writing to the supervisor".into())?;
            read_response(&control.lines, timeout)
        })
        .await
        .map_err(|e| PlaneError::Supervisor(format!("request task failed: {e}")))??;
        let state = *response.state.expect("ok responses carry the state");
        *self.state.lock().expect("state poisoned") = state.clone();
        Ok(state)
    }
}

impl Drop for ControlPlane {
    /// Closing the supervisor's stdin is enough: it then stops every component on its own.
    fn drop(&mut self) {
        if let Some(control) = self.control.take()
            && let Ok(mut control) = control.lock()
        {
            control.stdin.take();
        }
    }
}

fn start_blocking(options: PlaneOptions) -> Result<ControlPlane> {
    let tools = match &options.tools_bin_dir {
        Some(dir) => Tools::from_bin_dir(dir)?,
        None => Tools::locate()?,
    };
    let state_dir = match &options.state_dir {
        Some(dir) => dir.clone(),
        None => fresh_state_dir()?,
    };
    let supervisor = match &options.supervisor {
        Some(path) => path.clone(),
        None => find_supervisor()?,
    };
    let opts = SupervisorOptions {
        state_dir: state_dir.clone(),
        targets: options.targets,
        tools,
        hearth_bin_dir: options.hearth_bin_dir.clone(),
        wait_for_pods_ready: options.wait_for_pods_ready,
        fournos_cluster_crd: options.fournos_cluster_crd.clone(),
        fournos: options.fournos,
        controller_manager: options.controller_manager,
        without_kueue_webhooks: options.without_kueue_webhooks,
        control: true,
        exit_on_stdin_eof: true,
        timeout: options.component_timeout,
    };
    let mut command = Process::new(&supervisor);
    command
        .args(opts.run_args())
        // The supervisor logs to <state>/logs/plane.log; its stderr would only interleave
        // with the test harness's output.
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command
        .spawn()
        .context(|| format!("starting {}", supervisor.display()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped");
    let (tx, lines) = mpsc::channel();
    std::thread::Builder::new()
        .name("hearth-plane-stdout".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
        .context(|| "starting a reader thread".into())?;
    let mut control = Control {
        child,
        stdin,
        lines,
    };
    match read_response(&control.lines, options.start_timeout) {
        Ok(response) => Ok(ControlPlane {
            state: Mutex::new(*response.state.expect("ok responses carry the state")),
            control: Some(Arc::new(Mutex::new(control))),
            request_timeout: options.component_timeout,
        }),
        Err(error) => {
            shut_down(&mut control, &state_dir);
            let log = state_dir.join(LOGS_DIR).join(PLANE_LOG);
            Err(PlaneError::Supervisor(format!(
                "the plane did not start: {error}\n--- {} ---\n{}",
                log.display(),
                crate::error::tail(&log, 30)
            )))
        }
    }
}

fn read_response(lines: &mpsc::Receiver<String>, timeout: Duration) -> Result<Response> {
    let line = lines.recv_timeout(timeout).map_err(|e| match e {
        mpsc::RecvTimeoutError::Timeout => PlaneError::Timeout {
            what: "the supervisor's answer".into(),
            secs: timeout.as_secs(),
            log: None,
        },
        mpsc::RecvTimeoutError::Disconnected => {
            PlaneError::Supervisor("the supervisor exited".into())
        }
    })?;
    let response: Response = serde_json::from_str(&line)
        .context(|| format!("decoding the supervisor's answer {line:?}"))?;
    match response.error {
        Some(error) if !response.ok => Err(PlaneError::Supervisor(error)),
        _ => Ok(response),
    }
}

/// Closes the supervisor's stdin and waits for it; kills it (and whatever it left) if it
/// takes too long.
fn shut_down(control: &mut Control, state_dir: &Path) {
    control.stdin.take();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut interval = Duration::from_millis(50);
    loop {
        match control.child.try_wait() {
            Ok(Some(_)) | Err(_) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = control.child.kill();
                let _ = control.child.wait();
                break;
            }
            Ok(None) => std::thread::sleep(interval),
        }
        interval = (interval * 2).min(Duration::from_millis(500));
    }
    if let Ok(pids) = read_json::<Pids>(&state_dir.join(PIDS_FILE)) {
        process::kill_stragglers(&pids.processes);
    }
}

/// `$TMPDIR/hearth-e2e/plane-<pid>-<n>`, after clearing out what dead planes left there
/// (their stragglers are killed; the logs of the five most recent are kept).
fn fresh_state_dir() -> Result<PathBuf> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let root = std::env::temp_dir().join("hearth-e2e");
    std::fs::create_dir_all(&root).context(|| format!("creating {}", root.display()))?;
    let mut dead = Vec::new();
    for entry in std::fs::read_dir(&root)
        .context(|| format!("reading {}", root.display()))?
        .flatten()
    {
        let dir = entry.path();
        match read_json::<Pids>(&dir.join(PIDS_FILE)) {
            Ok(pids) if process::runs(pids.supervisor_pid, &pids.supervisor_exe) => continue,
            Ok(pids) => {
                process::kill_stragglers(&pids.processes);
            }
            Err(_) => {}
        }
        let modified = entry.metadata().and_then(|m| m.modified()).ok();
        dead.push((modified, dir));
    }
    dead.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, dir) in dead.into_iter().skip(5) {
        let _ = std::fs::remove_dir_all(dir);
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(root.join(format!("plane-{}-{n}", std::process::id())))
}

fn find_supervisor() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(env::SUPERVISOR) {
        return Ok(PathBuf::from(path));
    }
    hearth_binary("hearth-plane")
}

/// A binary of this workspace (`hearth-plane`, `hearth-discovery`, …) from the cargo
/// target directory the running test belongs to: integration tests run from
/// `target/<profile>/deps/`, binaries live in `target/<profile>/`. Other crates' binaries
/// must have been built (`cargo build --workspace`) before the tests run.
pub fn hearth_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context(|| "locating the running executable".into())?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .find(|p| p.exists())
        .ok_or_else(|| {
            PlaneError::Tools(format!(
                "{name} not found near {}; build it first (cargo build --workspace)",
                exe.display()
            ))
        })
}

async fn client_from_file(path: &Path) -> Result<kube::Client> {
    let yaml = tokio::fs::read_to_string(path)
        .await
        .context(|| format!("reading {}", path.display()))?;
    client_from_yaml(&yaml).await
}

async fn apply_kubeconfig_secret(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    kubeconfig: &str,
) -> Result<Secret> {
    let name = kubeconfig_secret_name(cluster);
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.clone());
    secret.metadata.namespace = Some(namespace.to_string());
    secret.metadata.labels =
        Some([(KUBECONFIG_SECRET_LABEL.to_string(), "true".to_string())].into());
    secret.data = Some(
        [(
            KUBECONFIG_SECRET_KEY.to_string(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )]
        .into(),
    );
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut value = serde_json::to_value(&secret).context(|| "encoding a Secret".into())?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(value),
    )
    .await
    .context(|| format!("applying Secret {namespace}/{name}"))
}

/// `kubeconfig-<cluster>`, the contract's default pattern.
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    defaults::KUBECONFIG_SECRET_PATTERN.replace("{cluster}", cluster)
}

/// A target cluster of the plane.
#[derive(Debug, Clone)]
pub struct Target {
    state: TargetState,
}

impl Target {
    pub fn name(&self) -> &str {
        &self.state.cluster.name
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.state.cluster.server
    }

    pub fn ca_pem(&self) -> &str {
        &self.state.cluster.ca_pem
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        &self.state.cluster.admin_kubeconfig
    }

    /// Kubeconfig YAML (inline CA, bearer token) of the shared `hearth-node-reader`
    /// ServiceAccount, which may only get/list/watch nodes. Do not revoke it: use
    /// [`issue_node_reader`](Self::issue_node_reader) for a test's own.
    pub fn node_reader_kubeconfig(&self) -> &str {
        &self.state.node_reader_kubeconfig
    }

    pub fn fleet(&self) -> &TargetFleet {
        &self.state.fleet
    }

    /// False while stopped by [`ControlPlane::stop_target`] (as of this snapshot).
    pub fn is_running(&self) -> bool {
        self.state.running
    }

    pub async fn admin_client(&self) -> Result<kube::Client> {
        client_from_file(self.admin_kubeconfig()).await
    }

    pub async fn node_reader_client(&self) -> Result<kube::Client> {
        client_from_yaml(self.node_reader_kubeconfig()).await
    }

    /// Creates (or updates) a node with its status. Changes the fleet other tests see:
    /// do it on a target of your own ([`ControlPlane::add_target`]).
    pub async fn add_node(&self, node: &NodeSpec) -> Result<Node> {
        fleet::apply_node(&self.admin_client().await?, node).await
    }

    /// A node-reader kubeconfig for a ServiceAccount of the test's own (`sa`, in
    /// `kube-system`), created if needed, with a fresh token.
    pub async fn issue_node_reader(&self, sa: &str) -> Result<String> {
        let client = self.admin_client().await?;
        node_reader::issue(&client, self.name(), self.server(), self.ca_pem(), sa).await
    }

    /// Invalidates every token issued for `sa` (deletes and recreates the ServiceAccount).
    pub async fn revoke_node_reader(&self, sa: &str) -> Result<()> {
        node_reader::revoke(&self.admin_client().await?, sa).await
    }
}

/// A test's own namespaces and queues on the shared plane; derefs to its [`Scope`].
#[derive(Debug, Clone)]
pub struct Isolated {
    /// The suffix of every name (`<test>-<run token>`).
    pub id: String,
    pub scope: Scope,
}

impl std::ops::Deref for Isolated {
    type Target = Scope;

    fn deref(&self) -> &Scope {
        &self.scope
    }
}

impl Isolated {
    /// A cluster name unique to this test: `<base>-<id>`, at most 63 characters (it is a
    /// label value on ResourceFlavors).
    pub fn cluster(&self, base: &str) -> String {
        let mut name = format!("{base}-{}", self.id);
        if name.len() > 63 {
            let keep = 63 - self.id.len() - 1;
            name = format!("{}-{}", base[..keep].trim_end_matches('-'), self.id);
        }
        name
    }
}

/// `<sanitized test name, ≤ 24>-<4-char run token>`, unique within this process.
fn unique_id(test_name: &str) -> String {
    static USED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut base: String = test_name
        .rsplit("::")
        .next()
        .unwrap_or(test_name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(24);
    let base = base.trim_matches('-').to_string();
    let base = if base.is_empty() {
        "t".to_string()
    } else {
        base
    };
    let mut used = USED.lock().expect("ids poisoned");
    let used = used.get_or_insert_with(HashSet::new);
    let token = run_token();
    let mut id = format!("{base}-{token}");
    let mut n = 2;
    while !used.insert(id.clone()) {
        id = format!("{base}{n}-{token}");
        n += 1;
    }
    id
}

/// Four base-36 characters that differ between runs (from the pid and the start time).
fn run_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut n = (std::process::id() ^ nanos) % 36u32.pow(4);
        let mut out = String::new();
        for _ in 0..4 {
            out.push(char::from_digit(n % 36, 36).expect("digit"));
            n /= 36;
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dns_labels_and_unique() {
        let a = unique_id("smoke::Workload_admission");
        let b = unique_id("smoke::Workload_admission");
        assert_ne!(a, b);
        assert!(a.starts_with("workload-admission-"));
        assert!(a.len() <= 29);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn cluster_names_fit_a_label() {
        let iso = Isolated {
            id: "abcdefghijklmnopqrstuvwx-1234".into(),
            scope: Scope::isolated("x"),
        };
        let name = iso.cluster(&"c".repeat(60));
        assert!(name.len() <= 63, "{name}");
        assert!(name.ends_with("-abcdefghijklmnopqrstuvwx-1234"));
        assert_eq!(iso.cluster("a"), "a-abcdefghijklmnopqrstuvwx-1234");
        assert_eq!(kubeconfig_secret_name("a"), "kubeconfig-a");
    }
}
