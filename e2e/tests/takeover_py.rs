//! The takeover from the **real** Python (kopf) Hearth (`$HEARTH_PEERS_DIR/hearth-py`,
//! default `../shared/peers/hearth-py`), with the **real** Fournos running its lock
//! sentinels (`$HEARTH_PEERS_DIR/fournos`). Without either folder the test prints one
//! `skipped:` line and passes, or fails when `HEARTH_E2E_REQUIRE_PEERS` is set.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test takeover_py -- --nocapture
//! ```
//!
//! The plane serves the Python Hearth's own FournosCluster CRD (its `manifests/crd.yaml`),
//! and the Python Hearth runs as its packaging runs it (see [`hearth_e2e::hearth_py`]),
//! over a ClusterQueue pre-seeded with one resource group (it needs one) holding a foreign
//! `gitops` flavor. It onboards three clusters of the emulated fleet from their kubeconfig
//! Secrets, one after the other (its blind read-modify-write of the ClusterQueue loses
//! entries when onboardings overlap), discovers their GPUs and publishes quota; then a
//! cluster is locked for good and one for two minutes, the real Fournos turns its sentinels
//! into admitted Workloads, and a job is admitted on the third. That is the legacy state.
//!
//! Then, as docs/migration.md says: the Python Hearth is stopped, `kubectl
//! fournos migrate scrub-secrets` and `scrub-clusters` report and remove what kopf left on
//! the Secrets and FournosClusters (a dry run first), Hearth's CRD is applied, and Hearth's controllers take over: kueue-sync
//! and lock-manager first, discovery once they have. The same invariants as the hand-built
//! `migration.rs` are sampled all along ([`hearth_e2e::takeover`]), the same repaired state
//! is awaited, and a second run must write nothing.
//!
//! # What the real legacy state is, next to what `migration.rs` assumes
//!
//! Read back by this test from what the real one wrote (it prints the objects):
//! - **Conditions are replaced, not appended.** Each handler run starts a fresh kopf patch
//!   and appends to *its* empty `conditions` list, so every status write replaces the
//!   list: after onboarding only `GPUDiscovered=True`, reason `Discovered`, message `""`,
//!   remains; `KubeconfigValid` is gone. No duplicate types arise this way. migration.rs
//!   assumed five conditions with duplicates (reasons `SecretFound`/`SecretMissing`); it
//!   keeps them, as the harder case for the new CRD's map list.
//! - **Times** have microseconds and `+00:00` (`2026-11-23T21:30:23.293024+00:00`), in
//!   conditions, `spec.hardware.lastDiscovery`, `status.ownerSetAt`, `lockExpiresAt`;
//!   migration.rs wrote whole seconds with `Z`.
//! - **A kopf finalizer** `kopf.zalando.org/KopfFinalizerMarker` on every FournosCluster
//!   (kopf adds it for the timer). migration.rs had none. With the Python Hearth gone,
//!   a deleted FournosCluster would stay `Terminating`: `kubectl fournos migrate
//!   scrub-clusters` removes it, and the test deletes a cluster at the end.
//! - **Spec**: `gpuDiscoveryInterval: 5m` (its CRD's default) is stored; `spec.hardware`
//!   has `vendor` in lower case (`nvidia`, `amd`; migration.rs: `NVIDIA`, `AMD`), the real
//!   `nodeCount` (2 for the two A100 nodes; assumed 1), no `lastError` key once discovery
//!   succeeded. The AMD node (`amd.com/gpu.product-name`) is a generic `amd` GPU, model
//!   `amd`, resource `fournos/gpu-amd` (it reads `amd.com/gpu.product`; migration.rs
//!   assumed `mi300x`); the cordoned H100 node is counted, as assumed.
//! - **Queue entries**: each updated entry lists the GPUs first, then
//!   `fournos/cluster-slot`, then zeros backfilled for the resources other clusters
//!   brought, out of `coveredResources` order (Kueue's controller keeps the queue Active;
//!   its admission webhook refuses the write, so this plane runs Kueue without it); the foreign
//!   entry gets zeros appended for every GPU resource. Quotas are integers (migration.rs
//!   wrote strings and reversed one entry by hand). It needs the ClusterQueue pre-seeded
//!   with a resource group.
//! - **Locks**: as assumed (`locked`, `lockJobName` `hearth-lock-<cluster>`, `ownerSetAt`,
//!   `lockExpiresAt` only with a TTL, the sentinel FournosJob); its Workload is the real
//!   Fournos's, named like the sentinel.
//! - **Annotations**: on each FournosCluster, kopf's `last-handled-configuration` holds its
//!   whole `spec` (hardware included) and `metadata.labels` (migration.rs: only
//!   `kubeconfigSecret`, plus a `touch-dummy` that the real one does not write). On each
//!   kubeconfig **Secret**, `kopf.zalando.org/last-handled-configuration` holds the fields
//!   `data`, `metadata` and `type`: `data.kubeconfig` is the Secret's kubeconfig, token
//!   included (kopf's progress annotations are gone once the handler succeeded).
//!   migration.rs built no Secret annotations. Nothing else holds Secret data: not the
//!   FournosClusters' spec, status or annotations, not the Events of the three namespaces.
//!
//! Everything is awaited by polling with a deadline; the only fixed-length wait is the
//! window in which the restarted controllers must write nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use hearth_api::FournosCluster;
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use hearth_e2e::fournos_real::{self, Fournos};
use hearth_e2e::hearth_py::{self, HearthPy};
use hearth_e2e::invariants::{entry, is_active, nonzero, workload_is};
use hearth_e2e::objects::slot_workload;
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::process::until;
use hearth_e2e::resources::{apply, create_crds, read_yaml_documents, wait_established};
use hearth_e2e::takeover::{
    Flavors, GPU, Invariants, foreign_flavor, second_run_writes_nothing, watched_takeover,
};
use hearth_e2e::world::World;
use hearth_e2e::{ControlPlane, Isolated, PlaneOptions};
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// Deadline of every wait that is not about a known duration.
const DEADLINE: Duration = Duration::from_secs(180);
/// kopf's annotation with its copy of the last handled object.
const LAST_HANDLED: &str = "kopf.zalando.org/last-handled-configuration";
/// The finalizer kopf puts on objects with timers (the FournosClusters).
const KOPF_FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";
/// The TTL of the lock that expires during the takeover.
const TTL: &str = "2m";

