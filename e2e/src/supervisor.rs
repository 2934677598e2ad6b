//! The supervisor: the one process that owns every component of a plane (`hearth-plane
//! run`). It starts them, answers control requests, and stops them all when told to, when
//! its stdin closes (its owner died), or on SIGTERM/SIGINT/SIGHUP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::future::try_join_all;
use hearth_api::names::controllers;
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

use crate::apiserver::ApiServer;
use crate::certs::write_private;
use crate::controller_manager::ControllerManager;
use crate::error::{Context, PlaneError, Result};
use crate::etcd::Etcd;
use crate::fixtures;
use crate::fleet::{self, TargetFleet, fleet_for};
use crate::kueue::{self, Kueue};
use crate::layout::{
    self, DATA_DIR, KUBECONFIG_FILE, KUEUE_DIR, LOGS_DIR, MANAGEMENT, PIDS_FILE, PKI_DIR,
    STATE_FILE, TARGETS_DIR,
};
use crate::node_reader;
use crate::process::{self, Managed, Spawn};
use crate::protocol::{
    ClusterState, Command, ControllerState, KueueState, Pids, PlaneState, Response, read_json,
    write_json,
};

/// The options `hearth-plane run` starts a supervisor with.
pub use crate::protocol::SupervisorOptions;

/// The three Hearth controllers, started from `--hearth-bin-dir`.
pub const CONTROLLERS: [&str; 3] = [
    controllers::DISCOVERY,
    controllers::KUEUE_SYNC,
    controllers::LOCK_MANAGER,
];

/// Hearth's FournosCluster CRD in this repository (generated from the Rust types).
pub fn default_fournos_cluster_crd() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd.yaml")
}

struct Target {
    server: ApiServer,
    fleet: TargetFleet,
    node_reader: String,
    node_reader_path: PathBuf,
    running: bool,
}

struct Controller {
    name: String,
    admin_addr: SocketAddr,
    /// `None` once stopped through the control protocol.
    process: Option<Managed>,
    ready: bool,
}

impl Controller {
    /// Waits for the admin server's `/readyz` (or `/healthz`), failing at once if the
    /// process exits.
    async fn wait_ready(&mut self) -> Result<()> {
        let addr = self.admin_addr;
        let Some(process) = self.process.as_mut() else {
            return Err(PlaneError::Invalid(format!("{} is stopped", self.name)));
        };
        process
            .wait_until(&self.name, Duration::from_secs(30), || async move {
                for path in ["/readyz", "/healthz"] {
                    if let Ok((200, _)) = process::http_get(addr, path).await {
                        return Some(());
                    }
                }
                None
            })
            .await?;
        self.ready = true;
        Ok(())
    }
}

struct Plane {
    opts: SupervisorOptions,
    logs: PathBuf,
    started: Instant,
    ready_after: Duration,
    etcd: Option<Etcd>,
    management: Option<ApiServer>,
    targets: Vec<Target>,
    kueue: Option<Kueue>,
    controller_manager: Option<ControllerManager>,
    controllers: Vec<Controller>,
    reported_exits: Vec<u32>,
    /// With `--fournos`: the real Fournos, and the stand-ins beside it (what stands in for the
    /// kubelet and Tekton; the plane then runs kube-controller-manager too).
    fournos: Option<(
        crate::fournos_real::Fournos,
        tokio::task::JoinHandle<anyhow::Result<()>>,
    )>,
}

