//! What a run measured, as `results.json` holds it, and the machine and versions it ran
//! on.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hearth_e2e::bench::{ApiLoad, OnboardingStage, Summary, Usage};
use serde::Serialize;

use crate::args::Args;

#[derive(Serialize, Default)]
pub struct Results {
    pub command: String,
    pub started_at: String,
    pub finished_at: String,
    pub machine: BTreeMap<String, String>,
    pub versions: BTreeMap<String, String>,
    pub args: Option<Args>,
    pub onboarding: Vec<Onboarding>,
    pub lock: Option<Summary>,
    pub lock_samples: Vec<f64>,
    pub usage: Vec<UsageAt>,
    pub api_load: Option<Load>,
    pub scale: Option<Scale>,
    /// CPU seconds each process used during the idle window.
    pub idle_cpu: BTreeMap<String, f64>,
    /// The idle batch's ClusterQueue once the idle window is over.
    pub queue_after_idle: Option<QueueCheck>,
    pub python: PythonSide,
    /// `/proc/loadavg` when each phase started: the machine is shared.
    pub load: Vec<(String, String)>,
    pub notes: Vec<String>,
}

/// `/proc/loadavg` now (1, 5 and 15 minute load averages, running/total tasks).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.trim().to_owned())
        .unwrap_or_default()
}

/// The same measurements on the real Python Hearth.
#[derive(Serialize, Default)]
pub struct PythonSide {
    /// Why it did not run (the one line printed).
    pub skipped: Option<String>,
    pub onboarding: Vec<PyOnboarding>,
    pub usage: Vec<UsageAt>,
    pub api_load: Option<Load>,
    pub idle_cpu: BTreeMap<String, f64>,
    pub queue_after_idle: Option<QueueCheck>,
    /// Owner set → its own `status.locked=true` (written as it creates the sentinel).
    pub lock_claimed: Option<Summary>,
    /// Owner set → the real Fournos's Workload for its sentinel admitted by Kueue.
    pub lock_admitted: Option<Summary>,
    /// (claimed, admitted) per cycle, in seconds.
    pub lock_samples: Vec<(f64, f64)>,
    /// Why its lock latency was not measured.
    pub lock_skipped: Option<String>,
}

#[derive(Serialize)]
pub struct PyOnboarding {
    pub clusters: usize,
    /// Secret created → flavor with GPU quota in the ClusterQueue, of those that got it.
    pub latency: Option<Summary>,
    /// The same, each as it was measured (those that got quota before the deadline).
    #[serde(default)]
    pub latencies: Vec<f64>,
    pub with_quota: usize,
    pub deadline_secs: u64,
}

#[derive(Serialize, Clone)]
pub struct QueueCheck {
    /// Flavors whose resources are not the group's coveredResources.
    pub invalid_flavors: usize,
    pub active: bool,
}

#[derive(Serialize)]
pub struct Onboarding {
    pub clusters: usize,
    /// Secret created → Valid + GPUs + quota in the queue (or a KueueSynced answer).
    pub latency: Option<Summary>,
    /// Secret created → FournosCluster Valid with GPUs (discovery alone).
    pub discovered: Option<Summary>,
    pub with_quota: usize,
    pub kueue_synced_false: BTreeMap<String, usize>,
    pub queue_valid: bool,
    /// Where the time goes, stage by stage.
    pub stages: Vec<OnboardingStage>,
}

#[derive(Serialize)]
pub struct UsageAt {
    pub fournos_clusters: usize,
    pub controller: String,
    pub usage: Usage,
}

#[derive(Serialize)]
pub struct Load {
    pub clusters: usize,
    pub window_secs: f64,
    /// Per controller: totals, and per minute.
    pub per_controller: BTreeMap<String, ApiLoad>,
    /// Per controller, per minute: reads, writes, Lease requests.
    pub per_minute: BTreeMap<String, (f64, f64, f64)>,
}

#[derive(Serialize)]
pub struct Scale {
    pub clusters: usize,
    pub converge_secs: f64,
    pub with_quota: usize,
    pub kueue_synced_false: BTreeMap<String, usize>,
    pub queue_valid: bool,
    pub queue_active: bool,
    /// How many fit: Kueue's flavors per resource group (all in one group here).
    pub fit: usize,
    /// Clusters whose flavor had GPU quota in any version of the queue the bench's watch
    /// saw: more than `fit` means quota was taken from one cluster and given to another.
    pub ever_with_quota: usize,
    /// Clusters whose `KueueSynced` went from True to a final refusal.
    pub lost_quota: Vec<String>,
    /// Times the bench's watches had to list again (changes in between unseen).
    pub watch_relists: usize,
    pub stages: Vec<OnboardingStage>,
}

pub fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

pub fn machine() -> BTreeMap<String, String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .unwrap_or_default()
        .to_owned();
    BTreeMap::from([
        ("nproc".to_owned(), sh("nproc", &[])),
        ("cpu".to_owned(), model),
        ("memory".to_owned(), mem),
        ("kernel".to_owned(), sh("uname", &["-sr"])),
    ])
}

pub fn versions() -> BTreeMap<String, String> {
    let go_mod = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/kube/go.mod"),
    )
    .unwrap_or_default();
    let pin = |module: &str| {
        go_mod
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{module} ")))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    };
    // Results of earlier runs waiting to be committed do not change what is measured.
    let dirty = !sh(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":(exclude)bench-results",
        ],
    )
    .is_empty();
    BTreeMap::from([
        (
            "hearth".to_owned(),
            format!(
                "{}{}",
                sh("git", &["rev-parse", "HEAD"]),
                if dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            ),
        ),
        ("rustc".to_owned(), sh("rustc", &["--version"])),
        ("kubernetes".to_owned(), pin("k8s.io/kubernetes")),
        ("kueue".to_owned(), pin("sigs.k8s.io/kueue")),
        ("etcd".to_owned(), pin("go.etcd.io/etcd/server/v3")),
    ])
}
