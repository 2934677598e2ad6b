//! What `Held` needs of the Workload that holds a lock's slots (the sentinel itself, or
//! the Workload Fournos made of a `fournosjob` sentinel), against the real lock-manager,
//! kube-apiserver and Kueue, and with `fournosjob` the real Fournos (issue 41):
//!
//! - `Held` only in the cluster's queue, on its flavor, with every slot: when kueue-sync
//!   moves the cluster to another flavor or raises its slots, the lock says so.
//! - A Fournos user who changes that Workload while it waits for quota (to one slot,
//!   pinned to another cluster, moved to another team's LocalQueue or to none): never
//!   `locked=true`; it is replaced by one that asks for every slot of the cluster in the
//!   cluster's queue, and the lock is held once the cluster is free.
//! - A lock nobody made with Hearth is named among the cluster's slot holders.
//!
//! A scenario that applies to both sentinel kinds has one body and two tests: `…_workload`
//! (`HEARTH_SENTINEL=workload`) and `…_fournosjob` (the chart's default, beside the real
//! Fournos: one `skipped:` line for the binary without `$HEARTH_PEERS_DIR/fournos`, a
//! failure with `HEARTH_E2E_REQUIRE_PEERS=1`). Attackers run with a Fournos user's rights
//! ([`LockLab::fournos_user`]), never as admin. Every wait has a deadline, and each look at
//! a cluster that says `locked=true` tries to get a one-slot job admitted there, which
//! must fail ([`LockLab::probing`]).
//!
//! Run: `cargo build --workspace --bins && cargo test -p hearth-e2e --test lock_holds`.

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::{FournosJob, FournosJobSpec};
use hearth_api::kueue::{Workload, pinned_cluster, requested_slots};
use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, lock_sentinel_name};
use hearth_api::reasons::LockedReason;
use hearth_e2e::fixtures::{cluster_queue, local_queue, wait_cluster_queue_reconciled};
use hearth_e2e::fournos_lab::ModeLab;
use hearth_e2e::invariants::{workload_condition_false, workload_is};
use hearth_e2e::lab::{
    DEADLINE, LockLab, Mode, SLOTS, is_held, lock_state, locked, reason_is, says_locked,
};
use hearth_e2e::objects::{KUEUE_API_VERSION, slot_workload};
use hearth_e2e::process::until;
use hearth_e2e::resources::apply;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// `status.lockJobUID` of a cluster.
fn lock_job_uid(fc: &FournosCluster) -> Option<String> {
    fc.status.as_ref().and_then(|s| s.lock_job_uid.clone())
}

#[tokio::test]
async fn held_needs_the_clusters_flavor_and_every_slot_workload() -> Result<()> {
    held_needs_the_clusters_flavor_and_every_slot(Mode::Workload).await
}

#[tokio::test]
async fn held_needs_the_clusters_flavor_and_every_slot_fournosjob() -> Result<()> {
    held_needs_the_clusters_flavor_and_every_slot(Mode::FournosJob).await
}

/// `Held` needs the cluster's ClusterQueue and flavor and every slot: a flavor that
/// kueue-sync now says is another one gives `WrongFlavor`; raised slots give
/// `SlotsMismatch`, and a `workload` sentinel that asks for all of them (Fournos asks a
/// lock for 100 whatever the cluster has, so a `fournosjob` sentinel is kept and the
/// status says what to set).
async fn held_needs_the_clusters_flavor_and_every_slot(mode: Mode) -> Result<()> {
    let Some(lab) = ModeLab::new(mode, "held-truth").await? else {
        return Ok(());
    };
    let c = lab.cluster("truth").await?;
    let _lm = lab.lock_manager().await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    lab.wait_lock(&c, "held", is_held).await?;

    // kueue-sync now publishes the cluster on another flavor.
    let moved = json!({
        "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
        "status": { "kueue": {
            "flavor": format!("{c}-elsewhere"), "clusterQueue": lab.scope.cluster_queue,
            "quotas": { CLUSTER_SLOT_RESOURCE: SLOTS }, "clusterSlots": SLOTS,
        }},
    });
    lab.clusters
        .patch_status(
            &c,
            &PatchParams::apply("hearth-kueue-sync").force(),
            &Patch::Apply(&moved),
        )
        .await?;
    let wrong = lab
        .wait_lock(
            &c,
            "WrongFlavor",
            reason_is(LockedReason::WrongFlavor.as_str()),
        )
        .await?;
    ensure!(!says_locked(&wrong));
    lab.publish_slots(&c, SLOTS).await?;
    let before = lab.wait_lock(&c, "held again", is_held).await?;
    let old_uid = lock_job_uid(&before);

    // Raised slots: what holds the lock has too few.
    lab.publish_slots(&c, SLOTS + 50).await?;
    match mode {
        Mode::Workload => too_few_is_replaced(&lab, &c, old_uid).await,
        Mode::FournosJob => {
            let fc = lab
                .wait_lock(
                    &c,
                    "SlotsMismatch",
                    reason_is(LockedReason::SlotsMismatch.as_str()),
                )
                .await?;
            let message = &locked(&fc).context("Locked")?.message;
            ensure!(
                message.contains("HEARTH_CLUSTER_SLOTS=100"),
                "says what to set: {message}"
            );
            ensure!(
                lock_job_uid(&fc) == old_uid,
                "a new sentinel would be given as few: {}",
                lock_state(&fc)
            );
            Ok(())
        }
    }
}