/// Runs a plane until told to stop. Returns once every child is gone.
pub async fn run(opts: SupervisorOptions) -> Result<()> {
    let control = opts.control;
    let prepared = async {
        if opts.targets < 2 {
            return Err(PlaneError::Invalid(
                "a plane needs at least 2 targets".into(),
            ));
        }
        prepare_state_dir(&opts.state_dir)?;
        process::record_pids_in(opts.state_dir.join(PIDS_FILE))?;
        Signals::new()
    };
    let mut signals = match prepared.await {
        Ok(signals) => signals,
        Err(error) => {
            // Said where the owner looks: the log and, under control, the answer line.
            tracing::error!(%error, "the plane did not start");
            respond(control, failure(&error));
            return Err(error);
        }
    };
    let mut stdin = (opts.control || opts.exit_on_stdin_eof).then(read_stdin);

    let mut plane = Plane {
        logs: opts.state_dir.join(LOGS_DIR),
        opts,
        started: Instant::now(),
        ready_after: Duration::ZERO,
        etcd: None,
        management: None,
        targets: Vec::new(),
        kueue: None,
        controller_manager: None,
        controllers: Vec::new(),
        reported_exits: Vec::new(),
        fournos: None,
    };
    let exit_on_eof = plane.opts.exit_on_stdin_eof;
    let started = tokio::select! {
        result = plane.start() => result,
        reason = shutdown_requested(&mut signals, &mut stdin, exit_on_eof) => {
            Err(PlaneError::Supervisor(format!("interrupted while starting: {reason}")))
        }
    };
    if let Err(error) = started {
        tracing::error!(%error, "the plane did not start");
        plane.respond(failure(&error));
        plane.shutdown().await;
        return Err(error);
    }
    plane.ready_after = plane.started.elapsed();
    let state = plane.state();
    write_json(&plane.opts.state_dir.join(STATE_FILE), &state)?;
    tracing::info!(
        seconds = format!("{:.1}", plane.ready_after.as_secs_f64()),
        kubeconfig = %plane.opts.state_dir.join(KUBECONFIG_FILE).display(),
        "plane ready"
    );
    plane.respond(Response {
        ok: true,
        error: None,
        state: Some(Box::new(state)),
    });

    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            reason = signals.recv() => {
                tracing::info!(reason, "shutting down");
                break;
            }
            line = next_line(&mut stdin) => match line {
                Some(line) if plane.opts.control => {
                    let response = plane.handle(&line).await;
                    plane.respond(response);
                }
                Some(_) => {}
                None if plane.opts.exit_on_stdin_eof => {
                    tracing::info!("stdin closed (the owner is gone); shutting down");
                    break;
                }
                None => stdin = None,
            },
            _ = tick.tick() => plane.report_exits(),
        }
    }
    plane.shutdown().await;
    Ok(())
}

/// Refuses a state dir with a live supervisor; clears what a dead one left behind.
fn prepare_state_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join(LOGS_DIR))
        .context(|| format!("creating {}", dir.display()))?;
    let pids_path = dir.join(PIDS_FILE);
    if let Ok(pids) = read_json::<Pids>(&pids_path) {
        if pids.supervisor_pid != std::process::id()
            && process::runs(pids.supervisor_pid, &pids.supervisor_exe)
        {
            return Err(PlaneError::Invalid(format!(
                "a plane is already running in {} (supervisor pid {}); stop it with `hearth-plane down`",
                dir.display(),
                pids.supervisor_pid
            )));
        }
        process::kill_stragglers(&pids.processes);
    }
    layout::clear_run_state(dir, false);
    Ok(())
}

impl Plane {
    fn dir(&self, sub: &str) -> PathBuf {
        self.opts.state_dir.join(sub)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }

