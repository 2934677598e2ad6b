//! What Kueue does with admission checks and flavor taints on Workloads that no job
//! integration owns (Fournos's, Hearth's sentinels), on the real Kueue of the plane: the
//! facts the design of reservations (issue 38, docs/reservations.md) rests on. Run on
//! v0.19.2 by `just test` and on v0.16.6 by `just test-kueue 0.16`.
//!
//! - A ClusterQueue that names an AdmissionCheck nobody marked `Active` admits nothing
//!   at all, on any flavor.
//! - A check scoped to one flavor (`onFlavors`) holds a Workload on that flavor at
//!   `QuotaReserved` (its quota counted as used) until the check is `Ready`; a Workload
//!   on another flavor is admitted without it.
//! - `Retry` evicts, and a Workload no job integration owns keeps its quota reserved:
//!   nothing finishes the eviction. A check cannot keep such Workloads off a cluster.
//! - A Workload a flavor's taint keeps out is admitted there once its pod set tolerates
//!   the taint (a spec update while it waits): what lock-manager can do for the Workload
//!   Fournos makes of a lock, which Fournos does not let tolerate anything.
//!
//! Run: `cargo test -p hearth-e2e --test kueue_facts` (`HEARTH_E2E_KUEUE=0.16` for v0.16.6).

use std::time::Duration;

use anyhow::{Result, ensure};
use hearth_api::kueue::Workload;
use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, CORDON_TAINT_KEY};
use hearth_e2e::fixtures::local_queue;
use hearth_e2e::invariants::{workload_condition_false, workload_is};
use hearth_e2e::lab::{DEADLINE, LockLab, lock_plane};
use hearth_e2e::objects::KUEUE_API_VERSION;
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::resources::{apply, dynamic_api};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

/// How long "nothing finishes the eviction" is watched: Kueue finishes what it finishes
/// within its own reconcile, milliseconds after the eviction.
const STILL: Duration = Duration::from_secs(5);

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// A Workload like the one Fournos makes: one pod set pinned to `cluster`, asking for
/// `slots` cluster slots in `queue`, owned by no job.
fn workload(namespace: &str, name: &str, queue: &str, cluster: &str, slots: i64) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "queueName": queue,
            "podSets": [{
                "name": "launcher",
                "count": 1,
                "template": { "spec": {
                    "nodeSelector": { CLUSTER_NODE_LABEL: cluster },
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "placeholder",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": { "requests": { CLUSTER_SLOT_RESOURCE: slots.to_string() } },
                    }],
                }},
            }],
        },
    })
}

/// Sets the state of the admission check `check` on Workload `name`, as its controller.
async fn set_check(lab: &LockLab, name: &str, check: &str, state: &str) -> Result<()> {
    let status = json!({ "status": { "admissionChecks": [{
        "name": check, "state": state, "message": "set by the test", "lastTransitionTime": now(),
    }]}});
    lab.workloads
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The `Active` condition of ClusterQueue `name`: `(status, reason)`.
async fn queue_active(lab: &LockLab, name: &str) -> Result<Option<(String, String)>> {
    let (queues, _) = dynamic_api(
        &lab.client,
        &json!({
            "apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": { "name": name },
        }),
    )
    .await?;
    let queue = queues.get(name).await?;
    Ok(queue.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Active")
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("status"), s("reason"))
        }))
}

