//! Upgrading an installed release to the next one, following `docs/upgrade.md`
//! ("Upgrading to a new release") command by command, while a cluster stays locked and
//! its quota published.
//!
//! - **The installed release** is this repository's chart, installed by `helm install`
//!   into the plane's base scope (namespace `hearth`, `psap-secrets`, `psap-automation`,
//!   ClusterQueue `fournos-queue`: the names the docs use, so their commands run as
//!   written) with `config.sentinel=workload` (no Fournos runs here).
//! - **The next release** is a copy of that chart made at test time with what a release
//!   may change: a new chart version and an added optional field in the FournosCluster
//!   CRD's schema (`spec.upgradeNote`). The docs' commands run in a directory where
//!   `charts/hearth` is that copy, as in a checkout of the new release. The changed value
//!   is the one the docs' `helm upgrade` sets (`config.reconcileIntervalSec=45`).
//! - **The controllers**: there is no kubelet on the plane, so each Deployment's Pod is a
//!   process started with the environment of the Deployment's container as Helm stored
//!   it, and the upgrade's rollout is modelled as a rollout does it: each Deployment whose
//!   pod template changed has its process stopped (SIGTERM) and one started with the new
//!   template's environment, one controller after another ([`hearth_e2e::release`]).
//!   The docs' step 3 (`kubectl rollout status`) waits for
//!   available Pods, which need a kubelet, so it is the one command not run; the
//!   processes' readiness stands for it.
//!
//! Sampled all along (from before the CRD is applied until 10 s after the new controllers
//! are ready, the window in which they act on what they find): the locked cluster says `locked=true`, `Locked=True/Held`,
//! has exactly one sentinel and its Workload is admitted and not evicted; its queue entry
//! keeps its GPUs and all its slots; the ClusterQueue stays `Active`. Afterwards a
//! one-slot job for the locked cluster is still refused, the CRD keeps the new field,
//! and the running controllers have the changed value in their environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::kueue::Workload;
use hearth_e2e::chart::chart_dir;
use hearth_e2e::docs::{run_sh, sh_blocks};
use hearth_e2e::hearth::Controller;
use hearth_e2e::invariants::{entry, is_active, workload_is};
use hearth_e2e::lab::{DEADLINE, LockLab, SLOTS, is_held, lock_state, own_plane};
use hearth_e2e::process::{holds_for, until};
use hearth_e2e::release::{self, Sampler};
use hearth_e2e::resources::{parse_yaml_documents, to_yaml};
use hearth_e2e::{ControlPlane, Isolated, Scope};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::json;
use tokio::sync::OnceCell;

const DOCS: &str = include_str!("../../docs/upgrade.md");
const SECTION: &str = "## Upgrading to a new release";
/// The cluster locked throughout.
const CLUSTER: &str = "target-a";
/// The field the next release adds to the CRD's `spec`.
const NEW_FIELD: &str = "upgradeNote";
/// What the docs' `helm upgrade` sets.
const CHANGED: (&str, &str) = ("HEARTH_RECONCILE_INTERVAL_SEC", "45");

async fn plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    own_plane(&PLANE, Ok).await
}