struct Shared {
    plane: ControlPlane,
    fournos_source: PathBuf,
    fournos_venv: PathBuf,
    hearth_py_venv: PathBuf,
}

static SHARED: OnceCell<std::result::Result<Shared, String>> = OnceCell::const_new();

/// The plane with the Python Hearth's CRD and Fournos's, or `None` (after one skip line)
/// without the peers.
async fn shared() -> Result<Option<&'static Shared>> {
    let Some(peers) =
        tokio::task::spawn_blocking(|| hearth_py::with_fournos("takeover_py")).await??
    else {
        return Ok(None);
    };
    let shared = SHARED
        .get_or_init(|| async move {
            let hearth_py::WithFournos {
                py_source,
                py_venv: hearth_py_venv,
                fournos_source,
                fournos_venv,
            } = peers;
            let options = PlaneOptions::from_env().map_err(|e| e.to_string())?;
            let plane = ControlPlane::start(PlaneOptions {
                fournos_cluster_crd: Some(hearth_py::crd_path(&py_source)),
                // The controllers are started by the test, in its own scope.
                hearth_bin_dir: None,
                // The Python Hearth writes each queue entry GPUs first, out of
                // `coveredResources` order: Kueue's webhook refuses that ("must match the
                // name in coveredResources"), so against it the Python Hearth never
                // publishes a GPU quota and there is nothing to take over. The state a
                // takeover starts from is the one it reaches where Kueue does not check.
                without_kueue_webhooks: true,
                ..options
            })
            .await
            .map_err(|e| e.to_string())?;
            let client = plane.management_client().await.map_err(|e| e.to_string())?;
            fournos_real::install_crds(&client, &fournos_source)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Shared {
                plane,
                fournos_source,
                fournos_venv,
                hearth_py_venv,
            })
        })
        .await;
    shared
        .as_ref()
        .map(Some)
        .map_err(|e| anyhow!("setting up the plane with the peers failed: {e}"))
}

