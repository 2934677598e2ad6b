//! hearth-lock-manager with `fournosjob` sentinels next to the **real, unmodified Fournos
//! operator** (`$HEARTH_PEERS_DIR/fournos`, default `../shared/peers/fournos`), on the
//! local plane's real apiserver and Kueue. Without that folder every test prints one
//! `skipped:` line and passes, or fails when `HEARTH_E2E_REQUIRE_PEERS` is set (`just test`
//! sets it when the peers folder exists).
//!
//! The plane runs the real kube-controller-manager, whose garbage collector deletes what
//! Fournos leaves to it (a lockOnly job's Workload); what stands in for the kubelet and
//! Tekton is [`hearth_e2e::fournos_real::StandIns`] (see its docs). The plane runs Kueue with
//! WaitForPodsReady on and a short timeout, so a lock Workload that nobody reports ready
//! is evicted while a test watches.
//!
//! At every step a test takes, [`FournosLab::probe`] checks the promise that matters: while
//! the cluster says `locked=true`, a job asking for one slot of it is not admitted.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test fournos_real -- --nocapture
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::names::{CLUSTER_LOCK_LABEL, CLUSTER_SLOT_RESOURCE};
use hearth_e2e::fournos_lab::{job_message, lab_with_cluster, phase, shared};
use hearth_e2e::fournos_real;
use hearth_e2e::invariants::{workload_condition, workload_is};
use hearth_e2e::lab::{DEADLINE, WAIT_FOR_PODS_READY_SECS, is_held, lock_state, locked, reason_is};
use hearth_e2e::process::until;
use hearth_e2e::{ControlPlane, PlaneOptions};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
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

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

/// Lock → FournosJob sentinel (`lockOnly`, `exclusive`) → Fournos's Workload (100 slots,
/// pinned to the cluster) → admitted → `Held`; kept admitted past WaitForPodsReady's
/// timeout; an ordinary FournosJob waits with Fournos's own message; unlock → `Released`
/// once the Workload is gone, and the ordinary job is admitted.
#[tokio::test]
async fn lock_holds_a_cluster_for_real_fournos_jobs() -> Result<()> {
    let (lab, cluster) = lab!("fournos-lock", "real");

    let (job, workload) = lab.lock(&cluster, "alice").await?;
    let raw = serde_json::to_value(&job)?;
    assert_eq!(raw["spec"]["lockOnly"], true);
    assert_eq!(raw["spec"]["exclusive"], true);
    assert_eq!(
        raw["metadata"]["labels"][CLUSTER_LOCK_LABEL],
        cluster.as_str()
    );
    let w = serde_json::to_value(&workload)?;
    let pod = &w["spec"]["podSets"][0]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["resources"]["requests"][CLUSTER_SLOT_RESOURCE],
        "100"
    );
    assert_eq!(pod["nodeSelector"]["fournos.dev/cluster"], cluster.as_str());

    // An ordinary job for the cluster: Pending, in Fournos's words.
    lab.submit_job("carols-job", &cluster).await?;
    let pending = lab
        .wait_job("carols-job", "pending behind the lock", |j| {
            phase(j) == Some("Pending") && job_message(j).contains("exclusively locked")
        })
        .await?;
    eprintln!("ordinary job: {}", job_message(&pending));
    lab.probe(&cluster).await?;

    // WaitForPodsReady: lock-manager reports the lock Workload ready; still held after
    // the timeout.
    let w = lab
        .wait_job_workload(&job, "PodsReady", |w| workload_is(w, "PodsReady"))
        .await?;
    let admitted_at = workload_condition(&w, "Admitted")
        .unwrap()
        .last_transition_time
        .0;
    let past = Duration::from_secs(WAIT_FOR_PODS_READY_SECS + 5);
    until("the WaitForPodsReady timeout to pass", past * 2, || async {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(admitted_at);
        Ok(if age.as_secs() as u64 > past.as_secs() {
            Ok(())
        } else {
            Err(format!("{age:?}"))
        })
    })
    .await?;
    let w = lab.workloads.get(&w.name_any()).await?;
    ensure!(
        workload_is(&w, "Admitted") && !workload_is(&w, "Evicted"),
        "lock Workload evicted: {:?}",
        w.status
    );
    lab.wait_lock(&cluster, "still held", is_held).await?;

    // Unlock: released once the Workload is gone; then the ordinary job is admitted.
    let unlocked = Instant::now();
    lab.set_owner(&cluster, None, None).await?;
    lab.wait_lock(&cluster, "Released", reason_is("Released"))
        .await?;
    ensure!(
        lab.workloads
            .get_opt(&workload.name_any())
            .await?
            .is_none_or(|w| !workload_is(&w, "QuotaReserved")),
        "Released while the lock Workload still holds quota"
    );
    lab.wait_job("carols-job", "admitted after unlock", |j| {
        matches!(phase(j), Some("Admitted" | "Running"))
    })
    .await?;
    eprintln!(
        "ordinary job admitted {:?} after unlock",
        unlocked.elapsed()
    );
    Ok(())
}

