//! Attacks on a lock in the mode the chart installs (`fournosjob` sentinels beside the
//! **real, unmodified Fournos**, `$HEARTH_PEERS_DIR/fournos`), each run as the person who
//! could run it: a Fournos user, with exactly the rights [`LockLab::fournos_user`] gives
//! (FournosJobs and Workloads in the execution namespace), never as admin. Every look at
//! a cluster that says `locked=true` probes it: a one-slot job must not be admitted.
//! Without the Fournos folder every test prints one `skipped:` line and passes.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test fournos_attacks
//! ```
//!
//! [`LockLab::fournos_user`]: hearth_e2e::lab::LockLab::fournos_user

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::{lock_sentinel_name, sentinel_labels};
use hearth_e2e::fournos_lab::{FournosLab, JOB_NAME_LABEL, lab_with_cluster, phase};
use hearth_e2e::invariants::{workload_condition_false, workload_is};
use hearth_e2e::lab::{is_held, locked, reason_is};
use hearth_e2e::objects::slot_workload;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// `let (lab, cluster) = lab!("test", "base");`: a FournosLab, one cluster, lock-manager
/// running; or return (skipped) without Fournos.
macro_rules! lab {
    ($name:expr, $base:expr) => {
        match lab_with_cluster($name, $base).await? {
            Some(found) => found,
            None => return Ok(()),
        }
    };
}

/// The `Locked` condition's message, or nothing.
fn said(fc: &FournosCluster) -> String {
    locked(fc).map(|c| c.message.clone()).unwrap_or_default()
}

/// A Workload as a Fournos user writes it: `slots` of `cluster` asked for in a second
/// container (the first asks for nothing), in the lab's LocalQueue.
fn user_workload(lab: &FournosLab, name: &str, cluster: &str, slots: &str) -> Result<Workload> {
    let mut w = slot_workload(
        &lab.scope.execution_namespace,
        name,
        &lab.scope.local_queue,
        cluster,
        0,
    );
    let containers = &mut w["spec"]["podSets"][0]["template"]["spec"]["containers"];
    containers[0]["resources"] = json!({});
    let mut second = containers[0].clone();
    second["name"] = "second".into();
    second["resources"] =
        json!({ "requests": { hearth_api::names::CLUSTER_SLOT_RESOURCE: slots } });
    containers
        .as_array_mut()
        .context("containers")?
        .push(second);
    Ok(serde_json::from_value(w)?)
}

/// alice asks for the lock of `cluster`; it is refused (`SentinelNameTaken`) and never
/// said to be held meanwhile (every look probes).
async fn lock_is_refused(lab: &FournosLab, cluster: &str) -> Result<FournosCluster> {
    lab.set_owner(cluster, Some("alice"), None).await?;
    let fc = lab
        .wait_lock(cluster, "SentinelNameTaken", reason_is("SentinelNameTaken"))
        .await?;
    ensure!(fc.status.as_ref().and_then(|s| s.locked) != Some(true));
    Ok(fc)
}

