//! Apply: the API calls that carry out a plan, one kind of write each.
//!
//! - ResourceFlavors Hearth owns: server-side apply under [`KUEUE_SYNC`], forced (the
//!   label says they are Hearth's), and deletes with `uid`/`resourceVersion`
//!   preconditions (a flavor recreated or changed meanwhile is left to the next round).
//! - The shared ClusterQueue: a JSON patch that replaces `spec` only if the object's
//!   `uid` and `metadata.generation` are still those observed (two `test` operations the
//!   apiserver checks against the stored object, atomically). `generation` moves with
//!   every spec change and never with a status write, so a concurrent writer of the
//!   spec (GitOps, a person) makes it fail instead of being overwritten, while Kueue's
//!   own status writes, which follow every change of the queue, no longer do (a
//!   `resourceVersion` guard failed on them, and each failure cost a re-plan). Never
//!   server-side apply or merge patch: Hearth would then either claim fields others own
//!   or lose their concurrent changes.
//! - FournosCluster status: server-side apply of kueue-sync's own fields.

use hearth_api::FournosCluster;
use hearth_api::kueue::{ClusterQueue, ClusterQueueSpec, ResourceFlavor};
use hearth_api::names::controllers::KUEUE_SYNC;
use hearth_runtime::events::Events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::DeserializeGuard;

use crate::cached::CachedCluster;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::plan::ClusterSync;
use crate::writeback::status_patch;
use hearth_runtime::kit::answer::{is_conflict, is_gone_or_replaced};

/// What kueue-sync writes with, in its own namespace.
#[derive(Clone)]
pub(crate) struct Writer {
    pub clusters: Api<FournosCluster>,
    pub queues: Api<ClusterQueue>,
    pub queue_reads: Api<DeserializeGuard<ClusterQueue>>,
    pub flavors: Api<ResourceFlavor>,
    pub events: Events,
    pub metrics: Metrics,
}

/// What a flavor write is for (a metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlavorAction {
    Create,
    Repair,
    /// A legacy flavor taken over: Hearth's labels are added in place.
    Adopt,
}

impl FlavorAction {
    fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Repair => "repair",
            Self::Adopt => "adopt",
        }
    }
}

impl Writer {
    pub fn new(client: kube::Client, namespace: &str, events: Events, metrics: Metrics) -> Self {
        Self {
            clusters: Api::namespaced(client.clone(), namespace),
            queues: Api::all(client.clone()),
            queue_reads: Api::all(client.clone()),
            flavors: Api::all(client),
            events,
            metrics,
        }
    }

    /// Creates or repairs one of Hearth's ResourceFlavors.
    pub async fn apply_flavor(
        &self,
        flavor: &ResourceFlavor,
        action: FlavorAction,
    ) -> Result<ResourceFlavor, Error> {
        let name = flavor.metadata.name.clone().unwrap_or_default();
        let result = self
            .flavors
            .patch(
                &name,
                &PatchParams::apply(KUEUE_SYNC).force(),
                &Patch::Apply(flavor),
            )
            .await;
        self.metrics.flavor_write(action.as_str(), result.is_ok());
        match result {
            Ok(written) => {
                tracing::info!(flavor = %name, action = action.as_str(), "applied ResourceFlavor");
                Ok(written)
            }
            Err(source) => Err(Error::ApplyFlavor { name, source }),
        }
    }

