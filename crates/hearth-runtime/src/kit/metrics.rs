//! The metrics every controller exports about its reconciles and watches, under its
//! own prefix (`hearth_<controller>_reconciles_total`, …), and a span per reconcile.

use std::collections::HashSet;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::{Instrument as _, Span};

use super::FailureReason;

/// `reason`: an error's stable `reason()`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// `kind`: the kind a watch is of.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// A gauge per object (a cluster, a cluster's GPU model, …) whose series follow the
/// objects: each [`replace`](Self::replace) sets the current series and removes those
/// of objects that are gone, so a deleted cluster leaves no stale series behind.
#[derive(Clone, Debug)]
pub struct ObjectGauges<L> {
    family: Family<L, Gauge>,
    set: Arc<Mutex<HashSet<L>>>,
}

impl<L: Clone + Hash + Eq> Default for ObjectGauges<L> {
    fn default() -> Self {
        Self {
            family: Family::default(),
            set: Arc::default(),
        }
    }
}

impl<L: Clone + Hash + Eq> ObjectGauges<L> {
    /// The family, to register.
    pub fn family(&self) -> Family<L, Gauge> {
        self.family.clone()
    }

    /// Sets every series in `current` and removes the others.
    pub fn replace(&self, current: impl IntoIterator<Item = (L, i64)>) {
        let now: HashSet<L> = current
            .into_iter()
            .map(|(labels, value)| {
                self.family.get_or_create(&labels).set(value);
                labels
            })
            .collect();
        let mut set = crate::mutex::lock(&self.set);
        for gone in set.difference(&now) {
            self.family.remove(gone);
        }
        *set = now;
    }
}

/// The handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    reconciles: Counter,
    reconcile_errors: Family<ReasonLabel, Counter>,
    reconcile_duration: Histogram,
    watch_errors: Family<KindLabel, Counter>,
    invalid_objects: Family<KindLabel, Gauge>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            // 5 ms … ~40 s.
            reconcile_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            watch_errors: Family::default(),
            invalid_objects: Family::default(),
        }
    }
}

impl ControllerMetrics {
    /// Registers the metrics in `registry`, the controller's own sub-registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles run (leader or not), failed ones included",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles and sweeps, by reason",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a reconcile, writes included",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "watch_errors",
            "Errors of the watches (retried with backoff), by kind",
            self.watch_errors.clone(),
        );
        registry.register(
            "invalid_objects",
            "Watched objects that do not decode and are skipped, by kind",
            self.invalid_objects.clone(),
        );
    }

    /// Runs one reconcile inside `span`, timing and counting it.
    pub async fn reconcile<T, E: FailureReason>(
        &self,
        span: Span,
        reconcile: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = reconcile.instrument(span).await;
        self.reconciles.inc();
        self.reconcile_duration
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            self.error(error.reason());
        }
        result
    }

    /// Counts a failure outside a reconcile (a sweep).
    pub fn error(&self, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn watch_error(&self, kind: &'static str) {
        self.watch_errors.get_or_create(&KindLabel { kind }).inc();
    }

    /// Objects of `kind` that do not decode (zero included, so the series exists).
    pub fn invalid_objects(&self, kind: &'static str, count: usize) {
        self.invalid_objects
            .get_or_create(&KindLabel { kind })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[derive(Debug)]
    struct Failed;

    impl FailureReason for Failed {
        fn reason(&self) -> &'static str {
            "WriteStatusFailed"
        }
    }

    #[tokio::test]
    async fn reconciles_are_counted_timed_and_their_errors_labelled() {
        let mut registry = Registry::with_prefix("hearth");
        let metrics = ControllerMetrics::default();
        metrics.register(registry.sub_registry_with_prefix("demo"));
        let ok: Result<(), Failed> = metrics.reconcile(Span::none(), async { Ok(()) }).await;
        assert!(ok.is_ok());
        let failed = metrics
            .reconcile(Span::none(), async { Err::<(), _>(Failed) })
            .await;
        assert!(failed.is_err());
        metrics.watch_error("FournosCluster");
        metrics.invalid_objects("Secret", 0);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        let gauges = ObjectGauges::default();
        registry.register("demo_gpus", "GPUs", gauges.family());
        gauges.replace([(KindLabel { kind: "a" }, 1), (KindLabel { kind: "b" }, 2)]);
        gauges.replace([(KindLabel { kind: "b" }, 3)]);
        out.clear();
        encode(&mut out, &registry).unwrap();
        assert!(
            !out.contains("kind=\"a\""),
            "a gone series is removed:\n{out}"
        );
        assert!(out.contains("hearth_demo_gpus{kind=\"b\"} 3\n"), "{out}");
        for line in [
            "hearth_demo_reconciles_total 2\n",
            "hearth_demo_reconcile_duration_seconds_count 2\n",
            "hearth_demo_reconcile_errors_total{reason=\"WriteStatusFailed\"} 1\n",
            "hearth_demo_watch_errors_total{kind=\"FournosCluster\"} 1\n",
            "hearth_demo_invalid_objects{kind=\"Secret\"} 0\n",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
    }
}
