//! discovery's metrics, exported as `hearth_discovery_*` (the runtime adds `hearth_`).
//!
//! The gauges that describe every cluster ([`ClusterGauges`]) are read from the
//! FournosCluster cache when scraped: a series per cluster and GPU model kept in the
//! registry would be a second copy of what the cache holds.

use std::time::Duration;

use hearth_api::{FournosClusterStatus, KubeconfigStatus};
use hearth_runtime::kit::{Cache, ControllerMetrics};
use k8s_openapi::jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster_cache::CachedCluster;

type Labels1 = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];

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

/// The handles; cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    probes: Family<Labels1, Counter>,
    probe_duration: Family<Labels1, Histogram, fn() -> Histogram>,
    status_writes: Family<Labels1, Counter>,
    onboarding: Family<Labels2, Counter>,
    /// Reconciles, their errors and durations, watch errors, undecodable objects.
    pub(crate) controller: ControllerMetrics,
}

impl Metrics {
    /// Registers every metric under `discovery` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            probes: Family::default(),
            // 5 ms … ~40 s.
            probe_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            status_writes: Family::default(),
            onboarding: Family::default(),
            controller: ControllerMetrics::default(),
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
        metrics.controller.register(r);
        metrics
    }

    /// Registers [`ClusterGauges`] over `clusters` under `discovery` in `registry`.
    pub fn register_cluster_gauges(registry: &mut Registry, clusters: Cache<CachedCluster>) {
        registry
            .sub_registry_with_prefix("discovery")
            .register_collector(Box::new(ClusterGauges { clusters }));
    }

    pub fn probed(&self, result: &'static str, elapsed: Duration) {
        let labels = [("result", result.to_owned())];
        self.probes.get_or_create(&labels).inc();
        self.probe_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn status_write(&self, ok: bool) {
        self.status_writes.get_or_create(&[outcome(ok)]).inc();
    }

    pub fn onboarding(&self, action: &'static str, ok: bool) {
        let labels = [("action", action.to_owned()), outcome(ok)];
        self.onboarding.get_or_create(&labels).inc();
    }
}

/// The `outcome` label of a write.
fn outcome(ok: bool) -> (&'static str, String) {
    ("outcome", if ok { "ok" } else { "error" }.to_owned())
}

/// The gauges that describe every cluster, `clusters` by `kubeconfig_status` and `gpus`
/// per cluster and model, encoded from the cache at each scrape. Clusters being deleted
/// are left out; until the cache holds a full list neither is exported (as before the
/// first sweep, which used to set them).
pub struct ClusterGauges {
    clusters: Cache<CachedCluster>,
}

impl std::fmt::Debug for ClusterGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterGauges").finish_non_exhaustive()
    }
}

impl Collector for ClusterGauges {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if !self.clusters.is_synced() {
            return Ok(());
        }
        let state = self.clusters.state();
        encode_cluster_gauges(
            encoder,
            k8s_openapi::jiff::Timestamp::now(),
            state
                .iter()
                .filter_map(|c| c.0.as_ref().ok())
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(|c| {
                    (
                        c.metadata.name.as_deref().unwrap_or_default(),
                        c.status.as_ref(),
                    )
                }),
        )
    }
}

/// Encodes [`ClusterGauges`] for `clusters` (all of them at once), as of `now`.
fn encode_cluster_gauges<'a>(
    mut encoder: DescriptorEncoder,
    now: Timestamp,
    clusters: impl Iterator<Item = (&'a str, Option<&'a FournosClusterStatus>)> + Clone,
) -> Result<(), std::fmt::Error> {
    let mut by_status = [0_i64; STATUSES.len()];
    for (_, status) in clusters.clone() {
        let label = status
            .and_then(|s| s.kubeconfig_status)
            .map_or(UNKNOWN_STATUS, KubeconfigStatus::as_str);
        if let Some(i) = STATUSES.iter().position(|s| *s == label) {
            by_status[i] += 1;
        }
    }
    let mut metric = encoder.encode_descriptor(
        "clusters",
        "FournosClusters by status.kubeconfigStatus (Unknown: not probed yet)",
        None,
        MetricType::Gauge,
    )?;
    for (status, n) in STATUSES.iter().zip(by_status) {
        gauge(&mut metric, &[("kubeconfig_status", *status)], n)?;
    }
    // Seconds from the scrape until each cluster's credentials expire
    // (`status.credentialsExpireAt`), negative once past. Read at the scrape, so it is
    // exact whenever Prometheus looks; an alert compares it with a threshold
    // (`HearthCredentialsExpiring`).
    gauge_family(
        &mut encoder,
        "credentials_expiry_seconds",
        "Seconds until a cluster's kubeconfig credentials expire (status.credentialsExpireAt), negative once expired",
        clusters.clone().filter_map(move |(name, status)| {
            let at = status?.credentials_expire_at.as_ref()?.0;
            Some(([("cluster", name)], at.as_second() - now.as_second()))
        }),
    )?;
    gauge_family(
        &mut encoder,
        "gpus",
        "Discovered GPUs per cluster and model (status.hardware)",
        clusters.flat_map(|(name, status)| {
            let gpus = status.and_then(|s| s.hardware.as_ref());
            gpus.map(|h| h.gpus.as_slice())
                .unwrap_or_default()
                .iter()
                .map(move |gpu| {
                    let labels = [
                        ("cluster", name),
                        ("vendor", gpu.vendor.as_str()),
                        ("model", gpu.model.as_str()),
                        ("short_name", gpu.short_name.as_str()),
                    ];
                    (labels, gpu.count)
                })
        }),
    )
}

