//! The peers the bench measures beside Hearth: the Python Hearth and the real Fournos, where
//! they are, and the Python Hearth's lock latency with the real Fournos.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_e2e::ControlPlane;
use hearth_e2e::bench;
use hearth_e2e::bench_peer;
use hearth_e2e::fournos_real::{self, Fournos};
use hearth_e2e::invariants::workload_is;
use hearth_e2e::peers::Peer;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::phase::{PeerPaths, Phase};

/// The Python Hearth's source and venv, or the one line that says why it is skipped.
pub fn python_peer(sizes: &[usize]) -> std::result::Result<PeerPaths, String> {
    if sizes.iter().all(|&n| n == 0) {
        return Err("skipped: the Python Hearth (--py-sizes 0)".to_owned());
    }
    let source = Peer::HearthPy
        .source()
        .map_err(|why| format!("skipped: {why}"))?;
    let venv = Peer::HearthPy
        .venv(&source)
        .map_err(|e| format!("skipped: the Python Hearth could not be installed: {e}"))?;
    Ok(PeerPaths { source, venv })
}

/// The real Fournos's source and venv, with its CRDs on the plane, or why the Python
/// Hearth's lock latency is not measured.
pub async fn fournos_peer(
    plane: &ControlPlane,
    samples: usize,
) -> std::result::Result<PeerPaths, String> {
    if samples == 0 {
        return Err("--py-lock-samples 0".to_owned());
    }
    let source = Peer::Fournos.source()?;
    let venv = Peer::Fournos
        .venv(&source)
        .map_err(|e| format!("the real Fournos could not be installed: {e}"))?;
    let client = plane.management_client().await.map_err(|e| e.to_string())?;
    fournos_real::install_crds(&client, &source)
        .await
        .map_err(|e| format!("the real Fournos's CRDs: {e}"))?;
    Ok(PeerPaths { source, venv })
}

/// The Python Hearth's lock latency on `phase`'s clusters with GPU quota, with the real
/// Fournos (and its [`fournos_real::StandIns`]) running in the phase's scope as in
/// `takeover_py`: per cycle, (owner set → its `status.locked=true`, owner set → the
/// sentinel's Workload admitted), then unlocked until the sentinel's Workload is gone.
pub async fn py_lock_latency(
    plane: &ControlPlane,
    phase: &Phase,
    fournos: &PeerPaths,
    clusters: usize,
    samples: usize,
) -> Result<std::result::Result<Vec<(f64, f64)>, String>> {
    let cq = phase.queue_json().await?;
    let lockable: Vec<String> = (0..clusters)
        .map(|i| phase.cluster(i))
        .filter(|name| bench::flavor_has_gpu_quota(&cq, name))
        .collect();
    if lockable.is_empty() {
        return Ok(Err("no cluster of its batch got GPU quota".to_owned()));
    }
    let client = plane.management_client().await?;
    let exec = &phase.iso.execution_namespace;
    fournos_real::install_pipelines(&client, &fournos.source, exec).await?;
    let stand_ins = tokio::spawn(fournos_real::StandIns::new(&client, exec).run());
    let mut operator = Fournos::start(plane, &fournos.source, &fournos.venv, &phase.iso)
        .await
        .context("starting the real Fournos")?;
    let workloads: Api<Workload> = Api::namespaced(client.clone(), exec);
    let jobs: Api<FournosJob> = Api::namespaced(client, exec);
    let measured = async {
        let mut out = Vec::new();
        for i in 0..samples {
            let name = &lockable[i % lockable.len()];
            let sentinel = bench_peer::sentinel_name(name);
            let t0 = Instant::now();
            phase
                .clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": "bench" } })),
                )
                .await?;
            let (mut claimed, mut admitted) = (None, None);
            while claimed.is_none() || admitted.is_none() {
                let fc = phase.clusters.get(name).await?;
                if claimed.is_none() && fc.status.as_ref().and_then(|s| s.locked) == Some(true) {
                    claimed = Some(t0.elapsed().as_secs_f64());
                }
                if admitted.is_none()
                    && workloads
                        .get_opt(&sentinel)
                        .await?
                        .is_some_and(|w| workload_is(&w, "Admitted"))
                {
                    admitted = Some(t0.elapsed().as_secs_f64());
                }
                if t0.elapsed() > PY_LOCK_DEADLINE {
                    bail!(
                        "{name}: locked after {claimed:?} s, sentinel {sentinel} admitted after {admitted:?} s, after {PY_LOCK_DEADLINE:?}"
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            out.push((claimed.unwrap_or_default(), admitted.unwrap_or_default()));
            phase
                .clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": null } })),
                )
                .await?;
            let t1 = Instant::now();
            loop {
                let fc = phase.clusters.get(name).await?;
                let unlocked = fc.status.as_ref().and_then(|s| s.locked) != Some(true);
                if unlocked
                    && jobs.get_opt(&sentinel).await?.is_none()
                    && workloads.get_opt(&sentinel).await?.is_none()
                {
                    break;
                }
                if t1.elapsed() > PY_LOCK_DEADLINE {
                    bail!("{name}: still locked or sentinel {sentinel} still there after {PY_LOCK_DEADLINE:?}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(out)
    }
    .await;
    stand_ins.abort();
    let log = operator.log();
    operator.stop().await;
    measured
        .map(Ok)
        .map_err(|e: anyhow::Error| e.context(format!("Fournos log:\n{log}")))
}

/// Longest one lock or unlock of the Python Hearth may take.
const PY_LOCK_DEADLINE: Duration = Duration::from_secs(120);
