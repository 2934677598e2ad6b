//! The onboarding sweep: observe both caches, plan with
//! [`plan_onboarding`](crate::onboarding::plan_onboarding), apply (create, delete, warn),
//! and forget what the caches no longer need remembered (gone objects).
//!
//! It runs on every Secret event and on the cluster events that change what it reads
//! ([`sweep_fingerprint`](crate::observe::sweep_fingerprint); see `Context::watched`), when this replica becomes leader,
//! and every resync interval, resting three times its planning time between sweeps
//! ([`SWEEP_REST`]); never before both caches hold a full list: an empty
//! Secret cache would otherwise read as "every Secret is gone" and offboard everything.
//! Only the lease holder applies; every replica counts undecodable objects.

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_api::names::{
    AUTO_DISCOVERED_LABEL, KUBECONFIG_SECRET_SELECTOR, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use hearth_api::{FournosCluster, FournosClusterSpec};
use hearth_runtime::events::Event;
use hearth_runtime::kit::answer::{is_conflict, is_gone_or_replaced};
use hearth_runtime::kit::{
    Ledger, MAX_DECODE_ERROR, Triggers, WRITES_IN_FLIGHT, WriteBehind, Wrote,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Resource as _, ResourceExt as _};

use crate::cluster_cache::ClusterObject;
use crate::context::Context;
use crate::error::Error;
use crate::observe::{observe_cluster, observe_secret};
use crate::onboarding::{
    CLUSTER_NOT_FROM_SECRET, HeldBack, NewCluster, NotAdopted, OFFBOARDING_HELD_BACK,
    ObservedCluster, ObservedSecret, Offboard, OnboardingPlan, PlanSettings, SecretWarning,
    plan_onboarding,
};
use crate::secret::SecretObject;
use jiff::Timestamp;

/// What the sweep remembers so that it does not repeat itself: each warning is
/// published once per object version, each offboarding once per cluster.
#[derive(Default)]
struct Reported {
    /// `(uid, resourceVersion, reason)` of Secrets and clusters warned about.
    warned: HashSet<(String, String, &'static str)>,
    /// uids of clusters whose deletion was requested.
    offboarded: HashSet<String>,
    /// `(cluster uid, deadline)` of held-back offboardings announced.
    held_back: HashSet<(String, Timestamp)>,
    /// `(cluster uid, Secret uid)` of clusters announced as not created from their Secret.
    not_adopted: HashSet<(String, String)>,
    /// Wakes the sweep at the next held-back deadline; replaced by every sweep.
    wake: Option<AbortOnDrop>,
}

/// The creates handed to the background and the clusters created that the cache does
/// not show yet, by name (the kit's ledger): a sweep that follows a create before its
/// watch event would create them again (a 409 each, hundreds in a burst of
/// onboardings). A failed create is forgotten, so the next sweep plans it again.
/// [`WRITES_IN_FLIGHT`] creates at a time: what protects the apiserver.
#[derive(Clone)]
struct Creates(Arc<WriteBehind<String, NewCluster>>);

impl Creates {
    fn new(ctx: &Arc<Context>) -> Self {
        // Bounded by the Secrets there are: a create is one Secret's.
        let ledger = Ledger::default();
        let creates = WriteBehind::new(ledger, ctx.rt.leader(), None);
        let ctx = ctx.clone();
        creates.spawn(WRITES_IN_FLIGHT, move |_, new: NewCluster| {
            let ctx = ctx.clone();
            async move {
                match onboard(&ctx, &new).await {
                    Ok(()) => Wrote::Written(None),
                    Err(error) => {
                        tracing::warn!(cluster = %new.name, reason = error.reason(), error = %error, "onboarding failed; retrying on the next sweep");
                        Wrote::Dropped
                    }
                }
            }
        });
        Self(creates)
    }
}

/// Aborts the task when dropped, so a replaced wake-up never fires.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) async fn run(ctx: Arc<Context>) {
    if !ctx.wait_synced().await {
        return;
    }
    tracing::info!(
        clusters = ctx.clusters.state().len(),
        secrets = ctx.secrets.state().len(),
        "caches synced"
    );

    let reported = tokio::sync::Mutex::new(Reported::default());
    let creates = Creates::new(&ctx);
    Triggers {
        changes: ctx.changes.subscribe(),
        leader: ctx.rt.leader(),
        resync: ctx.settings.resync,
        debounce: Duration::ZERO,
        shutdown: ctx.rt.shutdown(),
    }
    .run(|| async {
        let planning = sweep_once(&ctx, &mut *reported.lock().await, &creates).await;
        // A sweep reads every Secret and cluster: at 1000 clusters a few milliseconds of
        // the one thread that also probes and writes. In a burst the next change is
        // always there already, so back-to-back sweeps would take that thread whole and
        // hold up the probes and creates they plan. Resting SWEEP_REST times as long as
        // the sweep planned keeps sweeps to a quarter of the thread; the changes that
        // come meanwhile are taken together by the next sweep. At 10 clusters the rest
        // is a few microseconds.
        tokio::time::sleep(planning * SWEEP_REST).await;
        Ok::<_, Infallible>(())
    })
    .await;
}

/// How many times as long as its planning a sweep rests before the next (see [`run`]).
const SWEEP_REST: u32 = 3;

/// One sweep; returns how long it took to plan (the part that reads every object).
async fn sweep_once(ctx: &Arc<Context>, reported: &mut Reported, creates: &Creates) -> Duration {
    let started = Instant::now();
    let secrets = ctx.secrets.state();
    let clusters = ctx.clusters.state();
    record_and_forget(ctx, &secrets, &clusters, reported);

    if !ctx.rt.is_leader() {
        return started.elapsed();
    }
    for invalid in clusters.iter().filter(|c| c.0.is_err()) {
        report_invalid_cluster(ctx, invalid, reported).await;
    }

    let observed_secrets: Vec<ObservedSecret> = secrets.iter().map(|s| observe_secret(s)).collect();
    let observed_clusters: Vec<ObservedCluster> =
        clusters.iter().map(|c| observe_cluster(c)).collect();
    let OnboardingPlan {
        create,
        delete,
        held_back,
        warnings,
        not_adopted,
    } = plan_onboarding(
        &observed_secrets,
        &observed_clusters,
        &PlanSettings {
            pattern: &ctx.settings.pattern,
            secrets_namespace: &ctx.settings.secrets_namespace,
            namespace: &ctx.settings.namespace,
            now: Timestamp::now(),
            locked_grace: ctx.settings.offboard_locked_grace,
        },
    );
    reported.wake = wake_at(ctx, held_back.iter().filter_map(|h| h.until).min());

    // Leadership can be lost mid-sweep: each step stops as soon as it is.
    let create = not_created_yet(
        create,
        &mut creates.0.lock(),
        (tokio::time::Instant::now(), ctx.settings.resync),
        |name| ctx.clusters.named(name).is_some(),
    );
    let planning = started.elapsed();
    onboard_all(create, creates);
    if !offboard_all(ctx, delete, reported).await {
        return planning;
    }
    announce_held_back(ctx, held_back, reported).await;
    announce_not_adopted(ctx, not_adopted, reported).await;
    publish_warnings(ctx, warnings, reported).await;
    planning
}

/// A sweep at `at` (just after), when the first held-back offboarding is due: no change
/// of any watched object marks that moment.
fn wake_at(ctx: &Context, at: Option<Timestamp>) -> Option<AbortOnDrop> {
    let at = at?;
    let wait = at
        .duration_since(Timestamp::now())
        .max(jiff::SignedDuration::ZERO);
    let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO) + Duration::from_millis(50);
    Some(AbortOnDrop(ctx.changes.bump_after(wait)))
}

