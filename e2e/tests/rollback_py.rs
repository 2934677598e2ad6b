//! Rolling back from Hearth to the **real** Python Hearth (`$HEARTH_PEERS_DIR/hearth-py`)
//! with the **real** Fournos (`$HEARTH_PEERS_DIR/fournos`), following `docs/upgrade.md`
//! ("Rolling back to the Python Hearth") command by command, and proving no lock is lost.
//! Without either folder the test prints one `skipped:` line and passes, or fails when
//! `HEARTH_E2E_REQUIRE_PEERS` is set.
//!
//! The plane runs kube-controller-manager (the hand-over of step 3 relies on its garbage
//! collector; Fournos does too) and Kueue; [`StandIns`] stand in for the kubelet and Tekton.
//! Hearth is installed by `helm install` into the plane's base scope (the docs' names:
//! `hearth`, `psap-secrets`, `psap-automation`, `fournos-queue`) with its default
//! `fournosjob` sentinels; its Deployments run as processes ([`hearth_e2e::release`]).
//! A cluster is onboarded and locked under Hearth: its sentinel is
//! `cluster-lock-<cluster>`, which Fournos turns into an admitted Workload.
//!
//! Then the docs' blocks run as written, with two substitutions: the settings block gets
//! the test's values (only `PYTHON_HEARTH` differs: the peers' checkout), and step 4's
//! `kubectl scale` of the Python Hearth's Deployment is its process starting (as its
//! packaging runs it, [`HearthPy`]). After step 1 the Hearth processes stop, as the
//! Deployments' Pods would.
//!
//! Sampled all along from before step 1 until 10 s (two rounds of its timer) after the
//! Python Hearth says it holds the lock:
//! the sentinel Workload that held the cluster stays admitted and not evicted, and the
//! cluster says `locked=true` with its owner unchanged. Then a one-slot job for the cluster
//! is refused (the lock holds under the Python Hearth), and unlocking through the Python
//! Hearth (`spec.owner` cleared) frees the cluster: both sentinels go (the second by the
//! garbage collector) and a one-slot job is admitted.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use hearth_api::fournosjob::FournosJob;
use hearth_e2e::chart::chart_dir;
use hearth_e2e::docs::{run_sh, sh_blocks};
use hearth_e2e::error::tail;
use hearth_e2e::fournos_real::{self, Fournos, StandIns};
use hearth_e2e::hearth_py::{self, HearthPy};
use hearth_e2e::invariants::workload_is;
use hearth_e2e::lab::{DEADLINE, LockLab, is_held, lock_state, own_plane, with_controller_manager};
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::release::{self, Sampler};
use hearth_e2e::{ControlPlane, Isolated, Scope};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const DOCS: &str = include_str!("../../docs/upgrade.md");
const SECTION: &str = "## Rolling back to the Python Hearth";
const CLUSTER: &str = "target-a";
const OWNER: &str = "alice";

async fn plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    own_plane(&PLANE, with_controller_manager).await
}

/// The sentinel Hearth made for [`CLUSTER`] must keep holding it.
async fn lock_kept(lab: &LockLab, held_by: &str) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    match lab.workloads.get_opt(held_by).await? {
        Some(w) if workload_is(&w, "Admitted") && !workload_is(&w, "Evicted") => {}
        other => bad.push(format!(
            "{held_by}: not admitted: {:?}",
            other.and_then(|w| w.status).map(|s| s.conditions)
        )),
    }
    let fc: Value = serde_json::to_value(lab.clusters.get(CLUSTER).await?)?;
    if fc["status"]["locked"] != true || fc["spec"]["owner"] != OWNER {
        bad.push(format!(
            "{CLUSTER}: owner {} locked {}",
            fc["spec"]["owner"], fc["status"]["locked"]
        ));
    }
    Ok(bad)
}

