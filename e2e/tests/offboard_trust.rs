//! What a lock user may edit cannot delete (DESIGN.md, "Sharpened rules, turn 4"):
//! offboarding follows the Secret a FournosCluster was created from, as hearth-discovery
//! recorded it in `status.sourceSecret`, never `spec.kubeconfigSecret` or the
//! `fournos.dev/auto-discovered` label, which anyone who may patch FournosClusters can
//! write.
//!
//! Each test acts as a lock user through a client holding exactly a lock user's rights
//! (get, list, watch, patch on FournosClusters in Hearth's namespace; see docs/plugin.md),
//! never as an administrator, and runs its own hearth-discovery in its own scope.
//!
//! Run: `cargo test -p hearth-e2e --test offboard_trust`.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::names::AUTO_DISCOVERED_LABEL;
use hearth_api::names::condition_types::KUBECONFIG_VALID;
use hearth_e2e::ControlPlane;
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::cluster_condition;
use hearth_e2e::plane::kubeconfig_secret_name;
use hearth_e2e::process::holds_for;
use hearth_e2e::world::World;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long any one expected change may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// Probe every 3 s, so that a status follows an edit within seconds.
const FAST: &[(&str, &str)] = &[
    ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3"),
    ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
];
/// `KubeconfigValid` reason and Warning Event of a `spec.kubeconfigSecret` that is not
/// the Secret the cluster was created from.
const SECRET_CHANGED: &str = "KubeconfigSecretChanged";
/// `KubeconfigValid` reason and Warning Event of a cluster labeled auto-discovered that
/// discovery has no record of creating.
const SOURCE_NOT_RECORDED: &str = "SourceNotRecorded";

/// One test's world: its scope, its discovery, and a lock user's view of its clusters.
struct Fixture {
    world: World<'static>,
    discovery: Running,
    /// FournosClusters as a lock user sees and patches them.
    as_lock_user: Api<FournosCluster>,
}

impl Fixture {
    async fn start(test: &str) -> Result<Fixture> {
        let plane = ControlPlane::shared().await?;
        let scope = plane.isolated(test).await?;
        let lock_user = hearth::lock_user(plane, &scope.namespace).await?;
        let as_lock_user = Api::namespaced(lock_user, &scope.namespace);
        let mut world = World::new(plane, scope).await?;
        let discovery = world.start(Controller::Discovery, "0", FAST).await?;
        Ok(Fixture {
            as_lock_user,
            world,
            discovery,
        })
    }

    /// Stores `cluster`'s kubeconfig Secret (target-a's node reader) as an administrator.
    async fn onboard(&self, cluster: &str) -> Result<()> {
        let target = self.world.plane.target("target-a")?;
        self.world
            .plane
            .create_kubeconfig_secret(
                &self.world.scope.secrets_namespace,
                cluster,
                target.node_reader_kubeconfig(),
            )
            .await?;
        Ok(())
    }

    /// A merge patch of `cluster` as the lock user.
    async fn patch_as_lock_user(&self, cluster: &str, body: serde_json::Value) -> Result<()> {
        self.as_lock_user
            .patch(cluster, &PatchParams::default(), &Patch::Merge(body))
            .await
            .with_context(|| format!("patching {cluster} as a lock user"))?;
        Ok(())
    }

    /// Waits for a Warning Event with `reason` about FournosCluster `name`.
    async fn wait_warning(&self, name: &str, reason: &str) -> Result<Event> {
        let events: Api<Event> =
            Api::namespaced(self.world.client.clone(), &self.world.scope.namespace);
        self.discovery
            .until(&format!("Warning {reason} on {name}"), DEADLINE, || async {
                let list = events.list(&ListParams::default()).await?;
                let about =
                    |e: &Event| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name);
                let seen: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| about(e))
                    .map(|e| e.reason.clone().unwrap_or_default())
                    .collect();
                Ok(list
                    .items
                    .into_iter()
                    .find(|e| {
                        about(e)
                            && e.reason.as_deref() == Some(reason)
                            && e.type_.as_deref() == Some("Warning")
                    })
                    .ok_or_else(|| format!("Events about {name}: {seen:?}")))
            })
            .await
    }

    /// Onboards a control cluster and waits for it: the sweep that created it read the
    /// caches after everything the test did before, so whatever that sweep would delete
    /// is deleted by then.
    async fn after_a_later_sweep(&self, label: &str) -> Result<()> {
        let control = self.world.scope.cluster(label);
        self.onboard(&control).await?;
        self.world
            .wait_cluster_opt(&control, "created", |c| {
                c.map(|_| ()).ok_or("absent".into())
            })
            .await
    }
}

fn uid(cluster: &FournosCluster) -> String {
    cluster.metadata.uid.clone().unwrap_or_default()
}

fn kubeconfig_reason(cluster: &FournosCluster) -> Option<&str> {
    cluster_condition(cluster, KUBECONFIG_VALID).map(|c| c.reason.as_str())
}

/// Waits for either the condition `reason` on the very cluster `uid_before`, or (the hole
/// this file guards) the cluster gone (`None`) or replaced: the caller asserts which.
async fn wait_reason_or_replaced(
    f: &Fixture,
    name: &str,
    uid_before: &str,
    reason: &str,
) -> Result<Option<FournosCluster>> {
    let what = format!("{reason}, or gone or replaced");
    f.world
        .wait_cluster_opt(name, &what, |cluster| match cluster {
            None => Ok(None),
            Some(c) if uid(&c) != uid_before || kubeconfig_reason(&c) == Some(reason) => {
                Ok(Some(c))
            }
            Some(c) => Err(format!(
                "KubeconfigValid reason {:?}, spec.kubeconfigSecret {}",
                kubeconfig_reason(&c),
                c.spec.kubeconfig_secret
            )),
        })
        .await
}