    async fn start(&mut self) -> Result<()> {
        let timeout = self.opts.timeout;
        let tools = self.opts.tools.clone();
        tracing::info!(targets = self.opts.targets, bin = %tools.bin_dir.display(), "starting the plane");
        let etcd = Etcd::start(
            &tools.etcd,
            self.dir(DATA_DIR).join("etcd"),
            self.log("etcd"),
            timeout,
        )
        .await?;
        let etcd_url = etcd.client_url.clone();
        self.etcd = Some(etcd);

        self.management = Some(ApiServer::prepare(
            MANAGEMENT,
            &tools.kube_apiserver,
            self.dir(PKI_DIR).join(MANAGEMENT),
            self.log(&format!("apiserver-{MANAGEMENT}")),
            &etcd_url,
        )?);
        for index in 0..self.opts.targets {
            let target = self.prepare_target(fleet_for(index), &etcd_url)?;
            self.targets.push(target);
        }
        // All apiservers boot at once: on 2 cores this is markedly faster than in turn.
        let management = self.management.as_mut().expect("set above");
        tokio::try_join!(
            management.start(timeout),
            try_join_all(self.targets.iter_mut().map(|t| t.server.start(timeout)))
        )?;
        let management = self.management.as_ref().expect("set above");
        write_private(
            &self.opts.state_dir.join(KUBECONFIG_FILE),
            &management.admin_kubeconfig,
        )?;
        tracing::info!("apiservers ready");

        let wants_manager = self.opts.controller_manager || self.opts.fournos;
        let manager = async {
            if !wants_manager {
                return Ok(None);
            }
            ControllerManager::start(
                &tools.kube_controller_manager,
                management,
                &self.opts.state_dir.join(PKI_DIR).join(MANAGEMENT),
                self.logs.join("kube-controller-manager.log"),
                timeout,
            )
            .await
            .map(Some)
        };
        let (kueue, readers, manager) = tokio::try_join!(
            start_kueue(management, &self.opts, &self.opts.state_dir, &self.logs),
            try_join_all(self.targets.iter().map(populate_target)),
            manager
        )?;
        self.kueue = Some(kueue);
        self.controller_manager = manager;
        for (target, reader) in self.targets.iter_mut().zip(readers) {
            target.node_reader = reader;
        }
        tracing::info!("Kueue reconciling, fixtures and fleet in place");

        if self.opts.fournos {
            self.start_fournos().await?;
        }
        if let Some(bin_dir) = self.opts.hearth_bin_dir.clone() {
            self.start_controllers(&bin_dir).await?;
        }
        Ok(())
    }

    /// The real Fournos for the base scope: its venv (built once), its CRD, its mock
    /// Pipelines, the process, and the [`crate::fournos_real::StandIns`] beside it.
    async fn start_fournos(&mut self) -> Result<()> {
        use crate::fournos_real::{self as real, Fournos, StandIns};
        let source = real::source().map_err(PlaneError::Invalid)?;
        let venv_source = source.clone();
        let venv = tokio::task::spawn_blocking(move || real::venv(&venv_source))
            .await
            .map_err(|e| PlaneError::Invalid(format!("building Fournos's venv: {e}")))??;
        let management = self.management.as_ref().expect("started");
        let client = management.admin_client().await?;
        let scope = fixtures::Scope::base();
        real::install_crds(&client, &source).await?;
        real::install_pipelines(&client, &source, &scope.execution_namespace).await?;
        let stand_ins = tokio::spawn(StandIns::new(&client, &scope.execution_namespace).run());
        let fournos = Fournos::start_with(
            &self.logs,
            &self.dir(KUBECONFIG_FILE),
            &source,
            &venv,
            &scope,
        )
        .await?;
        tracing::info!(log = %fournos.log_path().display(), "Fournos running");
        self.fournos = Some((fournos, stand_ins));
        Ok(())
    }

    fn prepare_target(&self, fleet: TargetFleet, etcd_url: &str) -> Result<Target> {
        let name = fleet.name.to_string();
        let server = ApiServer::prepare(
            &name,
            &self.opts.tools.kube_apiserver,
            self.dir(PKI_DIR).join(&name),
            self.log(&format!("apiserver-{name}")),
            etcd_url,
        )?;
        Ok(Target {
            server,
            fleet,
            node_reader: String::new(),
            node_reader_path: self
                .dir(TARGETS_DIR)
                .join(&name)
                .join("node-reader.kubeconfig"),
            running: true,
        })
    }

    async fn start_controllers(&mut self, bin_dir: &Path) -> Result<()> {
        for name in CONTROLLERS {
            let controller = self.spawn_controller(name, bin_dir.join(name), &[])?;
            self.controllers.push(controller);
        }
        // A controller that does not come up is reported (state, log) but does not take the
        // plane down: a person can still look at what it said and fix it.
        for controller in &mut self.controllers {
            if let Err(error) = controller.wait_ready().await {
                tracing::warn!(name = %controller.name, %error, "controller not ready");
            }
        }
        Ok(())
    }