/// Attack 1: a Workload made under the name Fournos gives the lock's Workload, asking
/// for one slot, before the lock. Fournos would adopt it (it ignores the 409 and reads
/// the Workload by name); the owner then made it look like the job's. The lock is never
/// said to be held while it exists, the status names it, nothing of it is deleted, and
/// once its maker deletes it the lock is taken.
#[tokio::test]
async fn a_workload_made_under_the_locks_name_never_holds_the_cluster() -> Result<()> {
    let (lab, cluster) = lab!("attack-named", "named");
    let users = lab.user_workloads().await?;
    let name = lock_sentinel_name(&cluster);
    let made = users
        .create(
            &PostParams::default(),
            &user_workload(&lab, &name, &cluster, "1")?,
        )
        .await?;
    lab.wait_workload(&name, "admitted", hearth_e2e::lab::DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;

    let fc = lock_is_refused(&lab, &cluster).await?;
    let message = said(&fc);
    ensure!(message.contains(&name), "names the Workload: {message}");
    ensure!(fc.status.as_ref().and_then(|s| s.locked) != Some(true));
    ensure!(
        fc.status
            .as_ref()
            .and_then(|s| s.lock_job_name.as_ref())
            .is_none(),
        "lockJobName is never written without lockJobUID"
    );
    ensure!(
        lab.sentinels::<FournosJob>(&cluster).await?.is_empty(),
        "no sentinel is made while Fournos would adopt that Workload"
    );
    // The cluster is not held by anything of the lock: a one-slot job gets in.
    ensure!(lab.try_job(&cluster).await?, "the cluster is free");
    let still = lab.workloads.get(&name).await?;
    ensure!(
        still.uid() == made.uid(),
        "lock-manager deleted the user's Workload"
    );

    users.delete(&name, &Default::default()).await?;
    lab.wait_lock(&cluster, "held once the Workload is gone", is_held)
        .await?;
    let job = lab
        .wait_sentinel(&cluster, "Admitted", |j| phase(j) == Some("Admitted"))
        .await?;
    let w = lab
        .wait_job_workload(&job, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    ensure!(w.uid() != made.uid());
    let fc = lab.clusters.get(&cluster).await?;
    ensure!(
        fc.status.as_ref().and_then(|s| s.lock_workload_uid.clone()) == w.uid(),
        "status.lockWorkloadUID names Fournos's Workload"
    );
    Ok(())
}

/// Attack 1, second half: once the lock holds, a user makes a one-slot Workload look like
/// the lock's (the job label and an ownerReference to the sentinel's UID, which the
/// apiserver does not check). It is not the Workload of the lock's name, so it changes
/// nothing: the lock stays held by Fournos's Workload, and the user's one is named among
/// the slot holders' claims only if Kueue admits it, which it cannot.
#[tokio::test]
async fn a_workload_dressed_as_the_locks_proves_nothing() -> Result<()> {
    let (lab, cluster) = lab!("attack-dressed", "dressed");
    let (job, workload) = lab.lock(&cluster, "alice").await?;
    let users = lab.user_workloads().await?;
    let mut w = user_workload(&lab, "dressed-up", &cluster, "1")?;
    w.metadata.labels = Some([(JOB_NAME_LABEL.to_owned(), job.name_any())].into());
    w.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
        "name": job.name_any(), "uid": job.uid().unwrap_or_default(),
    }))?]);
    users.create(&PostParams::default(), &w).await?;
    lab.wait_workload(
        "dressed-up",
        "pending behind the lock",
        hearth_e2e::lab::DEADLINE,
        |w| workload_condition_false(w, "QuotaReserved"),
    )
    .await?;
    let fc = lab.wait_lock(&cluster, "still held", is_held).await?;
    ensure!(
        fc.status.as_ref().and_then(|s| s.lock_workload_uid.clone()) == workload.uid(),
        "{:?}",
        fc.status
    );
    Ok(())
}

/// Attack 2: a Workload of any other name labelled `fournos.dev/job-name=<the lock's
/// sentinel>` blocked every lock of the cluster forever ("waiting for the garbage
/// collector"). A label is at most a hint: the lock is taken.
#[tokio::test]
async fn a_label_on_someone_elses_workload_does_not_block_a_lock() -> Result<()> {
    let (lab, cluster) = lab!("attack-label", "label");
    let users = lab.user_workloads().await?;
    let mut junk = user_workload(&lab, "junk", &cluster, "0")?;
    junk.spec.queue_name = None;
    junk.metadata.labels = Some([(JOB_NAME_LABEL.to_owned(), lock_sentinel_name(&cluster))].into());
    users.create(&PostParams::default(), &junk).await?;
    lab.lock(&cluster, "alice").await?;
    ensure!(
        lab.workloads.get_opt("junk").await?.is_some(),
        "junk was deleted"
    );
    Ok(())
}