/// A lock user points an auto-discovered, cordoned cluster's `spec.kubeconfigSecret` at a
/// Secret that does not exist: the cluster is not deleted (same UID, cordon kept), and
/// says why in a Warning Event and `KubeconfigValid`. Neither that edit nor taking the
/// auto-discovered label away stops the real offboarding: deleting the Secret the cluster
/// was created from deletes it.
#[tokio::test]
async fn a_lock_users_edit_of_the_kubeconfig_secret_never_deletes_the_cluster() -> Result<()> {
    let f = Fixture::start("offboard_spec_edit").await?;
    let cluster = f.world.scope.cluster("edited");
    f.onboard(&cluster).await?;
    let valid = f
        .world
        .wait_cluster_opt(&cluster, "Valid", |c| match c {
            Some(c) if kubeconfig_reason(&c) == Some("Valid") => Ok(c),
            other => Err(format!("{:?}", other.as_ref().and_then(kubeconfig_reason))),
        })
        .await?;
    let uid_before = uid(&valid);

    f.patch_as_lock_user(
        &cluster,
        json!({"spec": {"cordon": {"reason": "driver upgrade", "by": "lock-user"}}}),
    )
    .await?;
    let missing = format!("no-such-secret-{}", f.world.scope.id);
    f.patch_as_lock_user(&cluster, json!({"spec": {"kubeconfigSecret": missing}}))
        .await?;

    let seen = wait_reason_or_replaced(&f, &cluster, &uid_before, SECRET_CHANGED)
        .await?
        .context("the cluster was deleted after a lock user edited spec.kubeconfigSecret")?;
    ensure!(
        uid(&seen) == uid_before,
        "the cluster was deleted and created again after a lock user edited \
         spec.kubeconfigSecret: uid {uid_before} → {}, cordon now {:?}",
        uid(&seen),
        seen.spec.cordon
    );
    let message = &cluster_condition(&seen, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message;
    let source = kubeconfig_secret_name(&cluster);
    ensure!(
        message.contains(&missing) && message.contains(&source) && message.contains("set it back"),
        "{message}"
    );
    let event = f.wait_warning(&cluster, SECRET_CHANGED).await?;
    ensure!(event.note.as_deref() == Some(message.as_str()), "{event:?}");

    f.after_a_later_sweep("control-spec").await?;
    let after = f.world.clusters.get(&cluster).await?;
    ensure!(
        uid(&after) == uid_before && after.spec.cordon.is_some(),
        "uid {uid_before} → {}, cordon {:?}",
        uid(&after),
        after.spec.cordon
    );
    holds_for(
        "the cluster to stay, probe after probe",
        Duration::from_secs(7),
        || async {
            let now = f.world.clusters.get_opt(&cluster).await?;
            Ok(match now {
                Some(c) if uid(&c) == uid_before => Ok(()),
                other => Err(format!("replaced or gone: {:?}", other.map(|c| uid(&c)))),
            })
        },
    )
    .await?;

    // Taking the label away changes nothing either: the Secret is still what offboards.
    f.patch_as_lock_user(
        &cluster,
        json!({"metadata": {"labels": {AUTO_DISCOVERED_LABEL: null}}}),
    )
    .await?;
    f.world
        .secrets
        .delete(&source, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting Secret {source}"))?;
    f.world
        .wait_cluster_opt(&cluster, "offboarded with its Secret", |c| match c {
            None => Ok(()),
            Some(c) => Err(format!("still there, uid {}", uid(&c))),
        })
        .await?;
    Ok(())
}

/// A lock user labels a hand-made cluster (whose Secret does not exist)
/// `fournos.dev/auto-discovered=true`: it is not deleted, and a Warning Event and
/// `KubeconfigValid` say that discovery never created it, so never offboards it.
#[tokio::test]
async fn a_lock_user_labelling_a_hand_made_cluster_auto_discovered_does_not_get_it_deleted()
-> Result<()> {
    let f = Fixture::start("offboard_label").await?;
    let hand = f.world.scope.cluster("hand");
    let mut made = FournosCluster::new(
        &hand,
        hearth_api::FournosClusterSpec {
            kubeconfig_secret: kubeconfig_secret_name(&hand),
            ..Default::default()
        },
    );
    made.metadata.namespace = Some(f.world.scope.namespace.clone());
    let made = f
        .world
        .clusters
        .create(&PostParams::default(), &made)
        .await?;
    let uid_before = uid(&made);
    f.world
        .wait_cluster_opt(&hand, "Missing", |c| match c {
            Some(c) if kubeconfig_reason(&c) == Some("Missing") => Ok(()),
            other => Err(format!("{:?}", other.as_ref().and_then(kubeconfig_reason))),
        })
        .await?;

    f.patch_as_lock_user(
        &hand,
        json!({"metadata": {"labels": {AUTO_DISCOVERED_LABEL: "true"}}}),
    )
    .await?;
    let seen = wait_reason_or_replaced(&f, &hand, &uid_before, SOURCE_NOT_RECORDED)
        .await?
        .context(
            "the hand-made cluster was deleted after a lock user labeled it auto-discovered",
        )?;
    ensure!(uid(&seen) == uid_before, "replaced: uid {}", uid(&seen));
    f.wait_warning(&hand, SOURCE_NOT_RECORDED).await?;

    f.after_a_later_sweep("control-label").await?;
    let after = f.world.clusters.get_opt(&hand).await?;
    ensure!(
        after.as_ref().map(uid).as_deref() == Some(uid_before.as_str()),
        "the hand-made cluster was deleted: {:?}",
        after.map(|c| uid(&c))
    );
    Ok(())
}
