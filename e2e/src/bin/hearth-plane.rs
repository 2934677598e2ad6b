//! `hearth-plane`: run Hearth's local control plane from a terminal (`just up` / `just
//! down`) or as the supervisor of a test's plane. A thin layer over `hearth_e2e`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::{Args, Parser, Subcommand};
use hearth_e2e::layout::{self, KUBECONFIG_FILE, LOGS_DIR, PIDS_FILE, PLANE_LOG, STATE_FILE};
use hearth_e2e::pods_ready::WaitForPodsReady;
use hearth_e2e::protocol::{Pids, PlaneState, read_json};
use hearth_e2e::supervisor::{self, SupervisorOptions};
use hearth_e2e::tools::Tools;
use hearth_e2e::{ControlPlane, process};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[derive(Parser)]
#[command(
    name = "hearth-plane",
    version,
    about = "Hearth's local control plane: etcd, kube-apiservers, Kueue and an emulated GPU fleet"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the plane in the foreground until SIGTERM/SIGINT (the supervisor).
    Run(RunArgs),
    /// Start the plane in the background, onboard the fleet and say what to look at.
    Up {
        #[command(flatten)]
        plane: PlaneArgs,
        /// Do not create the fleet's kubeconfig Secrets.
        #[arg(long)]
        no_onboard: bool,
    },
    /// Stop a plane started with `up` and remove everything but its logs.
    Down(StateDirArg),
    /// Whether a plane runs, and where.
    Status(StateDirArg),
    /// Print `export KUBECONFIG=…` for the plane.
    Env(StateDirArg),
}

#[derive(Args, Clone)]
struct StateDirArg {
    /// Where the plane keeps its state, kubeconfigs and logs.
    #[arg(long, env = "HEARTH_PLANE_STATE_DIR", default_value = ".hearth/plane")]
    state_dir: PathBuf,
}

#[derive(Args, Clone)]
struct PlaneArgs {
    #[command(flatten)]
    dir: StateDirArg,
    /// Number of target clusters (at least 2).
    #[arg(long, default_value_t = 2)]
    targets: usize,
    /// Also run hearth-discovery, hearth-kueue-sync and hearth-lock-manager from here.
    #[arg(long, env = "HEARTH_BIN_DIR")]
    hearth_bin_dir: Option<PathBuf>,
    /// Directory with kube-apiserver, etcd and kueue (default: run e2e/tools/build.sh).
    #[arg(long, env = "HEARTH_E2E_BIN_DIR")]
    tools_bin: Option<PathBuf>,
    /// Kueue's WaitForPodsReady: `default` (Kueue's own: on with 30 min on 0.19, off on
    /// 0.16), `off`, or a timeout like `45s`.
    #[arg(long, default_value = "default")]
    wait_for_pods_ready: WaitForPodsReady,
    /// FournosCluster CRD to install (default: manifests/crd.yaml of this repository).
    #[arg(long)]
    fournos_cluster_crd: Option<PathBuf>,
    /// Also run the real Fournos operator (from $HEARTH_PEERS_DIR/fournos, default
    /// ../shared/peers/fournos) and lock-manager with `fournosjob` sentinels.
    #[arg(long, env = "HEARTH_PLANE_FOURNOS")]
    fournos: bool,
    /// Also run kube-controller-manager (garbage collector, Deployments, ReplicaSets, Jobs,
    /// namespaces, ServiceAccounts; no kubelet, so Pods stay Pending). Implied by --fournos.
    #[arg(long, env = "HEARTH_PLANE_CONTROLLER_MANAGER")]
    controller_manager: bool,
    /// Do not register Kueue's admission webhooks (a peer that cannot work against them);
    /// by default Kueue runs as users run it, webhooks on.
    #[arg(long)]
    without_kueue_webhooks: bool,
    /// Deadline for each component to become ready.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    plane: PlaneArgs,
    /// Read JSON commands on stdin and answer on stdout (used by the test library).
    #[arg(long)]
    control: bool,
    /// Stop everything when stdin closes: the process that started us is gone.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// Log to the state dir only, not to stderr.
    #[arg(long, hide = true)]
    no_stderr_log: bool,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // One thread: Linux sends a child's parent-death signal when the thread that spawned it
    // exits, so every child must be spawned from a thread that lives as long as we do.
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Cmd::Run(args) => run(args).await,
                    Cmd::Up { plane, no_onboard } => up(plane, no_onboard).await,
                    Cmd::Down(dir) => down(&absolute(&dir.state_dir)?),
                    Cmd::Status(dir) => status(&absolute(&dir.state_dir)?),
                    Cmd::Env(dir) => env(&absolute(&dir.state_dir)?),
                }
            })
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The chain of causes, not a backtrace: these errors are for people.
            eprintln!("hearth-plane: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// An existing file's absolute path (unlike [`absolute`], which makes a directory).
fn absolute_file(file: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(file).with_context(|| format!("resolving {}", file.display()))
}

fn absolute(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))
}

