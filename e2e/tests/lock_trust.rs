//! Attacks on who a lock's sentinel is ("`locked=true`: nobody else's job can start
//! there"), each run by someone with exactly the rights that could run it, against the real
//! lock-manager, kube-apiserver and Kueue (issue 24). Every test here fails on a
//! lock-manager that trusts sentinels by name and label.
//!
//! - Two Hearths sharing one execution namespace never touch each other's sentinels.
//! - A Fournos user who takes the sentinel's name first: `SentinelNameTaken`, naming the
//!   object, never `locked=true`; the lock is taken once the name is free.
//! - A Fournos user who forges a sentinel (the name, Hearth's labels, the owner's
//!   annotation, on their own running job): never `locked=true` while it is admitted.
//! - A Fournos user who swaps the sentinel for a forgery before its UID is recorded.
//!
//! What `Held` needs of the Workload that holds the slots is in `lock_holds.rs`.
//!
//! A scenario that applies to both sentinel kinds has one body and two tests:
//! `…_workload` (`HEARTH_SENTINEL=workload`) and `…_fournosjob` (the chart's default,
//! beside the real Fournos: one `skipped:` line for the binary without
//! `$HEARTH_PEERS_DIR/fournos`, a failure with `HEARTH_E2E_REQUIRE_PEERS=1`). The squatted
//! name and the forged sentinel have `fournosjob` twins of their own in
//! `fournos_attacks.rs` (there the name squatted first is the Workload's, which Fournos
//! would adopt). Every wait has a deadline, and each look at a cluster that says
//! `locked=true` tries to get a one-slot job admitted there, which must fail
//! ([`LockLab::probing`]).
//!
//! Run: `cargo build --workspace --bins && cargo test -p hearth-e2e --test lock_trust`.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::fournosjob::{FournosJob, FournosJobSpec};
use hearth_api::kueue::{Workload, requested_slots};
use hearth_api::names::{OWNER_ANNOTATION, lock_sentinel_name, sentinel_labels};
use hearth_api::reasons::LockedReason;
use hearth_e2e::Isolated;
use hearth_e2e::fixtures::local_queue;
use hearth_e2e::fournos_lab::{ModeLab, phase};
use hearth_e2e::invariants::workload_is;
use hearth_e2e::lab::{
    DEADLINE, LockLab, Mode, SLOTS, is_held, lock_state, reason_is, says_locked, start_lock_manager,
};
use hearth_e2e::objects::slot_workload;
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::resources::apply;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// How long the two-Hearths test watches both locks (each sample reads both clusters,
/// both sentinels and both lock Workloads).
const SHARED_WINDOW: Duration = Duration::from_secs(60);
/// How long a refused lock is watched for never saying `locked=true`.
const NEVER_WINDOW: Duration = Duration::from_secs(10);

/// A lab with lock-manager's `workload` sentinels (which never skips).
async fn workload_lab(test: &str) -> Result<ModeLab> {
    ModeLab::new(Mode::Workload, test)
        .await?
        .context("a workload lab needs no peer")
}

/// A workload lab for `test` with its cluster `test`, the name lock-manager gives that
/// cluster's sentinel, and the Workloads API as a Fournos user (the attacker) writes it.
async fn sentinel_name_lab(test: &str) -> Result<(ModeLab, String, String, Api<Workload>)> {
    let lab = workload_lab(test).await?;
    let attacker = lab.fournos_user().await?;
    let c = lab.cluster(test).await?;
    let name = lock_sentinel_name(&c);
    let workloads = Api::namespaced(attacker, &lab.scope.execution_namespace);
    Ok((lab, c, name, workloads))
}

/// `status.lockJobUID` and `status.lockWorkloadUID` of a held lock.
fn held_by(fc: &hearth_api::FournosCluster) -> Result<(String, String)> {
    let status = fc.status.as_ref().context("no status")?;
    Ok((
        status.lock_job_uid.clone().context("lockJobUID")?,
        status
            .lock_workload_uid
            .clone()
            .context("lockWorkloadUID")?,
    ))
}

