//! End-to-end tests of hearth-discovery's offboarding and its answers to bad input, on the
//! local control plane: Secrets deleted, unlabeled, misnamed or deleted and created again,
//! clusters made by hand or locked. Real kube-apiservers as management cluster and as
//! targets, no mocks.
//!
//! Each test isolates itself (own namespaces, cluster names unique to the test; see the
//! `hearth_e2e` crate docs) and runs its own hearth-discovery process, built from this
//! workspace, with short intervals. Every wait polls against a deadline or watches;
//! nothing sleeps to synchronise.
//!
//! Run: `cargo test -p hearth-e2e --test discovery_offboarding` (the e2e kit builds the
//! controllers first; attaches to `HEARTH_E2E_PLANE_DIR` if set).

use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt as _;
use hearth_api::names::{
    ALLOWED_CLUSTERS_ANNOTATION, AUTO_DISCOVERED_LABEL, OWNER_ANNOTATION,
    condition_types::KUBECONFIG_VALID, controllers,
};
use hearth_api::{FournosCluster, FournosClusterSpec, KubeconfigStatus};
use hearth_e2e::discovery::{
    DEADLINE, FAST, Fixture, conditions_text, expected_gpus, failures, kubeconfig_status,
    reported_gpus, secret_name,
};
use hearth_e2e::hearth::{self, Controller};
use hearth_e2e::invariants::cluster_condition as condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

/// Deleting a Secret, or taking its label away, deletes its auto-discovered
/// FournosCluster, with an `Offboarded` Event on the way.
#[tokio::test]
async fn offboarding_by_secret_deletion_or_unlabeling() -> Result<()> {
    let f = Fixture::start("offboarding", FAST).await?;
    let target = f.plane.target("target-a")?;
    let deleted = f.scope.cluster("deleted");
    let unlabeled = f.scope.cluster("unlabeled");
    for cluster in [&deleted, &unlabeled] {
        f.put_secret(
            &secret_name(cluster),
            target.node_reader_kubeconfig(),
            true,
            &[],
        )
        .await?;
        f.wait_status(cluster, KubeconfigStatus::Valid).await?;
    }

    f.delete_secret(&secret_name(&deleted)).await?;
    f.wait_gone(&deleted).await?;
    let event = f
        .wait_event(&f.scope.namespace, &deleted, "Offboarded")
        .await?;
    let note = event.note.unwrap_or_default();
    ensure!(note.contains(&secret_name(&deleted)), "{note}");

    f.put_secret(
        &secret_name(&unlabeled),
        target.node_reader_kubeconfig(),
        false,
        &[],
    )
    .await?;
    f.wait_gone(&unlabeled).await?;
    f.wait_event(&f.scope.namespace, &unlabeled, "Offboarded")
        .await?;

    // Labeled again: onboarded again.
    f.put_secret(
        &secret_name(&unlabeled),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&unlabeled, KubeconfigStatus::Valid).await?;
    Ok(())
}

