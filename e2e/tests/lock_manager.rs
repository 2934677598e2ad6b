//! End-to-end tests of hearth-lock-manager: the real binary as a process, against the local
//! control plane's real kube-apiserver and real Kueue. No mocks.
//!
//! Run with:
//! ```text
//! cargo build -p hearth-lock-manager && cargo test -p hearth-e2e --test lock_manager -- --nocapture
//! ```
//!
//! These tests start a plane of their own (not `HEARTH_E2E_PLANE_DIR`'s): Kueue runs with
//! WaitForPodsReady on and a short timeout ([`WAIT_FOR_PODS_READY_SECS`]), so that a sentinel
//! that would be evicted for having no ready pods is evicted while a test watches. Each test
//! works in its own [`Isolated`] scope with its own lock-manager process (run by the plane as
//! the chart's ServiceAccount; leader election on, short Lease; resync 10 minutes), and does what hearth-kueue-sync would do itself: the ResourceFlavor, the
//! ClusterQueue entry (`fournos/cluster-slot: 100`) and the FournosCluster's `status.kueue`
//! (under kueue-sync's field manager), so it depends on no other controller. Everything is
//! awaited by polling with a deadline, never by sleeping.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::{PriorityClassRef, Workload};
use hearth_api::names::{CLUSTER_LOCK_LABEL, CLUSTER_SLOT_RESOURCE, sentinel_labels};
use hearth_e2e::ControlPlane;
use hearth_e2e::Isolated;
use hearth_e2e::fixtures::{LOCK_PRIORITY, LOCK_PRIORITY_CLASS};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::{workload_condition, workload_is};
use hearth_e2e::lab::{
    DEADLINE, LockLab, SLOTS, WAIT_FOR_PODS_READY_SECS, is_held, lock_plane, lock_state, locked,
};
use hearth_e2e::objects::slot_workload;
use hearth_e2e::process::until;
use hearth_e2e::resources::apply;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// The plane and the lock-manager process
// ---------------------------------------------------------------------------------------

/// A hearth-lock-manager process working in a test's scope, started by the plane's
/// supervisor as the chart's ServiceAccount (a rule missing from the chart fails here).
struct LockManager {
    plane: &'static ControlPlane,
    scope: Isolated,
    env: Vec<(String, String)>,
    running: Running,
}

impl LockManager {
    /// Starts lock-manager with `--sentinel <kind>` and waits until it is ready. Leader
    /// election is on (short Lease) and the resync is 10 minutes, so everything a test
    /// sees happens because a watch event or the expiry triggered it.
    async fn start(
        lab: &LockFixture,
        kind: &str,
        extra_env: &[(&str, &str)],
    ) -> Result<LockManager> {
        let mut env: Vec<(String, String)> = [
            ("HEARTH_SENTINEL", kind),
            ("HEARTH_LEADER_ELECTION", "true"),
            ("HEARTH_LEASE_DURATION_SEC", "6"),
            ("HEARTH_LEASE_GRACE_SEC", "2"),
            ("HEARTH_RECONCILE_INTERVAL_SEC", "600"),
            ("HEARTH_LOG_LEVEL", "info"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let running = start_lock_manager(lab.plane, &lab.scope, &env).await?;
        Ok(LockManager {
            plane: lab.plane,
            scope: lab.scope.clone(),
            env,
            running,
        })
    }

    /// SIGKILL: no shutdown, no Lease release.
    async fn kill(&self) -> Result<()> {
        self.running.kill(self.plane).await?;
        Ok(())
    }

    /// Starts it again after [`kill`](Self::kill), with the same settings.
    async fn restart(&mut self) -> Result<()> {
        self.running = start_lock_manager(self.plane, &self.scope, &self.env).await?;
        Ok(())
    }

    async fn metrics(&self) -> Result<String> {
        Ok(self.running.metrics().await?)
    }

    /// The value of the sample `name` (with its labels, if any) in `/metrics`.
    async fn metric(&self, name: &str) -> Result<f64> {
        Ok(self.running.metric(name).await?)
    }
}

async fn start_lock_manager(
    plane: &ControlPlane,
    scope: &Isolated,
    env: &[(String, String)],
) -> Result<Running> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    hearth::start(plane, scope, Controller::LockManager, "0", &env)
        .await
        .context("starting hearth-lock-manager (cargo build -p hearth-lock-manager first)")
}

// ---------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------

fn quota_message(cluster: &str) -> String {
    format!("insufficient unused quota for {CLUSTER_SLOT_RESOURCE} in flavor {cluster}")
}

// ---------------------------------------------------------------------------------------
// A test's world: its scope, its clusters, helpers over the API
// ---------------------------------------------------------------------------------------

/// The shared [`LockLab`] and what only these tests do with it.
struct LockFixture(LockLab);

impl std::ops::Deref for LockFixture {
    type Target = LockLab;