/// A copy of `chart` as the next release: version bumped, `spec.<NEW_FIELD>` added to the
/// CRD. Returns the directory that holds `charts/hearth`.
fn next_release(chart: &Path, into: &Path) -> Result<PathBuf> {
    let copy = into.join("charts/hearth");
    copy_dir(chart, &copy)?;
    let meta = copy.join("Chart.yaml");
    let text = std::fs::read_to_string(&meta)?;
    let bumped: String = text
        .lines()
        .map(|l| match l.strip_prefix("version: ") {
            Some(v) => format!("version: {}-next", v.trim()),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(bumped != text, "no version line in {}", meta.display());
    std::fs::write(&meta, bumped + "\n")?;
    let crd_path = copy.join("crds/fournosclusters.yaml");
    let mut docs = parse_yaml_documents(&std::fs::read_to_string(&crd_path)?, "the CRD")?;
    ensure!(docs.len() == 1, "one CRD in {}", crd_path.display());
    for version in docs[0]["spec"]["versions"]
        .as_array_mut()
        .context("CRD versions")?
    {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        ensure!(spec.is_object(), "the CRD has spec properties");
        spec[NEW_FIELD] = json!({
            "type": "string", "maxLength": 256,
            "description": "Added by the next release (e2e/tests/upgrade.rs): optional.",
        });
    }
    std::fs::write(&crd_path, to_yaml(&docs[0]))?;
    Ok(into.to_path_buf())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// What must hold at every instant of the upgrade (empty when it does).
async fn violations(lab: &LockLab) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    let fc = lab.clusters.get(CLUSTER).await?;
    if !is_held(&fc) {
        bad.push(format!("{CLUSTER}: not held: {}", lock_state(&fc)));
    }
    let sentinels: Vec<Workload> = lab.sentinels(CLUSTER).await?;
    match sentinels.as_slice() {
        [w] if workload_is(w, "Admitted") && !workload_is(w, "Evicted") => {}
        other => bad.push(format!(
            "{CLUSTER}: sentinels {:?}",
            other
                .iter()
                .map(|w| (w.name_any(), w.status.as_ref().map(|s| &s.conditions)))
                .collect::<Vec<_>>()
        )),
    }
    let queue = lab.queue().await?;
    if !is_active(&queue) {
        bad.push("ClusterQueue not Active".into());
    }
    match entry(&queue, CLUSTER) {
        Some(quota)
            if quota.get(hearth_api::names::CLUSTER_SLOT_RESOURCE) == Some(&SLOTS)
                && quota
                    .iter()
                    .any(|(r, n)| r.starts_with("fournos/gpu-") && *n > 0) => {}
        other => bad.push(format!("{CLUSTER}: queue entry {other:?}")),
    }
    Ok(bad)
}

#[tokio::test]
async fn upgrade_keeps_locks_and_quota_and_applies_the_new_crd_and_values() -> Result<()> {
    let plane = plane().await?;
    let kubeconfig = plane.management_kubeconfig();
    let iso = Isolated {
        id: "upgrade".into(),
        scope: Scope::base(),
    };
    let chart = chart_dir();
    let (mut pods, lab) = release::install(
        plane,
        &iso,
        &chart,
        "--set config.sentinel=workload",
        CLUSTER,
    )
    .await?;
    let lab = Arc::new(lab);
    until("onboarded, published and locked", DEADLINE, || async {
        let bad = match lab.clusters.get_opt(CLUSTER).await? {
            None => vec!["no FournosCluster yet".to_owned()],
            // Locked as a person does, once discovery has made the cluster.
            Some(fc) if fc.spec.owner.is_none() => {
                lab.set_spec(CLUSTER, json!({ "owner": "alice" })).await?;
                vec!["owner just set".to_owned()]
            }
            Some(_) => violations(&lab).await?,
        };
        Ok(if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", pods.logs()))?;

    // The old CRD prunes the next release's field. Read untyped: Hearth's own type would
    // drop a field it does not know.
    let raw: Api<DynamicObject> = Api::namespaced_with(
        lab.client.clone(),
        &iso.namespace,
        &ApiResource::erase::<FournosCluster>(&()),
    );
    let note = json!({ "spec": { NEW_FIELD: "written before the upgrade" } });
    raw.patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&note))
        .await?;
    let fc = raw.get(CLUSTER).await?.data;
    ensure!(
        fc["spec"].get(NEW_FIELD).is_none(),
        "the installed CRD already keeps {NEW_FIELD}"
    );

    let checkout = tempdir()?;
    let dir = next_release(&chart, &checkout)?;
    let blocks = sh_blocks(DOCS, SECTION)?;
    ensure!(blocks.len() == 3, "three steps in {SECTION}: {blocks:?}");
    let sampler = {
        let lab = lab.clone();
        Sampler::start(move || {
            let lab = lab.clone();
            async move { violations(&lab).await }
        })
    };
    let replaced = async {
        run_sh(&blocks[0], &dir, &kubeconfig, &[])?;
        run_sh(&blocks[1], &dir, &kubeconfig, &[])?;
        // blocks[2] is `kubectl rollout status`: it waits for Pods a kubelet would run.
        pods.roll_out().await
    }
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", pods.logs()))?;
    // The new controllers act on what they find right after they start: the window in
    // which a lock or quota would be dropped, watched on top of the sampling.
    holds_for(
        "the lock and quota after the rollout",
        Duration::from_secs(10),
        || async {
            let bad = violations(&lab).await?;
            Ok(if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            })
        },
    )
    .await?;
    let samples = sampler.finish("the upgrade")?;
    println!("{samples} samples during the upgrade; replaced {replaced:?}");
    ensure!(
        replaced.len() == Controller::ALL.len(),
        "every Deployment's pod template changed with the value: {replaced:?}"
    );

    lab.probe(CLUSTER).await?;
    let still = violations(&lab).await?;
    ensure!(still.is_empty(), "after the upgrade: {still:?}");
    raw.patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&note))
        .await?;
    let fc = raw.get(CLUSTER).await?.data;
    ensure!(
        fc["spec"][NEW_FIELD] == "written before the upgrade",
        "the upgraded CRD keeps {NEW_FIELD}: {}",
        fc["spec"]
    );
    for (controller, (running, env)) in &pods.running {
        let want = format!("{}={}", CHANGED.0, CHANGED.1);
        ensure!(
            env.iter().any(|(k, v)| (k.as_str(), v.as_str()) == CHANGED),
            "{controller:?}'s Deployment has {want}: {env:?}"
        );
        ensure!(
            pods.process_env(running)?.lines().any(|l| l == want),
            "{controller:?} runs with {want}"
        );
    }
    let _ = std::fs::remove_dir_all(&checkout);
    Ok(())
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hearth-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