    /// Deletes one of Hearth's ResourceFlavors, if it is still the one observed. Gone
    /// already, or changed since: nothing to do now (the next round re-plans).
    pub async fn delete_flavor(
        &self,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Result<(), Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version,
            }),
            ..DeleteParams::default()
        };
        let result = self.flavors.delete(name, &params).await;
        self.metrics.flavor_write("delete", result.is_ok());
        match result {
            Ok(_) => {
                tracing::info!(flavor = %name, "deleted ResourceFlavor");
                Ok(())
            }
            Err(error) if is_gone_or_replaced(&error) => {
                tracing::debug!(flavor = %name, %error, "ResourceFlavor changed or gone before its delete");
                Ok(())
            }
            Err(source) => Err(Error::DeleteFlavor {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// The generation-guarded update of the ClusterQueue's spec. A failure that
    /// [`is_spec_conflict`] means someone else changed the spec first: re-observe and
    /// re-plan.
    pub async fn update_cluster_queue(
        &self,
        observed: &ClusterQueue,
        spec: &ClusterQueueSpec,
    ) -> Result<ClusterQueue, kube::Error> {
        let name = observed.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::from_value(cluster_queue_patch(observed, spec))
            .map_err(kube::Error::SerdeError)?;
        let params = PatchParams {
            field_manager: Some(KUEUE_SYNC.to_owned()),
            ..PatchParams::default()
        };
        self.queues
            .patch(&name, &params, &Patch::<()>::Json(patch))
            .await
    }

    /// One read of the ClusterQueue, when the watch cache lags after a conflict.
    /// `None`: it no longer exists.
    pub async fn get_cluster_queue(
        &self,
        name: &str,
    ) -> Result<Option<DeserializeGuard<ClusterQueue>>, Error> {
        self.queue_reads
            .get_opt(name)
            .await
            .map_err(|source| Error::ReadClusterQueue {
                name: name.to_owned(),
                source,
            })
    }

    /// Writes `sync` to the cluster's status; returns the cluster as written, or `None`
    /// when it is gone (deleted, or replaced by another of its name).
    pub async fn write_status(
        &self,
        cluster: &CachedCluster,
        sync: &ClusterSync,
        now: &Time,
    ) -> Result<Option<FournosCluster>, kube::Error> {
        let patch = status_patch(cluster, sync, now);
        let result =
            hearth_runtime::status::apply_status(&self.clusters, cluster, KUEUE_SYNC, patch).await;
        if !matches!(result, Ok(None)) {
            self.metrics.status_write(result.is_ok());
        }
        result
    }
}

/// The JSON patch that replaces the ClusterQueue's `spec` (every field Hearth does not
/// model included, as observed) if it is still the object observed, at the generation
/// observed. Metadata and status are not touched. An object without a generation (the
/// apiserver always sets one) is guarded by its `resourceVersion` instead.
pub(crate) fn cluster_queue_patch(
    observed: &ClusterQueue,
    spec: &ClusterQueueSpec,
) -> serde_json::Value {
    let meta = &observed.metadata;
    let guard = match meta.generation {
        Some(generation) => {
            serde_json::json!({"op": "test", "path": "/metadata/generation", "value": generation})
        }
        None => serde_json::json!({
            "op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version
        }),
    };
    serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": meta.uid},
        guard,
        {"op": "replace", "path": "/spec", "value": spec},
    ])
}