    fn deref(&self) -> &LockLab {
        &self.0
    }
}

impl LockFixture {
    async fn new(test: &str) -> Result<LockFixture> {
        Ok(LockFixture(LockLab::new(lock_plane().await?, test).await?))
    }

    /// A FournosCluster with its flavor and queue entry, as kueue-sync would make them;
    /// `status.kueue` too when `synced`.
    async fn cluster(&self, base: &str, synced: bool) -> Result<String> {
        let name = self.scope.cluster(base);
        self.queue_cluster(&name).await?;
        if synced {
            self.publish_kueue_status(&name).await?;
        }
        Ok(name)
    }

    /// `status.kueue` under kueue-sync's field manager, as kueue-sync would write it.
    async fn publish_kueue_status(&self, name: &str) -> Result<()> {
        self.publish_slots(name, SLOTS).await
    }

    /// The one sentinel Workload of `cluster`, once it satisfies `done`.
    async fn wait_sentinel(
        &self,
        cluster: &str,
        what: &str,
        done: impl Fn(&Workload) -> bool,
    ) -> Result<Workload> {
        self.wait_one_sentinel(cluster, what, done, |w: &Workload| {
            format!("{:?}", w.status)
        })
        .await
    }

    async fn wait_no_sentinel(&self, cluster: &str) -> Result<()> {
        until(&format!("no sentinel of {cluster}"), DEADLINE, || async {
            let found = self.sentinels::<Workload>(cluster).await?;
            let found_jobs = self.sentinels::<FournosJob>(cluster).await?;
            Ok(if found.is_empty() && found_jobs.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} Workloads, {} FournosJobs",
                    found.len(),
                    found_jobs.len()
                ))
            })
        })
        .await
    }

    /// A job pending because the cluster's slots are taken, with Kueue's own message.
    async fn wait_job_pending_for_quota(&self, name: &str, cluster: &str) -> Result<Workload> {
        let wanted = quota_message(cluster);
        let w = self
            .wait_workload(name, "pending for cluster slots", DEADLINE, |w| {
                workload_condition(w, "QuotaReserved")
                    .is_some_and(|c| c.status == "False" && c.message.contains(&wanted))
            })
            .await?;
        ensure!(!workload_is(&w, "Admitted"), "admitted while locked: {w:?}");
        Ok(w)
    }
}

// ---------------------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------------------

