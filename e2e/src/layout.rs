//! The names of the plane: its state dir's files and folders, its management cluster's
//! name and the environment variables that steer it. The supervisor, the test side
//! ([`crate::ControlPlane`]) and `hearth-plane` all read the same dir, so they share these
//! names; this module imports nothing of the crate, so that every other module may.

use std::path::Path;

/// The management cluster's name (apiserver, etcd prefix, kubeconfig context).
pub const MANAGEMENT: &str = "management";
/// Admin kubeconfig of the management cluster, relative to the state dir.
pub const KUBECONFIG_FILE: &str = "kubeconfig";
/// Directory of all logs, relative to the state dir. Kept after the plane stops.
pub const LOGS_DIR: &str = "logs";
/// The supervisor's own log, in the logs dir.
pub const PLANE_LOG: &str = "plane.log";
/// `state.json` in the state dir, written when the plane is ready and after every change.
pub const STATE_FILE: &str = "state.json";
/// `pids.json` in the state dir: every process the supervisor owns right now.
pub const PIDS_FILE: &str = "pids.json";
/// etcd's data, relative to the state dir.
pub const DATA_DIR: &str = "data";
/// Certificates, keys and kubeconfigs of each cluster (`pki/<cluster>/`), relative to the
/// state dir.
pub const PKI_DIR: &str = "pki";
/// Kueue's configuration and certificates, relative to the state dir.
pub const KUEUE_DIR: &str = "kueue";
/// Each target's node-reader kubeconfig, relative to the state dir.
pub const TARGETS_DIR: &str = "targets";
/// The management apiserver's audit policy and log, in its `pki/management/` dir.
pub const AUDIT_POLICY_FILE: &str = "audit-policy.yaml";
pub const AUDIT_LOG_FILE: &str = "audit.log";

/// What a run of the plane leaves in its state dir besides its logs and `pids.json`.
const RUN_STATE: [&str; 6] = [
    DATA_DIR,
    PKI_DIR,
    KUEUE_DIR,
    TARGETS_DIR,
    STATE_FILE,
    KUBECONFIG_FILE,
];

/// Removes a run's state from `dir` (with `pids.json` too when `pids`); the logs stay for
/// whoever reads them after the plane is gone.
pub fn clear_run_state(dir: &Path, pids: bool) {
    let extra = pids.then_some(PIDS_FILE);
    for name in RUN_STATE.into_iter().chain(extra) {
        let path = dir.join(name);
        let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
    }
}

/// Environment variables [`crate::PlaneOptions::from_env`] and the supervisor read.
pub mod env {
    /// Attach to a running plane (`hearth-plane up`) instead of starting one.
    pub const PLANE_DIR: &str = "HEARTH_E2E_PLANE_DIR";
    /// Number of targets (default 2).
    pub const TARGETS: &str = "HEARTH_E2E_TARGETS";
    /// `default`, `off` or a timeout (`30s`).
    pub const WAIT_FOR_PODS_READY: &str = "HEARTH_E2E_WAIT_FOR_PODS_READY";
    /// Start Hearth's controllers from this directory.
    pub const HEARTH_BIN_DIR: &str = "HEARTH_E2E_HEARTH_BIN_DIR";
    /// The `hearth-plane` binary (default: next to the test binary).
    pub const SUPERVISOR: &str = "HEARTH_PLANE_BIN";
    /// When set (in the environment the supervisor inherits), the management apiserver
    /// writes an audit log of every request's metadata to
    /// `<state dir>/pki/management/audit.log` (for `hearth-bench`'s API load).
    pub const AUDIT: &str = "HEARTH_E2E_MANAGEMENT_AUDIT";
}