#[tokio::test]
async fn rollback_to_the_python_hearth_loses_no_lock() -> Result<()> {
    let Some(peers) =
        tokio::task::spawn_blocking(|| hearth_py::with_fournos("rollback_py")).await??
    else {
        return Ok(());
    };
    let plane = plane().await?;
    let kubeconfig = plane.management_kubeconfig();
    let scope = Scope::base();
    let iso = Isolated {
        id: "rollback".into(),
        scope: scope.clone(),
    };
    let client = plane.management_client().await?;
    fournos_real::install_crds(&client, &peers.fournos_source).await?;
    fournos_real::install_pipelines(&client, &peers.fournos_source, &scope.execution_namespace)
        .await?;
    let stand_ins = tokio::spawn(StandIns::new(&client, &scope.execution_namespace).run());
    let _stand_ins = AbortOnDrop(stand_ins);
    let fournos = Fournos::start(plane, &peers.fournos_source, &peers.fournos_venv, &scope)
        .await
        .context("starting Fournos")?;

    let (mut pods, lab) = release::install(plane, &iso, &chart_dir(), "", CLUSTER).await?;
    let lab = Arc::new(lab);
    until("onboarded and locked under Hearth", DEADLINE, || async {
        Ok(match lab.clusters.get_opt(CLUSTER).await? {
            None => Err("no FournosCluster yet".to_owned()),
            Some(fc) if fc.spec.owner.is_none() => {
                lab.set_spec(CLUSTER, json!({ "owner": OWNER })).await?;
                Err("owner just set".to_owned())
            }
            Some(fc) if is_held(&fc) => Ok(()),
            Some(fc) => Err(lock_state(&fc)),
        })
    })
    .await
    .map_err(|e| anyhow!("{e:#}\n{}\n{}", pods.logs(), tail(fournos.log_path(), 30)))?;
    let held_by = hearth_api::names::lock_sentinel_name(CLUSTER);
    let legacy = format!("hearth-lock-{CLUSTER}");

    let blocks = sh_blocks(DOCS, SECTION)?;
    ensure!(
        blocks.len() == 5 && blocks[0].contains("# Settings"),
        "a settings block and four steps under {SECTION}: {blocks:?}"
    );
    let settings = [
        ("HEARTH_NAMESPACE", scope.namespace.as_str()),
        ("EXECUTION_NAMESPACE", scope.execution_namespace.as_str()),
        ("PYTHON_HEARTH", &peers.py_source.display().to_string()),
    ];
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, *v)).collect();
    let run = |block: &str| run_sh(block, &chart_dir(), &kubeconfig, &settings);

    let sampler = {
        let (lab, held_by) = (lab.clone(), held_by.clone());
        Sampler::start(move || {
            let (lab, held_by) = (lab.clone(), held_by.clone());
            async move { lock_kept(&lab, &held_by).await }
        })
    };
    let rolled_back = async {
        run(&blocks[1])?;
        pods.stop_all().await?;
        run(&blocks[2])?;
        let handed = run(&blocks[3])?;
        println!("step 3 said:\n{handed}");
        // Step 4 (`kubectl scale` of its Deployment): its process.
        let py = HearthPy::start(
            plane,
            &peers.py_venv,
            &scope,
            &[("HEARTH_RECONCILE_INTERVAL_SEC", "5")],
        )
        .await?;
        until("the Python Hearth holding the lock", DEADLINE, || async {
            let fc: Value = serde_json::to_value(lab.clusters.get(CLUSTER).await?)?;
            Ok(
                if fc["status"]["lockJobName"] == legacy.as_str() && fc["status"]["locked"] == true
                {
                    Ok(())
                } else {
                    Err(format!("status {}", fc["status"]))
                },
            )
        })
        .await
        .map_err(|e| anyhow!("{e:#}\n{}", tail(py.log_path(), 40)))?;
        // Two rounds of its timer (which re-checks the sentinel it knows) change nothing.
        holds_for(
            "the lock under the Python Hearth",
            Duration::from_secs(10),
            || async {
                let bad = lock_kept(&lab, &held_by).await?;
                Ok(if bad.is_empty() {
                    Ok(())
                } else {
                    Err(bad.join("; "))
                })
            },
        )
        .await?;
        Ok::<_, anyhow::Error>(py)
    }
    .await;
    let py = rolled_back?;
    let samples = sampler.finish("the rollback")?;
    println!("{samples} samples during the rollback");

    let sentinels: Vec<FournosJob> = lab.sentinels(CLUSTER).await?;
    let mut names: Vec<String> = sentinels.iter().map(|j| j.name_any()).collect();
    names.sort();
    ensure!(
        names == [held_by.clone(), legacy.clone()],
        "Hearth's sentinel and the Python Hearth's: {names:?}"
    );
    ensure!(
        !lab.try_job(CLUSTER).await?,
        "a job got onto {CLUSTER}, locked for {OWNER}"
    );

    // Unlocking through the Python Hearth frees the cluster.
    lab.clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": null } })),
        )
        .await?;
    until("both sentinels gone", DEADLINE, || async {
        let left: Vec<FournosJob> = lab.sentinels(CLUSTER).await?;
        let mut still = Vec::new();
        for name in [&held_by, &legacy] {
            if lab.workloads.get_opt(name).await?.is_some() {
                still.push(format!("Workload {name}"));
            }
        }
        still.extend(left.iter().map(|j| format!("FournosJob {}", j.name_any())));
        Ok(if still.is_empty() {
            Ok(())
        } else {
            Err(still.join(", "))
        })
    })
    .await
    .map_err(|e| {
        anyhow!(
            "{e:#}\n{}\n{}",
            tail(py.log_path(), 30),
            tail(fournos.log_path(), 30)
        )
    })?;
    ensure!(
        lab.try_job(CLUSTER).await?,
        "{CLUSTER} is free once unlocked"
    );
    Ok(())
}

/// Aborts a background task when the test ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<anyhow::Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
