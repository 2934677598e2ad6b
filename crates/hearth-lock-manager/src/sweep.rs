//! The derived sweep: sentinels whose FournosCluster no longer exists are deleted when
//! more than their labels say they are this lock-manager's: their UID is one it created,
//! or one it saw a cluster's `status.lockJobUID` record while it ran ([`crate::context::Recorded`]), or
//! their spec is a sentinel's for that same missing cluster (what lock-manager builds;
//! this keeps the promise that a cluster deleted while lock-manager was down strands
//! nothing). Labels alone prove nothing: anyone who may patch an object in the execution
//! namespace may label it for a cluster that does not exist, and a job whose spec was
//! not made for that missing cluster is left alone, counted
//! (`hearth_lock_manager_orphan_sentinels_unproven`) for a person to look at. It also counts held and waiting locks for the gauges.
//! Runs on every sentinel or cluster event and on the resync interval, from the watch
//! caches only.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hearth_api::FournosCluster;
use hearth_runtime::kit::Triggers;
use kube::api::{DeleteParams, Preconditions};
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::sentinel::{Sentinel, cluster_of};
use hearth_runtime::kit::answer::is_gone_or_replaced;

/// A sentinel to delete: no FournosCluster of its label's name exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    pub name: String,
    /// Deletion is preconditioned on it, so a newer namesake is never hit.
    pub uid: Option<String>,
    pub cluster: String,
    /// Its spec is a sentinel's for that same missing cluster, as lock-manager builds it.
    pub shaped: bool,
}