/// A lock on a busy cluster waits, saying so, and is held once the running job ends.
#[tokio::test]
async fn lock_on_a_busy_cluster_waits_for_the_running_job() -> Result<()> {
    let (lab, cluster) = lab!("fournos-busy", "busy");
    lab.submit_job("running-job", &cluster).await?;
    lab.wait_job("running-job", "Running", |j| phase(j) == Some("Running"))
        .await?;

    lab.set_owner(&cluster, Some("dave"), None).await?;
    let fc = lab
        .wait_lock(&cluster, "waiting for the running job", |fc| {
            reason_is("WaitingForAdmission")(fc)
                && locked(fc).is_some_and(|c| c.message.contains("exclusive access"))
        })
        .await?;
    eprintln!("busy: {}", lock_state(&fc));

    let ended = Instant::now();
    fournos_real::finish_pipeline_run(&lab.client, &lab.scope.execution_namespace, "running-job")
        .await?;
    lab.wait_job("running-job", "Succeeded", |j| {
        phase(j) == Some("Succeeded")
    })
    .await?;
    lab.wait_lock(&cluster, "held", is_held).await?;
    eprintln!("busy: held {:?} after the job ended", ended.elapsed());
    Ok(())
}

/// The TTL ends the lock on time, and the slots are free once it is released.
#[tokio::test]
async fn ttl_expiry_releases_the_lock() -> Result<()> {
    let (lab, cluster) = lab!("fournos-ttl", "ttl");
    lab.set_owner(&cluster, Some("erin"), Some("1m")).await?;
    let fc = lab.wait_lock(&cluster, "held", is_held).await?;
    let expires = fc
        .status
        .as_ref()
        .and_then(|s| s.lock_expires_at.clone())
        .context("no lockExpiresAt")?;
    let fc = lab
        .wait_lock(&cluster, "Expired", reason_is("Expired"))
        .await?;
    let late = k8s_openapi::jiff::Timestamp::now().duration_since(expires.0);
    eprintln!("ttl: expired {late:?} after lockExpiresAt");
    ensure!(fc.spec.owner.is_none(), "owner cleared");
    lab.no_workload_named(&hearth_api::names::lock_sentinel_name(&cluster))
        .await?;
    lab.wait_lock(&cluster, "still says Expired, nothing releasing", |fc| {
        reason_is("Expired")(fc)
            && locked(fc).is_some_and(|c| !c.message.contains("Still releasing"))
    })
    .await?;
    Ok(())
}

/// Restarts of Fournos and of lock-manager keep the lock held, on the same sentinel.
#[tokio::test]
async fn restarts_keep_the_lock() -> Result<()> {
    let (lab, cluster) = lab!("fournos-restart", "restart");
    let (job, _) = lab.lock(&cluster, "frank").await?;

    lab.fournos.lock().await.restart().await?;
    lab.submit_job("after-restart", &cluster).await?;
    lab.wait_job("after-restart", "pending behind the lock", |j| {
        phase(j) == Some("Pending") && job_message(j).contains("exclusively locked")
    })
    .await?;
    lab.wait_lock(&cluster, "held after Fournos restarted", is_held)
        .await?;

    {
        let guard = lab.lock_manager.lock().await;
        guard.as_ref().unwrap().kill(lab.shared.plane).await?;
    }
    lab.start_lock_manager().await?;
    lab.wait_lock(&cluster, "held after lock-manager restarted", is_held)
        .await?;
    let again = lab.wait_sentinel(&cluster, "the same", |_| true).await?;
    assert_eq!(
        again.uid(),
        job.uid(),
        "the sentinel was kept, not replaced"
    );
    Ok(())
}