/// A Warning Event on each locked cluster kept after its Secret went, once per deadline.
async fn announce_held_back(ctx: &Context, held_back: Vec<HeldBack>, reported: &mut Reported) {
    for held in held_back {
        let (Some(uid), Some(until)) = (held.uid.clone(), held.until) else {
            continue;
        };
        if !reported.held_back.insert((uid, until)) {
            continue;
        }
        tracing::warn!(cluster = %held.name, secret = %ctx.secret_ref(&held.secret), %until, "Secret gone, cluster locked: offboarding held back");
        let reference = cluster_reference(ctx, &held.name, held.uid.clone());
        let event = Event::warning(OFFBOARDING_HELD_BACK, "Offboard", held.message);
        ctx.events.publish(&reference, &event).await;
    }
}

/// A Warning Event on the cluster and on the Secret, once per pair.
async fn announce_not_adopted(
    ctx: &Context,
    not_adopted: Vec<NotAdopted>,
    reported: &mut Reported,
) {
    for found in not_adopted {
        let key = (
            found.cluster_uid.clone().unwrap_or_default(),
            found.secret_uid.clone().unwrap_or_default(),
        );
        if !reported.not_adopted.insert(key) {
            continue;
        }
        tracing::warn!(cluster = %found.cluster, secret = %ctx.secret_ref(&found.secret), "{}", found.message);
        let event = Event::warning(CLUSTER_NOT_FROM_SECRET, "Onboard", found.message);
        let cluster = cluster_reference(ctx, &found.cluster, found.cluster_uid.clone());
        ctx.events.publish(&cluster, &event).await;
        let secret = secret_reference(ctx, &found.secret, found.secret_uid.as_deref());
        ctx.events.publish(&secret, &event).await;
    }
}