    /// Starts a Hearth controller against the management cluster with the admin
    /// kubeconfig, an admin server on a free port, the workload sentinel and `env` on top.
    fn spawn_controller(
        &self,
        name: &str,
        program: PathBuf,
        env: &[(String, String)],
    ) -> Result<Controller> {
        if !program.exists() {
            return Err(PlaneError::Invalid(format!(
                "{} does not exist (build Hearth first)",
                program.display()
            )));
        }
        let admin_addr = SocketAddr::from(([127, 0, 0, 1], process::free_port()?));
        let mut spawn = Spawn::new(name, program, self.log(name))
            .env(
                "KUBECONFIG",
                self.dir(KUBECONFIG_FILE).display().to_string(),
            )
            .env("HEARTH_ADMIN_ADDR", admin_addr.to_string())
            .env(
                "HEARTH_SENTINEL",
                if self.opts.fournos {
                    "fournosjob"
                } else {
                    "workload"
                },
            )
            .env(
                "HEARTH_LOCAL_QUEUE_NAME",
                fixtures::Scope::base().local_queue,
            );
        for (key, value) in env {
            spawn = spawn.env(key, value);
        }
        Ok(Controller {
            name: name.to_string(),
            admin_addr,
            process: Some(process::spawn(spawn)?),
            ready: false,
        })
    }

    async fn handle(&mut self, line: &str) -> Response {
        let result = match serde_json::from_str::<Command>(line) {
            Ok(command) => self.execute(command).await,
            Err(e) => Err(PlaneError::Invalid(format!("not a command: {e}"))),
        };
        match result {
            Ok(()) => {
                let state = self.state();
                if let Err(e) = write_json(&self.dir(STATE_FILE), &state) {
                    tracing::warn!(error = %e, "could not update the state file");
                }
                Response {
                    ok: true,
                    error: None,
                    state: Some(Box::new(state)),
                }
            }
            Err(error) => failure(&error),
        }
    }

    async fn execute(&mut self, command: Command) -> Result<()> {
        let timeout = self.opts.timeout;
        match command {
            Command::State => Ok(()),
            Command::StopTarget { name } => {
                let target = self.target_mut(&name)?;
                tracing::info!(target = %name, "stopping target apiserver");
                target.server.stop().await;
                target.running = false;
                Ok(())
            }
            Command::StartTarget { name } => {
                let target = self.target_mut(&name)?;
                tracing::info!(target = %name, "starting target apiserver");
                target.server.spawn()?;
                target.server.wait_ready(timeout).await?;
                target.running = true;
                Ok(())
            }
            Command::RestartManagement => {
                let management = self
                    .management
                    .as_mut()
                    .ok_or_else(|| PlaneError::Invalid("no management apiserver".into()))?;
                tracing::info!("restarting the management apiserver");
                management.stop().await;
                management.spawn()?;
                management.wait_ready(timeout).await
            }
            Command::StartController { name, program, env } => {
                if self
                    .controllers
                    .iter()
                    .any(|c| c.name == name && c.process.is_some())
                {
                    return Err(PlaneError::Invalid(format!("controller {name} is running")));
                }
                self.controllers.retain(|c| c.name != name);
                tracing::info!(%name, program = %program.display(), "starting controller");
                let mut controller = self.spawn_controller(&name, program, &env)?;
                let ready = controller.wait_ready().await;
                self.controllers.push(controller);
                ready
            }
            Command::StopController { name, kill } => {
                let controller = self
                    .controllers
                    .iter_mut()
                    .find(|c| c.name == name)
                    .ok_or_else(|| PlaneError::Invalid(format!("no controller named {name}")))?;
                if let Some(mut process) = controller.process.take() {
                    tracing::info!(%name, kill, "stopping controller");
                    // kill: the controller gets no chance to clean up, as in a crash.
                    process
                        .stop(if kill {
                            Duration::ZERO
                        } else {
                            Duration::from_secs(10)
                        })
                        .await;
                }
                controller.ready = false;
                Ok(())
            }
            Command::AddTarget { fleet } => {
                if fleet.name == MANAGEMENT
                    || self.targets.iter().any(|t| t.fleet.name == fleet.name)
                {
                    return Err(PlaneError::Invalid(format!(
                        "a cluster named {} exists",
                        fleet.name
                    )));
                }
                let etcd_url = self
                    .etcd
                    .as_ref()
                    .map(|e| e.client_url.clone())
                    .unwrap_or_default();
                tracing::info!(target = %fleet.name, nodes = fleet.nodes.len(), "adding target");
                let mut target = self.prepare_target(fleet, &etcd_url)?;
                target.server.start(timeout).await?;
                target.node_reader = populate_target(&target).await?;
                self.targets.push(target);
                Ok(())
            }
        }
    }

