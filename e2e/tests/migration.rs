//! End-to-end test of the takeover from the Python (kopf) controller: the exact state it
//! leaves behind is built on a local control plane, then Hearth's three controllers are
//! started over it and watched while they converge — no lock lost, no quota lowered before
//! discovery reports the real value, no admitted Workload evicted, the ClusterQueue never
//! inactive — and then restarted over their own state, which must change nothing.
//!
//! Run with:
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test migration -- --nocapture
//! ```
//!
//! This test starts a plane of its own whose FournosCluster CRD is the *legacy* one:
//! `manifests/crd.yaml` without the map-list markers (`x-kubernetes-list-type: map`, keyed
//! by `type`) on `status.conditions`, as the Python controller's CRD had. That is the only
//! way to store the duplicated conditions the Python controller left: with the map list,
//! the apiserver refuses a write that introduces a duplicate (`Duplicate value`), and
//! ratchets only objects that were invalid already. The test then applies the new CRD,
//! as docs/migration.md's steps do, and records what the apiserver does with a
//! server-side apply to an object that still holds duplicates.
//!
//! Everything is awaited by polling with a deadline; the only fixed-length wait is the
//! window in which the restarted controllers must write nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::names::{
    AUTO_DISCOVERED_LABEL, CLUSTER_LOCK_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID, KUEUE_SYNCED},
};
use hearth_e2e::invariants::{is_active, workload_is};
use hearth_e2e::lab::own_plane;
use hearth_e2e::objects::KUEUE_API_VERSION;
use hearth_e2e::objects::slot_workload;
use hearth_e2e::process::eventually;
use hearth_e2e::resources::{apply, create_crds, dynamic_api, read_yaml_documents};
use hearth_e2e::takeover::{
    Flavors, GPU, Invariants, SLOTS, foreign_flavor, second_run_writes_nothing, watched_takeover,
};
use hearth_e2e::world::World;
use hearth_e2e::{ControlPlane, PlaneOptions};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// Deadline of every wait that is not about a known duration.
const DEADLINE: Duration = Duration::from_secs(180);
/// The Python controller's field manager for its status writes.
const KOPF: &str = "kopf";

// ---------------------------------------------------------------------------------------
// The plane, with the legacy CRD
// ---------------------------------------------------------------------------------------

static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn new_crd_path() -> PathBuf {
    repo_root().join("manifests/crd.yaml")
}

/// `manifests/crd.yaml` without the map-list markers of `status.conditions`, written to a
/// temporary file: the Python controller's CRD let it append conditions of any type.
fn legacy_crd_path() -> Result<PathBuf> {
    let text = std::fs::read_to_string(new_crd_path())?;
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    let mut removed = 0;
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "x-kubernetes-list-map-keys:" {
            ensure!(
                lines.next().map(str::trim) == Some("- type"),
                "unexpected list-map keys in manifests/crd.yaml"
            );
            removed += 1;
            continue;
        }
        if trimmed == "x-kubernetes-list-type: map" {
            removed += 1;
            continue;
        }
        out.push(line);
    }
    ensure!(
        removed == 2,
        "expected one map list (status.conditions) in manifests/crd.yaml, removed {removed} markers"
    );
    let dir = std::env::temp_dir().join(format!("hearth-e2e-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("legacy-crd.yaml");
    std::fs::write(&path, out.join("\n") + "\n")?;
    Ok(path)
}

async fn plane() -> Result<&'static ControlPlane> {
    own_plane(&PLANE, |options| {
        Ok(PlaneOptions {
            fournos_cluster_crd: Some(legacy_crd_path()?),
            // The garbage collector deletes the Workloads of sentinels that are gone
            // (the Fournos stand-in leaves them to it, as Fournos does).
            controller_manager: true,
            // The legacy queue lists each entry's GPUs out of `coveredResources` order, as
            // the Python controller wrote it where Kueue's webhook did not run; with the
            // webhook on, that state cannot be written, and the takeover from it is what
            // this test is about.
            without_kueue_webhooks: true,
            ..options
        })
    })
    .await
}

// ---------------------------------------------------------------------------------------
// The legacy state
// ---------------------------------------------------------------------------------------

/// One cluster as the Python controller left it.
struct Legacy {
    name: String,
    /// Index of the plane target whose node-reader kubeconfig the Secret holds.
    target: usize,
    /// `spec.hardware.gpus`: (vendor, model, shortName, count).
    gpus: Vec<(&'static str, &'static str, &'static str, i64)>,
    owner: Option<&'static str>,
    ttl: Option<&'static str>,
    owner_set_at: Option<Timestamp>,
}

fn time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn ago(secs: i64) -> Timestamp {
    Timestamp::now() - SignedDuration::from_secs(secs)
}

impl Legacy {
    fn sentinel_name(&self) -> String {
        format!("hearth-lock-{}", self.name)
    }

