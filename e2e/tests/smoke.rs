//! Smoke tests of the local control plane: real kube-apiservers, real Kueue, no mocks.
//! They share one plane (see the crate docs on isolation) and poll with deadlines.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use hearth_e2e::fleet::{GpuVendor, fleet_for};
use hearth_e2e::objects::{
    assigned_flavor, condition, is_true, resource_flavor, slot_resource_groups,
};
use hearth_e2e::process::poll;
use hearth_e2e::resources::{apply, dynamic_api};
use hearth_e2e::{ControlPlane, FLEET, PlaneError};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

/// Reads an object until `done` says it is in the wanted state; returns it then.
async fn wait_for(
    client: &kube::Client,
    object: &Value,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let (api, name) = dynamic_api(client, object).await?;
    let found = poll(what, DEADLINE, || async {
        let current = api.get(&name).await.map_err(|source| PlaneError::Kube {
            context: format!("reading {name}"),
            source,
        })?;
        let current = serde_json::to_value(current).expect("an object serializes");
        Ok(done(&current).then_some(current))
    })
    .await?;
    Ok(found)
}

#[tokio::test]
async fn workload_is_admitted_on_a_flavor_with_quota_and_pends_when_it_is_exhausted() -> Result<()>
{
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("workload_admission").await?;
    let client = plane.management_client().await?;
    let cluster = scope.cluster("smoke");

    // Before any flavor exists, Kueue has looked at the Workload and keeps it pending.
    let first = scope.slot_workload("first", &cluster, 1);
    apply(&client, &first).await?;
    wait_for(
        &client,
        &first,
        "first Workload evaluated while no flavor exists",
        |w| condition(w, "QuotaReserved").is_some_and(|c| c.status == "False"),
    )
    .await?;

    // The flavor first, then the queue entry: a ClusterQueue referencing a missing flavor
    // goes inactive.
    apply(&client, &resource_flavor(&cluster)).await?;
    let (queues, _) = dynamic_api(
        &client,
        &hearth_e2e::fixtures::cluster_queue(&scope.cluster_queue),
    )
    .await?;
    queues
        .patch(
            &scope.cluster_queue,
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "resourceGroups": slot_resource_groups(&[(&cluster, 1)]) } }),
            ),
        )
        .await
        .context("adding the flavor entry to the ClusterQueue")?;

    let admitted = wait_for(&client, &first, "first Workload admitted", |w| {
        is_true(w, "Admitted")
    })
    .await?;
    ensure!(
        is_true(&admitted, "QuotaReserved"),
        "admitted without QuotaReserved: {admitted}"
    );
    assert_eq!(
        assigned_flavor(&admitted, CLUSTER_SLOT_RESOURCE).as_deref(),
        Some(cluster.as_str())
    );

    // The only slot is taken: the second Workload waits, and Kueue says why.
    let second = scope.slot_workload("second", &cluster, 1);
    apply(&client, &second).await?;
    let pending = wait_for(&client, &second, "second Workload pending for quota", |w| {
        condition(w, "QuotaReserved")
            .is_some_and(|c| c.message.contains("insufficient unused quota"))
    })
    .await?;
    let reserved = condition(&pending, "QuotaReserved").expect("waited for it");
    assert_eq!(reserved.status, "False");
    assert_eq!(reserved.reason, "Pending");
    assert!(
        reserved.message.contains(CLUSTER_SLOT_RESOURCE) && reserved.message.contains(&cluster),
        "unexpected message: {}",
        reserved.message
    );
    assert!(!is_true(&pending, "Admitted"));
    Ok(())
}

#[tokio::test]
async fn node_reader_kubeconfig_lists_nodes_and_is_forbidden_secrets() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    for target in plane.targets() {
        let kubeconfig = target.node_reader_kubeconfig();
        assert!(kubeconfig.contains("token:"), "a bearer token");
        assert!(
            kubeconfig.contains("certificate-authority-data:"),
            "inline CA data"
        );
        assert!(
            !kubeconfig.contains("client-key-data"),
            "no admin credentials"
        );

        let reader = target.node_reader_client().await?;
        let nodes = Api::<Node>::all(reader.clone())
            .list(&ListParams::default())
            .await?;
        assert_eq!(
            nodes.items.len(),
            target.fleet().nodes.len(),
            "{}",
            target.name()
        );

        for result in [
            Api::<Secret>::all(reader.clone())
                .list(&ListParams::default())
                .await
                .map(drop),
            Api::<Secret>::namespaced(reader.clone(), "kube-system")
                .list(&ListParams::default())
                .await
                .map(drop),
        ] {
            match result {
                Err(kube::Error::Api(status)) => {
                    assert_eq!(status.code, 403, "{}: {status:?}", target.name())
                }
                other => panic!(
                    "{}: reading Secrets must be forbidden, got {other:?}",
                    target.name()
                ),
            }
        }
        // Read-only even on nodes.
        let node = fleet_for(0).nodes[0].to_node();
        match Api::<Node>::all(reader)
            .create(&Default::default(), &node)
            .await
        {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
            other => panic!(
                "{}: creating a node must be forbidden, got {other:?}",
                target.name()
            ),
        }
    }
    Ok(())
}

#[tokio::test]
async fn emulated_fleet_matches_the_table() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let targets = plane.targets();
    ensure!(targets.len() >= 2, "a plane has at least two targets");
    for (index, target) in targets.iter().enumerate() {
        assert_eq!(*target.fleet(), fleet_for(index));
        if let Some(table) = FLEET.get(index) {
            assert_eq!(target.fleet(), table);
        }
        let nodes = Api::<Node>::all(target.admin_client().await?)
            .list(&ListParams::default())
            .await?
            .items;
        assert_eq!(nodes.len(), target.fleet().nodes.len(), "{}", target.name());

        // Count GPUs from the API objects with the rule Hearth applies: schedulable, Ready.
        let mut counted: BTreeMap<(GpuVendor, String), u32> = BTreeMap::new();
        for spec in target.fleet().nodes.iter() {
            let node = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(&*spec.name))
                .with_context(|| format!("node {} on {}", spec.name, target.name()))?;
            let unschedulable = node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            assert_eq!(unschedulable, spec.unschedulable, "{}", spec.name);
            let status = node.status.as_ref().context("node status written")?;
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            assert_eq!(ready, spec.ready, "{}", spec.name);
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let allocatable = status.allocatable.clone().unwrap_or_default();
            match &spec.gpus {
                Some(gpus) => {
                    assert_eq!(
                        labels.get(gpus.vendor.product_label()),
                        Some(&gpus.model.to_string())
                    );
                    let quantity = allocatable
                        .get(gpus.vendor.resource())
                        .context("GPU allocatable")?;
                    assert_eq!(quantity.0, gpus.count.to_string(), "{}", spec.name);
                    if ready && !unschedulable {
                        *counted
                            .entry((gpus.vendor, gpus.model.to_string()))
                            .or_default() += gpus.count;
                    }
                }
                None => {
                    assert!(
                        !allocatable.contains_key("nvidia.com/gpu")
                            && !allocatable.contains_key("amd.com/gpu")
                    );
                }
            }
        }
        assert_eq!(
            counted,
            target.fleet().schedulable_gpus(),
            "{}",
            target.name()
        );
    }
    Ok(())
}