    fn target_mut(&mut self, name: &str) -> Result<&mut Target> {
        self.targets
            .iter_mut()
            .find(|t| t.fleet.name == name)
            .ok_or_else(|| PlaneError::Invalid(format!("no target named {name}")))
    }

    fn state(&self) -> PlaneState {
        let cluster = |server: &ApiServer| ClusterState {
            name: server.name.clone(),
            server: server.url(),
            ca_pem: server.ca_pem.clone(),
            admin_kubeconfig: server.admin_kubeconfig_path.clone(),
        };
        let management = self.management.as_ref().expect("started");
        let kueue = self.kueue.as_ref().expect("started");
        PlaneState {
            supervisor_pid: std::process::id(),
            state_dir: self.opts.state_dir.clone(),
            logs_dir: self.logs.clone(),
            ready_after_ms: self.ready_after.as_millis() as u64,
            etcd_url: self
                .etcd
                .as_ref()
                .map(|e| e.client_url.clone())
                .unwrap_or_default(),
            management: ClusterState {
                admin_kubeconfig: self.dir(KUBECONFIG_FILE),
                ..cluster(management)
            },
            targets: self
                .targets
                .iter()
                .map(|t| crate::protocol::TargetState {
                    cluster: cluster(&t.server),
                    node_reader_kubeconfig: t.node_reader.clone(),
                    node_reader_kubeconfig_path: t.node_reader_path.clone(),
                    fleet: t.fleet.clone(),
                    running: t.running,
                })
                .collect(),
            kueue: KueueState {
                health_addr: kueue.health_addr.to_string(),
                webhook_addr: kueue.webhook_addr.to_string(),
                config: kueue.config_path.clone(),
                wait_for_pods_ready: self.opts.wait_for_pods_ready,
            },
            controllers: self
                .controllers
                .iter()
                .map(|c| ControllerState {
                    name: c.name.clone(),
                    admin_addr: c.admin_addr.to_string(),
                    log: self.log(&c.name),
                    ready: c.ready,
                    running: c.process.is_some(),
                })
                .collect(),
            processes: process::registered(),
        }
    }

    fn respond(&self, response: Response) {
        respond(self.opts.control, response);
    }

    /// Logs each child that exited on its own, once.
    fn report_exits(&mut self) {
        let mut children: Vec<&mut Managed> = Vec::new();
        children.extend(self.etcd.as_mut().map(|e| &mut e.process));
        children.extend(self.management.as_mut().and_then(|m| m.process.as_mut()));
        children.extend(
            self.targets
                .iter_mut()
                .filter_map(|t| t.server.process.as_mut()),
        );
        children.extend(self.kueue.as_mut().map(|k| &mut k.process));
        children.extend(self.controller_manager.as_mut().map(|m| &mut m.process));
        children.extend(
            self.controllers
                .iter_mut()
                .filter_map(|c| c.process.as_mut()),
        );
        for child in children {
            if let Err(error) = child.check_running()
                && !self.reported_exits.contains(&child.pid)
            {
                tracing::error!(%error, "a component exited");
                self.reported_exits.push(child.pid);
            }
        }
    }