/// Issue 6, scenario 1: lock an idle cluster; new work pends with Kueue's quota message;
/// unlock; it is admitted. Also: `WaitingForFlavor` until kueue-sync reports the flavor,
/// and the sentinel's exact shape.
#[tokio::test]
async fn lock_idle_cluster_blocks_new_work_until_unlocked() -> Result<()> {
    let lab = LockFixture::new("lock_idle").await?;
    let cluster = lab.cluster("idle", false).await?;
    let lm = LockManager::start(&lab, "workload", &[]).await?;

    lab.set_spec(&cluster, json!({ "owner": "alice" })).await?;
    lab.wait_lock(&cluster, "WaitingForFlavor", |fc| {
        locked(fc).is_some_and(|c| c.reason == "WaitingForFlavor")
    })
    .await?;
    ensure!(
        lab.sentinels::<Workload>(&cluster).await?.is_empty(),
        "no sentinel before the flavor"
    );

    lab.publish_kueue_status(&cluster).await?;
    let started = Instant::now();
    let fc = lab.wait_lock(&cluster, "held", is_held).await?;
    eprintln!(
        "lock_idle: held {:?} after status.kueue appeared",
        started.elapsed()
    );
    let status = fc.status.clone().unwrap_or_default();
    let sentinel_name = format!("cluster-lock-{cluster}");
    assert_eq!(
        status.lock_job_name.as_deref(),
        Some(sentinel_name.as_str())
    );
    assert_eq!(status.lock_owner.as_deref(), Some("alice"));
    assert!(status.owner_set_at.is_some());
    assert_eq!(status.lock_expires_at, None, "no ttl, no expiry");
    assert_eq!(
        locked(&fc).unwrap().observed_generation,
        fc.metadata.generation
    );

    // The sentinel: the contract's name and label, the owner, all slots, the cluster's nodes.
    let sentinel = lab
        .wait_sentinel(&cluster, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    assert_eq!(sentinel.name_any(), sentinel_name);
    assert_eq!(
        sentinel
            .labels()
            .get(CLUSTER_LOCK_LABEL)
            .map(String::as_str),
        Some(cluster.as_str())
    );
    assert_eq!(
        sentinel
            .annotations()
            .get("fournos.dev/owner")
            .map(String::as_str),
        Some("alice")
    );
    assert_eq!(
        sentinel.spec.queue_name.as_deref(),
        Some(lab.scope.local_queue.as_str())
    );
    let pod = sentinel.spec.pod_sets[0].template.spec.clone().unwrap();
    assert_eq!(
        pod.node_selector.unwrap().get("fournos.dev/cluster"),
        Some(&cluster)
    );
    let requests = pod.containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests[CLUSTER_SLOT_RESOURCE].0, SLOTS.to_string());
    // It survives WaitForPodsReady: lock-manager reports its (absent) pods ready.
    let sentinel = lab
        .wait_sentinel(&cluster, "PodsReady", |w| workload_is(w, "PodsReady"))
        .await?;
    let managers: Vec<_> = sentinel
        .managed_fields()
        .iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect();
    ensure!(
        managers.iter().any(|m| m == "hearth-lock-manager"),
        "PodsReady written under lock-manager's field manager: {managers:?}"
    );

    // New work on the locked cluster waits, and Kueue says why.
    lab.job("job", &cluster, 1).await?;
    lab.wait_job_pending_for_quota("job", &cluster).await?;

    // Unlock: the sentinel goes, the job is admitted.
    lab.set_spec(&cluster, json!({ "owner": null })).await?;
    let started = Instant::now();
    lab.wait_workload("job", "admitted after unlock", DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;
    eprintln!(
        "lock_idle: job admitted {:?} after unlock",
        started.elapsed()
    );
    lab.wait_no_sentinel(&cluster).await?;
    let fc = lab
        .wait_lock(&cluster, "Released", |fc| {
            locked(fc).is_some_and(|c| c.reason == "Released")
        })
        .await?;
    let status = fc.status.unwrap();
    assert_eq!(status.locked, Some(false));
    assert_eq!(status.lock_job_name, None);
    assert_eq!(status.owner_set_at, None);
    lab.wait_event(&cluster, "LockHeld").await?;
    lab.wait_event(&cluster, "LockReleased").await?;
    ensure!(
        lm.metric("hearth_lock_manager_lock_acquisition_seconds_count")
            .await?
            >= 1.0,
        "acquisition latency observed"
    );
    Ok(())
}

/// Issue 6, scenario 2: a busy cluster's lock waits with Kueue's own message, and is held
/// once the running work finishes.
#[tokio::test]
async fn lock_busy_cluster_waits_for_running_work() -> Result<()> {
    let lab = LockFixture::new("lock_busy").await?;
    let cluster = lab.cluster("busy", true).await?;
    let lm = LockManager::start(&lab, "workload", &[]).await?;
    lab.running_job("busy-job", &cluster, 1).await?;

    lab.set_spec(&cluster, json!({ "owner": "bob" })).await?;
    let wanted = quota_message(&cluster);
    let fc = lab
        .wait_lock(&cluster, "WaitingForAdmission with Kueue's message", |fc| {
            locked(fc)
                .is_some_and(|c| c.reason == "WaitingForAdmission" && c.message.contains(&wanted))
        })
        .await?;
    let condition = locked(&fc).unwrap().clone();
    eprintln!(
        "lock_busy: Locked={}/{}: {}",
        condition.status, condition.reason, condition.message
    );
    assert_eq!(condition.status, "False");
    assert_eq!(fc.status.as_ref().unwrap().locked, Some(false));
    assert_eq!(
        fc.status.as_ref().unwrap().lock_job_name.as_deref(),
        Some(format!("cluster-lock-{cluster}").as_str())
    );
    until("locks_waiting gauge", DEADLINE, || async {
        let waiting = lm.metric("hearth_lock_manager_locks_waiting").await?;
        Ok(if waiting == 1.0 {
            Ok(())
        } else {
            Err(format!("{waiting}"))
        })
    })
    .await?;

    // The running work finishes.
    lab.workloads
        .delete("busy-job", &DeleteParams::default())
        .await?;
    let started = Instant::now();
    lab.wait_lock(&cluster, "held", is_held).await?;
    eprintln!(
        "lock_busy: held {:?} after the busy job was deleted",
        started.elapsed()
    );
    lab.wait_event(&cluster, "LockHeld").await?;
    until("locks_held gauge", DEADLINE, || async {
        let held = lm.metric("hearth_lock_manager_locks_held").await?;
        Ok(if held == 1.0 {
            Ok(())
        } else {
            Err(format!("{held}"))
        })
    })
    .await?;
    Ok(())
}

/// Issue 6, scenario 3: a TTL of 1m expires on time (not a resync later: the resync is 10
/// minutes): sentinel gone, `spec.owner` cleared, Event, new work admitted.
#[tokio::test]
async fn ttl_expires_on_time() -> Result<()> {
    let lab = LockFixture::new("ttl_expiry").await?;
    let cluster = lab.cluster("ttl", true).await?;
    // The resync is 10 minutes: only the requeue at the expiry can make it on time.
    let lm = LockManager::start(&lab, "workload", &[]).await?;

    lab.set_spec(&cluster, json!({ "owner": "carol", "ttl": "1m" }))
        .await?;
    let fc = lab.wait_lock(&cluster, "held", is_held).await?;
    let status = fc.status.clone().unwrap();
    let set_at = status.owner_set_at.clone().context("ownerSetAt")?.0;
    let expires = status.lock_expires_at.clone().context("lockExpiresAt")?.0;
    assert_eq!(
        expires.duration_since(set_at),
        SignedDuration::from_secs(60)
    );
    lab.job("after-expiry", &cluster, 1).await?;
    lab.wait_job_pending_for_quota("after-expiry", &cluster)
        .await?;

    // Wait for the expiry: until a minute after ownerSetAt, plus a margin.
    let until_expiry =
        Duration::try_from(expires.duration_since(Timestamp::now())).unwrap_or_default();
    let fc = until(
        &format!("{cluster}: spec.owner cleared at {expires}"),
        until_expiry + Duration::from_secs(30),
        || async {
            let fc = lab.clusters.get(&cluster).await?;
            Ok(if fc.spec.owner.is_none() {
                Ok(fc)
            } else {
                Err(lock_state(&fc))
            })
        },
    )
    .await?;
    let seen_late = Timestamp::now().duration_since(expires);
    let event = lab.wait_event(&cluster, "LockExpired").await?;
    let event_time = event.event_time.clone().context("eventTime")?.0;
    let late = event_time.duration_since(expires);
    eprintln!(
        "ttl_expiry: lockExpiresAt {expires}; LockExpired eventTime {event_time} ({late:#} late, \
         recorded after spec.owner was cleared); the test (polling) saw spec.owner cleared \
         {seen_late:#} after expiry"
    );
    ensure!(
        late >= SignedDuration::ZERO && late < SignedDuration::from_secs(2),
        "expiry fired {late:#} after lockExpiresAt"
    );
    ensure!(
        fc.spec.ttl.as_deref() == Some("1m"),
        "only the owner is cleared"
    );

    lab.wait_no_sentinel(&cluster).await?;
    lab.wait_workload("after-expiry", "admitted after expiry", DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;
    let fc = lab
        .wait_lock(&cluster, "Expired", |fc| {
            locked(fc).is_some_and(|c| c.reason == "Expired")
        })
        .await?;
    assert_eq!(fc.status.unwrap().locked, Some(false));
    assert_eq!(
        lm.metric("hearth_lock_manager_locks_expired_total").await?,
        1.0
    );
    Ok(())
}

/// Issue 6, scenario 4: lock-manager SIGKILLed and restarted while locks exist (one held,
/// one waiting) and while a locked cluster is deleted: nothing lost, nothing duplicated,
/// nothing rewritten, and the orphan swept.
#[tokio::test]
async fn restart_loses_and_duplicates_nothing() -> Result<()> {
    let lab = LockFixture::new("restart").await?;
    let held = lab.cluster("held", true).await?;
    let waiting = lab.cluster("waiting", true).await?;
    let doomed = lab.cluster("doomed", true).await?;
    let mut lm = LockManager::start(&lab, "workload", &[]).await?;
    lab.running_job("busy-job", &waiting, 1).await?;

    for (cluster, owner) in [(&held, "erin"), (&waiting, "frank"), (&doomed, "grace")] {
        lab.set_spec(cluster, json!({ "owner": owner })).await?;
    }
    let held_before = lab.wait_lock(&held, "held", is_held).await?;
    lab.wait_lock(&doomed, "held", is_held).await?;
    let waiting_before = lab
        .wait_lock(&waiting, "WaitingForAdmission", |fc| {
            locked(fc).is_some_and(|c| {
                c.reason == "WaitingForAdmission" && c.message.contains("insufficient")
            })
        })
        .await?;
    let held_sentinel = lab
        .wait_sentinel(&held, "PodsReady", |w| workload_is(w, "PodsReady"))
        .await?;
    let waiting_sentinel = lab.wait_sentinel(&waiting, "created", |_| true).await?;
    lab.wait_sentinel(&doomed, "admitted", |w| workload_is(w, "Admitted"))
        .await?;

    lm.kill().await?;
    // While lock-manager is down, a locked cluster is deleted (its sentinel is orphaned).
    lab.clusters
        .delete(&doomed, &DeleteParams::default())
        .await?;
    lm.restart().await?;

    // The sweep finds the orphan once both caches are in and the Lease is ours.
    lab.wait_no_sentinel(&doomed).await?;
    until(
        "both clusters reconciled after the restart",
        DEADLINE,
        || async {
            let n = lm.metric("hearth_lock_manager_reconciles_total").await?;
            let held = lm.metric("hearth_lock_manager_locks_held").await?;
            let waiting = lm.metric("hearth_lock_manager_locks_waiting").await?;
            Ok(if n >= 2.0 && held == 1.0 && waiting == 1.0 {
                Ok(())
            } else {
                Err(format!("reconciles {n}, held {held}, waiting {waiting}"))
            })
        },
    )
    .await?;

    for (cluster, before, sentinel) in [
        (&held, &held_before, &held_sentinel),
        (&waiting, &waiting_before, &waiting_sentinel),
    ] {
        let now = lab.clusters.get(cluster).await?;
        assert_eq!(now.status, before.status, "{cluster}: status unchanged");
        assert_eq!(
            now.resource_version(),
            before.resource_version(),
            "{cluster}: nothing written (status was already right)"
        );
        let sentinels = lab.sentinels::<Workload>(cluster).await?;
        assert_eq!(sentinels.len(), 1, "{cluster}: one sentinel");
        assert_eq!(
            sentinels[0].uid(),
            sentinel.uid(),
            "{cluster}: the same sentinel"
        );
    }
    let writes: Vec<String> = lm
        .metrics()
        .await?
        .lines()
        .filter(|l| l.starts_with("hearth_lock_manager_writes_total"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        writes,
        vec![r#"hearth_lock_manager_writes_total{what="sentinel_delete"} 1"#.to_owned()],
        "after a restart only the orphan is written"
    );

    // And it carries on: the waiting lock is taken once the cluster frees up.
    lab.workloads
        .delete("busy-job", &DeleteParams::default())
        .await?;
    let fc = lab.wait_lock(&waiting, "held", is_held).await?;
    assert_eq!(
        fc.status.unwrap().owner_set_at,
        waiting_before.status.unwrap().owner_set_at,
        "ownerSetAt survived the restart"
    );
    Ok(())
}

/// Owner changed A → B: B's lock, with a new sentinel and a new `ownerSetAt`.
#[tokio::test]
async fn owner_change_makes_a_new_lock() -> Result<()> {
    let lab = LockFixture::new("owner_change").await?;
    let cluster = lab.cluster("transfer", true).await?;
    let _lm = LockManager::start(&lab, "workload", &[]).await?;

    lab.set_spec(&cluster, json!({ "owner": "alice", "ttl": "2h" }))
        .await?;
    let before = lab.wait_lock(&cluster, "held by alice", is_held).await?;
    let first = lab
        .wait_sentinel(&cluster, "admitted", |w| workload_is(w, "Admitted"))
        .await?;

    lab.set_spec(&cluster, json!({ "owner": "bob" })).await?;
    let after = lab
        .wait_lock(&cluster, "held by bob", |fc| {
            is_held(fc) && fc.status.as_ref().unwrap().lock_owner.as_deref() == Some("bob")
        })
        .await?;
    let second = lab
        .wait_sentinel(&cluster, "bob's, admitted", |w| {
            workload_is(w, "Admitted")
                && w.annotations().get("fournos.dev/owner").map(String::as_str) == Some("bob")
        })
        .await?;
    assert_ne!(
        first.uid(),
        second.uid(),
        "a new sentinel for the new owner"
    );
    let (b, a) = (before.status.unwrap(), after.status.unwrap());
    assert!(
        a.owner_set_at >= b.owner_set_at,
        "the clock restarts for bob"
    );
    assert_eq!(
        a.lock_expires_at
            .unwrap()
            .0
            .duration_since(a.owner_set_at.unwrap().0),
        SignedDuration::from_hours(2)
    );
    lab.wait_event(&cluster, "LockOwnerChanged").await?;
    Ok(())
}

/// A sentinel deleted by someone while the lock is wanted is recreated; a sentinel whose
/// cluster does not exist is removed.
#[tokio::test]
async fn deleted_sentinel_is_recreated_and_orphan_removed() -> Result<()> {
    let lab = LockFixture::new("recreate_orphan").await?;
    let cluster = lab.cluster("recreate", true).await?;
    let _lm = LockManager::start(&lab, "workload", &[]).await?;

    lab.set_spec(&cluster, json!({ "owner": "heidi" })).await?;
    lab.wait_lock(&cluster, "held", is_held).await?;
    let first = lab
        .wait_sentinel(&cluster, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    lab.workloads
        .delete(
            &first.name_any(),
            &DeleteParams {
                preconditions: Some(Preconditions {
                    uid: first.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await?;
    let second = lab
        .wait_sentinel(&cluster, "recreated and admitted", |w| {
            w.uid() != first.uid() && workload_is(w, "Admitted")
        })
        .await?;
    assert_eq!(second.name_any(), first.name_any());
    lab.wait_lock(&cluster, "held again", is_held).await?;
    lab.wait_event(&cluster, "SentinelRecreated").await?;

    // A sentinel for a cluster that does not exist.
    let ghost = lab.scope.cluster("ghost");
    let mut orphan = slot_workload(
        &lab.scope.execution_namespace,
        &format!("cluster-lock-{ghost}"),
        &lab.scope.local_queue,
        &ghost,
        SLOTS,
    );
    orphan["metadata"]["labels"] = json!(sentinel_labels(&ghost, &lab.scope.namespace));
    // The same, but with the lock label alone: not this Hearth's, so never touched.
    let foreign_ghost = lab.scope.cluster("foreign-ghost");
    let mut foreign = slot_workload(
        &lab.scope.execution_namespace,
        &format!("cluster-lock-{foreign_ghost}"),
        &lab.scope.local_queue,
        &foreign_ghost,
        SLOTS,
    );
    foreign["metadata"]["labels"] = json!({ CLUSTER_LOCK_LABEL: foreign_ghost });
    apply(&lab.client, &foreign).await?;
    apply(&lab.client, &orphan).await?;
    lab.wait_no_sentinel(&ghost).await?;
    ensure!(
        lab.sentinels::<Workload>(&foreign_ghost).await?.len() == 1,
        "an object without this Hearth's labels was deleted by its sweep"
    );
    // The real lock is untouched.
    let kept = lab.sentinels::<Workload>(&cluster).await?;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].uid(), second.uid());

    // The locked cluster is deleted (offboarding): its sentinel goes with it.
    lab.clusters
        .delete(&cluster, &DeleteParams::default())
        .await?;
    lab.wait_no_sentinel(&cluster).await?;
    Ok(())
}

/// `--sentinel-priority-class`: the sentinel carries `priorityClassRef` and the class's
/// value as `priority` (Kueue v1beta2 requires both), read from the WorkloadPriorityClass.
#[tokio::test]
async fn sentinel_priority_comes_from_its_priority_class() -> Result<()> {
    let lab = LockFixture::new("priority").await?;
    let cluster = lab.cluster("prio", true).await?;
    let _lm = LockManager::start(
        &lab,
        "workload",
        &[("HEARTH_SENTINEL_PRIORITY_CLASS", LOCK_PRIORITY_CLASS)],
    )
    .await?;

    lab.set_spec(&cluster, json!({ "owner": "kim" })).await?;
    lab.wait_lock(&cluster, "held", is_held).await?;
    let sentinel = lab
        .wait_sentinel(&cluster, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    assert_eq!(
        sentinel.spec.priority_class_ref,
        Some(PriorityClassRef::workload_priority_class(
            LOCK_PRIORITY_CLASS
        ))
    );
    assert_eq!(sentinel.spec.priority, Some(i32::try_from(LOCK_PRIORITY)?));
    Ok(())
}

/// With Kueue's WaitForPodsReady on (timeout [`WAIT_FOR_PODS_READY_SECS`]), a bare Workload
/// without ready pods is evicted, and the sentinel, which has no pods either, is not.
#[tokio::test]
async fn sentinel_survives_wait_for_pods_ready() -> Result<()> {
    let lab = LockFixture::new("wait_for_pods_ready").await?;
    let cluster = lab.cluster("wfpr", true).await?;
    let other = lab.cluster("control", true).await?;
    let _lm = LockManager::start(&lab, "workload", &[]).await?;

    lab.set_spec(&cluster, json!({ "owner": "ivan" })).await?;
    lab.wait_lock(&cluster, "held", is_held).await?;
    let sentinel = lab
        .wait_sentinel(&cluster, "admitted", |w| workload_is(w, "Admitted"))
        .await?;

    // The control: the same kind of bare Workload, nobody reports its pods ready.
    lab.job("control", &other, 1).await?;
    let admitted = lab
        .wait_workload("control", "admitted", DEADLINE, |w| {
            workload_is(w, "Admitted")
        })
        .await?;
    let started = Instant::now();
    let evicted = lab
        .wait_workload(
            "control",
            "evicted by the PodsReady timeout",
            Duration::from_secs(WAIT_FOR_PODS_READY_SECS + 60),
            |w| workload_condition(w, "Evicted").is_some_and(|c| c.status == "True"),
        )
        .await?;
    let reason = workload_condition(&evicted, "Evicted")
        .unwrap()
        .reason
        .clone();
    eprintln!(
        "wait_for_pods_ready: control Workload evicted ({reason}) {:?} after it was seen admitted",
        started.elapsed()
    );
    assert_eq!(reason, "PodsReadyTimeout");
    let control_admitted_at = workload_condition(&admitted, "Admitted")
        .unwrap()
        .last_transition_time
        .0;
    let sentinel_admitted_at = workload_condition(&sentinel, "Admitted")
        .unwrap()
        .last_transition_time
        .0;
    assert!(
        sentinel_admitted_at <= control_admitted_at,
        "the sentinel was admitted first"
    );

    // The sentinel has been admitted longer than the timeout and is still admitted.
    let now = lab.workloads.get(&sentinel.name_any()).await?;
    assert_eq!(now.uid(), sentinel.uid());
    assert!(workload_is(&now, "Admitted"), "{:?}", now.status);
    assert!(workload_is(&now, "PodsReady"), "{:?}", now.status);
    assert!(
        workload_condition(&now, "Evicted").is_none_or(|c| c.status != "True"),
        "{:?}",
        now.status
    );
    ensure!(
        Timestamp::now().duration_since(sentinel_admitted_at)
            > SignedDuration::from_secs(WAIT_FOR_PODS_READY_SECS as i64),
        "observed past the timeout"
    );
    let fc = lab.clusters.get(&cluster).await?;
    assert!(is_held(&fc), "{}", lock_state(&fc));
    Ok(())
}

/// The `fournosjob` kind: the FournosJob has exactly the contract's spec and label, and a
/// stand-in for Fournos (what Fournos documents for lockOnly jobs: a Workload requesting
/// all slots, `status.phase` from Kueue's admission) shows `locked` following the phase.
#[tokio::test]
async fn fournosjob_sentinel_follows_its_phase() -> Result<()> {
    let lab = LockFixture::new("fournosjob").await?;
    let cluster = lab.cluster("fj", true).await?;
    let _lm = LockManager::start(&lab, "fournosjob", &[]).await?;
    lab.running_job("busy-job", &cluster, 1).await?;
    let fournos = tokio::spawn(hearth_e2e::fournos::run(
        lab.client.clone(),
        lab.scope.execution_namespace.clone(),
        lab.scope.local_queue.clone(),
        SLOTS,
        hearth_e2e::fournos::PodsReady::OwnWorkloads,
    ));

    lab.set_spec(&cluster, json!({ "owner": "judy" })).await?;
    let job = until("the FournosJob sentinel", DEADLINE, || async {
        let mut jobs = lab.sentinels::<FournosJob>(&cluster).await?;
        Ok(if jobs.len() == 1 {
            Ok(jobs.remove(0))
        } else {
            Err(format!("{} jobs", jobs.len()))
        })
    })
    .await?;
    let raw: Value = serde_json::to_value(&job)?;
    assert_eq!(raw["metadata"]["name"], format!("cluster-lock-{cluster}"));
    assert_eq!(
        raw["metadata"]["labels"],
        json!(sentinel_labels(&cluster, &lab.scope.namespace))
    );
    assert_eq!(
        raw["spec"],
        json!({
            "cluster": cluster,
            "exclusive": true,
            "lockOnly": true,
            "owner": "judy",
            "displayName": format!("Cluster lock: {cluster} (owner: judy)"),
        })
    );
    assert!(
        lab.sentinels::<Workload>(&cluster).await?.is_empty(),
        "no Workload sentinel of lock-manager's"
    );

    // Pending in Fournos (the cluster is busy): not locked, and it says why.
    let wanted = quota_message(&cluster);
    lab.wait_lock(
        &cluster,
        "WaitingForAdmission with the job's message",
        |fc| {
            fc.status.as_ref().and_then(|s| s.locked) == Some(false)
                && locked(fc).is_some_and(|c| {
                    c.reason == "WaitingForAdmission" && c.message.contains(&wanted)
                })
        },
    )
    .await?;

    // The busy job finishes: Fournos's Workload is admitted, the phase says so, locked.
    lab.workloads
        .delete("busy-job", &DeleteParams::default())
        .await?;
    lab.wait_lock(&cluster, "held", is_held).await?;

    // locked follows the phase, whoever sets it.
    fournos.abort();
    let jobs: Api<FournosJob> = Api::namespaced(lab.client.clone(), &lab.scope.execution_namespace);
    let set_phase = |phase: &'static str| {
        let jobs = jobs.clone();
        let name = job.name_any();
        async move {
            jobs.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({ "status": { "phase": phase, "message": format!("test set {phase}") } }),
                ),
            )
            .await
            .map(drop)
        }
    };
    set_phase("Pending").await?;
    lab.wait_lock(&cluster, "not held in phase Pending", |fc| {
        fc.status.as_ref().and_then(|s| s.locked) == Some(false)
            && locked(fc).is_some_and(|c| {
                c.reason == "WaitingForAdmission" && c.message.contains("test set Pending")
            })
    })
    .await?;
    lab.wait_event(&cluster, "LockLost").await?;
    set_phase("Running").await?;
    lab.wait_lock(&cluster, "held in phase Running", is_held)
        .await?;

    // Unlock: the FournosJob is deleted. Its Workload still holds the slots until the
    // garbage collector (the stopped stand-in) deletes it: Releasing until then.
    lab.set_spec(&cluster, json!({ "owner": null })).await?;
    lab.wait_no_sentinel(&cluster).await?;
    lab.wait_lock(&cluster, "Releasing", |fc| {
        locked(fc).is_some_and(|c| c.reason == "Releasing")
    })
    .await?;
    lab.workloads
        .delete(&job.name_any(), &DeleteParams::default())
        .await?;
    lab.wait_lock(&cluster, "Released", |fc| {
        locked(fc).is_some_and(|c| c.reason == "Released")
    })
    .await?;
    Ok(())
}
