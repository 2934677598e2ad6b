//! The pinned control-plane binaries, built by `e2e/tools/build.sh` and cached outside the
//! repository by pin hash.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{PlaneError, Result};

/// Overrides where the binaries are (skips `build.sh`).
pub const BIN_DIR_ENV: &str = "HEARTH_E2E_BIN_DIR";

/// The build script, found through this crate's source location.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/build.sh")
}

/// Chooses the Kueue version a plane runs: `0.19` (the default) or `0.16`.
pub const KUEUE_VERSION_ENV: &str = "HEARTH_E2E_KUEUE";

/// A Kueue version the plane can run, each pinned in a Go module under `e2e/tools`
/// (`kube` for 0.19, `kueue-0.16` for 0.16) and built by `build.sh` when chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KueueVersion {
    /// v0.16.x: the upstream base of the Red Hat build of Kueue 1.3.
    V0_16,
    /// v0.19.2.
    #[default]
    V0_19,
}

impl KueueVersion {
    /// [`KUEUE_VERSION_ENV`], or the default when unset.
    pub fn from_env() -> Result<KueueVersion> {
        match std::env::var(KUEUE_VERSION_ENV) {
            Ok(value) if !value.is_empty() => value.parse().map_err(PlaneError::Invalid),
            _ => Ok(KueueVersion::default()),
        }
    }

    /// The minor version as the setting names it.
    pub fn minor(self) -> &'static str {
        match self {
            Self::V0_16 => "0.16",
            Self::V0_19 => "0.19",
        }
    }

    /// What `build.sh` names this version's binary, and the prefix of its CRD directory
    /// (`<name>-crds`) and webhook manifests (`<name>-webhooks.yaml`) in the cache.
    pub fn cache_name(self) -> &'static str {
        match self {
            Self::V0_16 => "kueue-0.16",
            Self::V0_19 => "kueue",
        }
    }

    /// Whether Kueue retries the Workloads it found inadmissible when a flavor's
    /// `nodeLabels`, `nodeTaints` or `tolerations` change (kueue#13734, v0.18.6). Before,
    /// an uncordon or a pool relabel admits a waiting Workload only once something else
    /// makes Kueue retry (a ClusterQueue spec change, a Workload leaving the queue).
    pub fn retries_on_flavor_change(self) -> bool {
        self == Self::V0_19
    }

    /// Says in one line, past libtest's capture (as a skipped peer test does), that `test`
    /// expects `what` on this version instead of what v0.19 does, so a run shows it.
    pub fn expecting(self, test: &str, what: &str) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{test}: {self}: expecting {what}");
    }

    /// Whether Kueue 0.19's default WaitForPodsReady (on, 30 minutes) applies; 0.16 has it
    /// off unless configured.
    pub(crate) fn waits_for_pods_ready_by_default(self) -> bool {
        self == Self::V0_19
    }
}

impl std::str::FromStr for KueueVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim_start_matches('v') {
            "0.16" => Ok(Self::V0_16),
            "0.19" => Ok(Self::V0_19),
            other => Err(format!(
                "{KUEUE_VERSION_ENV} must be 0.16 or 0.19 (the pinned Kueue versions), not {other:?}"
            )),
        }
    }
}

impl std::fmt::Display for KueueVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kueue {}", self.minor())
    }
}

#[derive(Debug, Clone)]
pub struct Tools {
    pub bin_dir: PathBuf,
    pub kube_apiserver: PathBuf,
    /// Checked when a plane starts it ([`crate::controller_manager`]), not here: a bin dir
    /// built before it was added still serves every other plane.
    pub kube_controller_manager: PathBuf,
    pub etcd: PathBuf,
    /// The Kueue binary of [`kueue_version`](Self::kueue_version).
    pub kueue: PathBuf,
    /// Chosen by [`KUEUE_VERSION_ENV`]; it picks the binary, CRDs and webhooks.
    pub kueue_version: KueueVersion,
    pub kubectl: PathBuf,
    pub helm: PathBuf,
    /// For the chart's alert rules: `promtool check rules` / `promtool test rules`.
    pub promtool: PathBuf,
    /// Kueue's CRDs from the same pinned module (`<bin>/../kueue-crds`).
    pub kueue_crds: PathBuf,
    /// Kueue's webhook configurations from the same pinned module
    /// (`<bin>/../kueue-webhooks.yaml`).
    pub kueue_webhooks: PathBuf,
}

impl Tools {
    pub fn from_bin_dir(bin_dir: &Path) -> Result<Tools> {
        let kueue_version = KueueVersion::from_env()?;
        let kueue = kueue_version.cache_name();
        let cache = bin_dir.parent().unwrap_or(bin_dir);
        let tools = Tools {
            bin_dir: bin_dir.to_path_buf(),
            kube_apiserver: bin_dir.join("kube-apiserver"),
            kube_controller_manager: bin_dir.join("kube-controller-manager"),
            etcd: bin_dir.join("etcd"),
            kueue: bin_dir.join(kueue),
            kueue_version,
            kubectl: bin_dir.join("kubectl"),
            helm: bin_dir.join("helm"),
            promtool: bin_dir.join("promtool"),
            kueue_crds: cache.join(format!("{kueue}-crds")),
            kueue_webhooks: cache.join(format!("{kueue}-webhooks.yaml")),
        };
        for path in [
            &tools.kube_apiserver,
            &tools.etcd,
            &tools.kueue,
            &tools.helm,
            &tools.promtool,
            &tools.kueue_crds,
            &tools.kueue_webhooks,
        ] {
            if !path.exists() {
                return Err(PlaneError::Tools(format!(
                    "{} does not exist; run {KUEUE_VERSION_ENV}={} {}",
                    path.display(),
                    kueue_version.minor(),
                    build_script().display()
                )));
            }
        }
        Ok(tools)
    }

    /// `$HEARTH_E2E_BIN_DIR`, or whatever `build.sh` prints (building on a cold cache, which
    /// takes minutes; its progress goes to stderr).
    pub fn locate() -> Result<Tools> {
        if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
            return Tools::from_bin_dir(Path::new(&dir));
        }
        let script = build_script();
        let output = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| PlaneError::Tools(format!("running {}: {e}", script.display())))?;
        if !output.status.success() {
            return Err(PlaneError::Tools(format!(
                "{} failed ({})",
                script.display(),
                output.status
            )));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let dir = stdout
            .lines()
            .last()
            .ok_or_else(|| PlaneError::Tools(format!("{} printed nothing", script.display())))?;
        Tools::from_bin_dir(Path::new(dir.trim()))
    }
}