/// A gauge family of `series`; none at all when there is no series (as the registry does
/// with its own families).
fn gauge_family<'a, const N: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl Iterator<Item = ([(&'a str, &'a str); N], i64)> + Clone,
) -> Result<(), std::fmt::Error> {
    if series.clone().next().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        gauge(&mut metric, &labels, value)?;
    }
    Ok(())
}

fn gauge<const N: usize>(
    metric: &mut MetricEncoder<'_>,
    labels: &[(&str, &str); N],
    value: i64,
) -> Result<(), std::fmt::Error> {
    metric.encode_family(labels)?.encode_gauge(&value)
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

    fn cluster(name: &str, status: Option<FournosClusterStatus>) -> CachedCluster {
        let mut cluster = CachedCluster::default();
        cluster.metadata.name = Some(name.into());
        cluster.metadata.namespace = Some("ns".into());
        cluster.status = status;
        cluster
    }

    /// discovery's registry with its cluster gauges, and the feed of the cache they read.
    fn scraped_cache() -> (Registry, hearth_runtime::kit::HandFeed<CachedCluster>) {
        let mut registry = Registry::with_prefix("hearth");
        Metrics::register(&mut registry);
        let (cache, feed) = Cache::by_hand("FournosCluster", Some("ns"));
        Metrics::register_cluster_gauges(&mut registry, cache);
        (registry, feed)
    }

    #[test]
    fn cluster_gauges_are_read_from_the_cache_when_scraped() {
        let (registry, mut feed) = scraped_cache();
        let out = encode_registry(&registry).unwrap();
        assert!(
            !out.contains("hearth_discovery_gpus"),
            "no series, no family:\n{out}"
        );
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Valid"} 0"#),
            "{out}"
        );

        feed.deliver(cluster("a", Some(with_gpus("NVIDIA-L40S", 2))));
        feed.deliver(cluster("b", None));
        let out = encode_registry(&registry).unwrap();
        assert!(
            out.contains(
                "# TYPE hearth_discovery_gpus gauge\n\
                 hearth_discovery_gpus{cluster=\"a\",vendor=\"NVIDIA\",model=\"NVIDIA-L40S\",short_name=\"l40s\"} 2\n"
            ),
            "{out}"
        );
        for line in [
            r#"hearth_discovery_clusters{kubeconfig_status="Valid"} 1"#,
            r#"hearth_discovery_clusters{kubeconfig_status="Unknown"} 1"#,
            r#"hearth_discovery_clusters{kubeconfig_status="Unreachable"} 0"#,
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }

        // Being deleted: no longer described, at the very next scrape.
        let mut deleting = cluster("a", Some(with_gpus("NVIDIA-L40S", 2)));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        feed.deliver(deleting);
        let out = encode_registry(&registry).unwrap();
        assert!(!out.contains(r#"cluster="a""#), "{out}");
        assert!(
            out.contains(r#"hearth_discovery_clusters{kubeconfig_status="Valid"} 0"#),
            "{out}"
        );
    }

    #[test]
    fn credentials_expiry_is_seconds_from_the_scrape() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let (registry, mut feed) = scraped_cache();
        feed.deliver(cluster("silent", Some(with_gpus("NVIDIA-L40S", 2))));
        let out = encode_registry(&registry).unwrap();
        assert!(
            !out.contains("credentials_expiry"),
            "no expiry stated, no series:\n{out}"
        );
        let expiring = |name: &str, in_secs: i64| {
            let mut status = with_gpus("NVIDIA-L40S", 2);
            let at = Timestamp::now()
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(in_secs))
                .unwrap();
            status.credentials_expire_at = Some(Time(at));
            cluster(name, Some(status))
        };
        feed.deliver(expiring("soon", 3600));
        feed.deliver(expiring("gone", -60));
        let out = encode_registry(&registry).unwrap();
        let value = |name: &str| -> i64 {
            let prefix =
                format!("hearth_discovery_credentials_expiry_seconds{{cluster=\"{name}\"}} ");
            out.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("{name} in\n{out}"))
                .parse()
                .unwrap()
        };
        assert!((3590..=3600).contains(&value("soon")), "{out}");
        assert!((-70..=-60).contains(&value("gone")), "{out}");
        assert!(
            !out.contains(r#"hearth_discovery_credentials_expiry_seconds{cluster="silent"}"#),
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