    /// Stops everything in dependency order and removes all but the logs.
    async fn shutdown(&mut self) {
        let grace = Duration::from_secs(10);
        futures::future::join_all(
            self.controllers
                .iter_mut()
                .filter_map(|c| c.process.as_mut())
                .map(|p| p.stop(grace)),
        )
        .await;
        if let Some(kueue) = self.kueue.as_mut() {
            kueue.process.stop(grace).await;
        }
        if let Some(manager) = self.controller_manager.as_mut() {
            manager.process.stop(grace).await;
        }
        futures::future::join_all(self.targets.iter_mut().map(|t| t.server.stop())).await;
        if let Some(management) = self.management.as_mut() {
            management.stop().await;
        }
        if let Some(etcd) = self.etcd.as_mut() {
            etcd.process.stop(grace).await;
        }
        // Whatever escaped the orderly stop (nothing, normally).
        process::kill_stragglers(&process::registered());
        layout::clear_run_state(&self.opts.state_dir, true);
        tracing::info!(logs = %self.logs.display(), "plane stopped");
    }
}

/// Writes `response` as one line on stdout when under control.
fn respond(control: bool, response: Response) {
    if !control {
        return;
    }
    use std::io::Write;
    let line = serde_json::to_string(&response).expect("a response serializes");
    let mut out = std::io::stdout().lock();
    // The owner may be gone already; then there is nobody to tell.
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

fn failure(error: &PlaneError) -> Response {
    Response {
        ok: false,
        error: Some(error.to_string()),
        state: None,
    }
}

async fn start_kueue(
    management: &ApiServer,
    opts: &SupervisorOptions,
    state_dir: &Path,
    logs: &Path,
) -> Result<Kueue> {
    let client = management.admin_client().await?;
    let timeout = opts.timeout;
    fixtures::install_crds(
        &client,
        &opts.tools.kueue_crds,
        opts.fournos_cluster_crd.as_deref(),
        timeout,
    )
    .await?;
    let kueue = Kueue::start(
        &opts.tools,
        &state_dir.join(KUEUE_DIR),
        logs.join("kueue.log"),
        &management.admin_kubeconfig_path,
        &management.ca,
        opts.wait_for_pods_ready,
        timeout,
    )
    .await?;
    if !opts.without_kueue_webhooks {
        kueue::register_webhooks(
            &client,
            &opts.tools.kueue_webhooks,
            kueue.webhook_addr,
            &management.ca_pem,
        )
        .await?;
    }
    fixtures::install_base(&client, timeout).await?;
    Ok(kueue)
}

/// Creates a target's nodes and its node-reader identity; returns that kubeconfig.
async fn populate_target(target: &Target) -> Result<String> {
    let client = target.server.admin_client().await?;
    for node in target.fleet.nodes.iter() {
        fleet::apply_node(&client, node).await?;
    }
    let kubeconfig = node_reader::issue(
        &client,
        &target.fleet.name,
        &target.server.url(),
        &target.server.ca_pem,
        node_reader::NODE_READER,
    )
    .await?;
    if let Some(dir) = target.node_reader_path.parent() {
        std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    }
    write_private(&target.node_reader_path, &kubeconfig)?;
    Ok(kubeconfig)
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let install = |kind| signal(kind).context(|| "installing a signal handler".into());
        Ok(Signals {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Lines of stdin; the channel closes at EOF.
fn read_stdin() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    rx
}

async fn next_line(stdin: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match stdin {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn shutdown_requested(
    signals: &mut Signals,
    stdin: &mut Option<mpsc::Receiver<String>>,
    exit_on_eof: bool,
) -> &'static str {
    loop {
        tokio::select! {
            reason = signals.recv() => return reason,
            line = next_line(stdin) => {
                if line.is_none() {
                    if exit_on_eof {
                        return "stdin closed";
                    }
                    *stdin = None;
                }
            }
        }
    }
}
