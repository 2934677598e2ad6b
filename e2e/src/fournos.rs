//! A stand-in for Fournos, reduced to what Hearth relies on, for the tests that do not
//! need the real operator (`fournos_real`, which needs Python and the peers folder): for
//! each `lockOnly` FournosJob, a Workload named like it, labeled `fournos.dev/job-name`
//! and owned by it (as Fournos makes it), requesting all of the cluster's slots, and the
//! job's `status.phase` (with Kueue's message while pending) mirrored from Kueue's
//! admission. Unlike Fournos it recreates a missing Workload and has no finalizer: lost
//! Workloads, finalizers and adoption are tested against the real one. Like Fournos it
//! leaves the Workload of a job that is gone to the garbage collector (the ownerReference):
//! run it on a plane with kube-controller-manager. Nothing runs pods on the plane, so it
//! also reports admitted Workloads' pods ready, as a running job would, which keeps
//! Kueue's WaitForPodsReady from evicting them.

use std::time::Duration;

use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::invariants::{workload_condition, workload_is};
use crate::objects::slot_workload;
use crate::resources::{apply, apply_status};

/// Label on a Fournos Workload naming its FournosJob.
const JOB_LABEL: &str = "fournos.dev/job-name";

/// Which admitted Workloads of the namespace get their pods reported ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodsReady {
    /// Only the stand-in's own (those of lockOnly jobs).
    OwnWorkloads,
    /// Every admitted Workload of the namespace (a fleet where jobs do run).
    AllWorkloads,
}

/// Runs until dropped (spawn it, abort it at the end of the test).
pub async fn run(
    client: kube::Client,
    namespace: String,
    local_queue: String,
    slots: i64,
    pods_ready: PodsReady,
) -> anyhow::Result<()> {
    let jobs: Api<FournosJob> = Api::namespaced(client.clone(), &namespace);
    let workloads: Api<Workload> = Api::namespaced(client.clone(), &namespace);
    loop {
        let current = jobs.list(&ListParams::default()).await?.items;
        for job in &current {
            if job.spec.lock_only != Some(true) || job.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = job.name_any();
            let Some(workload) = workloads.get_opt(&name).await? else {
                let mut w = slot_workload(
                    &namespace,
                    &name,
                    &local_queue,
                    job.spec.cluster.as_deref().unwrap_or_default(),
                    slots,
                );
                w["metadata"]["labels"] = json!({ JOB_LABEL: job.name_any() });
                w["metadata"]["ownerReferences"] = json!([{
                    "apiVersion": "fournos.dev/v1", "kind": "FournosJob", "name": name,
                    "uid": job.uid(), "controller": true, "blockOwnerDeletion": true,
                }]);
                apply(&client, &w).await?;
                continue;
            };
            let (phase, message) = if workload_is(&workload, "Admitted") {
                ("Admitted", String::new())
            } else {
                let message = workload_condition(&workload, "QuotaReserved")
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                ("Pending", message)
            };
            let status = job.status.as_ref();
            let same = status.and_then(|s| s.phase.as_deref()) == Some(phase)
                && status
                    .and_then(|s| s.other.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    == message;
            if !same {
                jobs.patch_status(
                    &job.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "phase": phase, "message": message } })),
                )
                .await?;
            }
        }
        for workload in workloads.list(&ListParams::default()).await?.items {
            let ours = workload.labels().contains_key(JOB_LABEL);
            if (ours || pods_ready == PodsReady::AllWorkloads)
                && workload_is(&workload, "Admitted")
                && !workload_is(&workload, "PodsReady")
            {
                let patch = json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "status": { "conditions": [{
                        "type": "PodsReady", "status": "True", "reason": "Started", "message": "fournos stand-in",
                        "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    }]},
                });
                apply_status(&workloads, &workload.name_any(), "fournos-stand-in", &patch).await?;
            }
        }
        // The stand-in's own pace (Fournos reacts to watches); nothing waits on it.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
