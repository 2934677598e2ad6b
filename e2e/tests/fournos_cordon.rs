//! Cordons beside the **real, unmodified Fournos** in the mode the chart installs
//! (`fournosjob` sentinels), with hearth-kueue-sync running: on a cordoned cluster it
//! counts every Workload Kueue admitted on the cluster's flavor (`admittedWorkloads`),
//! leaving out exactly the one lock-manager proved to hold the lock
//! (`status.lockWorkloadUID`), and says `Schedulable=False/Drained` only once that count
//! is zero. What a Fournos user can write (labels, ownerReferences) hides nothing: the
//! work here is done with exactly the rights [`LockLab::fournos_user`] gives, never as
//! admin; the operator locks and cordons as a person does (`kubectl patch`). Every look at
//! a cluster that says `locked=true` probes it. Without the Fournos folder every test
//! prints one `skipped:` line and passes.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test fournos_cordon
//! ```
//!
//! [`LockLab::fournos_user`]: hearth_e2e::lab::LockLab::fournos_user

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::defaults::GPU_RESOURCE_PREFIX;
use hearth_api::names::{lock_sentinel_name, sentinel_labels};
use hearth_e2e::downstream::{gpu, wait_schedulable};
use hearth_e2e::fournos_lab::{FournosLab, JOB_NAME_LABEL, lab_with_kueue_sync, phase};
use hearth_e2e::fournos_real::finish_pipeline_run;
use hearth_e2e::hearth::Running;
use hearth_e2e::invariants::workload_is;
use hearth_e2e::lab::{DEADLINE, is_held, reason_is};
use hearth_e2e::objects;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// `let (lab, cluster, ks) = lab!("test", "base");`: a FournosLab, one cluster with 8 A100s that
/// kueue-sync synced, kueue-sync and lock-manager running; or return (skipped) without
/// Fournos.
macro_rules! lab {
    ($name:expr, $base:expr) => {
        match lab_with_kueue_sync($name, $base, &[gpu("a100", 8)]).await? {
            Some(found) => found,
            None => return Ok(()),
        }
    };
}

/// The operator cordons `cluster`: `kubectl fournos cordon` sets `spec.cordon`.
async fn cordon(lab: &FournosLab, cluster: &str) -> Result<()> {
    lab.set_spec(
        cluster,
        json!({ "cordon": { "reason": "firmware, OPS-7", "by": "ops-alice" } }),
    )
    .await
}

fn lock_workload_uid(fc: &FournosCluster) -> Option<String> {
    fc.status.as_ref()?.lock_workload_uid.clone()
}

/// Fournos's FournosJob `name` ends: its PipelineRun succeeds (as Tekton would report it)
/// and Fournos says `Succeeded` (it deletes the job's Workload).
async fn finish(lab: &FournosLab, name: &str) -> Result<()> {
    finish_pipeline_run(&lab.client, &lab.scope.execution_namespace, name).await?;
    lab.wait_job(name, "Succeeded", |j| phase(j) == Some("Succeeded"))
        .await?;
    Ok(())
}

/// Waits until `cluster` says `Schedulable` reason `reason` with `admitted` counted, with
/// kueue-sync's and Fournos's logs on failure.
async fn wait_count(
    lab: &FournosLab,
    ks: &Running,
    cluster: &str,
    reason: &str,
    admitted: i64,
) -> Result<String> {
    wait_schedulable(&lab.clusters, cluster, reason, Some(admitted), ks)
        .await
        .map_err(|e| lab.with_logs(e))
}