/// Reports the counts of undecodable objects every replica exports, and forgets what
/// was reported about objects (or versions) that are gone and the writes the watch
/// delivered, so memory follows the caches.
fn record_and_forget(
    ctx: &Context,
    secrets: &[Arc<SecretObject>],
    clusters: &[Arc<ClusterObject>],
    reported: &mut Reported,
) {
    let invalid_clusters = clusters.iter().filter(|c| c.0.is_err()).count();
    let invalid_secrets = secrets.iter().filter(|s| s.0.is_err()).count();
    ctx.metrics
        .controller
        .invalid_objects("FournosCluster", invalid_clusters);
    ctx.metrics
        .controller
        .invalid_objects("Secret", invalid_secrets);
    // Borrowed from the caches: this runs on every change, and copying the uids (and
    // versions) out of them each time cost thousands of allocations.
    let live: HashSet<&str> = clusters
        .iter()
        .filter_map(|c| c.meta().uid.as_deref())
        .collect();
    ctx.forget_except(|uid| live.contains(uid));
    reported.forget_gone(&live, secrets, clusters);
}

impl Reported {
    /// Forgets what was reported about objects that are gone (`live`: the uids of the
    /// cached clusters), and the warnings about versions since replaced.
    fn forget_gone(
        &mut self,
        live: &HashSet<&str>,
        secrets: &[Arc<SecretObject>],
        clusters: &[Arc<ClusterObject>],
    ) {
        self.offboarded.retain(|uid| live.contains(uid.as_str()));
        self.held_back
            .retain(|(uid, _)| live.contains(uid.as_str()));
        self.not_adopted
            .retain(|(uid, _)| live.contains(uid.as_str()));
        if self.warned.is_empty() {
            return;
        }
        let versions: HashSet<(&str, &str)> = secrets
            .iter()
            .map(|s| s.meta())
            .chain(clusters.iter().map(|c| c.meta()))
            .map(|meta| {
                (
                    meta.uid.as_deref().unwrap_or_default(),
                    meta.resource_version.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        self.warned
            .retain(|(uid, rv, _)| versions.contains(&(uid.as_str(), rv.as_str())));
    }
}

/// The planned creates but those handed over or of clusters this replica created and
/// the cache does not show yet. One that never shows (a watch that re-lists skips an
/// object created and deleted meanwhile) is planned again after `resync` (from `now`).
fn not_created_yet(
    create: Vec<NewCluster>,
    creates: &mut Ledger<String, NewCluster>,
    (now, resync): (tokio::time::Instant, Duration),
    cached: impl Fn(&str) -> bool,
) -> Vec<NewCluster> {
    creates.retain(|name, _, stage| !stage.written_long_ago(now, resync) && !cached(name));
    create
        .into_iter()
        .filter(|new| !creates.contains(&new.name))
        .collect()
}

/// Hands each planned create to the background, and returns at once. Each cluster is its
/// own object: a Secret that arrives while other creates are on their way is planned by
/// the next sweep and created beside them, not after them. Nothing is sent once this
/// replica lost leadership.
fn onboard_all(create: Vec<NewCluster>, creates: &Creates) {
    for new in create {
        creates.0.submit(new.name.clone(), new, 0);
    }
}

/// Deletes the planned clusters, each once; false when leadership was lost on the way.
async fn offboard_all(ctx: &Context, delete: Vec<Offboard>, reported: &mut Reported) -> bool {
    for gone in delete {
        if !ctx.rt.is_leader() {
            return false;
        }
        let Some(uid) = gone.uid.clone() else {
            continue;
        };
        if reported.offboarded.contains(&uid) {
            continue;
        }
        match offboard(ctx, &gone).await {
            Ok(()) => {
                reported.offboarded.insert(uid);
            }
            Err(error) => {
                tracing::warn!(cluster = %gone.name, reason = error.reason(), error = %error, "offboarding failed; retrying on the next sweep");
            }
        }
    }
    true
}

/// Publishes each Secret warning once per object version.
async fn publish_warnings(ctx: &Context, warnings: Vec<SecretWarning>, reported: &mut Reported) {
    for warning in warnings {
        let key = (
            warning.uid.clone().unwrap_or_default(),
            warning.resource_version.clone().unwrap_or_default(),
            warning.problem.reason(),
        );
        if reported.warned.contains(&key) {
            continue;
        }
        tracing::warn!(
            secret = %ctx.secret_ref(&warning.secret),
            reason = warning.problem.reason(),
            "{}",
            warning.message
        );
        let reference = secret_reference(ctx, &warning.secret, warning.uid.as_deref());
        let event = Event::warning(warning.problem.reason(), "Onboard", warning.message);
        ctx.events.publish(&reference, &event).await;
        reported.warned.insert(key);
    }
}

/// Creates the FournosCluster for a Secret. One that exists already (the cache lags
/// behind a create of ours, or a person was quicker) is left alone: create only.
async fn onboard(ctx: &Context, new: &NewCluster) -> Result<(), Error> {
    let mut cluster = FournosCluster::new(
        &new.name,
        FournosClusterSpec {
            kubeconfig_secret: new.secret.clone(),
            owner: new.owner.clone(),
            ..Default::default()
        },
    );
    cluster.metadata.namespace = Some(ctx.settings.namespace.clone());
    cluster.metadata.labels = Some(BTreeMap::from([
        (AUTO_DISCOVERED_LABEL.to_owned(), "true".to_owned()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
    ]));
    match ctx
        .cluster_api
        .create(&PostParams::default(), &cluster)
        .await
    {
        Ok(created) => {
            ctx.metrics.onboarding("create", true);
            if let (Some(uid), Some(secret_uid)) = (&created.metadata.uid, &new.secret_uid) {
                ctx.created_from(uid, &new.secret, secret_uid);
            }
            let secret = ctx.secret_ref(&new.secret);
            let owner = new
                .owner
                .as_deref()
                .map(|o| format!(", owner {o}"))
                .unwrap_or_default();
            tracing::info!(cluster = %new.name, %secret, "onboarded");
            let event = Event::normal(
                "Onboarded",
                "Onboard",
                format!("created from Secret {secret}{owner}"),
            );
            // In the background: the next create must not wait for a best-effort write.
            ctx.events
                .publish_in_background(created.object_ref(&()), event);
            Ok(())
        }
        Err(error) if is_conflict(&error) => Ok(()),
        Err(source) => {
            ctx.metrics.onboarding("create", false);
            let cluster = ctx.cluster_ref(&new.name);
            Err(Error::Create { cluster, source })
        }
    }
}

/// Deletes a FournosCluster whose source Secret is gone, with an Event on it first. The
/// uid precondition keeps a cluster recreated meanwhile safe.
async fn offboard(ctx: &Context, gone: &Offboard) -> Result<(), Error> {
    let secret = ctx.secret_ref(&gone.secret);
    let reference = cluster_reference(ctx, &gone.name, gone.uid.clone());
    let event = Event::normal(
        "Offboarded",
        "Offboard",
        format!(
            "Secret {secret}, which this FournosCluster was created from, is gone (deleted, no \
             longer labeled {KUBECONFIG_SECRET_SELECTOR}, or no longer named for it by the \
             pattern): deleting the cluster"
        ),
    );
    ctx.events.publish(&reference, &event).await;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: gone.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match ctx.cluster_api.delete(&gone.name, &params).await {
        Ok(_) => {
            ctx.metrics.onboarding("delete", true);
            tracing::info!(cluster = %gone.name, %secret, "offboarded");
            Ok(())
        }
        // Gone already, or replaced by a new cluster of the same name (uid mismatch).
        Err(error) if is_gone_or_replaced(&error) => Ok(()),
        Err(source) => {
            ctx.metrics.onboarding("delete", false);
            let cluster = ctx.cluster_ref(&gone.name);
            Err(Error::Delete { cluster, source })
        }
    }
}

/// A FournosCluster that does not decode: logged and reported once per version, and
/// otherwise left alone (never probed, never deleted).
async fn report_invalid_cluster(ctx: &Context, object: &ClusterObject, reported: &mut Reported) {
    let Err(invalid) = &object.0 else {
        return;
    };
    let meta = object.meta();
    let key = (
        meta.uid.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
        "InvalidObject",
    );
    if reported.warned.contains(&key) {
        return;
    }
    let error = hearth_api::text::bounded(&invalid.error, MAX_DECODE_ERROR);
    let name = object.name_any();
    tracing::warn!(cluster = %name, %error, "FournosCluster does not decode; skipped");
    let reference = cluster_reference(ctx, &name, invalid.metadata.uid.clone());
    let event = Event::warning(
        "InvalidObject",
        "Observe",
        format!("hearth-discovery cannot read this FournosCluster and skips it: {error}"),
    );
    ctx.events.publish(&reference, &event).await;
    reported.warned.insert(key);
}

fn cluster_reference(ctx: &Context, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(FournosCluster::api_version(&()).into_owned()),
        kind: Some(FournosCluster::kind(&()).into_owned()),
        name: Some(name.to_owned()),
        namespace: Some(ctx.settings.namespace.clone()),
        uid,
        ..Default::default()
    }
}

fn secret_reference(ctx: &Context, name: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Secret".into()),
        name: Some(name.to_owned()),
        namespace: Some(ctx.settings.secrets_namespace.clone()),
        uid: uid.map(str::to_owned),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cached_cluster;

    fn new(name: &str) -> NewCluster {
        NewCluster {
            name: name.to_owned(),
            secret: format!("{name}-kubeconfig"),
            secret_uid: None,
            owner: None,
        }
    }

    #[test]
    fn what_was_reported_about_gone_objects_and_old_versions_is_forgotten() {
        let mut reported = Reported::default();
        for uid in ["a", "b"] {
            reported.offboarded.insert(uid.to_owned());
            reported
                .held_back
                .insert((uid.to_owned(), Timestamp::UNIX_EPOCH));
            reported
                .not_adopted
                .insert((uid.to_owned(), "secret".to_owned()));
        }
        reported.warned.insert(("a".into(), "1".into(), "R"));
        reported.warned.insert(("a".into(), "2".into(), "R"));
        reported.warned.insert(("b".into(), "1".into(), "R"));
        let clusters = [cached_cluster("a", "2")];
        let live = HashSet::from(["a"]);
        reported.forget_gone(&live, &[], &clusters);
        assert_eq!(reported.offboarded, HashSet::from(["a".to_owned()]));
        assert_eq!(reported.held_back.len(), 1);
        assert_eq!(reported.not_adopted.len(), 1);
        assert_eq!(
            reported.warned,
            HashSet::from([("a".to_owned(), "2".to_owned(), "R")]),
            "only the warning about the version cached now stays"
        );
    }

    #[test]
    fn a_cluster_created_but_not_yet_cached_is_not_created_again_until_the_resync() {
        let start = tokio::time::Instant::now();
        let resync = Duration::from_secs(1);
        let mut created = Ledger::default();
        created.remember("a".to_owned(), new("a"), start);
        created.remember("b".to_owned(), new("b"), start);
        let names = |c: Vec<NewCluster>| c.into_iter().map(|n| n.name).collect::<Vec<_>>();
        // b is cached (so not planned), a is not yet: only c is created; b is forgotten.
        let planned = vec![new("a"), new("c")];
        let create = not_created_yet(planned, &mut created, (start, resync), |n| n == "b");
        assert_eq!(names(create), ["c"]);
        let kept: Vec<&String> = created.iter().map(|(name, _, _)| name).collect();
        assert_eq!(kept, ["a"]);
        // A resync interval later, a that never showed is planned again.
        let create = not_created_yet(
            vec![new("a")],
            &mut created,
            (start + resync, resync),
            |_| false,
        );
        assert_eq!(names(create), ["a"]);
        assert_eq!(created.iter().count(), 0);
    }
}