/// One cluster the Python Hearth onboards: its name and the plane target its Secret
/// points at.
struct Onboarded {
    name: String,
    target: usize,
}

fn token_of(kubeconfig: &str) -> Option<&str> {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(str::trim)
}

/// Every place under `scope` where `token` or the Secret `data` value occurs, by object
/// and field (annotations, spec, status, Events), never the value itself.
async fn copies(
    client: &kube::Client,
    scope: &Isolated,
    needles: &[String],
) -> Result<Vec<String>> {
    let hit = |text: &str| needles.iter().any(|n| text.contains(n.as_str()));
    let mut found = Vec::new();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &scope.secrets_namespace);
    for s in secrets.list(&ListParams::default()).await?.items {
        for (key, value) in s.annotations() {
            if hit(value) {
                found.push(format!("Secret {} annotation {key}", s.name_any()));
            }
        }
    }
    let clusters: Api<FournosCluster> = Api::namespaced(client.clone(), &scope.namespace);
    for fc in clusters.list(&ListParams::default()).await?.items {
        for (key, value) in fc.annotations() {
            if hit(value) {
                found.push(format!("FournosCluster {} annotation {key}", fc.name_any()));
            }
        }
        if hit(&serde_json::to_string(&fc.spec)?) {
            found.push(format!("FournosCluster {} spec", fc.name_any()));
        }
        if hit(&serde_json::to_string(&fc.status)?) {
            found.push(format!("FournosCluster {} status", fc.name_any()));
        }
    }
    for ns in [
        &scope.namespace,
        &scope.secrets_namespace,
        &scope.execution_namespace,
    ] {
        let events: Api<Event> = Api::namespaced(client.clone(), ns);
        for e in events.list(&ListParams::default()).await?.items {
            if hit(&serde_json::to_string(&e)?) {
                found.push(format!("Event {ns}/{}", e.name_any()));
            }
        }
    }
    Ok(found)
}

/// Runs `kubectl fournos migrate <step> [--dry-run]` in `scope` as the plane's
/// administrator.
async fn migrate(
    plane: &ControlPlane,
    scope: &Isolated,
    step: &str,
    dry_run: bool,
) -> Result<String> {
    let mut command = tokio::process::Command::new(hearth_binary("kubectl-fournos")?);
    command.args(["migrate", step]);
    if step == "scrub-secrets" {
        command
            .arg("--secrets-namespace")
            .arg(&scope.secrets_namespace);
    }
    command
        .arg("--namespace")
        .arg(&scope.namespace)
        .arg("--kubeconfig")
        .arg(plane.management_kubeconfig());
    if dry_run {
        command.arg("--dry-run");
    }
    let out = command.output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "{step} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "$ kubectl fournos migrate {step}{}\n{stdout}",
        if dry_run { " --dry-run" } else { "" }
    );
    Ok(stdout)
}

/// kopf annotation keys on each labeled Secret.
async fn kopf_keys(secrets: &Api<Secret>) -> Result<BTreeMap<String, Vec<String>>> {
    Ok(secrets
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|s| {
            let keys = s
                .annotations()
                .keys()
                .filter(|k| k.starts_with("kopf.zalando.org/"))
                .cloned()
                .collect();
            (s.name_any(), keys)
        })
        .collect())
}

/// Each Secret's data, by name.
async fn secret_data(
    secrets: &Api<Secret>,
) -> Result<Vec<(String, Option<BTreeMap<String, k8s_openapi::ByteString>>)>> {
    Ok(secrets
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|s| (s.name_any(), s.data))
        .collect())
}

