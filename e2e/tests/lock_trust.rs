//! Attacks on the lock's promise ("`locked=true`: nobody else's job can start there"),
//! each run by someone with exactly the rights that could run it, against the real
//! lock-manager, kube-apiserver and Kueue (issue 24). Every test here fails on a
//! lock-manager that trusts sentinels by name and label.
//!
//! - Two Hearths sharing one execution namespace never touch each other's sentinels.
//! - A Fournos user who takes the sentinel's name first: `SentinelNameTaken`, naming the
//!   object, never `locked=true`; the lock is taken once the name is free.
//! - A Fournos user who forges a sentinel (the name, Hearth's labels, the owner's
//!   annotation, on their own running job): never `locked=true` while it is admitted.
//! - `Held` only in the cluster's queue, on its flavor, with every slot.
//!
//! Workload sentinels (no Fournos needed); every wait has a deadline, and with
//! [`LockLab::probing`] each look at a cluster that says `locked=true` tries to get a
//! one-slot job admitted there, which must fail.
//!
//! Run: `cargo build --workspace --bins && cargo test -p hearth-e2e --test lock_trust`.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::kueue::Workload;
use hearth_api::names::{OWNER_ANNOTATION, lock_sentinel_name, sentinel_labels};
use hearth_api::reasons::LockedReason;
use hearth_e2e::Isolated;
use hearth_e2e::fixtures::local_queue;
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::workload_is;
use hearth_e2e::lab::{DEADLINE, LockLab, SLOTS, is_held, lock_plane, lock_state, reason_is};
use hearth_e2e::objects::slot_workload;
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::resources::apply;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long the two-Hearths test watches both locks (each sample reads both clusters
/// and both sentinels).
const SHARED_WINDOW: Duration = Duration::from_secs(60);
/// How long a refused lock is watched for never saying `locked=true`.
const NEVER_WINDOW: Duration = Duration::from_secs(10);

async fn lab(test: &str) -> Result<LockLab> {
    Ok(LockLab::new(lock_plane().await?, test).await?.probing())
}

/// lock-manager with workload sentinels in `lab`'s scope, as the chart's ServiceAccount.
async fn lock_manager(lab: &LockLab) -> Result<Running> {
    let env = [
        ("HEARTH_SENTINEL", "workload"),
        ("HEARTH_RECONCILE_INTERVAL_SEC", "600"),
        ("HEARTH_LOG_LEVEL", "info"),
    ];
    hearth::start(lab.plane, &lab.scope, Controller::LockManager, "0", &env)
        .await
        .context("starting hearth-lock-manager")
}

/// A queued cluster with `status.kueue`, as kueue-sync would leave it.
async fn cluster(lab: &LockLab, base: &str) -> Result<String> {
    let name = lab.scope.cluster(base);
    lab.queue_cluster(&name).await?;
    lab.publish_slots(&name, SLOTS).await?;
    Ok(name)
}

/// `fournos/cluster-slot` as a sentinel requests it.
fn requested_slots(w: &Workload) -> Result<String> {
    let raw = serde_json::to_value(w)?;
    Ok(raw["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
        ["fournos/cluster-slot"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
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

fn uid_of(w: &Workload) -> String {
    w.uid().unwrap_or_default()
}

/// Two Hearth releases (their own FournosCluster namespaces and ClusterQueues) share one
/// execution namespace, each with a lock held: neither deletes, replaces or counts the
/// other's sentinel, and neither lock ever stops saying `locked=true`.
#[tokio::test]
async fn two_hearths_in_one_execution_namespace_keep_each_others_locks() -> Result<()> {
    let plane = lock_plane().await?;
    let first = lab("shared-exec-1").await?;
    // The second release: its own namespace and ClusterQueue, the first's execution
    // namespace, with a LocalQueue there for its own ClusterQueue.
    let own = plane.isolated("shared-exec-2").await?;
    let mut scope = own.scope.clone();
    scope.execution_namespace = first.scope.execution_namespace.clone();
    scope.local_queue = format!("lq-{}", own.id);
    apply(
        &first.client,
        &local_queue(
            &scope.execution_namespace,
            &scope.local_queue,
            &scope.cluster_queue,
        ),
    )
    .await?;
    let second = LockLab::with_scope(
        plane,
        Isolated {
            id: format!("{}-x", own.id),
            scope,
        },
    )
    .await?
    .probing();

    let a = cluster(&first, "first").await?;
    let b = cluster(&second, "second").await?;
    let _lm1 = lock_manager(&first).await?;
    let _lm2 = lock_manager(&second).await?;
    first.set_spec(&a, json!({ "owner": "alice" })).await?;
    second.set_spec(&b, json!({ "owner": "bob" })).await?;
    let held_a = first.wait_cluster(&a, "held", is_held).await?;
    let held_b = second.wait_cluster(&b, "held", is_held).await?;
    let uid_a = held_a
        .status
        .and_then(|s| s.lock_job_uid)
        .context("lockJobUID of a")?;
    let uid_b = held_b
        .status
        .and_then(|s| s.lock_job_uid)
        .context("lockJobUID of b")?;

    holds_for("both locks, untouched", SHARED_WINDOW, || async {
        for (lab, cluster, uid) in [(&first, &a, &uid_a), (&second, &b, &uid_b)] {
            let fc = lab.clusters.get(cluster).await?;
            if !is_held(&fc) {
                return Ok(Err(format!("{cluster}: {}", lock_state(&fc))));
            }
            let sentinels = lab.sentinels::<Workload>(cluster).await?;
            let uids: Vec<String> = sentinels.iter().map(uid_of).collect();
            if uids != [uid.clone()] {
                return Ok(Err(format!(
                    "{cluster}: sentinels {uids:?}, not only the one it was locked with ({uid})"
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
    let lab = lab("squat").await?;
    let attacker = lab.fournos_user().await?;
    let c = cluster(&lab, "squat").await?;
    let name = lock_sentinel_name(&c);
    let workloads: Api<Workload> = Api::namespaced(attacker, &lab.scope.execution_namespace);
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

    let _lm = lock_manager(&lab).await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    let taken = lab
        .wait_cluster(
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
        .wait_cluster(&c, "held once the name is free", is_held)
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
    let lab = lab("forge").await?;
    let attacker = lab.fournos_user().await?;
    let c = cluster(&lab, "forge").await?;
    let name = lock_sentinel_name(&c);
    let workloads: Api<Workload> = Api::namespaced(attacker, &lab.scope.execution_namespace);
    let forged = workloads
        .create(&PostParams::default(), &forgery(&lab, &c)?)
        .await?;
    lab.wait_workload(&name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
        .await?;
    lab.mark_pods_ready(&name).await?;

    let _lm = lock_manager(&lab).await?;
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
    let fc = lab.wait_cluster(&c, "held", is_held).await?;
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

/// `Held` needs the cluster's ClusterQueue and flavor and every slot: a flavor that
/// kueue-sync now says is another one gives `WrongFlavor`; raised slots give
/// `SlotsMismatch` and a sentinel that asks for all of them.
#[tokio::test]
async fn held_needs_the_clusters_flavor_and_every_slot() -> Result<()> {
    let lab = lab("held-truth").await?;
    let c = cluster(&lab, "truth").await?;
    let _lm = lock_manager(&lab).await?;
    lab.set_spec(&c, json!({ "owner": "alice" })).await?;
    lab.wait_cluster(&c, "held", is_held).await?;

    // kueue-sync now publishes the cluster on another flavor.
    let moved = json!({
        "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
        "status": { "kueue": {
            "flavor": format!("{c}-elsewhere"), "clusterQueue": lab.scope.cluster_queue,
            "quotas": { "fournos/cluster-slot": SLOTS }, "clusterSlots": SLOTS,
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
        .wait_cluster(
            &c,
            "WrongFlavor",
            reason_is(LockedReason::WrongFlavor.as_str()),
        )
        .await?;
    ensure!(wrong.status.and_then(|s| s.locked) == Some(false));
    lab.publish_slots(&c, SLOTS).await?;
    let before = lab.wait_cluster(&c, "held again", is_held).await?;
    let old_uid = before.status.and_then(|s| s.lock_job_uid);

    // Raised slots: the held sentinel has too few; it is replaced by one with all of them.
    lab.publish_slots(&c, SLOTS + 50).await?;
    until("a sentinel asking for every slot", DEADLINE, || async {
        let fc = lab.clusters.get(&c).await?;
        ensure!(
            fc.status.as_ref().and_then(|s| s.locked) != Some(true)
                || fc.status.as_ref().and_then(|s| s.lock_job_uid.clone()) == old_uid,
            "a replaced sentinel said locked=true: {}",
            lock_state(&fc)
        );
        let sentinels = lab.sentinels::<Workload>(&c).await?;
        Ok(match sentinels.as_slice() {
            [s] if s.uid() != old_uid && requested_slots(s)? == (SLOTS + 50).to_string() => Ok(()),
            _ => Err(format!(
                "{} sentinels; {}",
                sentinels.len(),
                lock_state(&fc)
            )),
        })
    })
    .await?;
    // The queue has 100 slots for it: it is not admitted, and the cluster says why.
    lab.wait_cluster(&c, "not held", |fc| {
        fc.status.as_ref().and_then(|s| s.locked) == Some(false)
    })
    .await?;
    Ok(())
}

/// A lock nobody made with Hearth (another tool's Fournos `lockOnly` job, an exclusive
/// job) holds every slot of a cluster: its status names the holder, so the cluster is
/// never presented as free.
#[tokio::test]
async fn a_foreign_lock_is_named_in_status() -> Result<()> {
    let lab = lab("foreign-holder").await?;
    let attacker = lab.fournos_user().await?;
    let c = cluster(&lab, "foreign").await?;
    let _lm = lock_manager(&lab).await?;
    let name = format!("lock-{c}");
    let workloads: Api<Workload> = Api::namespaced(attacker, &lab.scope.execution_namespace);
    let foreign: Workload = serde_json::from_value(slot_workload(
        &lab.scope.execution_namespace,
        &name,
        &lab.scope.local_queue,
        &c,
        SLOTS,
    ))?;
    workloads.create(&PostParams::default(), &foreign).await?;
    lab.wait_workload(&name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
        .await?;
    let wanted = format!("{}/{name}", lab.scope.execution_namespace);
    let fc = lab
        .wait_cluster(&c, "its slot holder named", |fc| {
            fc.status.as_ref().is_some_and(|s| {
                s.slot_holders
                    .iter()
                    .any(|h| h.workload == wanted && h.slots == SLOTS)
            })
        })
        .await?;
    ensure!(fc.status.and_then(|s| s.locked) != Some(true));
    // Gone: no longer named.
    workloads.delete(&name, &DeleteParams::default()).await?;
    lab.wait_cluster(&c, "no slot holder", |fc| {
        fc.status
            .as_ref()
            .is_some_and(|s| s.slot_holders.is_empty())
    })
    .await?;
    Ok(())
}

/// How many sentinels the swapping attacker replaces: once its forgery stands under the
/// name, lock-manager makes no new sentinel to swap (it names the forgery and leaves it).
const SWAPS: usize = 1;

/// How long the cluster may go on saying `locked=true` for its deleted sentinel while a
/// forgery is admitted. The cluster and the Workload are two reads, and lock-manager
/// learns of a swap from its watch: a status true when written is stale for one reaction
/// (p99 0.116 s, bench-results/2026-11-25/LOCK-REACTION.md). The bound is far above that,
/// so only a lock-manager that does not react fails it, whatever the load.
const STALE_CLAIM_BOUND: Duration = Duration::from_secs(5);

/// A Fournos user swaps the sentinel in the window between its creation and the moment
/// lock-manager records its UID in `status.lockJobUID` (the window in which "the sentinel
/// I just created" can only be told from a forgery by its UID, not by its name or
/// labels). The attacker watches the sentinel's name with the chart's Fournos-user
/// rights; each time lock-manager's sentinel appears it deletes it at once and creates
/// its own under the same name, with Hearth's labels and the owner's annotation, asking
/// for one slot. A forgery is never the recorded holder of a `locked=true` lock; a claim
/// that went stale by a swap (the cluster still says `locked=true` for lock-manager's own
/// sentinel, now deleted, while the forgery is admitted) ends within
/// [`STALE_CLAIM_BOUND`]; the forgery is named (`SentinelNameTaken`) and never deleted by
/// lock-manager, and once the attacker deletes it the lock is held by lock-manager's own
/// sentinel. How many swaps landed before the UID was
/// recorded is printed (the race is the attacker's to win or lose; the promise holds
/// either way).
#[tokio::test]
async fn a_sentinel_swapped_before_its_uid_is_recorded_never_holds() -> Result<()> {
    use futures::StreamExt as _;
    use kube::runtime::watcher::{self, Event};

    let lab = lab("swap").await?;
    let attacker = lab.fournos_user().await?;
    let c = cluster(&lab, "swap").await?;
    let name = lock_sentinel_name(&c);
    let workloads: Api<Workload> = Api::namespaced(attacker, &lab.scope.execution_namespace);
    let forged = forgery(&lab, &c)?;

    // The attacker: every sentinel that is not its own is swapped for a forgery. What it
    // forged is known to the checks below as soon as it is created.
    let clusters = lab.clusters.clone();
    let (attack_name, attack_cluster) = (name.clone(), c.clone());
    let forged_live = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let forged_by_attacker = forged_live.clone();
    let attack = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={attack_name}"));
        let mut events = std::pin::pin!(watcher::watcher(workloads.clone(), config));
        let (mut forged_uids, mut in_window) = (Vec::<String>::new(), 0);
        while forged_uids.len() < SWAPS {
            let Some(event) = events.next().await else {
                anyhow::bail!("the attacker's watch ended");
            };
            let (Ok(Event::Apply(w)) | Ok(Event::InitApply(w))) = event else {
                continue;
            };
            let uid = uid_of(&w);
            if forged_uids.contains(&uid) || w.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let precondition = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            let _ = workloads.delete(&attack_name, &precondition).await;
            // Taken again (the old one still terminating, or lock-manager was quicker to
            // make a new one): the next sentinel that appears is swapped instead.
            let created = match workloads.create(&PostParams::default(), &forged).await {
                Ok(created) => created,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e.into()),
            };
            forged_by_attacker
                .lock()
                .expect("poisoned")
                .push(uid_of(&created));
            let recorded = clusters
                .get(&attack_cluster)
                .await?
                .status
                .and_then(|s| s.lock_job_uid);
            if recorded.as_deref() != Some(uid.as_str()) {
                in_window += 1;
            }
            forged_uids.push(uid_of(&created));
        }
        Ok((forged_uids, in_window))
    });

    let _lm = lock_manager(&lab).await?;
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
    let (lab, c, name) = (&lab, &c, &name);
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
            let live = lab.workloads.get_opt(name).await?;
            let locked = fc.status.as_ref().and_then(|s| s.locked) == Some(true);
            let recorded = fc.status.as_ref().and_then(|s| s.lock_job_uid.clone());
            let forged_now = forged_live.lock().expect("poisoned").clone();
            ensure!(
                !(locked && recorded.as_ref().is_some_and(|r| forged_now.contains(r))),
                "{c} says locked=true held by the forgery {recorded:?}: {}",
                lock_state(&fc)
            );
            let stale = locked
                && live.as_ref().is_some_and(|w| {
                    workload_is(w, "Admitted")
                        && recorded.as_deref() != w.uid().as_deref()
                        && forged_now.contains(&uid_of(w))
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
            if let Some(w) = &live
                && forged.contains(&uid_of(w))
                && reason_is("SentinelNameTaken")(&fc)
            {
                // Named, as it must be: its maker (here, the test) removes it.
                lab.workloads.delete(name, &DeleteParams::default()).await?;
                *named.lock().expect("poisoned") = true;
            }
            let done = !forged.is_empty()
                && is_held(&fc)
                && live.is_some_and(|w| !forged.contains(&uid_of(&w)));
            Ok(if done { Ok(fc) } else { Err(lock_state(&fc)) })
        },
    )
    .await?;
    let sentinel = lab.workloads.get(name).await?;
    ensure!(
        *named.lock().expect("poisoned"),
        "the forgery was never named SentinelNameTaken"
    );
    ensure!(
        fc.status.and_then(|s| s.lock_job_uid) == sentinel.uid(),
        "held by the sentinel lock-manager created"
    );
    ensure!(
        requested_slots(&sentinel)? == SLOTS.to_string(),
        "the sentinel asks for every slot"
    );
    Ok(())
}