/// A labeled Secret whose name does not match the pattern, or names an invalid cluster,
/// gets a Warning Event and nothing else.
#[tokio::test]
async fn a_secret_not_matching_the_pattern_gets_a_warning_and_nothing_else() -> Result<()> {
    let f = Fixture::start("pattern_mismatch", FAST).await?;
    let target = f.plane.target("target-a")?;
    let mismatched = format!("creds-{}", f.scope.id);
    let bad_name = format!("kubeconfig-a.b-{}", f.scope.id);
    f.put_secret(&mismatched, target.node_reader_kubeconfig(), true, &[])
        .await?;
    f.put_secret(&bad_name, target.node_reader_kubeconfig(), true, &[])
        .await?;

    let event = f
        .wait_event(
            &f.scope.secrets_namespace,
            &mismatched,
            "SecretNameMismatch",
        )
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
    let note = event.note.unwrap_or_default();
    ensure!(note.contains("kubeconfig-{cluster}"), "{note}");
    let event = f
        .wait_event(&f.scope.secrets_namespace, &bad_name, "InvalidClusterName")
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");

    // The sweep that warned would have created them; a control Secret proves a later one ran.
    let control = f.scope.cluster("control");
    f.put_secret(
        &secret_name(&control),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_cluster(&control, "created", |_| Ok(())).await?;
    let names: Vec<String> = f
        .clusters
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    ensure!(
        names == [control.clone()],
        "only the control cluster exists: {names:?}"
    );
    // Warned once per Secret version, not once per sweep.
    let warnings = f
        .events_about(&f.scope.secrets_namespace, &mismatched)
        .await?;
    let count: i32 = warnings
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    ensure!(count == 1, "{count} warnings about {mismatched}");
    Ok(())
}

/// A FournosCluster made by hand is never deleted: it reports `Missing` while its
/// Secret is absent (or unlabeled), `Invalid/SecretNotForThisCluster` while the Secret
/// (not named for it) does not list it in `fournos.dev/allowed-clusters`, `Valid` once
/// it does, and `Missing` again when the Secret goes, while an auto-discovered
/// neighbour is offboarded.
#[tokio::test]
async fn a_hand_made_cluster_is_never_deleted_and_reports_missing() -> Result<()> {
    let f = Fixture::start("hand_made", FAST).await?;
    let target = f.plane.target("target-a")?;
    let hand = f.scope.cluster("hand");
    let secret = format!("hand-kubeconfig-{}", f.scope.id);
    let mut cluster = FournosCluster::new(
        &hand,
        FournosClusterSpec {
            kubeconfig_secret: secret.clone(),
            ..Default::default()
        },
    );
    cluster.metadata.namespace = Some(f.scope.namespace.clone());
    f.clusters.create(&PostParams::default(), &cluster).await?;
    let missing = f.wait_status(&hand, KubeconfigStatus::Missing).await?;
    let message = &condition(&missing, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message;
    ensure!(message.contains(&secret), "{message}");

    // Unlabeled: invisible to discovery, so still Missing, probe after probe.
    f.put_secret(&secret, target.node_reader_kubeconfig(), false, &[])
        .await?;
    let seen = failures(&missing);
    let later = f
        .wait_cluster(&hand, "probed twice more", |c| {
            if failures(c) >= seen + 2 {
                Ok(())
            } else {
                Err(format!("failures {}", failures(c)))
            }
        })
        .await?;
    ensure!(
        kubeconfig_status(&later) == Some(KubeconfigStatus::Missing),
        "{}",
        conditions_text(&later)
    );
    // Labeled, but its name is not the pattern's for this cluster: refused until the
    // Secret says it is meant for it.
    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let refused = f.wait_status(&hand, KubeconfigStatus::Invalid).await?;
    let reason = &condition(&refused, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .reason;
    ensure!(reason == "SecretNotForThisCluster", "{reason}");
    f.put_secret(
        &secret,
        target.node_reader_kubeconfig(),
        true,
        &[(ALLOWED_CLUSTERS_ANNOTATION, &hand)],
    )
    .await?;
    f.wait_status(&hand, KubeconfigStatus::Valid).await?;

    let neighbour = f.scope.cluster("auto");
    f.put_secret(
        &secret_name(&neighbour),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&neighbour, KubeconfigStatus::Valid).await?;

    f.delete_secret(&secret).await?;
    f.delete_secret(&secret_name(&neighbour)).await?;
    f.wait_gone(&neighbour).await?;
    f.wait_status(&hand, KubeconfigStatus::Missing).await?;
    ensure!(
        f.clusters.get_opt(&hand).await?.is_some(),
        "the hand-made cluster was deleted"
    );
    // The Secret's name matches no pattern, but a cluster uses it: no warning.
    let warned: Vec<Option<String>> = f
        .events_about(&f.scope.secrets_namespace, &secret)
        .await?
        .into_iter()
        .map(|e| e.reason)
        .collect();
    ensure!(
        warned.is_empty(),
        "a Secret in use was warned about: {warned:?}"
    );
    Ok(())
}

/// `(uid, spec.owner)` of one version of a cluster.
type Incarnation = (String, Option<String>);

/// Every incarnation (uid) and owner one FournosCluster had while recorded, and whether
/// the watch saw it deleted.
struct Lifetime {
    seen: Arc<Mutex<(Vec<Incarnation>, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Lifetime {
    fn record(api: &Api<FournosCluster>, name: &str) -> Lifetime {
        let seen = Arc::new(Mutex::new((Vec::new(), false)));
        let record = seen.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let mut seen = record.lock().expect("lifetime");
                match item {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                        let entry = (c.metadata.uid.clone().unwrap_or_default(), c.spec.owner);
                        if seen.0.last() != Some(&entry) {
                            seen.0.push(entry);
                        }
                    }
                    Ok(watcher::Event::Delete(_)) => seen.1 = true,
                    _ => {}
                }
            }
        });
        Lifetime { seen, task }
    }

    /// `Ok` when the cluster only ever was `uid`, owned by `owner`, and never deleted.
    fn only(&self, uid: &str, owner: &str) -> std::result::Result<(), String> {
        let (versions, deleted) = self.seen.lock().expect("lifetime").clone();
        let expected = [(uid.to_owned(), Some(owner.to_owned()))];
        if deleted || versions != expected {
            Err(format!("deleted {deleted}, (uid, owner) seen {versions:?}"))
        } else {
            Ok(())
        }
    }
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn missing_since(cluster: &FournosCluster) -> Option<k8s_openapi::jiff::Timestamp> {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.secret_missing_since.as_ref())
        .map(|t| t.0)
}

/// Locks `cluster` for `owner` as a lock user would (lock-manager need not run: the
/// offboarding rule reads `spec.owner`), and waits until the watch shows it.
async fn set_owner(f: &Fixture, cluster: &str, owner: &str) -> Result<()> {
    f.clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": owner } })),
        )
        .await
        .with_context(|| format!("locking {cluster} for {owner}"))?;
    f.wait_cluster(cluster, &format!("owned by {owner}"), |c| {
        (c.spec.owner.as_deref() == Some(owner))
            .then_some(())
            .ok_or_else(|| format!("owner {:?}", c.spec.owner))
    })
    .await?;
    Ok(())
}