    fn total(&self) -> i64 {
        self.gpus.iter().map(|g| g.3).sum()
    }

    /// The queue entry's quota per resource, as the Python controller published it.
    fn quotas(&self) -> BTreeMap<String, i64> {
        let mut q = BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), SLOTS)]);
        for (_, _, short, count) in &self.gpus {
            *q.entry(format!("{GPU}{short}")).or_default() += count;
        }
        q
    }

    fn object(&self, namespace: &str) -> Value {
        let gpus: Vec<Value> = self
            .gpus
            .iter()
            .map(|(vendor, model, short, count)| {
                json!({"vendor": vendor, "model": model, "shortName": short,
                       "count": count, "nodeCount": 1})
            })
            .collect();
        let mut spec = json!({
            "kubeconfigSecret": format!("kubeconfig-{}", self.name),
            "hardware": {
                "gpus": gpus,
                "totalGPUs": self.total(),
                "lastDiscovery": time(ago(600)),
                "consecutiveFailures": 0,
            },
        });
        if let Some(owner) = self.owner {
            spec["owner"] = json!(owner);
        }
        if let Some(ttl) = self.ttl {
            spec["ttl"] = json!(ttl);
        }
        json!({
            "apiVersion": "fournos.dev/v1",
            "kind": "FournosCluster",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": { AUTO_DISCOVERED_LABEL: "true", MANAGED_BY_LABEL: MANAGED_BY_VALUE },
                "annotations": {
                    "kopf.zalando.org/last-handled-configuration":
                        json!({"spec": {"kubeconfigSecret": format!("kubeconfig-{}", self.name)}}).to_string(),
                    "kopf.zalando.org/touch-dummy": "2026-11-20T10:00:00.000000",
                },
            },
            "spec": spec,
        })
    }

    /// The status the Python controller wrote: conditions appended on every change.
    fn status(&self) -> Value {
        let cond = |type_: &str, status: &str, reason: &str, message: &str, at: i64| {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                   "lastTransitionTime": time(ago(at))})
        };
        let summary = self
            .gpus
            .iter()
            .map(|(_, _, short, count)| format!("{count}x {}", short.to_uppercase()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut status = json!({
            "kubeconfigStatus": "Valid",
            "gpuSummary": summary,
            "conditions": [
                cond(KUBECONFIG_VALID, "False", "SecretMissing", "no secret", 7200),
                cond(KUBECONFIG_VALID, "True", "SecretFound", "secret exists", 5400),
                cond(GPU_DISCOVERED, "True", "Discovered", "found GPUs", 5000),
                cond(GPU_DISCOVERED, "True", "Discovered", "found GPUs again", 3000),
                cond(KUBECONFIG_VALID, "True", "SecretFound", "secret exists", 1800),
            ],
            "locked": false,
        });
        if let (Some(_), Some(at)) = (self.owner, self.owner_set_at) {
            status["locked"] = json!(true);
            status["lockJobName"] = json!(self.sentinel_name());
            status["ownerSetAt"] = json!(time(at));
            if let Some(ttl) = self.ttl {
                let secs: i64 = ttl.trim_end_matches('m').parse::<i64>().expect("minutes") * 60;
                status["lockExpiresAt"] = json!(time(at + SignedDuration::from_secs(secs)));
            }
        }
        status
    }

    /// The Python controller's sentinel.
    fn sentinel(&self, namespace: &str) -> Value {
        let owner = self.owner.unwrap_or_default();
        json!({
            "apiVersion": "fournos.dev/v1",
            "kind": "FournosJob",
            "metadata": {
                "name": self.sentinel_name(),
                "namespace": namespace,
                "labels": { CLUSTER_LOCK_LABEL: self.name },
            },
            "spec": {
                "cluster": self.name,
                "exclusive": true,
                "lockOnly": true,
                "owner": owner,
                "displayName": format!("Cluster lock: {} (owner: {owner})", self.name),
                "executionEngine": { "none": {} },
            },
        })
    }
}

/// A ResourceFlavor as the Python controller made it: no Hearth label.
fn legacy_flavor(cluster: &str) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": { "name": cluster },
        "spec": { "nodeLabels": { CLUSTER_NODE_LABEL: cluster } },
    })
}