/// The Workload under a held lock disappears: not held, said so, repaired.
#[tokio::test]
async fn lost_workload_is_not_a_held_lock_and_is_repaired() -> Result<()> {
    let (lab, cluster) = lab!("fournos-lost", "lost");
    let (job, workload) = lab.lock(&cluster, "grace").await?;

    lab.workloads
        .delete(&workload.name_any(), &DeleteParams::default())
        .await?;
    // Nothing holds the cluster now: a job gets in, and the cluster must not say locked.
    let admitted = lab.try_job(&cluster).await?;
    eprintln!(
        "lost: a one-slot job {} while the Workload was gone",
        if admitted {
            "was admitted"
        } else {
            "was not admitted"
        }
    );
    lab.wait_event(&cluster, "LockWorkloadLost").await?;
    ensure!(
        lab.metric("hearth_lock_manager_lock_workloads_lost_total")
            .await?
            >= 1.0
    );
    let (new_job, _) = {
        lab.wait_lock(&cluster, "held again", is_held).await?;
        let j = lab
            .wait_sentinel(&cluster, "a new sentinel", |j| {
                j.uid() != job.uid() && phase(j) == Some("Admitted")
            })
            .await?;
        let w = lab
            .wait_job_workload(&j, "admitted", |w| workload_is(w, "Admitted"))
            .await?;
        (j, w)
    };
    assert_ne!(new_job.uid(), job.uid());
    let fc = lab.clusters.get(&cluster).await?;
    let c = locked(&fc).unwrap();
    eprintln!("lost: repaired; condition {}: {}", c.reason, c.message);

    // Evicted (here: deactivated, which Kueue evicts at once) while the job still says
    // Admitted: not held either, and repaired with a Workload of its own (the evicted one
    // is kept until the garbage collector has deleted it, so Fournos cannot adopt it).
    let evicted = lab
        .wait_job_workload(&new_job, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    lab.workloads
        .patch(
            &evicted.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "active": false } })),
        )
        .await?;
    let third = lab
        .wait_sentinel(&cluster, "a third sentinel", |j| {
            j.uid() != new_job.uid() && phase(j) == Some("Admitted")
        })
        .await?;
    lab.wait_lock(&cluster, "held again after the eviction", is_held)
        .await?;
    let w = lab
        .wait_job_workload(&third, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    assert_ne!(w.uid(), evicted.uid(), "the evicted Workload was adopted");
    ensure!(
        lab.metric("hearth_lock_manager_lock_workloads_lost_total")
            .await?
            >= 2.0
    );
    Ok(())
}

/// A sentinel Fournos does not pick up (Fournos is down) says so after the grace, and is
/// held once Fournos runs.
#[tokio::test]
async fn sentinel_fournos_never_picks_up_says_so() -> Result<()> {
    let (lab, cluster) = lab!("fournos-pickup", "pickup");
    lab.fournos.lock().await.stop().await;
    lab.set_owner(&cluster, Some("kim"), None).await?;
    let fc = until("SentinelNotPickedUp", DEADLINE, || async {
        let fc = lab.clusters.get(&cluster).await?;
        Ok(if reason_is("SentinelNotPickedUp")(&fc) {
            Ok(fc)
        } else {
            Err(lock_state(&fc))
        })
    })
    .await?;
    eprintln!("pickup: {}", lock_state(&fc));
    lab.fournos.lock().await.restart().await?;
    lab.wait_lock(&cluster, "held once Fournos runs", is_held)
        .await?;
    Ok(())
}

/// Unlock while Fournos is down: Releasing (its finalizer holds the job, its Workload the
/// slots) until Fournos is back and the Workload is gone.
#[tokio::test]
async fn unlock_while_fournos_is_down_is_releasing_until_it_is_free() -> Result<()> {
    let (lab, cluster) = lab!("fournos-down", "down");
    let (_, workload) = lab.lock(&cluster, "heidi").await?;

    lab.fournos.lock().await.stop().await;
    lab.set_owner(&cluster, None, None).await?;
    let fc = lab
        .wait_lock(&cluster, "Releasing", |fc| {
            reason_is("Releasing")(fc)
                && locked(fc).is_some_and(|c| c.message.contains("finalizer"))
        })
        .await?;
    eprintln!("down: {}", lock_state(&fc));
    ensure!(
        lab.workloads.get_opt(&workload.name_any()).await?.is_some(),
        "the Workload still holds"
    );

    lab.fournos.lock().await.restart().await?;
    lab.wait_lock(&cluster, "Released", reason_is("Released"))
        .await?;
    ensure!(
        lab.workloads
            .get_opt(&workload.name_any())
            .await?
            .is_none_or(|w| !workload_is(&w, "QuotaReserved")),
        "Released while the lock Workload still holds quota"
    );
    Ok(())
}