#[tokio::test]
async fn admission_checks_and_taints_on_workloads_no_job_owns() -> Result<()> {
    let plane = lock_plane().await?;
    let lab = LockLab::new(plane, "kueue-facts").await?;
    let namespace = lab.scope.execution_namespace.clone();
    let id = lab.scope.cluster_queue.clone();
    let (checked, free) = (format!("{id}-checked"), format!("{id}-free"));
    let check = format!("{id}-check");
    for flavor in [&checked, &free] {
        apply(
            &lab.client,
            &json!({
                "apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
                "metadata": { "name": flavor },
                "spec": { "nodeLabels": { CLUSTER_NODE_LABEL: flavor } },
            }),
        )
        .await?;
    }
    apply(
        &lab.client,
        &json!({
            "apiVersion": KUEUE_API_VERSION, "kind": "AdmissionCheck",
            "metadata": { "name": check },
            "spec": { "controllerName": "fournos.dev/test" },
        }),
    )
    .await?;
    let slots = |flavor: &str| {
        json!({
            "name": flavor,
            "resources": [{ "name": CLUSTER_SLOT_RESOURCE, "nominalQuota": "100" }],
        })
    };
    let queue = format!("{id}-facts");
    apply(&lab.client, &json!({
        "apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue",
        "metadata": { "name": queue },
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": [CLUSTER_SLOT_RESOURCE],
                "flavors": [slots(&checked), slots(&free)],
            }],
            "admissionChecksStrategy": { "admissionChecks": [{ "name": check, "onFlavors": [checked] }] },
        },
    }))
    .await?;
    apply(&lab.client, &local_queue(&namespace, &queue, &queue)).await?;

    // Nobody marked the check Active: the whole queue stops.
    until(
        "the ClusterQueue inactive for its check",
        DEADLINE,
        || async {
            Ok(match queue_active(&lab, &queue).await? {
                Some((s, r)) if s == "False" && r == "AdmissionCheckInactive" => Ok(()),
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await?;
    let (checks, _) = dynamic_api(&lab.client, &json!({
        "apiVersion": KUEUE_API_VERSION, "kind": "AdmissionCheck", "metadata": { "name": check },
    }))
    .await?;
    let active = json!({ "status": { "conditions": [{
        "type": "Active", "status": "True", "reason": "Active", "message": "the test", "lastTransitionTime": now(),
    }]}});
    checks
        .patch_status(&check, &PatchParams::default(), &Patch::Merge(&active))
        .await?;
    until("the ClusterQueue active", DEADLINE, || async {
        Ok(match queue_active(&lab, &queue).await? {
            Some((s, _)) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        })
    })
    .await?;

    // Scoped to its flavor: held at QuotaReserved there, admitted elsewhere.
    for (name, flavor) in [("held", &checked), ("elsewhere", &free)] {
        apply(&lab.client, &workload(&namespace, name, &queue, flavor, 1)).await?;
    }
    let reserved = |w: &Workload| workload_is(w, "QuotaReserved");
    lab.wait_workload("held", "quota reserved", DEADLINE, reserved)
        .await?;
    lab.wait_workload("elsewhere", "admitted", DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;
    ensure!(
        !workload_is(&lab.workloads.get("held").await?, "Admitted"),
        "admitted with its check pending"
    );

    // Retry: evicted, and its quota stays reserved: nothing finishes the eviction of a
    // Workload no job owns.
    set_check(&lab, "held", &check, "Retry").await?;
    lab.wait_workload("held", "evicted", DEADLINE, |w| workload_is(w, "Evicted"))
        .await?;
    holds_for("the evicted Workload keeping its quota", STILL, || async {
        let w = lab.workloads.get("held").await?;
        Ok(if reserved(&w) && !workload_is(&w, "Admitted") {
            Ok(())
        } else {
            Err(format!("{:?}", w.status.map(|s| s.conditions)))
        })
    })
    .await?;

    // Ready: admitted.
    apply(
        &lab.client,
        &workload(&namespace, "ready", &queue, &checked, 1),
    )
    .await?;
    lab.wait_workload("ready", "quota reserved", DEADLINE, reserved)
        .await?;
    set_check(&lab, "ready", &check, "Ready").await?;
    lab.wait_workload("ready", "admitted", DEADLINE, |w| {
        workload_is(w, "Admitted")
    })
    .await?;

    // A taint keeps a Workload out until its pod set tolerates it.
    let taint = json!({ "spec": { "nodeTaints": [{
        "key": CORDON_TAINT_KEY, "value": "reserved", "effect": "NoSchedule",
    }]}});
    lab.flavors
        .patch(&free, &PatchParams::default(), &Patch::Merge(&taint))
        .await?;
    apply(
        &lab.client,
        &workload(&namespace, "lock", &queue, &free, 50),
    )
    .await?;
    let waiting = lab
        .wait_workload("lock", "refused by the taint", DEADLINE, |w| {
            workload_condition_false(w, "QuotaReserved")
        })
        .await?;
    let mut pod_sets = serde_json::to_value(&waiting.spec.pod_sets)?;
    pod_sets[0]["template"]["spec"]["tolerations"] = json!([{
        "key": CORDON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule",
    }]);
    lab.workloads
        .patch(
            "lock",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "podSets": pod_sets } })),
        )
        .await?;
    let admitted = lab
        .wait_workload("lock", "admitted once tolerating", DEADLINE, |w| {
            workload_is(w, "Admitted")
        })
        .await?;
    ensure!(
        admitted.metadata.generation == Some(2),
        "one spec change: {:?}",
        admitted.metadata.generation
    );
    Ok(())
}
