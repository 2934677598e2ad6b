//! The real Python (kopf) Hearth that Hearth replaces, on the local plane: the pinned,
//! unmodified snapshot under `HEARTH_PEERS_DIR` (default `../shared/peers/hearth-py`),
//! installed with pip into a venv cached beside the other tools (see [`Peer::venv`]).
//!
//! How its packaging runs it, and how this runs it:
//! - Its image runs `python -m hearth`, whose `__main__` is `kopf.run(namespaces=[
//!   HEARTH_NAMESPACE, HEARTH_SECRETS_NAMESPACE], liveness_endpoint=
//!   "http://0.0.0.0:8080/healthz")`; the `--liveness` flag of its ENTRYPOINT is ignored.
//!   The port is fixed, so two of them on one machine (parallel tests, the benchmark)
//!   collide. This runs the same operator module the same way with kopf's own command
//!   line, `python -m kopf run -m hearth.operator --namespace <ns> --namespace <secrets ns>
//!   --liveness=http://127.0.0.1:<free port>/healthz`: same handlers, same namespaces,
//!   only the liveness port differs.
//! - Environment as `deploy/deployment.yaml` sets it (`HEARTH_NAMESPACE`,
//!   `HEARTH_SECRETS_NAMESPACE`, `HEARTH_EXECUTION_NAMESPACE`), plus the scope's
//!   ClusterQueue in `HEARTH_KUEUE_CLUSTER_QUEUE_NAME` (its setting; the deployment keeps
//!   the default `fournos-queue`) and whatever the caller adds (e.g. a shorter
//!   `HEARTH_RECONCILE_INTERVAL_SEC`).
//! - As the plane's administrator, not as the ServiceAccount of `deploy/clusterrole.yaml`.
//! - Its CRD is its own `manifests/crd.yaml` (FournosCluster `fournos.dev/v1`, no map list
//!   on `status.conditions`): [`crd_path`] for a plane's `fournos_cluster_crd`.
//! - It needs, pre-seeded, a ClusterQueue with at least one resource group: it only ever
//!   appends flavors to `spec.resourceGroups[0]` and does nothing (a warning) without one.
//!   Its sentinels are FournosJobs, which only the real Fournos turns into Workloads.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::peers::{KopfProcess, Peer};
use crate::process::{self, Spawn};
use crate::{ControlPlane, Scope};

/// The Python Hearth's source folder, or why there is none.
pub fn source() -> std::result::Result<PathBuf, String> {
    Peer::HearthPy.source()
}

/// A venv with it installed (see [`Peer::venv`]).
pub fn venv(source: &Path) -> Result<PathBuf> {
    Peer::HearthPy.venv(source)
}

/// The two peers a hand-over test needs, the Python Hearth and the real Fournos, each
/// with its venv.
#[derive(Debug)]
pub struct WithFournos {
    pub py_source: PathBuf,
    pub py_venv: PathBuf,
    pub fournos_source: PathBuf,
    pub fournos_venv: PathBuf,
}

/// Both peers with their venvs (blocking: a venv may be built), or `None` after one
/// `<test>: skipped …` line when either folder is absent (an error instead when the peers
/// are required: [`crate::peers::on_absent`]).
pub fn with_fournos(test: &str) -> Result<Option<WithFournos>> {
    let sources = source().and_then(|py| Ok((py, crate::fournos_real::source()?)));
    let (py_source, fournos_source) = match sources {
        Ok(sources) => sources,
        Err(why) => {
            return crate::peers::on_absent(test, &why)
                .skip_or_fail()
                .map(|()| None);
        }
    };
    Ok(Some(WithFournos {
        py_venv: venv(&py_source)?,
        fournos_venv: crate::fournos_real::venv(&fournos_source)?,
        py_source,
        fournos_source,
    }))
}

/// Its FournosCluster CRD: the legacy one.
pub fn crd_path(source: &Path) -> PathBuf {
    source.join("manifests/crd.yaml")
}

/// The running Python Hearth, working in one scope.
#[derive(Debug)]
pub struct HearthPy(KopfProcess);

impl std::ops::Deref for HearthPy {
    type Target = KopfProcess;

    fn deref(&self) -> &KopfProcess {
        &self.0
    }
}

impl std::ops::DerefMut for HearthPy {
    fn deref_mut(&mut self) -> &mut KopfProcess {
        &mut self.0
    }
}

impl HearthPy {
    /// Starts it for `scope` with `env` added, and waits for kopf's liveness endpoint.
    pub async fn start(
        plane: &ControlPlane,
        venv: &Path,
        scope: &Scope,
        env: &[(&str, &str)],
    ) -> Result<HearthPy> {
        let liveness = process::free_port()?;
        let mut spec = Spawn::new(
            format!("hearth-py-{}", scope.namespace),
            // `python -m kopf`, not `bin/kopf`: the venv is built aside and renamed, so
            // its console scripts' shebangs name a path that no longer exists.
            venv.join("bin/python"),
            plane
                .logs_dir()
                .join(format!("hearth-py-{}.log", scope.namespace)),
        )
        .arg("-m")
        .arg("kopf")
        .arg("run")
        .arg("-m")
        .arg("hearth.operator")
        .arg(format!("--namespace={}", scope.namespace))
        .arg(format!("--namespace={}", scope.secrets_namespace))
        .arg(KopfProcess::liveness_arg(liveness))
        .env(
            "KUBECONFIG",
            plane.management_kubeconfig().to_string_lossy(),
        )
        .env("HEARTH_NAMESPACE", &scope.namespace)
        .env("HEARTH_SECRETS_NAMESPACE", &scope.secrets_namespace)
        .env("HEARTH_EXECUTION_NAMESPACE", &scope.execution_namespace)
        .env("HEARTH_KUEUE_CLUSTER_QUEUE_NAME", &scope.cluster_queue)
        .env("PYTHONUNBUFFERED", "1");
        for (key, value) in env {
            spec = spec.env(*key, *value);
        }
        Ok(HearthPy(KopfProcess::start(spec, liveness).await?))
    }
}
