//! A test binary's own plane, and [`LockLab`]: one lock test's scope on it with the
//! helpers every lock test needs (clusters queued as kueue-sync makes them, the owner set
//! as a person does, waits on clusters, sentinels, Workloads and Events).
//!
//! Shared by the lock-manager tests with bare Workload sentinels and by the tests next to
//! the real Fournos; with [`LockLab::probing`] every look at a cluster that says
//! `locked=true` also tries to get a one-slot job admitted there, which must fail.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::{CLUSTER_LOCK_LABEL, condition_types::LOCKED};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::error::tail;
use crate::fixtures::{publish_kueue_status, queued_cluster};
use crate::hearth::{self, Controller, Running};
use crate::invariants::{cluster_condition, workload_condition, workload_is};
use crate::objects::slot_workload;
use crate::process::until;
use crate::resources::{apply, apply_status};
use crate::world::World;
use crate::{ControlPlane, PlaneOptions, WaitForPodsReady};

/// Deadline of every lab wait that is not about a known duration.
pub const DEADLINE: Duration = Duration::from_secs(90);
/// `fournos/cluster-slot` per cluster: what kueue-sync publishes by default and what a
/// lock requests.
pub const SLOTS: i64 = 100;
/// Kueue's WaitForPodsReady timeout on a lock test binary's plane: short, so that a
/// sentinel nobody reports ready would be evicted while a test watches.
pub const WAIT_FOR_PODS_READY_SECS: u64 = 20;
/// How long a test waits for lock-manager to stop saying `locked=true` after a probe job
/// got into the cluster, before it fails. A deadline only, so that a test never waits
/// forever: what lock-manager actually takes (its watches bringing it what Kueue did, then
/// one reconcile) is measured by `hearth-bench --lock-reaction`
/// (`bench-results/2026-11-25/LOCK-REACTION.md`), not asserted by a test's patience.
pub const REACTION_DEADLINE: Duration = Duration::from_secs(5);

/// The plane of this test binary alone, started once with `adjust` applied to the
/// environment's options (Hearth's controllers are started by each test, in its scope).
pub async fn own_plane(
    cell: &'static OnceCell<std::result::Result<ControlPlane, String>>,
    adjust: impl FnOnce(PlaneOptions) -> Result<PlaneOptions>,
) -> Result<&'static ControlPlane> {
    let plane = cell
        .get_or_init(|| async {
            let options = PlaneOptions::from_env().map_err(|e| e.to_string())?;
            let options = adjust(PlaneOptions {
                hearth_bin_dir: None,
                ..options
            })
            .map_err(|e| format!("{e:#}"))?;
            ControlPlane::start(options)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
    plane
        .as_ref()
        .map_err(|e| anyhow!("the plane failed to start: {e}"))
}

/// For [`own_plane`]: the environment's options with kube-controller-manager.
pub fn with_controller_manager(options: PlaneOptions) -> Result<PlaneOptions> {
    Ok(PlaneOptions {
        controller_manager: true,
        ..options
    })
}

/// The plane of a lock test binary: Kueue with WaitForPodsReady on, timeout
/// [`WAIT_FOR_PODS_READY_SECS`], and kube-controller-manager, whose garbage collector
/// deletes a lockOnly job's Workload once the job is gone (the real Fournos relies on
/// it, and [`crate::fournos`]'s stand-in does as Fournos does).
pub async fn lock_plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    own_plane(&PLANE, |options| {
        Ok(PlaneOptions {
            wait_for_pods_ready: WaitForPodsReady::Timeout(WAIT_FOR_PODS_READY_SECS),
            controller_manager: true,
            ..options
        })
    })
    .await
}

/// A cluster's `Locked` condition.
pub fn locked(fc: &FournosCluster) -> Option<&Condition> {
    cluster_condition(fc, LOCKED)
}

/// Whether the cluster says `status.locked=true`.
pub fn says_locked(fc: &FournosCluster) -> bool {
    fc.status.as_ref().and_then(|s| s.locked) == Some(true)
}

/// `locked=true` and `Locked=True/Held`.
pub fn is_held(fc: &FournosCluster) -> bool {
    says_locked(fc) && locked(fc).is_some_and(|c| c.status == "True" && c.reason == "Held")
}

/// Not locked, with `Locked` of `reason`.
pub fn reason_is(reason: &'static str) -> impl Fn(&FournosCluster) -> bool {
    move |fc| !says_locked(fc) && locked(fc).is_some_and(|c| c.reason == reason)
}

