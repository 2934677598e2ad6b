//! New ResourceFlavors, created in the background.
//!
//! A reconcile hands the flavors its plan creates to [`NewFlavors`] and plans again at
//! once: no entry names a flavor before the cache shows it (the plan reserves the
//! cluster's place meanwhile, see the plan module's rules), so nothing in a round needs
//! the create to have landed, and a cluster whose count arrives during a burst of new
//! clusters is planned without waiting for their flavors. What protects the apiserver is
//! the bound, [`WRITES_IN_FLIGHT`] creates at a time; a flavor has at most one create
//! waiting, and a newer shape handed over for it replaces the waiting one.
//!
//! What was handed over is remembered until the flavor cache holds the flavor, so the
//! next plans, made from a cache that does not show it yet, neither create it again nor
//! treat its cluster differently ([`NewFlavors::creating`] is the plan's
//! `PlanInput::creating`). A create the cache has not shown after [`UNSEEN_FOR`] is
//! forgotten and asked for again by the next plan (applying what exists changes
//! nothing): the flavor was deleted before the watch delivered it, or the watch is down.
//! A failed create is retried after the flavor's backoff (1 s doubling to a minute),
//! through a reconcile that plans it again; the reconcile reports the failure
//! (`ApplyFlavorFailed`), and the cluster keeps its reservation meanwhile. The memory
//! is the kit's [`Ledger`](hearth_runtime::kit::Ledger).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_api::kueue::ResourceFlavor;
use hearth_runtime::kit::{
    Cache, Changes, Ledger, Stage, Submitted, WRITES_IN_FLIGHT, WriteBehind, Wrote,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::apply::{FlavorAction, Writer};
use crate::cached::CachedFlavor;
use crate::error::Error;
use hearth_runtime::lock;

/// How long a created flavor the cache does not show is remembered.
pub(crate) const UNSEEN_FOR: Duration = Duration::from_secs(30);

/// A flavor to create: equal to another when it would create the same object.
#[derive(Clone)]
struct Shape(ResourceFlavor);

impl PartialEq for Shape {
    fn eq(&self, other: &Self) -> bool {
        self.0.metadata == other.0.metadata && self.0.spec == other.0.spec
    }
}

/// The flavor creates of the leader, by name: the latest shape handed over. Cheap to
/// clone; clones share it.
#[derive(Clone)]
pub(crate) struct NewFlavors {
    creates: Arc<WriteBehind<String, Shape>>,
    flavors: Cache<CachedFlavor>,
    /// The first failure not yet reported by a reconcile.
    failure: Arc<Mutex<Option<Error>>>,
}

impl NewFlavors {
    pub fn new(
        writer: Writer,
        flavors: Cache<CachedFlavor>,
        leader: watch::Receiver<bool>,
        changes: Changes,
    ) -> Self {
        // Bounded by the flavors there are to create: one a cluster (the ledger's own
        // bound is never reached).
        let creates = WriteBehind::new(Ledger::default(), leader, Some(changes));
        let failure = Arc::new(Mutex::new(None));
        let writer = Arc::new(writer);
        let failed = failure.clone();
        creates.spawn(WRITES_IN_FLIGHT, move |name: String, flavor: Shape| {
            let (writer, failed) = (writer.clone(), failed.clone());
            async move {
                match writer.apply_flavor(&flavor.0, FlavorAction::Create).await {
                    Ok(_) => Wrote::Written(None),
                    Err(error) => {
                        tracing::warn!(flavor = %name, %error, "cannot create ResourceFlavor");
                        lock(&failed).get_or_insert(error);
                        Wrote::Failed
                    }
                }
            }
        });
        Self {
            creates,
            flavors,
            failure,
        }
    }

    /// Forgets the creates whose flavor the cache holds (and those unseen for
    /// [`UNSEEN_FOR`]). Call before taking the snapshot, so that the plan and this
    /// memory agree on which flavors exist.
    pub fn settle(&self) {
        let now = Instant::now();
        self.creates.lock().retain(|name, _, stage| {
            !stage.written_long_ago(now, UNSEEN_FOR) && self.flavors.named(name).is_none()
        });
    }

    /// The flavors whose create is under way, for the plan (`PlanInput::creating`):
    /// waiting, being created, created but not in the cache yet, or failed and not yet
    /// due again.
    pub fn creating(&self) -> BTreeSet<String> {
        let now = Instant::now();
        self.creates
            .lock()
            .iter()
            .filter(
                |(_, _, stage)| !matches!(stage, Stage::Failed { retry_at } if *retry_at <= now),
            )
            .map(|(name, _, _)| name.clone())
            .collect()
    }

    /// Whether the create of `name` is on its way and has not failed: the cluster's
    /// wait for it ends without anyone doing anything.
    pub fn on_its_way(&self, name: &str) -> bool {
        self.creates
            .lock()
            .get(&name.to_owned())
            .is_some_and(|(_, stage)| !matches!(stage, Stage::Failed { .. }))
    }

    /// Asks for `flavor` to be created. False when its create is already under way
    /// (a newer shape then replaces a waiting one).
    pub fn submit(&self, flavor: &ResourceFlavor) -> bool {
        let Some(name) = flavor.metadata.name.clone() else {
            return false;
        };
        self.creates.submit(name, Shape(flavor.clone()), 0) == Submitted::Queued
    }

    /// The first create that failed since the last call.
    pub fn take_failure(&self) -> Option<Error> {
        lock(&self.failure).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::desired_flavor;
    use crate::testing::FakeApi;
    use hearth_runtime::kit::HandFeed;
    use serde_json::Value;
    use std::sync::atomic::Ordering;

    struct Kit {
        new_flavors: NewFlavors,
        server: FakeApi,
        feed: HandFeed<CachedFlavor>,
    }

    /// The flavor an apply answers with: the one applied, at version `rv`.
    fn applied(_: &str, body: &Value, rv: &str) -> Value {
        let mut flavor = body.clone();
        flavor["metadata"]["resourceVersion"] = rv.into();
        flavor
    }

    /// NewFlavors creating on a [`FakeApi`], with an empty flavor cache.
    fn kit(open: bool) -> Kit {
        let server = FakeApi::new(open);
        let (writer, leader) = server.writer(|_| true, applied);
        let (cache, feed) = Cache::by_hand("ResourceFlavor", None);
        let new_flavors = NewFlavors::new(writer, cache, leader, Changes::default());
        Kit {
            new_flavors,
            server,
            feed,
        }
    }

    /// The names of the flavors applied, in order.
    fn seen(kit: &Kit) -> Vec<String> {
        kit.server
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| {
                body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    impl Kit {
        fn submit(&self, name: &str) -> bool {
            self.new_flavors.submit(&desired_flavor(name, "hearth"))
        }

        /// Waits (10 s at most) until `done` holds.
        async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !done(self) {
                assert!(Instant::now() < deadline, "{what}: not after 10 s");
                tokio::task::yield_now().await;
            }
        }

        /// What the memory would say once `elapsed` has passed: every moment it holds is
        /// moved back by that much.
        fn time_passes(&self, elapsed: Duration) {
            self.new_flavors.creates.lock().age(elapsed);
        }

        /// Waits until no create waits or is under way.
        async fn settled(&self) {
            self.until("creates still under way", |kit| {
                !kit.new_flavors.creates.lock().busy()
            })
            .await;
        }
    }

    #[tokio::test]
    async fn a_flavor_is_created_once_and_remembered_until_the_cache_shows_it() {
        let mut kit = kit(true);
        assert!(kit.submit("a"));
        kit.settled().await;
        assert_eq!(seen(&kit), ["a"]);
        kit.new_flavors.settle();
        assert_eq!(kit.new_flavors.creating(), BTreeSet::from(["a".to_owned()]));
        assert!(kit.new_flavors.on_its_way("a"));
        assert!(!kit.submit("a"), "created, not yet cached: not again");

        kit.feed
            .deliver(CachedFlavor::from(desired_flavor("a", "hearth")));
        kit.new_flavors.settle();
        assert!(kit.new_flavors.creating().is_empty(), "cached: forgotten");
        assert!(!kit.new_flavors.on_its_way("a"));
        assert_eq!(seen(&kit), ["a"]);
        assert!(kit.new_flavors.take_failure().is_none());
    }

    #[tokio::test]
    async fn creates_are_bounded_and_a_waiting_one_takes_the_latest_shape() {
        let kit = kit(false);
        let names: Vec<String> = (0..=WRITES_IN_FLIGHT).map(|i| format!("f{i:02}")).collect();
        for name in &names {
            assert!(kit.submit(name));
        }
        kit.until("every write slot taken", |kit| {
            kit.server.at_gate.load(Ordering::SeqCst) == WRITES_IN_FLIGHT as u64
        })
        .await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(seen(&kit).len(), WRITES_IN_FLIGHT, "one waits");
        // The one waiting is handed over again, cordoned now: one create, the new shape.
        let last = names.last().unwrap();
        let mut cordoned = desired_flavor(last, "hearth");
        cordoned.spec.node_taints = vec![crate::plan::cordon_taint()];
        assert!(!kit.new_flavors.submit(&cordoned), "coalesced");
        assert_eq!(kit.new_flavors.creating().len(), names.len());

        kit.server.gate.add_permits(names.len());
        kit.settled().await;
        let seen = kit.server.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), names.len(), "each created once");
        let (_, body) = seen
            .iter()
            .find(|(_, body)| body["metadata"]["name"] == last.as_str())
            .unwrap();
        assert_eq!(body["spec"]["nodeTaints"][0]["key"], "fournos.dev/cordoned");
    }

    #[tokio::test]
    async fn a_failed_create_is_reported_once_keeps_its_place_and_is_retried_after_its_backoff() {
        let kit = kit(true);
        kit.server.fail.store(true, Ordering::SeqCst);
        assert!(kit.submit("a"));
        kit.settled().await;
        let Some(Error::ApplyFlavor { name, .. }) = kit.new_flavors.take_failure() else {
            panic!("the failure is reported");
        };
        assert_eq!(name, "a");
        assert!(kit.new_flavors.take_failure().is_none(), "reported once");
        // Until its backoff passes, the plan treats it as being created (the cluster keeps
        // its reservation) and does not ask again; its cluster's wait is news now.
        kit.new_flavors.settle();
        assert_eq!(kit.new_flavors.creating(), BTreeSet::from(["a".to_owned()]));
        assert!(!kit.new_flavors.on_its_way("a"));
        assert_eq!(seen(&kit), ["a"]);

        kit.time_passes(hearth_runtime::kit::RETRY_MIN);
        assert!(kit.new_flavors.creating().is_empty(), "due: planned again");
        kit.server.fail.store(false, Ordering::SeqCst);
        assert!(kit.submit("a"));
        kit.settled().await;
        assert_eq!(seen(&kit), ["a", "a"]);
        assert!(kit.new_flavors.on_its_way("a"));
        assert!(kit.new_flavors.take_failure().is_none());
    }

    #[tokio::test]
    async fn a_create_the_cache_never_shows_is_forgotten_and_asked_again() {
        let kit = kit(true);
        assert!(kit.submit("a"));
        kit.settled().await;
        kit.new_flavors.settle();
        assert!(!kit.submit("a"));
        kit.time_passes(UNSEEN_FOR);
        kit.new_flavors.settle();
        assert!(kit.new_flavors.creating().is_empty());
        assert!(kit.submit("a"));
        kit.settled().await;
        assert_eq!(seen(&kit), ["a", "a"]);
    }
}
