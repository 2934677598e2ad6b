//! FournosClusters as a person and hearth-discovery make them, for tests of the
//! controllers downstream of discovery (kueue-sync, lock-manager): the test writes
//! `status.kubeconfigStatus` and `status.hardware` itself, under a field manager of its own,
//! as discovery would. And waits on what Kueue does with Workloads. Every wait polls with a
//! deadline.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::kueue::Workload;
use hearth_api::names::condition_types;
use hearth_api::{FournosCluster, FournosClusterSpec, GpuInfo};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::hearth::Running;
use crate::process::until;
use crate::resources::apply_status;

/// How long any one expected change may take.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// The field manager the tests write FournosCluster status with, as discovery would.
pub const DISCOVERY: &str = "e2e-discovery";

/// `count` GPUs of model `NVIDIA-<SHORT>` on one node.
pub fn gpu(short: &str, count: i64) -> GpuInfo {
    GpuInfo {
        vendor: "NVIDIA".into(),
        model: format!("NVIDIA-{}", short.to_uppercase()),
        short_name: short.into(),
        count,
        node_count: 1,
        driver_versions: Vec::new(),
    }
}

/// Creates FournosCluster `name` (as a person or discovery's onboarding would) and
/// reports it `Valid` with `gpus`.
pub async fn onboard(clusters: &Api<FournosCluster>, name: &str, gpus: &[GpuInfo]) -> Result<()> {
    let cluster = FournosCluster::new(
        name,
        FournosClusterSpec {
            kubeconfig_secret: format!("kubeconfig-{name}"),
            ..FournosClusterSpec::default()
        },
    );
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .with_context(|| format!("creating FournosCluster {name}"))?;
    discover(clusters, name, "Valid", gpus).await
}

/// Writes what hearth-discovery would: `kubeconfigStatus` and `hardware`, counted
/// (`lastDiscovery`; discovery keeps it, with the last count, when a probe fails).
pub async fn discover(
    clusters: &Api<FournosCluster>,
    name: &str,
    kubeconfig_status: &str,
    gpus: &[GpuInfo],
) -> Result<()> {
    write_status(clusters, name, kubeconfig_status, gpus, true).await
}

/// Writes `kubeconfigStatus` and `hardware` under the discovery field manager; `counted`:
/// with `lastDiscovery`, as discovery writes it once it has counted.
pub async fn write_status(
    clusters: &Api<FournosCluster>,
    name: &str,
    kubeconfig_status: &str,
    gpus: &[GpuInfo],
    counted: bool,
) -> Result<()> {
    let total: i64 = gpus.iter().map(|g| g.count).sum();
    let mut hardware = json!({"gpus": gpus, "totalGPUs": total, "consecutiveFailures": 0});
    if counted {
        hardware["lastDiscovery"] = json!(
            k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        );
    }
    let status = json!({
        "apiVersion": "fournos.dev/v1",
        "kind": "FournosCluster",
        "status": {
            "kubeconfigStatus": kubeconfig_status,
            "hardware": hardware,
        },
    });
    apply_status(clusters, name, DISCOVERY, &status)
        .await
        .with_context(|| format!("writing the discovered status of {name}"))?;
    Ok(())
}

/// `KueueSynced` of a cluster: (status, reason, message).
pub fn synced(cluster: &FournosCluster) -> Option<(String, String, String)> {
    let status = cluster.status.as_ref()?;
    hearth_api::conditions::find(&status.conditions, condition_types::KUEUE_SYNCED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until cluster `name` reports KueueSynced with `reason`; returns the cluster.
pub async fn wait_reason(
    clusters: &Api<FournosCluster>,
    name: &str,
    reason: &str,
    log: &Running,
) -> Result<FournosCluster> {
    let what = format!("{name} KueueSynced={reason}");
    wait_for(clusters, name, &what, log, |cluster| {
        match synced(&cluster) {
            Some((_, r, _)) if r == reason => Ok(cluster),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Waits until `pick` takes what it needs from cluster `name` (`Err` says what it saw);
/// a time-out ends with `log`'s tail.
async fn wait_for<T>(
    clusters: &Api<FournosCluster>,
    name: &str,
    what: &str,
    log: &Running,
    pick: impl Fn(FournosCluster) -> std::result::Result<T, String>,
) -> Result<T> {
    log.until(what, DEADLINE, || async {
        Ok(pick(clusters.get(name).await?))
    })
    .await
}

/// `Schedulable` of a cluster: (status, reason, message), and `status.admittedWorkloads`
/// (what kueue-sync counts on a cordoned cluster's flavor).
pub fn schedulable(c: &FournosCluster) -> (Option<(String, String, String)>, Option<i64>) {
    let status = c.status.as_ref();
    let condition = status
        .and_then(|s| hearth_api::conditions::find(&s.conditions, condition_types::SCHEDULABLE))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    (condition, status.and_then(|s| s.admitted_workloads))
}

/// Waits until `name` says `Schedulable` reason `reason` with `admitted` still admitted;
/// returns the condition's message.
pub async fn wait_schedulable(
    clusters: &Api<FournosCluster>,
    name: &str,
    reason: &str,
    admitted: Option<i64>,
    ks: &Running,
) -> Result<String> {
    let what = format!("{name} Schedulable={reason}, {admitted:?} admitted");
    wait_for(clusters, name, &what, ks, |c| match schedulable(&c) {
        (Some((_, r, message)), n) if r == reason && n == admitted => Ok(message),
        other => Err(format!("{other:?}")),
    })
    .await
}

pub fn workload_condition(w: &Workload, type_: &str) -> Option<(String, String, String)> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until Workload `name` is admitted; returns resource → flavor it got.
pub async fn wait_admitted(
    workloads: &Api<Workload>,
    name: &str,
) -> Result<BTreeMap<String, String>> {
    until(&format!("Workload {name} admitted"), DEADLINE, || async {
        let w = workloads.get(name).await?;
        Ok(match workload_condition(&w, "Admitted") {
            Some((s, _, _)) if s == "True" => Ok(w
                .status
                .and_then(|s| s.admission)
                .and_then(|a| a.pod_set_assignments.into_iter().next())
                .map(|p| p.flavors)
                .unwrap_or_default()),
            _ => Err(format!("{:?}", workload_condition(&w, "QuotaReserved"))),
        })
    })
    .await
}

/// Waits until Kueue has evaluated Workload `name` and keeps it pending with a message
/// containing every one of `needles`; returns the message.
pub async fn wait_pending(
    workloads: &Api<Workload>,
    name: &str,
    needles: &[&str],
) -> Result<String> {
    let message = until(&format!("Workload {name} pending"), DEADLINE, || async {
        let w = workloads.get(name).await?;
        Ok(match workload_condition(&w, "QuotaReserved") {
            Some((s, _, m)) if s == "False" && needles.iter().all(|n| m.contains(n)) => Ok(m),
            other => Err(format!("{other:?}")),
        })
    })
    .await?;
    let w = workloads.get(name).await?;
    ensure!(
        workload_condition(&w, "Admitted").is_none_or(|(s, _, _)| s != "True"),
        "{name} is admitted: {:?}",
        w.status
    );
    Ok(message)
}

/// Waits for an Event on FournosCluster `cluster` with `reason`; returns its note.
pub async fn wait_event(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    reason: &str,
) -> Result<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    until(
        &format!("Event {reason} on {cluster}"),
        DEADLINE,
        || async {
            let list = events.list(&ListParams::default()).await?;
            let found = list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
            });
            Ok(found.ok_or_else(|| "not yet".to_owned()))
        },
    )
    .await
}