/// Sentinels (not already being deleted) whose cluster is not in `clusters`.
pub fn orphans<K: Sentinel>(
    clusters: &HashSet<String>,
    sentinels: &[Arc<DeserializeGuard<K>>],
) -> Vec<Orphan> {
    let mut found: Vec<Orphan> = sentinels
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter_map(|s| {
            let cluster = cluster_of(s.as_ref()).unwrap_or_default();
            (!clusters.contains(cluster)).then(|| Orphan {
                name: s.name_any(),
                uid: s.uid(),
                cluster: cluster.to_owned(),
                shaped: s
                    .0
                    .as_ref()
                    .is_ok_and(|s| !cluster.is_empty() && s.shape_problem(cluster, None).is_none()),
            })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// `(held, waiting)`: clusters whose lock is held, and clusters with an owner whose
/// lock is not held (yet).
pub fn lock_counts(clusters: &[Arc<DeserializeGuard<FournosCluster>>]) -> (i64, i64) {
    let mut held = 0;
    let mut waiting = 0;
    for cluster in clusters.iter().filter_map(|c| c.0.as_ref().ok()) {
        let locked = cluster.status.as_ref().and_then(|s| s.locked) == Some(true);
        let wanted = cluster
            .spec
            .owner
            .as_deref()
            .is_some_and(|o| !o.trim().is_empty());
        if locked {
            held += 1;
        } else if wanted {
            waiting += 1;
        }
    }
    (held, waiting)
}

/// Runs until shutdown: waits for both caches, then sweeps on every change, on
/// gaining the Lease and every resync interval.
pub async fn run<K: Sentinel>(ctx: Arc<Context<K>>) {
    let shutdown = ctx.rt.shutdown();
    let ready =
        async { ctx.clusters.synced().await.is_ok() && ctx.sentinels.synced().await.is_ok() };
    let ready = tokio::select! {
        ready = ready => ready,
        () = shutdown.cancelled() => return,
    };
    if !ready {
        return;
    }
    Triggers {
        changes: ctx.changes.subscribe(),
        leader: ctx.rt.leader(),
        resync: ctx.rt.reconcile_interval(),
        debounce: Duration::ZERO,
        shutdown,
    }
    .run(|| async {
        sweep_once(&ctx).await;
        Ok::<_, Infallible>(())
    })
    .await;
}

async fn sweep_once<K: Sentinel>(ctx: &Context<K>) {
    let state = ctx.clusters.state();
    let (held, waiting) = lock_counts(&state);
    ctx.writer.metrics.held.set(held);
    ctx.writer.metrics.waiting.set(waiting);
    if !ctx.rt.is_leader() {
        return;
    }
    let names: HashSet<String> = state.iter().map(|c| c.name_any()).collect();
    let sentinels = ctx.sentinels.state();
    let recorded = ctx.recorded.update(&state, &sentinels);
    let (proven, unproven): (Vec<Orphan>, Vec<Orphan>) =
        orphans(&names, &sentinels).into_iter().partition(|o| {
            o.uid
                .as_deref()
                .is_some_and(|u| o.shaped || recorded.contains(u) || ctx.writer.created.contains(u))
        });
    ctx.writer
        .metrics
        .orphans_unproven
        .set(i64::try_from(unproven.len()).unwrap_or(i64::MAX));
    for orphan in proven {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: orphan.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match ctx.writer.sentinels.delete(&orphan.name, &params).await {
            Ok(_) => {
                ctx.writer.metrics.orphans_deleted.inc();
                ctx.writer.metrics.wrote("sentinel_delete");
                tracing::info!(
                    sentinel = %orphan.name,
                    cluster = %orphan.cluster,
                    "deleted a sentinel whose FournosCluster no longer exists"
                );
            }
            // Gone already, or replaced by a newer namesake: nothing to do.
            Err(e) if is_gone_or_replaced(&e) => {}
            Err(error) => {
                ctx.writer.metrics.error("SentinelDeleteFailed");
                tracing::warn!(%error, sentinel = %orphan.name, "cannot delete an orphaned sentinel");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Recorded;
    use hearth_api::kueue::Workload;
    use serde_json::json;

    fn sentinel(
        name: &str,
        cluster: Option<&str>,
        deleting: bool,
    ) -> Arc<DeserializeGuard<Workload>> {
        let mut meta = json!({ "name": name, "uid": format!("uid-{name}") });
        if let Some(c) = cluster {
            meta["labels"] = json!({ "fournos.dev/cluster-lock": c });
        }
        if deleting {
            meta["deletionTimestamp"] = json!("2026-11-21T00:00:00Z");
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": meta, "spec": { "podSets": [] },
            }))
            .unwrap(),
        )
    }

    fn cluster(
        name: &str,
        owner: Option<&str>,
        locked: Option<bool>,
    ) -> Arc<DeserializeGuard<FournosCluster>> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
                "metadata": { "name": name },
                "spec": { "kubeconfigSecret": "k", "owner": owner },
                "status": { "locked": locked },
            }))
            .unwrap(),
        )
    }

    #[test]
    fn sentinels_of_missing_clusters_are_orphans() {
        let clusters: HashSet<String> = ["a".to_owned()].into();
        let sentinels = [
            sentinel("cluster-lock-a", Some("a"), false),
            sentinel("cluster-lock-gone", Some("gone"), false),
            sentinel("cluster-lock-going", Some("going"), true),
            sentinel("unlabeled-value", Some(""), false),
        ];
        assert_eq!(
            orphans(&clusters, &sentinels),
            vec![
                Orphan {
                    name: "cluster-lock-gone".into(),
                    uid: Some("uid-cluster-lock-gone".into()),
                    cluster: "gone".into(),
                    shaped: false,
                },
                Orphan {
                    name: "unlabeled-value".into(),
                    uid: Some("uid-unlabeled-value".into()),
                    cluster: String::new(),
                    shaped: false,
                },
            ]
        );
    }

    /// A sentinel lock-manager built for the missing cluster is shaped (deletable after a
    /// restart forgot its UID); the same object labelled for another missing cluster is not.
    #[test]
    fn only_a_sentinel_built_for_its_own_missing_cluster_is_shaped() {
        use crate::sentinel::SentinelSpec;
        let built = |cluster: &str, label: &str| {
            let mut w = Workload::build(&SentinelSpec {
                name: &hearth_api::names::lock_sentinel_name(cluster),
                namespace: "exec",
                cluster,
                cluster_namespace: "hearth",
                owner: "alice",
                slots: 100,
                local_queue: "fournos-queue",
                priority: None,
            });
            w.metadata.uid = Some(format!("uid-{label}"));
            w.labels_mut()
                .insert(hearth_api::names::CLUSTER_LOCK_LABEL.into(), label.into());
            Arc::new(DeserializeGuard(Ok(w)))
        };
        let found = orphans(
            &HashSet::new(),
            &[built("gone", "gone"), built("gone", "other")],
        );
        let shaped: Vec<(&str, bool)> = found
            .iter()
            .map(|o| (o.cluster.as_str(), o.shaped))
            .collect();
        assert_eq!(shaped, vec![("gone", true), ("other", false)]);
    }

    /// Only what a cluster's status recorded is remembered, and only while a sentinel of
    /// that UID exists.
    #[test]
    fn recorded_uids_follow_the_statuses_and_the_live_sentinels() {
        let with_uid = |name: &str, uid: &str| -> Arc<DeserializeGuard<FournosCluster>> {
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
                    "metadata": { "name": name },
                    "spec": { "kubeconfigSecret": "k" },
                    "status": { "lockJobUID": uid },
                }))
                .unwrap(),
            )
        };
        let recorded = Recorded::default();
        let a = sentinel("cluster-lock-a", Some("a"), false);
        let forged = sentinel("cluster-lock-b", Some("b"), false);
        let seen = recorded.update(
            &[with_uid("a", "uid-cluster-lock-a")],
            &[a.clone(), forged.clone()],
        );
        assert_eq!(seen, ["uid-cluster-lock-a".to_owned()].into());
        // The cluster is gone: its sentinel's UID is still known, the forgery's never was.
        let seen = recorded.update(&[], &[a, forged.clone()]);
        assert_eq!(seen, ["uid-cluster-lock-a".to_owned()].into());
        // The sentinel is gone: forgotten.
        assert!(recorded.update(&[], &[forged]).is_empty());
    }

    #[test]
    fn undecodable_cluster_still_protects_its_sentinel() {
        let broken: Arc<DeserializeGuard<FournosCluster>> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
                "metadata": { "name": "a" }, "spec": { "owner": 7 },
            }))
            .unwrap(),
        );
        assert!(broken.0.is_err());
        let names: HashSet<String> = [broken.name_any()].into();
        assert_eq!(
            orphans(&names, &[sentinel("cluster-lock-a", Some("a"), false)]),
            vec![]
        );
    }

    #[test]
    fn counts_held_and_waiting_locks() {
        let clusters = [
            cluster("a", Some("alice"), Some(true)),
            cluster("b", Some("bob"), Some(false)),
            cluster("c", Some("carol"), None),
            cluster("d", None, Some(false)),
            cluster("e", Some(" "), None),
        ];
        assert_eq!(lock_counts(&clusters), (1, 2));
    }
}