async fn run(args: RunArgs) -> Result<()> {
    let state_dir = absolute(&args.plane.dir.state_dir)?;
    init_logging(
        &state_dir.join(LOGS_DIR).join(PLANE_LOG),
        !args.no_stderr_log,
    )?;
    let tools = match &args.plane.tools_bin {
        Some(dir) => Tools::from_bin_dir(dir)?,
        None => Tools::locate()?,
    };
    let opts = SupervisorOptions {
        state_dir,
        targets: args.plane.targets,
        tools,
        hearth_bin_dir: args
            .plane
            .hearth_bin_dir
            .as_deref()
            .map(absolute)
            .transpose()?,
        wait_for_pods_ready: args.plane.wait_for_pods_ready,
        fournos: args.plane.fournos,
        controller_manager: args.plane.controller_manager,
        without_kueue_webhooks: args.plane.without_kueue_webhooks,
        fournos_cluster_crd: Some(
            args.plane
                .fournos_cluster_crd
                .unwrap_or_else(supervisor::default_fournos_cluster_crd),
        ),
        control: args.control,
        exit_on_stdin_eof: args.exit_on_stdin_eof,
        timeout: Duration::from_secs(args.plane.timeout_secs),
    };
    supervisor::run(opts).await?;
    Ok(())
}

