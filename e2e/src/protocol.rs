//! What the supervisor tells the world: the state file and the control protocol spoken over
//! its stdin/stdout (one JSON object per line).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Context, Result};
use crate::fleet::TargetFleet;
use crate::pods_ready::WaitForPodsReady;
use crate::tools::Tools;

/// `state.json` in the state dir, written when the plane is ready and after every change.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaneState {
    pub supervisor_pid: u32,
    pub state_dir: PathBuf,
    pub logs_dir: PathBuf,
    /// How long the supervisor took from start to ready.
    pub ready_after_ms: u64,
    pub etcd_url: String,
    pub management: ClusterState,
    pub targets: Vec<TargetState>,
    pub kueue: KueueState,
    pub controllers: Vec<ControllerState>,
    pub processes: Vec<ProcessState>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    pub name: String,
    pub server: String,
    pub ca_pem: String,
    /// Admin kubeconfig file (client certificate in `system:masters`).
    pub admin_kubeconfig: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetState {
    pub cluster: ClusterState,
    /// Kubeconfig (inline CA, bearer token) of the `hearth-node-reader` ServiceAccount.
    pub node_reader_kubeconfig: String,
    pub node_reader_kubeconfig_path: PathBuf,
    pub fleet: TargetFleet,
    /// False while stopped through the control protocol.
    pub running: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueState {
    pub health_addr: String,
    pub webhook_addr: String,
    pub config: PathBuf,
    pub wait_for_pods_ready: WaitForPodsReady,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerState {
    pub name: String,
    pub admin_addr: String,
    pub log: PathBuf,
    /// Whether its admin endpoint answered after the last start.
    pub ready: bool,
    /// False once stopped through the control protocol.
    pub running: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessState {
    pub name: String,
    pub pid: u32,
    pub exe: PathBuf,
    pub log: PathBuf,
}

/// `pids.json`: every process the supervisor owns right now, rewritten on each change, so
/// that `hearth-plane down` and the next start can find stragglers even of a supervisor that
/// was killed halfway through starting.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pids {
    pub supervisor_pid: u32,
    pub supervisor_exe: PathBuf,
    pub processes: Vec<ProcessState>,
}

/// A request on the supervisor's stdin.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Command {
    State,
    StopTarget {
        name: String,
    },
    StartTarget {
        name: String,
    },
    /// Stops the management apiserver and starts it again on the same port and data.
    RestartManagement,
    AddTarget {
        fleet: TargetFleet,
    },
    /// Runs `program` as a Hearth controller named `name` (unique; also its log file name).
    StartController {
        name: String,
        program: PathBuf,
        env: Vec<(String, String)>,
    },
    /// SIGTERM (or with `kill`, SIGKILL at once) to a controller.
    StopController {
        name: String,
        kill: bool,
    },
}

/// The supervisor's answer on stdout. The first line it ever writes is the answer to "start":
/// the ready state or the error that stopped it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Box<PlaneState>>,
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text =
        serde_json::to_string_pretty(value).context(|| format!("encoding {}", path.display()))?;
    crate::certs::write_private(path, &text)
}

pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).context(|| format!("decoding {}", path.display()))
}

#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    pub state_dir: PathBuf,
    /// Number of target clusters (at least 2).
    pub targets: usize,
    pub tools: Tools,
    /// Where `hearth-discovery`, `hearth-kueue-sync` and `hearth-lock-manager` are; `None`
    /// runs the plane without Hearth.
    pub hearth_bin_dir: Option<PathBuf>,
    pub wait_for_pods_ready: WaitForPodsReady,
    pub fournos_cluster_crd: Option<PathBuf>,
    /// Also run the real Fournos ([`crate::fournos_real`]) for the base scope, and
    /// lock-manager with `fournosjob` sentinels.
    pub fournos: bool,
    /// Also run kube-controller-manager for the management cluster
    /// ([`crate::controller_manager`]); implied by `fournos`.
    pub controller_manager: bool,
    /// Do not register Kueue's admission webhooks ([`crate::plane::PlaneOptions`] says when).
    pub without_kueue_webhooks: bool,
    /// Read [`Command`]s from stdin and write [`Response`]s to stdout.
    pub control: bool,
    /// Stop everything when stdin reaches EOF (the owner of the pipe died).
    pub exit_on_stdin_eof: bool,
    /// Deadline for each component to become ready.
    pub timeout: Duration,
}

impl SupervisorOptions {
    /// The command line of `hearth-plane` that runs a supervisor with these options: what
    /// its `run` subcommand parses back into them.
    pub fn run_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "run".into(),
            "--state-dir".into(),
            self.state_dir.clone().into(),
            "--targets".into(),
            self.targets.to_string().into(),
            "--tools-bin".into(),
            self.tools.bin_dir.clone().into(),
            "--wait-for-pods-ready".into(),
            self.wait_for_pods_ready.to_string().into(),
            "--timeout-secs".into(),
            self.timeout.as_secs().to_string().into(),
        ];
        if let Some(dir) = &self.hearth_bin_dir {
            args.extend(["--hearth-bin-dir".into(), dir.clone().into()]);
        }
        if let Some(crd) = &self.fournos_cluster_crd {
            args.extend(["--fournos-cluster-crd".into(), crd.clone().into()]);
        }
        let flags = [
            (self.fournos, "--fournos"),
            (self.controller_manager, "--controller-manager"),
            (self.without_kueue_webhooks, "--without-kueue-webhooks"),
            (self.control, "--control"),
            (self.exit_on_stdin_eof, "--exit-on-stdin-eof"),
        ];
        args.extend(flags.iter().filter(|(on, _)| *on).map(|(_, f)| f.into()));
        args
    }
}
