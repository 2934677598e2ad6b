//! Memory against the people who share the cluster (issue 41 item 4): a lock user (who may
//! patch FournosClusters and nothing else) bloats 60 clusters as far as the CRD lets them,
//! and another team creates 100 Workloads of ~900 KiB in a namespace of its own. Each
//! controller, restarted into that (its first list is the worst moment: every object at
//! once), peaks under 100 MiB (`VmHWM`, debug builds); so does each while it lived
//! through the bloat.
//!
//! The bloat of a cluster is the bytes of 15 000 legacy `spec.hardware.gpus` entries,
//! what the CRD accepted before it bounded them: as many entries as the installed CRD
//! allows, and the rest of those bytes as labels, which no CRD bounds. The numbers it
//! prints are in `bench-results/2026-11-28/MEMORY-HOSTILE.md`.
//!
//! Run: `cargo build --workspace --bins && HEARTH_E2E_BIN_DIR="$(e2e/tools/build.sh)"
//! cargo test -p hearth-e2e --test memory_bounds -- --nocapture`.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use futures::{StreamExt as _, TryStreamExt as _};
use hearth_api::names::CRD_NAME;
use hearth_api::{FournosCluster, FournosClusterSpec};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::objects::KUEUE_API_VERSION;
use hearth_e2e::resources::apply;
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

const CLUSTERS: usize = 60;
const WORKLOADS: usize = 100;
/// Of each Workload, in container arguments of 1 KiB.
const WORKLOAD_KIB: usize = 900;
/// Legacy GPU entries per cluster whose bytes make the bloat.
const LEGACY_ENTRIES: usize = 15_000;
/// What each controller may peak at.
const LIMIT_KIB: u64 = 100 * 1024;
/// Requests in flight while bloating.
const IN_FLIGHT: usize = 4;
/// Tries of each large write.
const ATTEMPTS: u32 = 5;
/// How long a controller runs on what it sees before its peak is read.
const SETTLE: Duration = Duration::from_secs(10);

fn gpu_entry(i: usize) -> Value {
    json!({
        "vendor": "NVIDIA",
        "model": format!("NVIDIA-M{i:05}"),
        "shortName": format!("m{i:05}"),
        "count": 1,
        "nodeCount": 1,
    })
}

/// How many `spec.hardware.gpus` entries the installed CRD accepts (at most
/// [`LEGACY_ENTRIES`]).
async fn gpus_allowed(admin: &kube::Client) -> Result<usize> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let crd = serde_json::to_value(crds.get(CRD_NAME).await?)?;
    let max = crd
        .pointer(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/hardware\
             /properties/gpus/maxItems",
        )
        .and_then(Value::as_u64);
    Ok(max.map_or(LEGACY_ENTRIES, |n| (n as usize).min(LEGACY_ENTRIES)))
}

/// The merge patch a lock user bloats a cluster with: `allowed` GPU entries, and labels
/// for the rest of the bytes of [`LEGACY_ENTRIES`] entries.
fn bloat(allowed: usize) -> Value {
    let size = |n: usize| {
        serde_json::to_string(&(0..n).map(gpu_entry).collect::<Vec<_>>()).map_or(0, |s| s.len())
    };
    let budget = size(LEGACY_ENTRIES);
    let mut bytes = size(allowed);
    // Labels as long as Kubernetes allows (a 253-character prefix, a 63-character name
    // and value): the same bytes in a quarter of the labels of short ones, and the
    // apiserver's cost of a write grows with the number of labels (field ownership,
    // validation), not only with their bytes.
    let prefix = [
        "b".repeat(61),
        "c".repeat(61),
        "d".repeat(61),
        "e".repeat(61),
    ]
    .join(".");
    let mut labels = Map::new();
    while bytes < budget {
        let key = format!("{prefix}.x/l{:05}{}", labels.len(), "n".repeat(57));
        let value = "v".repeat(63);
        bytes += key.len() + value.len() + 6;
        labels.insert(key, value.into());
    }
    json!({
        "metadata": { "labels": labels },
        "spec": { "hardware": { "gpus": (0..allowed).map(gpu_entry).collect::<Vec<_>>() } },
    })
}

/// A Workload of about [`WORKLOAD_KIB`] KiB, in no queue: another team's, left alone.
fn big_workload(namespace: &str, name: &str) -> Value {
    let args: Vec<String> = (0..WORKLOAD_KIB)
        .map(|i| format!("--arg{i:04}={}", "x".repeat(1014)))
        .collect();
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "podSets": [{
            "name": "main",
            "count": 1,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "job",
                    "image": "registry.invalid/another-team/big",
                    "args": args,
                }],
            }},
        }]},
    })
}