async fn up(args: PlaneArgs, no_onboard: bool) -> Result<()> {
    let state_dir = absolute(&args.dir.state_dir)?;
    // Build (or find) the tools here, in the foreground, so a cold build shows its progress.
    let tools = match &args.tools_bin {
        Some(dir) => Tools::from_bin_dir(dir)?,
        None => Tools::locate()?,
    };
    let mut path = vec![tools.bin_dir.clone()];
    if let Some(dir) = &args.hearth_bin_dir {
        path.push(absolute(dir)?);
    }
    if let Some(state) = running_state(&state_dir) {
        eprintln!("A plane is already running in {}.", state_dir.display());
        print_next_steps(&state, &[], &path);
        return Ok(());
    }
    let logs = state_dir.join(LOGS_DIR);
    std::fs::create_dir_all(&logs)?;
    let out = std::fs::File::create(logs.join("supervisor.out"))?;
    let exe = std::env::current_exe().context("locating hearth-plane")?;
    let opts = SupervisorOptions {
        state_dir: state_dir.clone(),
        targets: args.targets,
        tools,
        hearth_bin_dir: args.hearth_bin_dir.as_deref().map(absolute).transpose()?,
        wait_for_pods_ready: args.wait_for_pods_ready,
        fournos_cluster_crd: args
            .fournos_cluster_crd
            .as_deref()
            .map(absolute_file)
            .transpose()?,
        fournos: args.fournos,
        controller_manager: args.controller_manager,
        without_kueue_webhooks: args.without_kueue_webhooks,
        control: false,
        exit_on_stdin_eof: false,
        timeout: Duration::from_secs(args.timeout_secs),
    };
    let mut command = Process::new(exe);
    command
        .args(opts.run_args())
        .arg("--no-stderr-log")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // A process group of its own: closing this terminal or pressing Ctrl-C in it later does
    // not reach the plane.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let started = Instant::now();
    let mut child = command.spawn().context("starting the supervisor")?;
    eprintln!(
        "Starting the plane in {} (log: {})…",
        state_dir.display(),
        logs.join(PLANE_LOG).display()
    );

    let deadline = started + Duration::from_secs(args.timeout_secs * 3);
    let state = loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the plane did not start ({status}). Last lines of {}:\n{}",
                logs.join(PLANE_LOG).display(),
                hearth_e2e::error::tail(&logs.join(PLANE_LOG), 30)
            );
        }
        if let Some(state) = running_state(&state_dir) {
            break state;
        }
        if Instant::now() > deadline {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            bail!(
                "the plane was not ready after {:?}; see {}",
                deadline - started,
                logs.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let mut onboarded = Vec::new();
    if !no_onboard {
        let plane = ControlPlane::attach(&state_dir)?;
        onboarded = plane
            .onboard_fleet(hearth_api::names::defaults::SECRETS_NAMESPACE)
            .await?;
    }
    eprintln!("Ready in {:.1}s.\n", started.elapsed().as_secs_f64());
    print_next_steps(&state, &onboarded, &path);
    Ok(())
}

/// The state of a live plane in `dir`, if there is one.
fn running_state(dir: &Path) -> Option<PlaneState> {
    let state: PlaneState = read_json(&dir.join(STATE_FILE)).ok()?;
    process::is_alive(state.supervisor_pid).then_some(state)
}

/// `path`: directories to put first on PATH, so that the commands printed here run the
/// pinned `kubectl` (the version the plane runs) and this checkout's `kubectl-fournos`.
fn print_next_steps(state: &PlaneState, onboarded: &[String], path: &[PathBuf]) {
    let kubeconfig = state.management.admin_kubeconfig.display();
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("  export KUBECONFIG={kubeconfig}"));
    if !path.is_empty() {
        let dirs: Vec<String> = path.iter().map(|d| d.display().to_string()).collect();
        line(format!("  export PATH={}:$PATH", dirs.join(":")));
    }
    line(String::new());
    line(format!(
        "  {:<10} {}   Kueue, ClusterQueue fournos-queue",
        "management", state.management.server
    ));
    for target in &state.targets {
        let gpus: Vec<String> = target
            .fleet
            .schedulable_gpus()
            .iter()
            .map(|((_, model), n)| format!("{n}x {model}"))
            .collect();
        line(format!(
            "  {:<10} {}   {} nodes; schedulable GPUs: {}{}",
            target.cluster.name,
            target.cluster.server,
            target.fleet.nodes.len(),
            if gpus.is_empty() {
                "none".into()
            } else {
                gpus.join(", ")
            },
            if target.running { "" } else { "   (STOPPED)" }
        ));
    }
    line(String::new());
    if !onboarded.is_empty() {
        line(format!(
            "Onboarded: Secrets {} in {} (node-reader tokens, not admin).",
            onboarded
                .iter()
                .map(|c| format!("kubeconfig-{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            hearth_api::names::defaults::SECRETS_NAMESPACE
        ));
    }
    if state.controllers.is_empty() {
        line("Hearth's controllers are not running (no --hearth-bin-dir): FournosClusters will not appear.".into());
    }
    for c in state.controllers.iter().filter(|c| !c.ready) {
        line(format!(
            "WARNING: {} did not report ready; see {}",
            c.name,
            c.log.display()
        ));
    }
    let first = state
        .targets
        .first()
        .map(|t| t.cluster.name.as_str())
        .unwrap_or("target-a");
    line("Look at:".into());
    line("  kubectl get fc -A                                  clusters Hearth onboarded".into());
    line("  kubectl -n hearth get fc -o wide                   with lock details".into());
    line(
        "  kubectl get resourceflavors,clusterqueues          what Hearth published to Kueue"
            .into(),
    );
    line("  kubectl -n psap-automation get workloads           sentinels and jobs".into());
    line("Lock a cluster for yourself, see why it is (not) held, then release it:".into());
    line(format!("  kubectl fournos lock {first} --ttl 2h"));
    line(format!("  kubectl fournos why {first}"));
    line(format!("  kubectl fournos unlock {first}"));
    if let Some(target) = state.targets.first() {
        line("Talk to a target as Hearth does:".into());
        line(format!(
            "  kubectl --kubeconfig {} get nodes",
            target.node_reader_kubeconfig_path.display()
        ));
    }
    line(format!(
        "Logs: {}/ (plane.log, kueue.log, apiserver-*.log, hearth-*.log)",
        state.logs_dir.display()
    ));
    line("Stop: hearth-plane down (just down)".into());
    print!("{out}");
    let _ = std::io::stdout().flush();
}

fn down(state_dir: &Path) -> Result<()> {
    let Ok(pids) = read_json::<Pids>(&state_dir.join(PIDS_FILE)) else {
        eprintln!("No plane is running in {}.", state_dir.display());
        return Ok(());
    };
    let supervisor = pids.supervisor_pid;
    if process::runs(supervisor, &pids.supervisor_exe) {
        eprintln!("Stopping the plane (supervisor pid {supervisor})…");
        let _ = kill(Pid::from_raw(supervisor as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while process::is_alive(supervisor) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if process::is_alive(supervisor) {
            eprintln!("The supervisor did not stop in time; killing it.");
            let _ = kill(Pid::from_raw(supervisor as i32), Signal::SIGKILL);
        }
    }
    let killed = process::kill_stragglers(&pids.processes);
    if !killed.is_empty() {
        eprintln!("Killed {} leftover process(es): {killed:?}", killed.len());
    }
    layout::clear_run_state(state_dir, true);
    eprintln!(
        "Stopped. Logs kept in {}.",
        state_dir.join(LOGS_DIR).display()
    );
    Ok(())
}

fn status(state_dir: &Path) -> Result<()> {
    match running_state(state_dir) {
        Some(state) => {
            println!(
                "running (supervisor pid {}, {} processes)",
                state.supervisor_pid,
                state.processes.len()
            );
            print_next_steps(&state, &[], &[]);
            Ok(())
        }
        None => {
            println!("not running ({})", state_dir.display());
            std::process::exit(1);
        }
    }
}

fn env(state_dir: &Path) -> Result<()> {
    if running_state(state_dir).is_none() {
        eprintln!("note: no plane is running in {}", state_dir.display());
    }
    println!(
        "export KUBECONFIG={}",
        state_dir.join(KUBECONFIG_FILE).display()
    );
    Ok(())
}

/// Logs to `file` and, unless told otherwise, to stderr: a person watching `run` sees what
/// happens, and the file keeps it for the tests and for `up`.
fn init_logging(file: &Path, stderr: bool) -> Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    let writer = Tee {
        file: Arc::new(Mutex::new(file)),
        stderr,
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("HEARTH_PLANE_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(
                "info,kube_client=off,tower=warn,hyper=warn,rustls=warn",
            )
        });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false)
        .with_writer(writer)
        .init();
    Ok(())
}

#[derive(Clone)]
struct Tee {
    file: Arc<Mutex<std::fs::File>>,
    stderr: bool,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stderr {
            let _ = std::io::stderr().write_all(buf);
        }
        self.file
            .lock()
            .map_err(|_| std::io::Error::other("log file poisoned"))?
            .write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Tee {
    type Writer = Tee;

    fn make_writer(&'a self) -> Tee {
        self.clone()
    }
}