/// Attack 6: a FournosJob a user made under the sentinel's name with this Hearth's
/// labels (lockOnly, so Fournos turns it into a lock of its own), or with the lock label
/// of another cluster. Labels prove nothing: the lock says `SentinelNameTaken` naming it,
/// never "created … waiting" without a UID, and lock-manager does not delete it.
#[tokio::test]
async fn a_forged_sentinel_is_named_and_never_trusted_or_deleted() -> Result<()> {
    let (lab, cluster) = lab!("attack-forged", "forged");
    let jobs: Api<FournosJob> =
        Api::namespaced(lab.fournos_user().await?, &lab.scope.execution_namespace);
    let name = lock_sentinel_name(&cluster);
    let forged: FournosJob = serde_json::from_value(json!({
        "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
        "metadata": { "name": name, "labels": sentinel_labels(&cluster, &lab.scope.namespace) },
        "spec": { "cluster": cluster, "exclusive": true, "lockOnly": true, "owner": "alice",
                  "displayName": "forged" },
    }))?;
    let made = jobs.create(&PostParams::default(), &forged).await?;
    lab.wait_sentinel(&cluster, "admitted by Fournos", |j| {
        phase(j) == Some("Admitted")
    })
    .await?;

    let fc = lock_is_refused(&lab, &cluster).await?;
    ensure!(said(&fc).contains("lockJobUID"), "{}", said(&fc));
    let holders = fc
        .status
        .as_ref()
        .map(|s| s.slot_holders.clone())
        .unwrap_or_default();
    ensure!(
        holders.iter().any(|h| h.slots == 100),
        "the forged lock's Workload is named as a holder: {holders:?}"
    );
    let still = lab.jobs.get(&name).await?;
    ensure!(
        still.uid() == made.uid(),
        "lock-manager deleted the user's FournosJob"
    );

    // With the lock label of another cluster: not this cluster's sentinel either.
    lab.set_owner(&cluster, None, None).await?;
    jobs.delete(&name, &Default::default()).await?;
    lab.no_workload_named(&name).await?;
    lab.wait_lock(&cluster, "released", reason_is("Released"))
        .await?;
    let mut other = forged.clone();
    other.metadata.labels = Some(sentinel_labels("some-other-cluster", &lab.scope.namespace));
    other.metadata.resource_version = None;
    jobs.create(&PostParams::default(), &other).await?;
    let fc = lock_is_refused(&lab, &cluster).await?;
    ensure!(said(&fc).contains("some-other-cluster"), "{}", said(&fc));
    Ok(())
}

/// Attack 5: slot holders are named as Kueue counts them. A user's Workload asking for
/// `99500m` slots (Kueue rounds it up to all 100) is named with 100; once it claims the
/// lock's sentinel as its owner (an ownerReference anyone may write) it is still named.
#[tokio::test]
async fn slot_holders_are_counted_as_kueue_counts_and_never_hidden_by_an_owner() -> Result<()> {
    let (lab, cluster) = lab!("attack-holders", "holders");
    let users = lab.user_workloads().await?;
    users
        .create(
            &PostParams::default(),
            &user_workload(&lab, "almost-all", &cluster, "99500m")?,
        )
        .await?;
    lab.wait_workload("almost-all", "admitted", hearth_e2e::lab::DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;
    lab.set_owner(&cluster, Some("alice"), None).await?;
    let holds_all = |fc: &FournosCluster| {
        fc.status.as_ref().is_some_and(|s| {
            s.slot_holders
                .iter()
                .any(|h| h.workload.ends_with("/almost-all") && h.slots == 100)
        })
    };
    lab.wait_lock(&cluster, "almost-all named with 100 slots", holds_all)
        .await?;
    let job = lab
        .wait_sentinel(&cluster, "made", |j| j.uid().is_some())
        .await?;
    // One patch: the ownerReference that main trusted to hide a holder, and the owner it
    // claims, so that the holder lock-manager names next says "mallory" exactly when it
    // has seen the patch.
    let owner = json!({ "metadata": {
        "annotations": { hearth_api::names::OWNER_ANNOTATION: "mallory" },
        "ownerReferences": [{
            "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
            "name": job.name_any(), "uid": job.uid().unwrap_or_default() }] } });
    users
        .patch("almost-all", &PatchParams::default(), &Patch::Merge(&owner))
        .await?;
    let fc = lab
        .wait_lock(&cluster, "almost-all named as mallory's, 100 slots", |fc| {
            fc.status.as_ref().is_some_and(|s| {
                s.slot_holders.iter().any(|h| {
                    h.workload.ends_with("/almost-all")
                        && h.slots == 100
                        && h.owner.as_deref() == Some("mallory")
                })
            })
        })
        .await?;
    ensure!(fc.status.as_ref().and_then(|s| s.locked) != Some(true));
    Ok(())
}