/// Owner change: the new owner's sentinel never adopts the old owner's Workload.
#[tokio::test]
async fn owner_change_gets_a_new_workload() -> Result<()> {
    let (lab, cluster) = lab!("fournos-owner", "owner");
    let (alice_job, alice_workload) = lab.lock(&cluster, "alice").await?;

    lab.set_owner(&cluster, Some("bob"), None).await?;
    lab.wait_lock(&cluster, "held for bob", |fc| {
        is_held(fc) && fc.status.as_ref().and_then(|s| s.lock_owner.as_deref()) == Some("bob")
    })
    .await?;
    let bob_job = lab
        .wait_sentinel(&cluster, "bob's, Admitted", |j| {
            j.spec.owner.as_deref() == Some("bob") && phase(j) == Some("Admitted")
        })
        .await?;
    assert_ne!(bob_job.uid(), alice_job.uid());
    let bob_workload = lab
        .wait_job_workload(&bob_job, "admitted", |w| workload_is(w, "Admitted"))
        .await?;
    assert_ne!(
        bob_workload.uid(),
        alice_workload.uid(),
        "alice's Workload was adopted"
    );
    Ok(())
}

/// A 63-character cluster name (the longest a label value takes) is locked, through a
/// sentinel name cut to fit with a hash; the label still names the whole cluster.
#[tokio::test]
async fn longest_cluster_name_can_be_locked() -> Result<()> {
    let (lab, cluster) = lab!("fournos-long", &format!("{}-", "l".repeat(63)));
    ensure!(cluster.len() == 63, "{cluster}");
    let (job, _) = lab.lock(&cluster, "ivan").await?;
    ensure!(job.name_any().len() <= 63, "{}", job.name_any());
    assert_eq!(
        job.name_any(),
        hearth_api::names::lock_sentinel_name(&cluster)
    );
    Ok(())
}

/// A cluster whose slots differ from what Fournos requests for a lock is never called
/// held, and says what to set.
#[tokio::test]
async fn slots_that_differ_from_fournos_are_flagged() -> Result<()> {
    let (lab, cluster) = lab!("fournos-slots", "slots");
    lab.publish_slots(&cluster, 120).await?;
    lab.set_owner(&cluster, Some("judy"), None).await?;
    let fc = lab
        .wait_lock(&cluster, "SlotsMismatch", reason_is("SlotsMismatch"))
        .await?;
    ensure!(
        locked(&fc)
            .unwrap()
            .message
            .contains("HEARTH_CLUSTER_SLOTS=100")
    );
    Ok(())
}

/// `just up --fournos`: the plane's own scope with the real Fournos and lock-manager's
/// `fournosjob` sentinels. An onboarded target is locked through Fournos's Workload.
#[tokio::test]
async fn plane_with_fournos_is_the_production_shape() -> Result<()> {
    if fournos_real::source().is_err() {
        return shared().await.map(drop);
    }
    let lock_manager = hearth_e2e::plane::hearth_binary("hearth-lock-manager")?;
    let plane = ControlPlane::start(PlaneOptions {
        fournos: true,
        hearth_bin_dir: lock_manager.parent().map(std::path::Path::to_path_buf),
        ..PlaneOptions::from_env()?
    })
    .await?;
    plane.onboard_fleet("psap-secrets").await?;
    let client = plane.management_client().await?;
    let clusters: Api<FournosCluster> = Api::namespaced(client.clone(), "hearth");
    let jobs: Api<FournosJob> = Api::namespaced(client.clone(), "psap-automation");
    until("target-a onboarded and published", DEADLINE, || async {
        Ok(match clusters.get_opt("target-a").await? {
            Some(fc) if fc.status.as_ref().and_then(|s| s.kueue.as_ref()).is_some() => Ok(()),
            other => Err(format!("{:?}", other.map(|fc| fc.status))),
        })
    })
    .await?;
    clusters
        .patch(
            "target-a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": "alice" } })),
        )
        .await?;
    until("target-a held", DEADLINE, || async {
        let fc = clusters.get("target-a").await?;
        Ok(if is_held(&fc) {
            Ok(())
        } else {
            Err(lock_state(&fc))
        })
    })
    .await?;
    let job = jobs.get("cluster-lock-target-a").await?;
    assert_eq!(
        phase(&job),
        Some("Admitted"),
        "Fournos admitted the sentinel"
    );
    plane.stop().await?;
    Ok(())
}