/// Short description of a cluster's lock status for failure messages.
pub fn lock_state(fc: &FournosCluster) -> String {
    let s = fc.status.clone().unwrap_or_default();
    format!(
        "owner={:?} locked={:?} job={:?} lockOwner={:?} Locked={:?}",
        fc.spec.owner,
        s.locked,
        s.lock_job_name,
        s.lock_owner,
        locked(fc).map(|c| format!("{}/{}: {}", c.status, c.reason, c.message))
    )
}

/// The kind of sentinel lock-manager makes (`HEARTH_SENTINEL`): a bare Kueue Workload, or
/// a Fournos `lockOnly` FournosJob (the chart's default) that the real Fournos turns into
/// the Workload that holds the slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Workload,
    FournosJob,
}

impl Mode {
    /// Its `HEARTH_SENTINEL` value.
    pub fn sentinel(self) -> &'static str {
        match self {
            Mode::Workload => "workload",
            Mode::FournosJob => "fournosjob",
        }
    }
}

/// hearth-lock-manager with `mode`'s sentinels in `lab`'s scope, as the chart's
/// ServiceAccount.
pub async fn start_lock_manager(lab: &LockLab, mode: Mode) -> Result<Running> {
    let env = [
        ("HEARTH_SENTINEL", mode.sentinel()),
        ("HEARTH_RECONCILE_INTERVAL_SEC", "600"),
        ("HEARTH_LOG_LEVEL", "info"),
    ];
    hearth::start(lab.plane, &lab.scope, Controller::LockManager, "0", &env)
        .await
        .context("starting hearth-lock-manager (cargo build --workspace --bins first)")
}

/// One lock test's scope and clients: a [`World`] (its fields through `Deref`) with the
/// scope's Events and the clusters queued so far.
pub struct LockLab {
    world: World<'static>,
    pub events: Api<Event>,
    /// Clusters whose flavor is in the scope's ClusterQueue (shared with a lab whose
    /// ClusterQueue is the same, [`sharing_queue`](Self::sharing_queue)).
    queued: Arc<Mutex<Vec<String>>>,
    /// Whether each [`wait_lock`](Self::wait_lock) also [`probe`](Self::probe)s.
    probing: bool,
    probes: AtomicUsize,
    /// Logs of what runs beside lock-manager (Fournos), ended by a failed wait
    /// ([`with_logs`](Self::with_logs)).
    logs: Mutex<Vec<PathBuf>>,
}

impl std::ops::Deref for LockLab {
    type Target = World<'static>;

    fn deref(&self) -> &World<'static> {
        &self.world
    }
}

impl LockLab {
    /// A new scope on `plane` for `test`.
    pub async fn new(plane: &'static ControlPlane, test: &str) -> Result<LockLab> {
        Self::with_scope(plane, plane.isolated(test).await?).await
    }

    /// A lab in `scope`, made (and perhaps changed) by the test: e.g. a second Hearth
    /// whose execution namespace is another lab's.
    pub async fn with_scope(
        plane: &'static ControlPlane,
        scope: crate::Isolated,
    ) -> Result<LockLab> {
        let mut world = World::new(plane, scope).await?;
        world.deadline = DEADLINE;
        Ok(LockLab {
            events: Api::namespaced(world.client.clone(), &world.scope.namespace),
            world,
            queued: Default::default(),
            probing: false,
            probes: AtomicUsize::new(0),
            logs: Default::default(),
        })
    }

    /// A lab for a second Hearth in `scope` (its own namespace) whose execution namespace,
    /// LocalQueue and ClusterQueue are this lab's: the queue entries either lab writes name
    /// the clusters of both.
    pub async fn sharing_queue(&self, mut scope: crate::Isolated) -> Result<LockLab> {
        scope.scope.execution_namespace = self.scope.execution_namespace.clone();
        scope.scope.local_queue = self.scope.local_queue.clone();
        scope.scope.cluster_queue = self.scope.cluster_queue.clone();
        let mut lab = Self::with_scope(self.plane, scope).await?;
        lab.queued = self.queued.clone();
        lab.probing = self.probing;
        Ok(lab)
    }

    /// From now on, every [`wait_lock`](Self::wait_lock) ends with a
    /// [`probe`](Self::probe): the promise that `locked=true` keeps jobs out, checked at
    /// every step a test takes.
    pub fn probing(mut self) -> LockLab {
        self.probing = true;
        self
    }

    /// FournosCluster `name` with its flavor and queue entry as kueue-sync makes them.
    pub async fn queue_cluster(&self, name: &str) -> Result<()> {
        let entries: Vec<(String, i64)> = {
            let mut queued = self.queued.lock().expect("poisoned");
            queued.push(name.to_owned());
            queued.iter().map(|c| (c.clone(), SLOTS)).collect()
        };
        let entries: Vec<(&str, i64)> = entries.iter().map(|(c, s)| (c.as_str(), *s)).collect();
        Ok(queued_cluster(&self.client, &self.scope, name, &entries).await?)
    }

