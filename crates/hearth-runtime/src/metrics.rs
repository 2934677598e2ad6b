//! The Prometheus registry `/metrics` serves, shared with the controller.
//!
//! Every name gets the `hearth_` prefix. A controller registers its metrics once at
//! startup and keeps the metric handles (they are cheap clones over atomics):
//!
//! ```
//! # let metrics = hearth_runtime::Metrics::new("hearth-example");
//! use prometheus_client::metrics::counter::Counter;
//! let probes = Counter::<u64>::default();
//! metrics
//!     .registry()
//!     .sub_registry_with_prefix("discovery")
//!     .register("probes", "Target clusters probed", probes.clone());
//! probes.inc(); // exported as hearth_discovery_probes_total
//! ```

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::{
    encoding::text::encode,
    metrics::{gauge::Gauge, info::Info},
    registry::Registry,
};

/// Content type of [`Metrics::encode`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text exposition of `registry`: what `/metrics` serves, and what the
/// controllers' metric tests read.
pub fn encode_registry(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    encode(&mut text, registry)?;
    Ok(text)
}

/// Shared metrics registry. Cheap to clone; clones share the registry.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    leader: Gauge,
}

impl Metrics {
    /// A registry holding the runtime's own metrics: `hearth_build_info` and `hearth_leader`.
    pub fn new(controller: &str) -> Self {
        let mut registry = Registry::with_prefix("hearth");
        registry.register(
            "build",
            "Build of this controller",
            Info::new(vec![
                ("controller", controller.to_owned()),
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ]),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader-election Lease (and may write), else 0",
            leader.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            leader,
        }
    }

    /// The registry, for registering a controller's metrics. Do not hold the guard
    /// across an `.await`: `/metrics` needs the same lock.
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        // Registering cannot leave the registry half-updated, so a poisoned lock is usable.
        crate::mutex::lock(&self.registry)
    }

    /// The OpenMetrics text exposition of every registered metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        encode_registry(&self.registry())
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_build_info_and_leader() {
        let metrics = Metrics::new("hearth-test");
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(&format!(
                "hearth_build_info{{controller=\"hearth-test\",version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.contains("hearth_leader 0\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");

        metrics.clone().set_leader(true);
        assert!(metrics.encode().unwrap().contains("hearth_leader 1\n"));
    }

    #[test]
    fn controller_metrics_share_the_registry() {
        let metrics = Metrics::new("hearth-test");
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        metrics
            .clone()
            .registry()
            .sub_registry_with_prefix("discovery")
            .register("probes", "Probes", counter.clone());
        counter.inc();
        assert!(
            metrics
                .encode()
                .unwrap()
                .contains("hearth_discovery_probes_total 1\n")
        );
    }
}
