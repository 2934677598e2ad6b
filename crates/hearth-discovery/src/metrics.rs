//! discovery's metrics, exported as `hearth_discovery_*` (the runtime adds `hearth_`).

use std::collections::BTreeMap;
use std::time::Duration;

use hearth_api::{FournosClusterStatus, KubeconfigStatus};
use hearth_runtime::kit::{ControllerMetrics, ObjectGauges};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels1 = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];
type GpuLabels = [(&'static str, String); 4];

/// `kubeconfig_status` label of a cluster discovery has not written a status for yet.
pub const UNKNOWN_STATUS: &str = "Unknown";
const STATUSES: [&str; 6] = [
    "Valid",
    "Missing",
    "Invalid",
    "Unauthorized",
    "Unreachable",
    UNKNOWN_STATUS,
];

fn probe_duration_histogram() -> Histogram {
    // 5 ms … ~40 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    probes: Family<Labels1, Counter>,
    probe_duration: Family<Labels1, Histogram, fn() -> Histogram>,
    status_writes: Family<Labels1, Counter>,
    onboarding: Family<Labels2, Counter>,
    /// Reconciles, their errors and durations, watch errors, undecodable objects.
    pub(crate) controller: ControllerMetrics,
    clusters: Family<Labels1, Gauge>,
    gpus: ObjectGauges<GpuLabels>,
}

impl Metrics {
    /// Registers every metric under `discovery` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            probes: Family::default(),
            probe_duration: Family::new_with_constructor(probe_duration_histogram),
            status_writes: Family::default(),
            onboarding: Family::default(),
            controller: ControllerMetrics::default(),
            clusters: Family::default(),
            gpus: ObjectGauges::default(),
        };
        let r = registry.sub_registry_with_prefix("discovery");
        r.register(
            "probes",
            "Probes of target clusters, by result (Discovered, Forbidden, DiscoveryFailed, Missing, Invalid, \
             Unauthorized, Unreachable)",
            metrics.probes.clone(),
        );
        r.register(
            "probe_duration_seconds",
            "Duration of a probe (connect, /version, node list), by result",
            metrics.probe_duration.clone(),
        );
        r.register(
            "status_writes",
            "FournosCluster status writes by discovery, by outcome (ok, error)",
            metrics.status_writes.clone(),
        );
        r.register(
            "onboarding_actions",
            "FournosClusters created from Secrets and deleted when their Secret went, by action and outcome",
            metrics.onboarding.clone(),
        );
        r.register(
            "clusters",
            "FournosClusters by status.kubeconfigStatus (Unknown: not probed yet)",
            metrics.clusters.clone(),
        );
        r.register(
            "gpus",
            "Discovered GPUs per cluster and model (status.hardware)",
            metrics.gpus.family(),
        );
        metrics.controller.register(r);
        metrics
    }

    pub fn probed(&self, result: &'static str, elapsed: Duration) {
        let labels = [("result", result.to_owned())];
        self.probes.get_or_create(&labels).inc();
        self.probe_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn status_write(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.status_writes
            .get_or_create(&[("outcome", outcome.to_owned())])
            .inc();
    }

    pub fn onboarding(&self, action: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.onboarding
            .get_or_create(&[
                ("action", action.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// The gauges that describe every cluster: call with all of them at once.
    pub fn clusters<'a>(
        &self,
        clusters: impl IntoIterator<Item = (&'a str, Option<&'a FournosClusterStatus>)>,
    ) {
        let mut by_status: BTreeMap<&str, i64> = STATUSES.iter().map(|s| (*s, 0)).collect();
        let mut gpus = Vec::new();
        for (name, status) in clusters {
            let label = status
                .and_then(|s| s.kubeconfig_status)
                .map_or(UNKNOWN_STATUS, KubeconfigStatus::as_str);
            *by_status.entry(label).or_default() += 1;
            for gpu in status
                .and_then(|s| s.hardware.as_ref())
                .map(|h| h.gpus.as_slice())
                .unwrap_or_default()
            {
                let labels: GpuLabels = [
                    ("cluster", name.to_owned()),
                    ("vendor", gpu.vendor.clone()),
                    ("model", gpu.model.clone()),
                    ("short_name", gpu.short_name.clone()),
                ];
                gpus.push((labels, gpu.count));
            }
        }
        for (status, n) in by_status {
            self.clusters
                .get_or_create(&[("kubeconfig_status", status.to_owned())])
                .set(n);
        }
        self.gpus.replace(gpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::{GpuInfo, Hardware};
    use hearth_runtime::encode_registry;

    fn with_gpus(model: &str, count: i64) -> FournosClusterStatus {
        FournosClusterStatus {
            kubeconfig_status: Some(KubeconfigStatus::Valid),
            hardware: Some(Hardware {
                gpus: vec![GpuInfo {
                    vendor: "NVIDIA".into(),
                    model: model.into(),
                    short_name: "l40s".into(),
                    count,
                    node_count: 1,
                    driver_versions: Vec::new(),
                }],
                total_gpus: count,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn cluster_gauges_follow_the_clusters() {
        let mut registry = Registry::with_prefix("hearth");
        let metrics = Metrics::register(&mut registry);
        let a = with_gpus("NVIDIA-L40S", 2);
        metrics.clusters([("a", Some(&a)), ("b", None)]);
        let out = encode_registry(&registry).unwrap();
        assert!(
            out.contains(
                r#"hearth_discovery_gpus{cluster="a",vendor="NVIDIA",model="NVIDIA-L40S",short_name="l40s"} 2"#
            ),
            "{out}"
        );
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Valid"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Unknown"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Unreachable"} 0"#),
            "{out}"
        );

        metrics.clusters([("b", None)]);
        let out = encode_registry(&registry).unwrap();
        assert!(!out.contains(r#"cluster="a""#), "{out}");
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Valid"} 0"#),
            "{out}"
        );
    }

    #[test]
    fn probes_are_counted_and_timed_by_result() {
        let mut registry = Registry::with_prefix("hearth");
        let metrics = Metrics::register(&mut registry);
        metrics.probed("Discovered", Duration::from_millis(20));
        metrics.probed("Unreachable", Duration::from_secs(10));
        let out = encode_registry(&registry).unwrap();
        assert!(
            out.contains(r#"hearth_discovery_probes_total{result="Discovered"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(
                r#"hearth_discovery_probe_duration_seconds_count{result="Unreachable"} 1"#
            ),
            "{out}"
        );
    }
}