/// A one-slot job under cluster `c`'s sentinel name with everything a name-and-label
/// check looks at: Hearth's labels and alice's owner annotation.
fn forgery(lab: &LockLab, c: &str) -> Result<Workload> {
    let mut forged = slot_workload(
        &lab.scope.execution_namespace,
        &lock_sentinel_name(c),
        &lab.scope.local_queue,
        c,
        1,
    );
    forged["metadata"]["labels"] = json!(sentinel_labels(c, &lab.scope.namespace));
    forged["metadata"]["annotations"] = json!({ OWNER_ANNOTATION: "alice" });
    Ok(serde_json::from_value(forged)?)
}

fn uid_of<K: Resource>(object: &K) -> String {
    object.meta().uid.clone().unwrap_or_default()
}

#[tokio::test]
async fn two_hearths_in_one_execution_namespace_keep_each_others_locks_workload() -> Result<()> {
    two_hearths_in_one_execution_namespace_keep_each_others_locks(Mode::Workload).await
}

#[tokio::test]
async fn two_hearths_in_one_execution_namespace_keep_each_others_locks_fournosjob() -> Result<()> {
    two_hearths_in_one_execution_namespace_keep_each_others_locks(Mode::FournosJob).await
}

/// Two Hearth releases (their own FournosCluster namespaces) share one execution
/// namespace, each with a lock held: neither deletes, replaces or counts the other's
/// sentinel or the Workload that holds the other's slots, and neither lock ever stops
/// saying `locked=true`.
async fn two_hearths_in_one_execution_namespace_keep_each_others_locks(mode: Mode) -> Result<()> {
    let Some(first) = ModeLab::new(mode, "shared-exec-1").await? else {
        return Ok(());
    };
    let plane = first.plane;
    let own = plane.isolated("shared-exec-2").await?;
    let own = Isolated {
        id: format!("{}-x", own.id),
        scope: own.scope,
    };
    let second = match mode {
        // The second release's own ClusterQueue, through a LocalQueue of its own in the
        // first's execution namespace.
        Mode::Workload => {
            let mut scope = own.scope.clone();
            scope.execution_namespace = first.scope.execution_namespace.clone();
            scope.local_queue = format!("lq-{}", own.id);
            let queue = local_queue(
                &scope.execution_namespace,
                &scope.local_queue,
                &scope.cluster_queue,
            );
            apply(&first.client, &queue).await?;
            LockLab::with_scope(plane, Isolated { id: own.id, scope })
                .await?
                .probing()
        }
        // One Fournos serves a namespace and puts every job, locks included, in its one
        // LocalQueue: both releases' clusters are in that queue's ClusterQueue (kueue-sync
        // writes only its own flavors' entries there, docs/fleet.md).
        Mode::FournosJob => first.sharing_queue(own).await?,
    };

    let a = first.cluster("first").await?;
    let b = second.synced_cluster("second").await?;
    let _lm1 = first.lock_manager().await?;
    let _lm2 = start_lock_manager(&second, mode).await?;
    first.set_spec(&a, json!({ "owner": "alice" })).await?;
    second.set_spec(&b, json!({ "owner": "bob" })).await?;
    let held_a = held_by(&first.wait_lock(&a, "held", is_held).await?)?;
    let held_b = held_by(&second.wait_lock(&b, "held", is_held).await?)?;

    let locks = [(&*first, &a, &held_a), (&second, &b, &held_b)];
    holds_for("both locks, untouched", SHARED_WINDOW, || async {
        for (lab, cluster, (sentinel, workload)) in locks {
            let fc = lab.clusters.get(cluster).await?;
            if !is_held(&fc) || held_by(&fc)? != (sentinel.clone(), workload.clone()) {
                return Ok(Err(format!("{cluster}: {}", lock_state(&fc))));
            }
            let uids = lab.sentinel_uids(mode, cluster).await?;
            if uids != [sentinel.clone()] {
                return Ok(Err(format!(
                    "{cluster}: sentinels {uids:?}, not only the one it was locked with ({sentinel})"
                )));
            }
            // The Workload that holds the slots (the sentinel, or the one Fournos made of it).
            let holder = lab.workloads.get_opt(&lock_sentinel_name(cluster)).await?;
            if holder.as_ref().map(uid_of).as_ref() != Some(workload) {
                return Ok(Err(format!(
                    "{cluster}: the lock's Workload is {:?}, not {workload}",
                    holder.as_ref().map(uid_of)
                )));
            }
        }
        Ok(Ok(()))
    })
    .await?;
    // What each release holds is still true: Kueue admits nothing else there.
    first.probe(&a).await?;
    second.probe(&b).await?;
    Ok(())
}