/// A `workload` sentinel held with fewer slots than `c` now has is replaced by one that
/// asks for all of them, which the queue's 100 never admit: the cluster says it is not
/// held, and no replaced sentinel ever said `locked=true`.
async fn too_few_is_replaced(lab: &LockLab, c: &str, old_uid: Option<String>) -> Result<()> {
    let wanted = SLOTS + 50;
    until("a sentinel asking for every slot", DEADLINE, || async {
        let fc = lab.clusters.get(c).await?;
        ensure!(
            !says_locked(&fc) || lock_job_uid(&fc) == old_uid,
            "a replaced sentinel said locked=true: {}",
            lock_state(&fc)
        );
        let sentinels = lab.sentinels::<Workload>(c).await?;
        Ok(match sentinels.as_slice() {
            [s] if s.uid() != old_uid && requested_slots(s) == Some(wanted) => Ok(()),
            _ => Err(format!(
                "{} sentinels; {}",
                sentinels.len(),
                lock_state(&fc)
            )),
        })
    })
    .await?;
    lab.wait_lock(c, "not held", |fc| {
        fc.status.as_ref().and_then(|s| s.locked) == Some(false)
    })
    .await?;
    Ok(())
}

/// How a Fournos user changes the Workload that is to hold a lock while it waits for
/// quota: Kueue lets anyone who may update a Workload change its pod sets until it has
/// reserved quota for it (and never after), and a Fournos user may update Workloads.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Its `fournos/cluster-slot` request cut to 1: admitted beside other jobs.
    ToOneSlot,
    /// Its pod set pinned to another cluster (free): admitted there, with every slot.
    Elsewhere,
    /// Its `spec.queueName` set to another team's LocalQueue in the namespace, whose
    /// ClusterQueue has room: admitted there, holding nothing of the cluster.
    OtherQueue,
    /// Its `spec.queueName` set to a LocalQueue that does not exist: never admitted,
    /// so the lock would wait for good.
    NoQueue,
}

impl Change {
    /// For the test's scope name.
    fn name(self) -> &'static str {
        match self {
            Change::ToOneSlot => "cut",
            Change::Elsewhere => "moved",
            Change::OtherQueue => "requeued",
            Change::NoQueue => "unqueued",
        }
    }
}

/// The merge patch that makes `change` to `w`, pinned elsewhere to `elsewhere`, or
/// queued in `side_queue`.
fn changed(w: &Workload, change: Change, elsewhere: &str, side_queue: &str) -> Result<Value> {
    match change {
        Change::OtherQueue => return Ok(json!({ "spec": { "queueName": side_queue } })),
        Change::NoQueue => return Ok(json!({ "spec": { "queueName": "no-such-queue" } })),
        Change::ToOneSlot | Change::Elsewhere => {}
    }
    let mut pod_sets = serde_json::to_value(&w.spec.pod_sets)?;
    let spec = &mut pod_sets[0]["template"]["spec"];
    match change {
        Change::ToOneSlot => {
            let containers = spec["containers"].as_array_mut().context("containers")?;
            for container in containers {
                for part in ["requests", "limits"] {
                    let at = format!("/resources/{part}/fournos~1cluster-slot");
                    if let Some(slots) = container.pointer_mut(&at) {
                        *slots = "1".into();
                    }
                }
            }
        }
        Change::Elsewhere => spec["nodeSelector"][CLUSTER_NODE_LABEL] = elsewhere.into(),
        Change::OtherQueue | Change::NoQueue => unreachable!("patched above"),
    }
    Ok(json!({ "spec": { "podSets": pod_sets } }))
}