/// A Secret deleted and created again (a rotation done that way, a GitOps prune) does
/// not offboard a locked cluster: it stays, the same object with the same owner, says
/// when it would go and how to let it go now (a Warning Event and `KubeconfigValid`),
/// keeps that time across a restart of discovery, and is `Valid` again once the Secret
/// is back.
#[tokio::test]
async fn a_locked_cluster_survives_its_secret_deleted_and_recreated() -> Result<()> {
    let mut f = Fixture::start("held_back", FAST).await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("locked");
    let secret = secret_name(&cluster);
    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let valid = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    let uid = valid.metadata.uid.clone().context("uid")?;
    set_owner(&f, &cluster, "alice").await?;
    let lifetime = Lifetime::record(&f.clusters, &cluster);

    f.delete_secret(&secret).await?;
    let held = f
        .wait_cluster(&cluster, "Missing, held back for alice", |c| {
            let message = condition(c, KUBECONFIG_VALID).map(|c| c.message.clone());
            match (kubeconfig_status(c), missing_since(c), message) {
                (Some(KubeconfigStatus::Missing), Some(_), Some(m))
                    if m.contains("locked by alice") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await?;
    let since = missing_since(&held).context("secretMissingSince")?;
    let message = condition(&held, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message
        .clone();
    ensure!(
        message.contains("unless the Secret returns") && message.contains("unlock it"),
        "{message}"
    );
    let event = f
        .wait_event(&f.scope.namespace, &cluster, "OffboardingHeldBack")
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
    ensure!(
        event.note.as_deref() == Some(message.as_str()),
        "{:?} vs {message}",
        event.note
    );

    // A restart forgets nothing: the grace still counts from the first loss.
    f.discovery.stop(f.plane).await?;
    f.discovery = hearth::start(f.plane, &f.scope, Controller::Discovery, "1", FAST).await?;
    let seen = failures(&held);
    let later = f
        .wait_cluster(&cluster, "probed again after the restart", |c| {
            if failures(c) > seen {
                Ok(())
            } else {
                Err(format!("failures {}", failures(c)))
            }
        })
        .await?;
    ensure!(
        missing_since(&later) == Some(since),
        "secretMissingSince moved: {since} → {:?}",
        missing_since(&later)
    );

    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let back = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    ensure!(missing_since(&back).is_none(), "{:?}", back.status);
    f.eventually(
        "the same cluster, never deleted, owner alice",
        DEADLINE,
        || async { Ok(lifetime.only(&uid, "alice")) },
    )
    .await?;
    Ok(())
}

/// The grace period is bounded: a locked cluster whose Secret stays gone is offboarded
/// once it has passed, and an unlocked one at once, as before.
#[tokio::test]
async fn a_locked_cluster_is_offboarded_after_the_grace_and_an_unlocked_one_at_once() -> Result<()>
{
    const GRACE_SEC: i64 = 15;
    let grace = GRACE_SEC.to_string();
    let env: Vec<(&str, &str)> = FAST
        .iter()
        .copied()
        .chain([("HEARTH_OFFBOARD_LOCKED_GRACE_SEC", grace.as_str())])
        .collect();
    let f = Fixture::start("grace", &env).await?;
    let target = f.plane.target("target-a")?;
    let locked = f.scope.cluster("locked");
    let unlocked = f.scope.cluster("unlocked");
    for cluster in [&locked, &unlocked] {
        f.put_secret(
            &secret_name(cluster),
            target.node_reader_kubeconfig(),
            true,
            &[],
        )
        .await?;
        f.wait_status(cluster, KubeconfigStatus::Valid).await?;
    }
    set_owner(&f, &locked, "bob").await?;

    f.delete_secret(&secret_name(&unlocked)).await?;
    f.delete_secret(&secret_name(&locked)).await?;
    f.wait_gone(&unlocked).await?;
    f.wait_event(&f.scope.namespace, &locked, "OffboardingHeldBack")
        .await?;
    let held = f.clusters.get(&locked).await?;
    let since = missing_since(&held).context("secretMissingSince")?;

    f.wait_gone(&locked).await?;
    let gone_at = k8s_openapi::jiff::Timestamp::now();
    ensure!(
        gone_at.as_second() >= since.as_second() + GRACE_SEC,
        "offboarded at {gone_at}, before the grace from {since} had passed"
    );
    let event = f
        .wait_event(&f.scope.namespace, &locked, "Offboarded")
        .await?;
    ensure!(event.type_.as_deref() == Some("Normal"), "{event:?}");
    Ok(())
}

/// A FournosCluster someone created before its Secret arrived is not adopted: a Warning
/// Event on the cluster and on the Secret names it and says it was not created from the
/// Secret; it gets no auto-discovered label, its spec (owner, hardware) stays its
/// creator's (discovery never writes spec), and discovery writes its own status fields
/// only.
#[tokio::test]
async fn a_hand_made_cluster_is_not_adopted_by_a_secret_that_comes_later() -> Result<()> {
    let f = Fixture::start("squat", FAST).await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("squat");
    let secret = secret_name(&cluster);
    let squatter_hardware: hearth_api::Hardware = serde_json::from_value(json!({
        "gpus": [{
            "vendor": "NVIDIA", "model": "NVIDIA-H200", "shortName": "h200",
            "count": 64, "nodeCount": 8,
        }],
        "totalGPUs": 64,
    }))?;
    let mut squat = FournosCluster::new(
        &cluster,
        FournosClusterSpec {
            kubeconfig_secret: secret.clone(),
            owner: Some("mallory".into()),
            hardware: Some(squatter_hardware.clone()),
            ..Default::default()
        },
    );
    squat.metadata.namespace = Some(f.scope.namespace.clone());
    let created = f.clusters.create(&PostParams::default(), &squat).await?;
    f.wait_status(&cluster, KubeconfigStatus::Missing).await?;

    f.put_secret(
        &secret,
        target.node_reader_kubeconfig(),
        true,
        &[(OWNER_ANNOTATION, "alice")],
    )
    .await?;
    let on_cluster = f
        .wait_event(&f.scope.namespace, &cluster, "ClusterNotCreatedFromSecret")
        .await?;
    let on_secret = f
        .wait_event(
            &f.scope.secrets_namespace,
            &secret,
            "ClusterNotCreatedFromSecret",
        )
        .await?;
    for event in [&on_cluster, &on_secret] {
        ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
        let note = event.note.as_deref().unwrap_or_default();
        ensure!(
            note.contains(&format!(
                "FournosCluster {}/{cluster} was not created from Secret",
                f.scope.namespace
            )) && note.contains("spec.owner (mallory)")
                && note.contains("fournos.dev/owner (alice) is not applied"),
            "{note}"
        );
    }

    let valid = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    ensure!(
        valid.metadata.uid == created.metadata.uid,
        "the cluster was replaced"
    );
    let labels = valid.metadata.labels.clone().unwrap_or_default();
    ensure!(
        !labels.contains_key(AUTO_DISCOVERED_LABEL),
        "labelled as Hearth's: {labels:?}"
    );
    ensure!(
        valid.spec.owner.as_deref() == Some("mallory")
            && valid.spec.hardware.as_ref() == Some(&squatter_hardware),
        "spec changed: {:?}",
        valid.spec
    );
    // Discovery counted the target itself; the squatter's 64 H200s are nowhere in status.
    ensure!(
        reported_gpus(&valid) == expected_gpus(target.fleet()),
        "status.hardware {:?}",
        valid.status.as_ref().and_then(|s| s.hardware.clone())
    );
    let discovery_writes: Vec<(Option<String>, Option<String>)> = valid
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.manager.as_deref() == Some(controllers::DISCOVERY))
        .map(|m| (m.operation, m.subresource))
        .collect();
    ensure!(
        !discovery_writes.is_empty()
            && discovery_writes
                .iter()
                .all(|(_, subresource)| subresource.as_deref() == Some("status")),
        "discovery wrote more than status: {discovery_writes:?}"
    );
    Ok(())
}