/// A Fournos user creates an ordinary job under the sentinel's name before the owner
/// locks: the lock says `SentinelNameTaken` naming it, never `locked=true`, and leaves it
/// alone; once the user deletes it, the lock is taken.
#[tokio::test]
async fn a_squatted_sentinel_name_is_named_and_never_held() -> Result<()> {
    let (lab, c, name, workloads) = sentinel_name_lab("squat").await?;
    let squat: Workload = serde_json::from_value(slot_workload(
        &lab.scope.execution_namespace,
        &name,
        &lab.scope.local_queue,
        &c,
        1,
    ))?;
    let squat = workloads.create(&PostParams::default(), &squat).await?;
    lab.wait_workload(&name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
        .await?;
    lab.mark_pods_ready(&name).await?;

    let _lm = lab.lock_manager().await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    let taken = lab
        .wait_lock(
            &c,
            "SentinelNameTaken",
            reason_is(LockedReason::SentinelNameTaken.as_str()),
        )
        .await?;
    let message = &hearth_e2e::lab::locked(&taken).context("Locked")?.message;
    ensure!(
        message.contains(&format!(
            "Workload {}/{name}",
            lab.scope.execution_namespace
        )),
        "the message names the object: {message}"
    );
    holds_for(
        "the squatted lock never says locked=true",
        NEVER_WINDOW,
        || async {
            let fc = lab.clusters.get(&c).await?;
            Ok(if fc.status.as_ref().and_then(|s| s.locked) == Some(true) {
                Err(lock_state(&fc))
            } else {
                Ok(())
            })
        },
    )
    .await?;
    let still = lab.workloads.get(&name).await?;
    ensure!(
        uid_of(&still) == uid_of(&squat),
        "the squatter's job was left alone"
    );

    workloads.delete(&name, &DeleteParams::default()).await?;
    let held = lab
        .wait_lock(&c, "held once the name is free", is_held)
        .await?;
    let sentinel = lab.workloads.get(&name).await?;
    ensure!(
        held.status.and_then(|s| s.lock_job_uid) == sentinel.uid(),
        "held by the sentinel lock-manager created"
    );
    Ok(())
}

/// A Fournos user's running one-slot job under the sentinel's name, carrying Hearth's
/// labels and the owner's annotation (everything a label-and-name check looks at): the
/// cluster never says `locked=true` while it runs there, the lock says
/// `SentinelNameTaken` naming it, lock-manager never deletes it (labels never condemn:
/// they would turn a patch right into a delete right), and once its maker deletes it the
/// lock that follows is the sentinel lock-manager created.
#[tokio::test]
async fn a_forged_sentinel_never_holds_a_lock() -> Result<()> {
    let (lab, c, name, workloads) = sentinel_name_lab("forge").await?;
    let forged = workloads
        .create(&PostParams::default(), &forgery(&lab, &c)?)
        .await?;
    lab.wait_workload(&name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
        .await?;
    lab.mark_pods_ready(&name).await?;

    let _lm = lab.lock_manager().await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    // Every sample: while the forged job is admitted there, the cluster is not locked.
    until(
        "the forged job named, and never a lock",
        DEADLINE,
        || async {
            let fc = lab.clusters.get(&c).await?;
            let forged_admitted = match lab.workloads.get_opt(&name).await? {
                Some(w) => uid_of(&w) == uid_of(&forged) && workload_is(&w, "Admitted"),
                None => false,
            };
            let locked = fc.status.as_ref().and_then(|s| s.locked) == Some(true);
            ensure!(
                !(locked && forged_admitted),
                "{c} says locked=true while the forged job is admitted: {}",
                lock_state(&fc)
            );
            ensure!(forged_admitted, "lock-manager deleted the forged job");
            Ok(if reason_is("SentinelNameTaken")(&fc) {
                Ok(fc)
            } else {
                Err(lock_state(&fc))
            })
        },
    )
    .await?;
    workloads.delete(&name, &DeleteParams::default()).await?;
    let fc = lab.wait_lock(&c, "held", is_held).await?;
    let sentinel = lab.workloads.get(&name).await?;
    ensure!(
        uid_of(&sentinel) != uid_of(&forged),
        "the forged job is gone"
    );
    ensure!(
        fc.status.and_then(|s| s.lock_job_uid) == sentinel.uid(),
        "held by the sentinel lock-manager created"
    );
    Ok(())
}

/// How many sentinels the swapping attacker replaces: once its forgery stands under the
/// name, lock-manager makes no new sentinel to swap (it names the forgery and leaves it).
const SWAPS: usize = 1;

/// How long the cluster may go on saying `locked=true` for its deleted sentinel while a
/// forgery is admitted. The cluster and the sentinel are two reads, and lock-manager
/// learns of a swap from its watch: a status true when written is stale for one reaction
/// (p99 0.116 s, bench-results/2026-11-25/LOCK-REACTION.md). The bound is far above that,
/// so only a lock-manager that does not react fails it, whatever the load.
const STALE_CLAIM_BOUND: Duration = Duration::from_secs(5);

/// A kind of sentinel as the swapping attacker forges it.
trait Forged:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// What the attacker puts under cluster `c`'s sentinel name.
    fn forgery(lab: &LockLab, c: &str) -> Result<Self>;
    /// Admitted (by Kueue, or as Fournos says it of a FournosJob).
    fn admitted(&self) -> bool;
}

/// A one-slot job dressed as the sentinel ([`forgery`]).
impl Forged for Workload {
    fn forgery(lab: &LockLab, c: &str) -> Result<Self> {
        forgery(lab, c)
    }

    fn admitted(&self) -> bool {
        workload_is(self, "Admitted")
    }
}

/// Exactly what lock-manager makes (a lockOnly FournosJob for alice with Hearth's labels),
/// which Fournos turns into a lock of its own: only its UID tells it from the sentinel.
impl Forged for FournosJob {
    fn forgery(lab: &LockLab, c: &str) -> Result<Self> {
        let mut job = FournosJob::new(
            &lock_sentinel_name(c),
            FournosJobSpec::lock_sentinel(c, "alice"),
        );
        job.metadata.labels = Some(sentinel_labels(c, &lab.scope.namespace));
        Ok(job)
    }

    fn admitted(&self) -> bool {
        matches!(phase(self), Some("Admitted" | "Running"))
    }
}

#[tokio::test]
async fn a_sentinel_swapped_before_its_uid_is_recorded_never_holds_workload() -> Result<()> {
    a_sentinel_swapped_before_its_uid_is_recorded_never_holds::<Workload>(Mode::Workload).await
}

#[tokio::test]
async fn a_sentinel_swapped_before_its_uid_is_recorded_never_holds_fournosjob() -> Result<()> {
    a_sentinel_swapped_before_its_uid_is_recorded_never_holds::<FournosJob>(Mode::FournosJob).await
}

/// The attacker of [`a_sentinel_swapped_before_its_uid_is_recorded_never_holds`]: every
/// sentinel under `name` that is not its own is deleted at once and replaced by `forged`
/// (when the name comes free, too: a finalizer may keep the old one a moment). Each
/// forgery's UID goes into `forged_live` as soon as it exists. The UIDs it forged, and how
/// many of its swaps came before lock-manager recorded the swapped sentinel's UID.
async fn swap<K: Forged>(
    api: Api<K>,
    clusters: Api<hearth_api::FournosCluster>,
    (name, cluster): (String, String),
    forged: K,
    forged_live: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> Result<(Vec<String>, usize)> {
    use futures::StreamExt as _;
    use kube::runtime::watcher::{self, Event};

    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api.clone(), config));
    let (mut forged_uids, mut in_window) = (Vec::<String>::new(), 0);
    while forged_uids.len() < SWAPS {
        let event = events.next().await.context("the attacker's watch ended")?;
        let swapped = match event {
            Ok(Event::Apply(s) | Event::InitApply(s)) => {
                let uid = uid_of(&s);
                if forged_uids.contains(&uid) || s.meta().deletion_timestamp.is_some() {
                    continue;
                }
                let precondition = DeleteParams {
                    preconditions: Some(kube::api::Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                let _ = api.delete(&name, &precondition).await;
                Some(uid)
            }
            Ok(Event::Delete(_)) => None,
            _ => continue,
        };
        // Taken again (the old one still terminating, or lock-manager was quicker to make
        // a new one): the next sentinel that appears, or the name coming free, is used.
        let created = match api.create(&PostParams::default(), &forged).await {
            Ok(created) => created,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        };
        forged_live.lock().expect("poisoned").push(uid_of(&created));
        let recorded = clusters
            .get(&cluster)
            .await?
            .status
            .and_then(|s| s.lock_job_uid);
        if swapped.is_some() && recorded != swapped {
            in_window += 1;
        }
        forged_uids.push(uid_of(&created));
    }
    Ok((forged_uids, in_window))
}

/// A Fournos user swaps the sentinel in the window between its creation and the moment
/// lock-manager records its UID in `status.lockJobUID` (the window in which "the sentinel
/// I just created" can only be told from a forgery by its UID, not by its name or
/// labels). The attacker watches the sentinel's name with the chart's Fournos-user
/// rights; each time lock-manager's sentinel appears it deletes it at once and creates
/// its own under the same name ([`Forged::forgery`]). A forgery is never the recorded
/// holder of a `locked=true` lock; a claim that went stale by a swap (the cluster still
/// says `locked=true` for lock-manager's own sentinel, now deleted, while the forgery is
/// admitted) ends within [`STALE_CLAIM_BOUND`]; the forgery is named
/// (`SentinelNameTaken`) and never deleted by lock-manager, and once its maker deletes it
/// the lock is held by lock-manager's own sentinel, through a Workload that asks for
/// every slot. How many swaps landed before the UID was recorded is printed (the race is
/// the attacker's to win or lose; the promise holds either way).
async fn a_sentinel_swapped_before_its_uid_is_recorded_never_holds<K: Forged>(
    mode: Mode,
) -> Result<()> {
    let Some(lab) = ModeLab::new(mode, "swap").await? else {
        return Ok(());
    };
    let attacker = lab.fournos_user().await?;
    let c = lab.cluster("swap").await?;
    let name = lock_sentinel_name(&c);
    let sentinels: Api<K> = Api::namespaced(lab.client.clone(), &lab.scope.execution_namespace);
    let forged_live = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let attack = tokio::spawn(swap(
        Api::<K>::namespaced(attacker, &lab.scope.execution_namespace),
        lab.clusters.clone(),
        (name.clone(), c.clone()),
        K::forgery(&lab, &c)?,
        forged_live.clone(),
    ));

    let _lm = lab.lock_manager().await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    // Every sample while the attack goes on, and until the lock is held after it: a
    // forgery is never the recorded holder of `locked=true`, and a claim made stale by a
    // swap ends within STALE_CLAIM_BOUND.
    let attack = std::sync::Mutex::new(Some(attack));
    let forged_uids = std::sync::Mutex::new(Vec::<String>::new());
    let stale_since = std::sync::Mutex::new(None::<std::time::Instant>);
    let named = std::sync::Mutex::new(false);
    let (attack, forged_uids, stale_since, forged_live, named) =
        (&attack, &forged_uids, &stale_since, &forged_live, &named);
    let (lab, c, name, sentinels) = (&lab, &c, &name, &sentinels);
    let fc = until(
        "held by lock-manager's own sentinel after the attack",
        DEADLINE * 2,
        || async move {
            let finished = {
                let mut running = attack.lock().expect("poisoned");
                match running.as_ref().is_some_and(|a| a.is_finished()) {
                    true => running.take(),
                    false => None,
                }
            };
            if let Some(done) = finished {
                let (uids, in_window) = done.await??;
                eprintln!(
                    "swap: {} swaps, {in_window} before lock-manager recorded the UID",
                    uids.len()
                );
                *forged_uids.lock().expect("poisoned") = uids;
            }
            let fc = lab.clusters.get(c).await?;
            let live = sentinels.get_opt(name).await?;
            let locked = says_locked(&fc);
            let recorded = fc.status.as_ref().and_then(|s| s.lock_job_uid.clone());
            let forged_now = forged_live.lock().expect("poisoned").clone();
            ensure!(
                !(locked && recorded.as_ref().is_some_and(|r| forged_now.contains(r))),
                "{c} says locked=true held by the forgery {recorded:?}: {}",
                lock_state(&fc)
            );
            let stale = locked
                && live.as_ref().is_some_and(|s| {
                    s.admitted()
                        && recorded.as_deref() != s.meta().uid.as_deref()
                        && forged_now.contains(&uid_of(s))
                });
            {
                let mut since = stale_since.lock().expect("poisoned");
                if stale {
                    let first = *since.get_or_insert_with(std::time::Instant::now);
                    ensure!(
                        first.elapsed() <= STALE_CLAIM_BOUND,
                        "{c} has said locked=true for {recorded:?} for {:?} while the forgery {} \
                         is admitted: {}",
                        first.elapsed(),
                        live.as_ref().map(uid_of).unwrap_or_default(),
                        lock_state(&fc)
                    );
                } else {
                    *since = None;
                }
            }
            let forged = forged_uids.lock().expect("poisoned").clone();
            if let Some(s) = &live
                && forged.contains(&uid_of(s))
                && reason_is("SentinelNameTaken")(&fc)
            {
                // Named, as it must be: its maker (here, the test) removes it.
                sentinels.delete(name, &DeleteParams::default()).await?;
                *named.lock().expect("poisoned") = true;
            }
            let done = !forged.is_empty()
                && is_held(&fc)
                && live.is_some_and(|s| !forged.contains(&uid_of(&s)));
            Ok(if done { Ok(fc) } else { Err(lock_state(&fc)) })
        },
    )
    .await?;
    ensure!(
        *named.lock().expect("poisoned"),
        "the forgery was never named SentinelNameTaken"
    );
    let sentinel = sentinels.get(name).await?;
    let (job, workload) = held_by(&fc)?;
    ensure!(
        job == uid_of(&sentinel),
        "held by the sentinel lock-manager created"
    );
    // The Workload that holds the slots: the sentinel itself, or the one Fournos made.
    let holder = lab.workloads.get(name).await?;
    ensure!(
        workload == uid_of(&holder),
        "status.lockWorkloadUID names it"
    );
    ensure!(
        requested_slots(&holder) == Some(SLOTS),
        "the lock's Workload asks for every slot"
    );
    Ok(())
}