#[tokio::test]
async fn a_lock_workload_cut_to_one_slot_is_replaced_workload() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::Workload, Change::ToOneSlot).await
}

#[tokio::test]
async fn a_lock_workload_cut_to_one_slot_is_replaced_fournosjob() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::FournosJob, Change::ToOneSlot).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_another_cluster_is_replaced_workload() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::Workload, Change::Elsewhere).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_another_cluster_is_replaced_fournosjob() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::FournosJob, Change::Elsewhere).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_another_queue_is_replaced_workload() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::Workload, Change::OtherQueue).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_another_queue_is_replaced_fournosjob() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::FournosJob, Change::OtherQueue).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_no_queue_is_replaced_workload() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::Workload, Change::NoQueue).await
}

#[tokio::test]
async fn a_lock_workload_moved_to_no_queue_is_replaced_fournosjob() -> Result<()> {
    a_lock_workload_changed_while_it_waits_is_replaced(Mode::FournosJob, Change::NoQueue).await
}

/// Another team's LocalQueue in the execution namespace, made by an admin: its
/// ClusterQueue has a flavor of `cluster`'s node label with room for a whole lock, so a
/// Workload moved there is admitted at once. Returns the LocalQueue's name.
async fn side_queue(lab: &LockLab, cluster: &str) -> Result<String> {
    let name = format!("{}-side", lab.scope.cluster_queue);
    let flavor = json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": { "name": name },
        "spec": { "nodeLabels": { CLUSTER_NODE_LABEL: cluster } },
    });
    let mut queue = cluster_queue(&name);
    queue["spec"]["resourceGroups"] = json!([{
        "coveredResources": [CLUSTER_SLOT_RESOURCE],
        "flavors": [{
            "name": name,
            "resources": [{ "name": CLUSTER_SLOT_RESOURCE, "nominalQuota": (SLOTS * 10).to_string() }],
        }],
    }]);
    let local = local_queue(&lab.scope.execution_namespace, &name, &name);
    for object in [flavor, queue, local] {
        apply(&lab.client, &object).await?;
    }
    wait_cluster_queue_reconciled(&lab.client, &name, DEADLINE).await?;
    Ok(name)
}

/// carol's one-slot job runs on the cluster, so alice's lock waits; a Fournos user makes
/// `change` to the Workload that is to hold it (the sentinel, or the Workload Fournos made
/// of it), and Kueue admits that Workload as changed. The cluster never says
/// `locked=true` while carol's job runs; the changed Workload is replaced by one that
/// asks for every slot of this cluster; once carol's job ends the lock is held through
/// that new Workload, and the cluster the Workload was moved to is free again.
async fn a_lock_workload_changed_while_it_waits_is_replaced(
    mode: Mode,
    change: Change,
) -> Result<()> {
    let test = format!("{}-{}", change.name(), mode.sentinel());
    let Some(lab) = ModeLab::new(mode, &test).await? else {
        return Ok(());
    };
    let users: Api<Workload> =
        Api::namespaced(lab.fournos_user().await?, &lab.scope.execution_namespace);
    let c = lab.cluster("changed").await?;
    let elsewhere = lab.cluster("elsewhere").await?;
    let side = side_queue(&lab, &c).await?;
    let _lm = lab.lock_manager().await?;
    lab.running_job("carol", &c, 1).await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    let name = lock_sentinel_name(&c);
    let waiting = lab
        .wait_workload(&name, "waiting behind carol's job", DEADLINE, |w| {
            workload_condition_false(w, "QuotaReserved")
        })
        .await?;
    let first = lab.sentinel_uids(mode, &c).await?;
    users
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(changed(&waiting, change, &elsewhere, &side)?),
        )
        .await?;

    let (lab, c) = (&lab, &c);
    until(
        "a new sentinel's Workload asking for every slot of the cluster",
        DEADLINE,
        || async {
            let fc = lab.clusters.get(c).await?;
            ensure!(
                !says_locked(&fc),
                "{c} says locked=true while carol's job runs there: {}",
                lock_state(&fc)
            );
            let uids = lab.sentinel_uids(mode, c).await?;
            let holder = lab.workloads.get_opt(&name).await?;
            Ok(match holder {
                Some(w)
                    if uids.len() == 1
                        && uids != first
                        && w.uid() != waiting.uid()
                        && requested_slots(&w) == Some(SLOTS)
                        && pinned_cluster(&w) == Some(c.as_str())
                        && w.spec.queue_name.as_deref() == Some(&lab.scope.local_queue) =>
                {
                    Ok(())
                }
                w => Err(format!(
                    "sentinels {uids:?} (first {first:?}); Workload {:?} asking for {:?} on \
                     {:?}; {}",
                    w.as_ref().and_then(|w| w.uid()),
                    w.as_ref().and_then(requested_slots),
                    w.as_ref().and_then(pinned_cluster),
                    lock_state(&fc)
                )),
            })
        },
    )
    .await?;

    lab.workloads
        .delete("carol", &DeleteParams::default())
        .await?;
    let fc = lab
        .wait_lock(c, "held once carol's job ended", is_held)
        .await?;
    let holder = lab.workloads.get(&name).await?;
    ensure!(
        fc.status.as_ref().and_then(|s| s.lock_workload_uid.clone()) == holder.uid(),
        "held through the new Workload: {}",
        lock_state(&fc)
    );
    ensure!(
        requested_slots(&holder) == Some(SLOTS) && workload_is(&holder, "Admitted"),
        "the Workload that holds it asks for every slot"
    );
    ensure!(
        lab.try_job(&elsewhere).await?,
        "{elsewhere} is free: nothing of the lock holds it"
    );
    Ok(())
}

