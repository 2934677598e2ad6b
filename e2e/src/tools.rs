//! The pinned control-plane binaries, built by `e2e/tools/build.sh` and cached outside the
//! repository by pin hash.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{PlaneError, Result};
use crate::kueue::{KUEUE_VERSION_ENV, KueueVersion};

/// Overrides where the binaries are (skips `build.sh`).
pub const BIN_DIR_ENV: &str = "HEARTH_E2E_BIN_DIR";

/// The build script, found through this crate's source location.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/build.sh")
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