// ---------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn takeover_from_the_python_controller_drops_nothing() -> Result<()> {
    let plane = plane().await?;
    let scope = plane.isolated("migration").await?;
    let client = plane.management_client().await?;
    let world = World::new(plane, scope.clone()).await?;
    let ns = scope.namespace.clone();
    let exec = scope.execution_namespace.clone();

    // ---- the legacy state ----
    let clusters = [
        Legacy {
            name: scope.cluster("locked"),
            target: 0,
            gpus: vec![("NVIDIA", "NVIDIA-A100-SXM4-80GB", "a100", 8)],
            owner: Some("alice"),
            ttl: None,
            owner_set_at: Some(ago(3600)),
        },
        Legacy {
            name: scope.cluster("expiring"),
            target: 1,
            // The Python controller counted the cordoned H100 node too.
            gpus: vec![
                ("NVIDIA", "NVIDIA-H100-80GB-HBM3", "h100", 8),
                ("NVIDIA", "NVIDIA-H200-SXM-141GB", "h200", 8),
                ("NVIDIA", "NVIDIA-L40S", "l40s", 2),
                ("AMD", "AMD_Instinct_MI300X", "mi300x", 8),
            ],
            owner: Some("bob"),
            ttl: Some("2m"),
            // Expires 40 s from now: while the controllers take over.
            owner_set_at: Some(ago(80)),
        },
        Legacy {
            name: scope.cluster("busy"),
            target: 0,
            gpus: vec![("NVIDIA", "NVIDIA-A100-SXM4-80GB", "a100", 8)],
            owner: None,
            ttl: None,
            owner_set_at: None,
        },
    ];
    let [locked, expiring, busy] = &clusters;
    let targets = plane.targets();
    let fcs: Api<DynamicObject> = dynamic_api(&client, &locked.object(&ns)).await?.0;
    let kopf = PatchParams {
        field_manager: Some(KOPF.into()),
        ..PatchParams::default()
    };
    for c in &clusters {
        plane
            .onboard_onto(&scope.secrets_namespace, &c.name, &targets[c.target])
            .await?;
        let object: DynamicObject = serde_json::from_value(c.object(&ns))?;
        fcs.create(
            &PostParams {
                field_manager: Some(KOPF.into()),
                ..Default::default()
            },
            &object,
        )
        .await
        .with_context(|| format!("creating legacy FournosCluster {}", c.name))?;
        fcs.patch_status(
            &c.name,
            &kopf,
            &Patch::Merge(json!({ "status": c.status() })),
        )
        .await
        .with_context(|| format!("writing the legacy status of {}", c.name))?;
    }

    // Flavors (unlabeled) and the queue: a foreign flavor, the legacy entries, one of them
    // with its resources out of coveredResources order.
    let gitops = format!("gitops-{}", scope.id);
    foreign_flavor(&client, &gitops).await?;
    for c in &clusters {
        apply(&client, &legacy_flavor(&c.name)).await?;
    }
    let gpu_resources = ["a100", "h100", "h200", "l40s", "mi300x"].map(|s| format!("{GPU}{s}"));
    let mut covered_resources = vec![CLUSTER_SLOT_RESOURCE.to_owned()];
    covered_resources.extend(gpu_resources.iter().cloned());
    let entry = |name: &str, quotas: &BTreeMap<String, i64>, reversed: bool| {
        let mut resources: Vec<Value> = covered_resources
            .iter()
            .map(|r| json!({ "name": r, "nominalQuota": quotas.get(r).copied().unwrap_or(0).to_string() }))
            .collect();
        if reversed {
            resources.reverse();
        }
        json!({ "name": name, "resources": resources })
    };
    let gitops_quotas = BTreeMap::from([
        (CLUSTER_SLOT_RESOURCE.to_owned(), 5),
        (format!("{GPU}a100"), 1),
    ]);
    let queue_patch = json!({ "spec": { "resourceGroups": [{
        "coveredResources": covered_resources,
        "flavors": [
            entry(&gitops, &gitops_quotas, false),
            entry(&locked.name, &locked.quotas(), true),
            entry(&expiring.name, &expiring.quotas(), false),
            entry(&busy.name, &busy.quotas(), false),
        ],
    }]}});
    world
        .patch_queue(&queue_patch)
        .await
        .context("writing the legacy ClusterQueue")?;

    // Fournos: the legacy sentinels, and a job admitted on the busy cluster.
    // Jobs do run in the fleet being migrated: every admitted Workload reports its pods ready.
    let fournos = tokio::spawn(hearth_e2e::fournos::run(
        client.clone(),
        exec.clone(),
        scope.local_queue.clone(),
        SLOTS,
        hearth_e2e::fournos::PodsReady::AllWorkloads,
    ));
    for c in [locked, expiring] {
        apply(&client, &c.sentinel(&exec)).await?;
    }
    let job = "benchmark-on-busy";
    apply(
        &client,
        &slot_workload(&exec, job, &scope.local_queue, &busy.name, 1),
    )
    .await?;
    eventually(
        "the legacy Workloads admitted, the queue Active",
        DEADLINE,
        || async {
            let queue = world.queue().await?;
            let mut admitted = 0;
            for name in [
                locked.sentinel_name(),
                expiring.sentinel_name(),
                job.to_owned(),
            ] {
                if let Some(w) = world.workloads.get_opt(&name).await?
                    && workload_is(&w, "Admitted")
                {
                    admitted += 1;
                }
            }
            Ok((is_active(&queue) && admitted == 3).then_some(()))
        },
    )
    .await?;
    ensure!(
        !fournos.is_finished(),
        "the Fournos stand-in stopped: {:?}",
        fournos.await
    );

    // ---- the new CRD (docs/migration.md: `kubectl apply -f manifests/crd.yaml`) ----
    let names = create_crds(&client, read_yaml_documents(&new_crd_path())?).await?;
    hearth_e2e::resources::wait_established(&client, &names, DEADLINE).await?;
    // Served once a write introducing a duplicate condition is refused. A scratch
    // object, dry run: nothing is stored.
    let probe_name = format!("crd-probe-{}", scope.id);
    let probe = Legacy {
        name: probe_name.clone(),
        target: 0,
        gpus: vec![],
        owner: None,
        ttl: None,
        owner_set_at: None,
    };
    fcs.create(
        &PostParams::default(),
        &serde_json::from_value(probe.object(&ns))?,
    )
    .await?;
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refusal = eventually(
        "the new CRD's map list to be enforced",
        DEADLINE,
        || async {
            Ok(fcs
                .patch_status(
                    &probe_name,
                    &dry_run,
                    &Patch::Merge(json!({ "status": probe.status() })),
                )
                .await
                .err()
                .map(|e| e.to_string()))
        },
    )
    .await?;
    println!("apiserver, a status write that introduces duplicate conditions: {refusal}");
    fcs.delete(&probe_name, &DeleteParams::default()).await?;

    // What the stored legacy objects now get from a server-side apply (dry run).
    let stored = world.clusters.get(&locked.name).await?;
    let types: Vec<&str> = stored.status.as_ref().map_or(vec![], |s| {
        s.conditions.iter().map(|c| c.type_.as_str()).collect()
    });
    ensure!(types.len() == 5, "the duplicates are stored: {types:?}");
    // One type that is not stored yet, one that is stored three times.
    for type_ in [KUEUE_SYNCED, KUBECONFIG_VALID] {
        let ssa = fcs
            .patch_status(
                &locked.name,
                &PatchParams::apply("migration-probe").force().dry_run(),
                &Patch::Apply(json!({
                    "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
                    "status": { "conditions": [{
                        "type": type_, "status": "True", "reason": "Probe", "message": "dry run",
                        "lastTransitionTime": time(Timestamp::now()),
                    }]},
                })),
            )
            .await;
        println!(
            "apiserver, server-side apply of {type_} to an object holding duplicate conditions: {}",
            match &ssa {
                Ok(result) => format!(
                    "accepted; the resulting conditions: {:?}",
                    result.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| c["type"].as_str().unwrap_or_default())
                        .collect::<Vec<_>>()
                ),
                Err(e) => format!("refused: {e}"),
            }
        );
    }

    // ---- what must hold throughout ----
    let baseline: BTreeMap<String, BTreeMap<String, i64>> = clusters
        .iter()
        .map(|c| (c.name.clone(), c.quotas()))
        .collect();
    let expires_at = expiring.owner_set_at.expect("set") + SignedDuration::from_secs(120);
    let invariants = Invariants {
        baseline,
        locked: (locked.name.clone(), locked.sentinel_name()),
        expiring: (expiring.name.clone(), expires_at),
        workload: job.to_owned(),
    };
    let names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
    let flavors = Flavors::record(&world, &names, &gitops).await?;

    // ---- Hearth takes over ----
    // kueue-sync and lock-manager first, discovery once they have taken over: the window
    // in which the legacy quota and the legacy kubeconfig status are all there is. Then
    // converged: conditions repaired, hardware discovered, flavors adopted in place (same
    // objects) and the foreign one untouched, lock kept, TTL honoured, quota the real
    // count.
    let env = [("HEARTH_SENTINEL", "fournosjob")];
    let running = watched_takeover(&world, invariants, &flavors, &env, DEADLINE).await?;

    // Hardware moved to status; spec.hardware is left as it was (Hearth never writes spec).
    let fc = world.clusters.get(&expiring.name).await?;
    let hardware = fc
        .status
        .as_ref()
        .and_then(|s| s.hardware.clone())
        .expect("status.hardware");
    ensure!(
        hardware.gpus.iter().all(|g| g.short_name != "h100"),
        "the cordoned H100s are not counted: {hardware:?}"
    );
    ensure!(
        fc.spec.hardware.is_some(),
        "spec.hardware is left to people"
    );

    // ---- a second run over its own state writes nothing ----
    // Every controller resyncs every 2 s here: five intervals without a write.
    second_run_writes_nothing(&world, running, &env, &flavors, Duration::from_secs(10)).await?;
    fournos.abort();
    Ok(())
}