    /// A cluster named from `base`, queued, with [`SLOTS`] in `status.kueue`: as
    /// kueue-sync leaves it.
    pub async fn synced_cluster(&self, base: &str) -> Result<String> {
        let name = self.scope.cluster(base);
        self.queue_cluster(&name).await?;
        self.publish_slots(&name, SLOTS).await?;
        Ok(name)
    }

    /// `status.kueue` under kueue-sync's field manager, with `slots` as the cluster's.
    pub async fn publish_slots(&self, name: &str, slots: i64) -> Result<()> {
        Ok(publish_kueue_status(&self.client, &self.scope, name, SLOTS, slots).await?)
    }

    /// What a person does: `kubectl patch fc <name> --type merge -p '{"spec":{…}}'`.
    pub async fn set_spec(&self, name: &str, spec: Value) -> Result<()> {
        self.clusters
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .with_context(|| format!("patching spec of {name}"))?;
        Ok(())
    }

    /// From now on, an error of [`with_logs`](Self::with_logs) (every failed wait) ends
    /// with the last lines of the log at `path`.
    pub fn show_log(&self, path: &Path) {
        self.logs.lock().expect("poisoned").push(path.to_owned());
    }

    /// `e` with the last lines of each log given to [`show_log`](Self::show_log).
    pub fn with_logs(&self, e: anyhow::Error) -> anyhow::Error {
        let logs = self.logs.lock().expect("poisoned");
        logs.iter().fold(e, |e, log| {
            e.context(format!("{} ends with:\n{}", log.display(), tail(log, 40)))
        })
    }