#[tokio::test]
async fn takeover_from_the_real_python_hearth_drops_nothing() -> Result<()> {
    let Some(shared) = shared().await? else {
        return Ok(());
    };
    let plane = &shared.plane;
    let scope = plane.isolated("takeover-py").await?;
    let client = plane.management_client().await?;
    let world = World::new(plane, scope.clone()).await?;
    let exec = scope.execution_namespace.clone();

    // ---- what the Python Hearth needs: a resource group in the ClusterQueue ----
    let gitops = format!("gitops-{}", scope.id);
    foreign_flavor(&client, &gitops).await?;
    let seed = json!({ "spec": { "resourceGroups": [{
        "coveredResources": [CLUSTER_SLOT_RESOURCE],
        "flavors": [{ "name": gitops, "resources": [{ "name": CLUSTER_SLOT_RESOURCE, "nominalQuota": 5 }] }],
    }]}});
    world
        .patch_queue(&seed)
        .await
        .context("pre-seeding the ClusterQueue's resource group")?;

    // ---- the real Fournos (sentinels → Workloads) and the real Python Hearth ----
    fournos_real::install_pipelines(&client, &shared.fournos_source, &exec).await?;
    let stand_ins = tokio::spawn(fournos_real::StandIns::new(&client, &exec).run());
    let mut fournos = Fournos::start(plane, &shared.fournos_source, &shared.fournos_venv, &scope)
        .await
        .context("starting the real Fournos")?;
    let mut python = HearthPy::start(
        plane,
        &shared.hearth_py_venv,
        &scope,
        // Its timer (kubeconfig check, discovery, TTL expiry) every 2 s instead of 30 s.
        &[("HEARTH_RECONCILE_INTERVAL_SEC", "2")],
    )
    .await
    .context("starting the real Python Hearth")?;
    eprintln!(
        "takeover_py: Python Hearth log {}, Fournos log {}",
        python.log_path().display(),
        fournos.log_path().display()
    );
    let with_logs = |e: anyhow::Error, python: &HearthPy, fournos: &Fournos| {
        e.context(format!(
            "the Python Hearth's log ends with:\n{}\nFournos's log ends with:\n{}",
            python.log(),
            fournos.log()
        ))
    };

    // ---- the legacy state: onboarding, one Secret after the other ----
    let clusters = [
        Onboarded {
            name: scope.cluster("locked"),
            target: 0,
        },
        Onboarded {
            name: scope.cluster("expiring"),
            target: 1,
        },
        Onboarded {
            name: scope.cluster("busy"),
            target: 0,
        },
    ];
    let [locked, expiring, busy] = &clusters;
    let targets = plane.targets();
    for c in &clusters {
        plane
            .onboard_onto(&scope.secrets_namespace, &c.name, &targets[c.target])
            .await?;
        until(
            &format!("the Python Hearth to publish GPU quota for {}", c.name),
            DEADLINE,
            || async {
                let queue = world.queue().await?;
                let entry = entry(&queue, &c.name).unwrap_or_default();
                let gpus = entry.iter().any(|(r, q)| r.starts_with(GPU) && *q > 0);
                Ok(if gpus {
                    Ok(())
                } else {
                    Err(format!("entry {entry:?}"))
                })
            },
        )
        .await
        .map_err(|e| with_logs(e, &python, &fournos))?;
    }

    // ---- locks, and a job on the third cluster ----
    for (c, spec) in [
        (locked, json!({ "owner": "alice" })),
        (expiring, json!({ "owner": "bob", "ttl": TTL })),
    ] {
        world
            .clusters
            .patch(
                &c.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await?;
    }
    let job = "benchmark-on-busy";
    apply(
        &client,
        &slot_workload(&exec, job, &scope.local_queue, &busy.name, 1),
    )
    .await?;
    let sentinel = |c: &Onboarded| format!("hearth-lock-{}", c.name);
    until(
        "the Python Hearth's locks and the job admitted",
        DEADLINE,
        || async {
            let mut waiting = Vec::new();
            for name in [sentinel(locked), sentinel(expiring), job.to_owned()] {
                match world.workloads.get_opt(&name).await? {
                    Some(w) if workload_is(&w, "Admitted") => {}
                    _ => waiting.push(format!("{name} not admitted")),
                }
            }
            for c in [locked, expiring] {
                let fc = world.clusters.get(&c.name).await?;
                if fc.status.as_ref().and_then(|s| s.locked) != Some(true) {
                    waiting.push(format!("{}: not locked=true", c.name));
                }
            }
            Ok(if waiting.is_empty() {
                Ok(())
            } else {
                Err(waiting.join("; "))
            })
        },
    )
    .await
    .map_err(|e| with_logs(e, &python, &fournos))?;

    // ---- what it left ----
    let fcs: Api<kube::api::DynamicObject> =
        hearth_e2e::resources::dynamic_api(&client, &json!({ "apiVersion": "fournos.dev/v1", "kind": "FournosCluster", "metadata": { "namespace": scope.namespace } }))
            .await?
            .0;
    for c in &clusters {
        let mut fc = serde_json::to_value(fcs.get(&c.name).await?)?;
        fc["metadata"]["managedFields"] = Value::Null;
        println!("legacy FournosCluster: {}", serde_json::to_string(&fc)?);
        let flavor = world.flavors.get(&c.name).await?;
        println!(
            "legacy ResourceFlavor {}: labels {:?} spec {}",
            c.name,
            flavor.labels(),
            serde_json::to_string(&flavor.spec)?
        );
    }
    for c in &clusters {
        let fc = world.clusters.get(&c.name).await?;
        ensure!(
            fc.finalizers()
                .iter()
                .any(|f| f.starts_with("kopf.zalando.org/")),
            "{}: no kopf finalizer any more (update the docs): {:?}",
            c.name,
            fc.finalizers()
        );
    }
    let queue = world.queue().await?;
    println!(
        "legacy ClusterQueue spec: {}\nactive: {}",
        serde_json::to_string(&queue.spec.resource_groups)?,
        is_active(&queue)
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &scope.secrets_namespace);
    let legacy_keys = kopf_keys(&secrets).await?;
    println!("kopf annotations on the kubeconfig Secrets: {legacy_keys:?}");

    // The leak: kopf's copy of each Secret carries its data, token included.
    let mut needles: Vec<String> = targets
        .iter()
        .filter_map(|t| token_of(t.node_reader_kubeconfig()).map(str::to_owned))
        .collect();
    for c in &clusters {
        let secret = secrets.get(&format!("kubeconfig-{}", c.name)).await?;
        let data = secret.data.clone().unwrap_or_default();
        let copy: Value = serde_json::from_str(
            secret
                .annotations()
                .get(LAST_HANDLED)
                .with_context(|| format!("{}: no {LAST_HANDLED}", secret.name_any()))?,
        )?;
        let fields: Vec<&String> = copy
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        println!(
            "{}: {LAST_HANDLED} holds the fields {fields:?}",
            secret.name_any()
        );
        let stored = serde_json::to_value(data.get("kubeconfig"))?;
        ensure!(
            copy["data"]["kubeconfig"] == stored,
            "{}: {LAST_HANDLED} no longer holds the Secret's data (update the migration guide)",
            secret.name_any()
        );
        if let Value::String(encoded) = stored {
            needles.push(encoded);
        }
    }
    let leaked = copies(&client, &scope, &needles).await?;
    println!("where the Python Hearth copied Secret data: {leaked:?}");
    ensure!(
        leaked.iter().all(|l| l.contains(LAST_HANDLED)),
        "Secret data copied elsewhere too: {leaked:?}"
    );

    // Baselines, before anything changes.
    let mut baseline: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for c in &clusters {
        let legacy = entry(&queue, &c.name).with_context(|| format!("{}: no entry", c.name))?;
        baseline.insert(c.name.clone(), nonzero(legacy));
    }
    let expires_at: Timestamp = world
        .clusters
        .get(&expiring.name)
        .await?
        .status
        .and_then(|s| s.lock_expires_at)
        .context("the Python Hearth's lockExpiresAt")?
        .0;
    let names_only: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
    let flavors = Flavors::record(&world, &names_only, &gitops).await?;

    // ---- migration step 1: stop the Python Hearth ----
    python.stop().await;

    // ---- step 2: scrub the Secrets (a dry run first) ----
    let names: Vec<String> = clusters
        .iter()
        .map(|c| format!("kubeconfig-{}", c.name))
        .collect();
    let report = migrate(plane, &scope, "scrub-secrets", true).await?;
    for name in &names {
        ensure!(
            report.contains(&format!("{name}: would remove"))
                && report.contains(&format!(
                    "{LAST_HANDLED} (held a copy of the Secret's data)"
                )),
            "the dry run does not report {name}: {report}"
        );
    }
    ensure!(
        kopf_keys(&secrets).await? == legacy_keys,
        "the dry run changed the Secrets"
    );
    let data_before = secret_data(&secrets).await?;
    let report = migrate(plane, &scope, "scrub-secrets", false).await?;
    for name in &names {
        ensure!(
            report.contains(&format!("{name}: removed {LAST_HANDLED}")),
            "the scrub does not report {name}: {report}"
        );
    }
    ensure!(
        !needles.iter().any(|n| report.contains(n.as_str())),
        "the report shows Secret data"
    );
    let left = kopf_keys(&secrets).await?;
    ensure!(
        left.values().all(Vec::is_empty),
        "kopf annotations left: {left:?}"
    );
    let data_after = secret_data(&secrets).await?;
    ensure!(data_after == data_before, "the scrub changed Secret data");
    let again = migrate(plane, &scope, "scrub-secrets", false).await?;
    ensure!(again.contains("nothing to remove"), "{again}");

    // And kopf's finalizer and annotations on the FournosClusters.
    let report = migrate(plane, &scope, "scrub-clusters", true).await?;
    for c in &clusters {
        ensure!(
            report.contains(&format!(
                "{}: would remove {LAST_HANDLED}, finalizer {KOPF_FINALIZER}",
                c.name
            )),
            "the dry run does not report {}: {report}",
            c.name
        );
        let fc = world.clusters.get(&c.name).await?;
        ensure!(
            fc.finalizers() == [KOPF_FINALIZER],
            "the dry run changed {}",
            c.name
        );
    }
    migrate(plane, &scope, "scrub-clusters", false).await?;
    for c in &clusters {
        let fc = world.clusters.get(&c.name).await?;
        let kopf = |k: &String| k.starts_with("kopf.zalando.org/");
        ensure!(
            !fc.finalizers().iter().any(kopf) && !fc.annotations().keys().any(kopf),
            "{}: kopf's leftovers remain: {:?} {:?}",
            c.name,
            fc.finalizers(),
            fc.annotations().keys().collect::<Vec<_>>()
        );
    }

    // ---- step 3: Hearth's CRD (docs/migration.md: `kubectl apply -f manifests/crd.yaml`) ----
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crd.yaml");
    let crds = create_crds(&client, read_yaml_documents(&crd)?).await?;
    wait_established(&client, &crds, DEADLINE).await?;

    // ---- step 4: Hearth takes over, watched all along ----
    let invariants = Invariants {
        baseline,
        locked: (locked.name.clone(), sentinel(locked)),
        expiring: (expiring.name.clone(), expires_at),
        workload: job.to_owned(),
    };
    // Flavors adopted in place, the foreign one untouched, no Secret data anywhere.
    let env = [("HEARTH_SENTINEL", "fournosjob")];
    let running = watched_takeover(&world, invariants, &flavors, &env, DEADLINE).await?;
    let leaked = copies(&client, &scope, &needles).await?;
    ensure!(
        leaked.is_empty(),
        "Secret data found after the takeover: {leaked:?}"
    );

    // ---- a second run over its own state writes nothing ----
    second_run_writes_nothing(&world, running, &env, &flavors, Duration::from_secs(10)).await?;

    // Without kopf's finalizer a legacy cluster can be deleted (with it, it would stay
    // Terminating for good). Discovery may onboard it again from its Secret: a new object.
    let gone = world.clusters.get(&expiring.name).await?.uid();
    world
        .clusters
        .delete(&expiring.name, &kube::api::DeleteParams::default())
        .await?;
    until(
        &format!("{} to be deleted", expiring.name),
        DEADLINE,
        || async {
            let now = world.clusters.get_opt(&expiring.name).await?;
            Ok(match now {
                Some(fc) if fc.uid() == gone => Err(format!("finalizers {:?}", fc.finalizers())),
                _ => Ok(()),
            })
        },
    )
    .await?;
    fournos.stop().await;
    stand_ins.abort();
    Ok(())
}