/// A cluster locked before it is cordoned: Fournos's lock Workload (every slot, proven by
/// lock-manager) is what the operator wanted, not work left to drain. A user's Workload
/// that runs beside it on the cluster's GPUs is counted, alone; once it is gone the
/// cluster is `Drained` while the lock still holds with the same Workload.
#[tokio::test]
async fn a_lock_held_before_the_cordon_is_not_counted_as_work_left() -> Result<()> {
    let (lab, cluster, ks) = lab!("cordon-held", "held");
    let (_, lock) = lab.lock(&cluster, "ops-alice").await?;
    let fc = lab.clusters.get(&cluster).await?;
    ensure!(
        lock_workload_uid(&fc).is_some() && lock_workload_uid(&fc) == lock.uid(),
        "status.lockWorkloadUID names Fournos's lock Workload: {:?}",
        fc.status
    );

    // Other work on the cluster: GPUs only (every slot is the lock's), as a user writes it.
    let users = lab.user_workloads().await?;
    let gpus = objects::workload(
        &lab.scope.execution_namespace,
        "gpus-only",
        &lab.scope.local_queue,
        &cluster,
        &[(&format!("{GPU_RESOURCE_PREFIX}a100"), 1)],
    );
    users
        .create(&PostParams::default(), &serde_json::from_value(gpus)?)
        .await?;
    lab.wait_workload("gpus-only", "admitted beside the lock", DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;
    // Its pods run (the kubelet's word, so that WaitForPodsReady leaves it admitted).
    lab.mark_pods_ready("gpus-only").await?;

    cordon(&lab, &cluster).await?;
    let message = wait_count(&lab, &ks, &cluster, "Cordoned", 1).await?;
    ensure!(message.contains("1 Workload"), "{message}");

    users.delete("gpus-only", &DeleteParams::default()).await?;
    let message = wait_count(&lab, &ks, &cluster, "Drained", 0).await?;
    eprintln!("{cluster}: {message}");
    let fc = lab
        .wait_lock(&cluster, "still held once drained", is_held)
        .await?;
    ensure!(
        lock_workload_uid(&fc) == lock.uid(),
        "held by the same Workload: {:?}",
        fc.status
    );
    lab.wait_workload(&lock.name_any(), "still admitted", DEADLINE, |w| {
        workload_is(w, "Admitted") && w.uid() == lock.uid()
    })
    .await?;
    Ok(ks.stop_cleanly(lab.shared.plane).await?)
}

/// A user dresses the Workload of their running job as the lock's: this Hearth's sentinel
/// labels, Fournos's job label naming the lock's sentinel, and an ownerReference to the
/// sentinel FournosJob (its real UID; the apiserver checks none of it). The job still runs,
/// so it is still counted: the cluster is not `Drained` while it runs, and is once it ends.
#[tokio::test]
async fn a_running_job_dressed_as_the_lock_is_counted_until_it_ends() -> Result<()> {
    let (lab, cluster, ks) = lab!("cordon-dressed", "dressed");
    lab.submit_job("dressed", &cluster).await?;
    lab.wait_job("dressed", "Running", |j| phase(j) == Some("Running"))
        .await?;
    // The lock waits for the running job; its sentinel exists meanwhile.
    lab.set_owner(&cluster, Some("ops-alice"), None).await?;
    lab.wait_lock(
        &cluster,
        "waiting for the running job",
        reason_is("WaitingForAdmission"),
    )
    .await?;
    let sentinel = lab
        .wait_sentinel(&cluster, "made", |j| j.uid().is_some())
        .await?;
    dress_as_the_lock(&lab, "dressed", &cluster, &sentinel).await?;

    // A job admitted after the disguise: kueue-sync's one Workload watch delivers in
    // order, so once it counts this one it has seen the disguise too.
    lab.submit_job("plain", &cluster).await?;
    lab.wait_job("plain", "Running", |j| phase(j) == Some("Running"))
        .await?;
    cordon(&lab, &cluster).await?;
    let message = wait_count(&lab, &ks, &cluster, "Cordoned", 2).await?;
    ensure!(message.contains("2 Workloads"), "{message}");

    finish(&lab, "plain").await?;
    let message = wait_count(&lab, &ks, &cluster, "Cordoned", 1).await?;
    ensure!(message.contains("1 Workload"), "{message}");
    let w = lab.workloads.get("dressed").await?;
    ensure!(
        workload_is(&w, "Admitted"),
        "the dressed job still runs: {:?}",
        w.status
    );

    finish(&lab, "dressed").await?;
    let message = wait_count(&lab, &ks, &cluster, "Drained", 0).await?;
    eprintln!("{cluster}: {message}");
    Ok(ks.stop_cleanly(lab.shared.plane).await?)
}

/// As the Fournos user: the Workload of job `job` gets the sentinel's labels, Fournos's job
/// label naming the lock's sentinel, and an ownerReference to `sentinel` beside its own.
async fn dress_as_the_lock(
    lab: &FournosLab,
    job: &str,
    cluster: &str,
    sentinel: &FournosJob,
) -> Result<()> {
    let users = lab.user_workloads().await?;
    let w: Workload = users.get(job).await?;
    let mut labels = sentinel_labels(cluster, &lab.scope.namespace);
    labels.insert(JOB_NAME_LABEL.to_owned(), lock_sentinel_name(cluster));
    let mut owners = serde_json::to_value(w.owner_references())?;
    owners
        .as_array_mut()
        .context("ownerReferences")?
        .push(json!({
            "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
            "name": sentinel.name_any(), "uid": sentinel.uid().unwrap_or_default(),
        }));
    let patch = json!({ "metadata": {
        "labels": labels,
        "ownerReferences": owners,
        "resourceVersion": w.resource_version(),
    }});
    let dressed = users
        .patch(job, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    ensure!(
        dressed.labels().get(JOB_NAME_LABEL) == Some(&lock_sentinel_name(cluster))
            && dressed.owner_references().len() == 2,
        "{:?}",
        dressed.metadata
    );
    Ok(())
}