/// `write` until it succeeds, at most [`ATTEMPTS`] times: an apiserver this loaded may
/// time out (504) on a large write.
async fn retried<T, E, F, Fut>(what: &str, mut write: F) -> Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    for _ in 1..ATTEMPTS {
        match write().await {
            Ok(_) => return Ok(()),
            Err(e) => eprintln!("{what}: {e}; trying again"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    write().await.map(drop).context(what.to_owned())
}

/// `VmHWM` of `running` (the peak of its resident memory), in KiB.
fn peak_kib(plane: &ControlPlane, running: &Running) -> Result<u64> {
    let pid = running.pid(plane)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    hearth_e2e::bench::status_kib(&status, "VmHWM:").context("VmHWM in /proc/<pid>/status")
}

/// Each controller's environment here: workload sentinels (no Fournos on the plane).
const ENV: &[(&str, &str)] = &[("HEARTH_SENTINEL", "workload")];
/// How long a restarted controller may take to list it all: the apiserver serves
/// 60 objects of 1.2 MB slowly (and debug builds decode them slowly).
const READY_WITHIN: Duration = Duration::from_secs(600);

async fn start_all(plane: &ControlPlane, scope: &Isolated, instance: &str) -> Result<Vec<Running>> {
    let mut all = Vec::new();
    for controller in Controller::ALL {
        all.push(hearth::start(plane, scope, controller, instance, ENV).await?);
    }
    Ok(all)
}

/// Creates the clusters (as admin), then bloats them as a lock user.
async fn bloat_clusters(plane: &ControlPlane, scope: &Isolated) -> Result<usize> {
    let admin = plane.management_client().await?;
    let clusters: Api<FournosCluster> = Api::namespaced(admin.clone(), &scope.namespace);
    let names: Vec<String> = (0..CLUSTERS)
        .map(|i| scope.cluster(&format!("mb{i:02}")))
        .collect();
    for name in &names {
        let spec = FournosClusterSpec {
            kubeconfig_secret: format!("kubeconfig-{name}"),
            ..FournosClusterSpec::default()
        };
        clusters
            .create(&PostParams::default(), &FournosCluster::new(name, spec))
            .await
            .with_context(|| format!("creating {name}"))?;
    }
    let lock_user = hearth::lock_user(plane, &scope.namespace).await?;
    let allowed = gpus_allowed(&admin).await?;
    let patch = Patch::Merge(bloat(allowed));
    let params = PatchParams::default();
    let as_user: Api<FournosCluster> = Api::namespaced(lock_user, &scope.namespace);
    futures::stream::iter(&names)
        .map(|name| {
            let (api, patch, params) = (&as_user, &patch, &params);
            async move {
                retried(&format!("bloating {name} as a lock user"), || {
                    api.patch(name, params, patch)
                })
                .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(allowed)
}

/// Another team's namespace and its big Workloads, as admin.
async fn big_workloads(plane: &ControlPlane, scope: &Isolated) -> Result<()> {
    let admin = plane.management_client().await?;
    let namespace = format!("another-team-{}", scope.id);
    apply(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    )
    .await?;
    futures::stream::iter(0..WORKLOADS)
        .map(|i| {
            let (admin, namespace) = (&admin, &namespace);
            async move {
                let workload = big_workload(namespace, &format!("big-{i:03}"));
                retried(&format!("creating Workload big-{i:03}"), || {
                    apply(admin, &workload)
                })
                .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_lock_user_and_another_team_cannot_make_a_controller_hold_their_bytes() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("memory_bounds").await?;
    let first = start_all(plane, &scope, "0").await?;
    let calm: Vec<u64> = first
        .iter()
        .map(|r| peak_kib(plane, r))
        .collect::<Result<_>>()?;

    let mib = |kib: u64| kib as f64 / 1024.0;
    let started = std::time::Instant::now();
    let allowed = bloat_clusters(plane, &scope).await?;
    eprintln!("{CLUSTERS} clusters bloated in {:?}", started.elapsed());
    let started = std::time::Instant::now();
    big_workloads(plane, &scope).await?;
    eprintln!("{WORKLOADS} Workloads created in {:?}", started.elapsed());
    tokio::time::sleep(SETTLE).await;
    let lived: Vec<u64> = first
        .iter()
        .map(|r| peak_kib(plane, r))
        .collect::<Result<_>>()?;
    for (running, kib) in first.iter().zip(&lived) {
        eprintln!(
            "{} lived through it at {:.1} MiB",
            running.name(),
            mib(*kib)
        );
    }

    // All three restart at once: each lists the same bloated objects, and the apiserver
    // serves those lists side by side (one after another took most of this test's time).
    for running in &first {
        running.stop(plane).await?;
    }
    let again = futures::future::try_join_all(first.iter().map(|running| {
        let scope = &scope;
        async move {
            let started = std::time::Instant::now();
            let again =
                hearth::start_within(plane, scope, running.controller, "again", ENV, READY_WITHIN)
                    .await?;
            eprintln!("{} ready after {:?}", again.name(), started.elapsed());
            anyhow::Ok(again)
        }
    }))
    .await?;
    tokio::time::sleep(SETTLE).await;
    let mut restarted = Vec::new();
    for again in &again {
        restarted.push(peak_kib(plane, again)?);
        ensure!(!again.log().contains("panicked"), "{}", again.log_tail(40));
    }

    println!(
        "{CLUSTERS} clusters with {allowed} spec.hardware.gpus entries and the rest of \
         {LEGACY_ENTRIES} entries' bytes in labels; {WORKLOADS} Workloads of \
         {WORKLOAD_KIB} KiB in another namespace. VmHWM, MiB:"
    );
    println!("controller           before  lived-through  restarted");
    for (i, running) in first.iter().enumerate() {
        println!(
            "{:<20} {:>6.1}  {:>13.1}  {:>9.1}",
            running.controller.binary(),
            mib(calm[i]),
            mib(lived[i]),
            mib(restarted[i])
        );
    }
    for (i, running) in first.iter().enumerate() {
        let binary = running.controller.binary();
        ensure!(
            lived[i] < LIMIT_KIB && restarted[i] < LIMIT_KIB,
            "{binary} peaked at {:.1} MiB living through the bloat and {:.1} MiB restarted \
             into it; at most {} MiB",
            mib(lived[i]),
            mib(restarted[i]),
            LIMIT_KIB / 1024
        );
    }
    Ok(())
}