    /// [`World::wait_cluster`] until `done` accepts cluster `name` (a time-out says its
    /// lock state, and ends with the logs given to [`show_log`](Self::show_log)), then
    /// probes if [`probing`](Self::probing).
    pub async fn wait_lock(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&FournosCluster) -> bool,
    ) -> Result<FournosCluster> {
        let fc = self
            .world
            .wait_cluster(name, what, |fc| {
                if done(fc) {
                    Ok(())
                } else {
                    Err(lock_state(fc))
                }
            })
            .await
            .map_err(|e| self.with_logs(e))?;
        if self.probing {
            self.probe(name).await?;
        }
        Ok(fc)
    }

    /// If the cluster says `locked=true`, a one-slot job for it must not be admitted.
    pub async fn probe(&self, cluster: &str) -> Result<()> {
        let before = self.clusters.get(cluster).await?;
        if !says_locked(&before) {
            return Ok(());
        }
        self.try_job(cluster).await.map(drop)
    }

    /// Submits a one-slot job for `cluster` and deletes it once Kueue has decided; fails
    /// if it was admitted while the cluster said `locked=true`. Whether it was admitted.
    pub async fn try_job(&self, cluster: &str) -> Result<bool> {
        let name = format!("probe-{}", self.probes.fetch_add(1, Ordering::Relaxed));
        self.job(&name, cluster, 1).await?;
        let decided = until(&format!("Kueue deciding on {name}"), DEADLINE, || async {
            let w = self.workloads.get(&name).await?;
            Ok(match workload_condition(&w, "QuotaReserved") {
                Some(_) => Ok(w),
                None => Err("no QuotaReserved yet".to_owned()),
            })
        })
        .await?;
        self.workloads
            .delete(&name, &DeleteParams::default())
            .await?;
        let admitted = workload_is(&decided, "QuotaReserved");
        if admitted {
            // The job got in, so the sentinel no longer holds every slot: lock-manager must
            // say so. It learns what Kueue did through its watches, so it trails Kueue by
            // one watch delivery and a reconcile (measured in the bench); the deadline
            // only ends the wait.
            until(
                &format!("{cluster} to stop saying locked=true once a job got in"),
                REACTION_DEADLINE,
                || async {
                    let fc = self.clusters.get(cluster).await?;
                    Ok(if says_locked(&fc) {
                        Err(lock_state(&fc))
                    } else {
                        Ok(())
                    })
                },
            )
            .await
            .with_context(|| {
                format!("{cluster}: a one-slot job was admitted while it said locked=true")
            })?;
        }
        Ok(admitted)
    }

    /// A job's bare Workload asking for `slots` of `cluster`'s slots.
    pub async fn job(&self, name: &str, cluster: &str, slots: i64) -> Result<()> {
        let w = slot_workload(
            &self.scope.execution_namespace,
            name,
            &self.scope.local_queue,
            cluster,
            slots,
        );
        apply(&self.client, &w).await?;
        Ok(())
    }

    /// A job that runs: admitted, and its pods ready (so WaitForPodsReady leaves it be).
    pub async fn running_job(&self, name: &str, cluster: &str, slots: i64) -> Result<()> {
        self.job(name, cluster, slots).await?;
        self.wait_workload(name, "admitted", DEADLINE, |w| workload_is(w, "Admitted"))
            .await?;
        self.mark_pods_ready(name).await
    }

    /// `PodsReady=True` on Workload `name`, as a job's running pods would make Kueue say.
    pub async fn mark_pods_ready(&self, name: &str) -> Result<()> {
        let patch = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "status": { "conditions": [{
                "type": "PodsReady", "status": "True", "reason": "Started",
                "message": "pods of the test job run",
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            }]},
        });
        apply_status(&self.workloads, name, "hearth-e2e-job", &patch)
            .await
            .with_context(|| format!("marking {name} PodsReady"))?;
        Ok(())
    }

    /// A client for a person who may submit work (FournosJobs and Workloads: create,
    /// read, change, delete) in the execution namespace and nothing else: what a Fournos
    /// user has. The attacks on locks run with exactly these rights, never as admin.
    pub async fn fournos_user(&self) -> Result<kube::Client> {
        let rules = json!([
            {"apiGroups": ["fournos.dev"], "resources": ["fournosjobs"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        ]);
        crate::hearth::client_with_rules(
            self.plane,
            &self.scope.execution_namespace,
            "fournos-user",
            rules,
        )
        .await
    }

    /// Polls until Workload `name` exists and satisfies `done` (one Fournos makes appears
    /// a moment after its job).
    pub async fn wait_workload(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Workload) -> bool,
    ) -> Result<Workload> {
        until(&format!("Workload {name}: {what}"), timeout, || async {
            Ok(match self.workloads.get_opt(name).await? {
                Some(w) if done(&w) => Ok(w),
                Some(w) => Err(format!("{:?}", w.status.as_ref().map(|s| &s.conditions))),
                None => Err("absent".to_owned()),
            })
        })
        .await
        .map_err(|e| self.with_logs(e))
    }

    /// The one sentinel of `cluster` of kind `K` (by the contract's label), once it
    /// satisfies `done`; `describe` says what a time-out last saw of it.
    pub async fn wait_one_sentinel<K>(
        &self,
        cluster: &str,
        what: &str,
        done: impl Fn(&K) -> bool,
        describe: impl Fn(&K) -> String,
    ) -> Result<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        until(
            &format!("sentinel of {cluster}: {what}"),
            DEADLINE,
            || async {
                let mut found = self.sentinels::<K>(cluster).await?;
                Ok(match found.len() {
                    1 if done(&found[0]) => Ok(found.remove(0)),
                    1 => Err(describe(&found[0])),
                    n => Err(format!("{n} sentinels")),
                })
            },
        )
        .await
    }

    /// Sentinels of `cluster` (by the contract's label), of either kind.
    pub async fn sentinels<K>(&self, cluster: &str) -> Result<Vec<K>>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.scope.execution_namespace);
        let selector = format!("{CLUSTER_LOCK_LABEL}={cluster}");
        Ok(api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items)
    }

    /// UIDs of the sentinels of `cluster` of `mode`'s kind.
    pub async fn sentinel_uids(&self, mode: Mode, cluster: &str) -> Result<Vec<String>> {
        fn uids<K: Resource>(objects: Vec<K>) -> Vec<String> {
            objects
                .iter()
                .filter_map(|o| o.meta().uid.clone())
                .collect()
        }
        Ok(match mode {
            Mode::Workload => uids(self.sentinels::<Workload>(cluster).await?),
            Mode::FournosJob => uids(self.sentinels::<FournosJob>(cluster).await?),
        })
    }

    /// Events with `reason` about cluster `cluster`.
    pub async fn events_of(&self, cluster: &str, reason: &str) -> Result<Vec<Event>> {
        Ok(self
            .events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
                    && e.reason.as_deref() == Some(reason)
            })
            .collect())
    }

    /// The first Event with `reason` about `cluster`, once there is one.
    pub async fn wait_event(&self, cluster: &str, reason: &str) -> Result<Event> {
        until(
            &format!("Event {reason} on {cluster}"),
            DEADLINE,
            || async {
                let mut found = self.events_of(cluster, reason).await?;
                Ok(if found.is_empty() {
                    Err("none".into())
                } else {
                    Ok(found.remove(0))
                })
            },
        )
        .await
    }
}