#[tokio::test]
async fn a_foreign_lock_is_named_in_status_workload() -> Result<()> {
    a_foreign_lock_is_named_in_status(Mode::Workload).await
}

#[tokio::test]
async fn a_foreign_lock_is_named_in_status_fournosjob() -> Result<()> {
    a_foreign_lock_is_named_in_status(Mode::FournosJob).await
}

/// A lock nobody made with Hearth holds every slot of a cluster: its status names the
/// holder, so the cluster is never presented as free. The foreign lock is what a Fournos
/// user could make in each installation: a bare Workload (an exclusive job's), or, beside
/// Fournos, another tool's `lockOnly` FournosJob, whose Workload Fournos makes.
async fn a_foreign_lock_is_named_in_status(mode: Mode) -> Result<()> {
    let Some(lab) = ModeLab::new(mode, "foreign-holder").await? else {
        return Ok(());
    };
    let attacker = lab.fournos_user().await?;
    let namespace = &lab.scope.execution_namespace;
    let c = lab.cluster("foreign").await?;
    let _lm = lab.lock_manager().await?;
    let name = format!("lock-{c}");
    let workloads: Api<Workload> = Api::namespaced(attacker.clone(), namespace);
    let jobs: Api<FournosJob> = Api::namespaced(attacker, namespace);
    match mode {
        Mode::Workload => {
            let foreign = slot_workload(namespace, &name, &lab.scope.local_queue, &c, SLOTS);
            let foreign: Workload = serde_json::from_value(foreign)?;
            workloads.create(&PostParams::default(), &foreign).await?;
        }
        Mode::FournosJob => {
            let foreign = FournosJob::new(&name, FournosJobSpec::lock_sentinel(&c, "mallory"));
            jobs.create(&PostParams::default(), &foreign).await?;
        }
    }
    lab.wait_workload(&name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
        .await?;
    let wanted = format!("{namespace}/{name}");
    let fc = lab
        .wait_lock(&c, "its slot holder named", |fc| {
            fc.status.as_ref().is_some_and(|s| {
                s.slot_holders
                    .iter()
                    .any(|h| h.workload == wanted && h.slots == SLOTS)
            })
        })
        .await?;
    ensure!(!says_locked(&fc));
    // Gone (for Fournos's: its job deleted, and the Workload with it): no longer named.
    match mode {
        Mode::Workload => drop(workloads.delete(&name, &DeleteParams::default()).await?),
        Mode::FournosJob => drop(jobs.delete(&name, &DeleteParams::default()).await?),
    }
    lab.wait_lock(&c, "no slot holder", |fc| {
        fc.status
            .as_ref()
            .is_some_and(|s| s.slot_holders.is_empty())
    })
    .await?;
    Ok(())
}