/// Whether a ClusterQueue update failed because the queue changed since it was
/// observed: a failed `test` of [`cluster_queue_patch`] (the apiserver answers 422 with
/// the JSON patch library's "testing value … failed"), or a 409.
pub(crate) fn is_spec_conflict(error: &kube::Error) -> bool {
    is_conflict(error)
        || matches!(error, kube::Error::Api(status)
            if status.code == 422 && status.message.contains("testing value"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::queue;
    use hearth_runtime::testing::{answering, refusal};
    use serde_json::json;

    fn observed() -> ClusterQueue {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": "fournos-queue",
                "resourceVersion": "4242",
                "generation": 7,
                "uid": "u-1",
                "labels": {"team": "platform"},
                "managedFields": [{"manager": "argocd", "operation": "Apply"}]
            },
            "spec": {"cohortName": "gpu", "resourceGroups": []},
            "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready",
                        "message": "", "lastTransitionTime": "2026-11-21T00:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_update_replaces_only_the_spec_of_the_generation_observed() {
        let spec = queue(json!({"cohortName": "gpu", "resourceGroups": [
            {"coveredResources": ["fournos/cluster-slot"],
             "flavors": [{"name": "a", "resources": [{"name": "fournos/cluster-slot", "nominalQuota": "100"}]}]}
        ]}));
        let patch = cluster_queue_patch(&observed(), &spec);
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/generation", "value": 7},
                {"op": "replace", "path": "/spec", "value": serde_json::to_value(&spec).unwrap()},
            ])
        );
        let mut no_generation = observed();
        no_generation.metadata.generation = None;
        assert_eq!(
            cluster_queue_patch(&no_generation, &spec)[1],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "4242"})
        );
    }

    fn writer(client: kube::Client) -> Writer {
        let (_, leader) = tokio::sync::watch::channel(false);
        let events = Events::new(client.clone(), KUEUE_SYNC, "test".into(), leader);
        let mut registry = prometheus_client::registry::Registry::default();
        Writer::new(client, "hearth", events, Metrics::register(&mut registry))
    }

    #[tokio::test]
    async fn the_cluster_queue_spec_is_patched_guarded_by_uid_and_generation() {
        let mut answer = serde_json::to_value(observed()).unwrap();
        answer["metadata"]["resourceVersion"] = json!("4243");
        let (client, seen) = answering(200, answer);
        let spec = queue(json!({"cohortName": "gpu"}));
        let written = writer(client)
            .update_cluster_queue(&observed(), &spec)
            .await
            .unwrap();
        assert_eq!(written.metadata.resource_version.as_deref(), Some("4243"));

        let seen = seen.all();
        assert_eq!(seen.len(), 1, "exactly one request: {seen:?}");
        let (method, path, body) = (&seen[0].method, &seen[0].uri, &seen[0].body);
        assert_eq!(method, "PATCH");
        assert_eq!(
            path,
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/fournos-queue?&fieldManager=hearth-kueue-sync"
        );
        assert_eq!(body, &cluster_queue_patch(&observed(), &spec));
    }

    /// A failed update of the queue: a conflict (re-plan) only when the queue changed.
    #[tokio::test]
    async fn a_changed_queue_is_a_conflict_and_an_invalid_spec_is_not() {
        let answers = [
            // A 409 (kept: a stale resourceVersion guard).
            (
                409,
                "Conflict",
                "Operation cannot be fulfilled on clusterqueues.kueue.x-k8s.io \"fournos-queue\": the object has been modified",
                true,
            ),
            // What kube-apiserver answers when a `test` operation fails.
            (
                422,
                "Invalid",
                "testing value /metadata/generation failed: test failed",
                true,
            ),
            (
                422,
                "Invalid",
                "ClusterQueue.kueue.x-k8s.io \"fournos-queue\" is invalid: spec.resourceGroups: Too many: 17: must have at most 16 items",
                false,
            ),
        ];
        for (code, reason, message, conflict) in answers {
            let (client, _) = answering(code, refusal(code, reason, message));
            let error = writer(client)
                .update_cluster_queue(&observed(), &queue(json!({})))
                .await
                .unwrap_err();
            assert_eq!(is_spec_conflict(&error), conflict, "{error:?}");
        }
    }

    #[tokio::test]
    async fn flavors_are_server_side_applied_and_deleted_with_preconditions() {
        let flavor = crate::plan::desired_flavor("a", "hearth");
        let (client, seen) = answering(200, serde_json::to_value(&flavor).unwrap());
        let writer = writer(client);
        writer
            .apply_flavor(&flavor, FlavorAction::Create)
            .await
            .unwrap();
        writer
            .delete_flavor("a", Some("u-a".into()), Some("7".into()))
            .await
            .unwrap();

        let seen = seen.all();
        let (method, path, body) = (&seen[0].method, &seen[0].uri, &seen[0].body);
        assert_eq!(method, "PATCH");
        assert_eq!(
            path,
            "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/a?&force=true&fieldManager=hearth-kueue-sync"
        );
        assert_eq!(body["apiVersion"], "kueue.x-k8s.io/v1beta2");
        assert_eq!(body["kind"], "ResourceFlavor");
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "hearth"
        );
        assert_eq!(body["spec"]["nodeLabels"]["fournos.dev/cluster"], "a");

        let (method, path, body) = (&seen[1].method, &seen[1].uri, &seen[1].body);
        assert_eq!(method, "DELETE");
        assert_eq!(path, "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/a?");
        assert_eq!(
            body["preconditions"],
            json!({"uid": "u-a", "resourceVersion": "7"})
        );
    }
}
