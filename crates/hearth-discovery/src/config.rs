//! hearth-discovery's command line: the common runtime options plus its own.

use std::{num::NonZeroUsize, time::Duration};

use clap::Parser;
use hearth_api::names::defaults;
use hearth_runtime::{CommonArgs, args::parse_duration};

/// Placeholder in the kubeconfig Secret name pattern that stands for the cluster name.
pub const CLUSTER_PLACEHOLDER: &str = "{cluster}";

#[derive(Parser, Debug)]
#[command(
    name = "hearth-discovery",
    version,
    about = "Creates a FournosCluster for each labeled kubeconfig Secret, validates every \
             target cluster and counts its GPUs."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub config: DiscoveryConfig,
}

/// Settings of the discovery controller.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Discovery options")]
pub struct DiscoveryConfig {
    /// Namespace of the kubeconfig Secrets (labeled fournos.dev/cluster-kubeconfig=true).
    #[arg(long, env = "HEARTH_SECRETS_NAMESPACE", default_value = defaults::SECRETS_NAMESPACE)]
    pub secrets_namespace: String,

    /// Name of a cluster's kubeconfig Secret; `{cluster}` stands for the cluster name.
    /// A labeled Secret whose name does not match gets a Warning Event and is skipped.
    #[arg(
        long,
        env = "HEARTH_KUBECONFIG_SECRET_PATTERN",
        default_value = defaults::KUBECONFIG_SECRET_PATTERN,
        value_parser = parse_secret_pattern,
    )]
    pub kubeconfig_secret_pattern: String,

    /// Seconds between probes of a cluster whose spec.gpuDiscoveryInterval is unset.
    #[arg(
        long,
        env = "HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC",
        default_value_t = defaults::GPU_DISCOVERY_INTERVAL_SEC,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub gpu_discovery_default_interval_sec: u64,

    /// Seconds one probe of a target cluster may take (connect, authenticate, list nodes).
    #[arg(
        long,
        env = "HEARTH_GPU_DISCOVERY_TIMEOUT_SEC",
        default_value_t = defaults::GPU_DISCOVERY_TIMEOUT_SEC,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub gpu_discovery_timeout_sec: u64,

    /// How many node pages (up to 4 MiB each) discovery reads from targets at the same
    /// time: the memory targets can make it hold. Probes themselves run 32 at a time;
    /// connecting and `GET /version` need no page.
    #[arg(long, env = "HEARTH_DISCOVERY_CONCURRENCY", default_value = "8")]
    pub discovery_concurrency: NonZeroUsize,

    /// Warn (Event and condition reason) when a kubeconfig's certificate or token expires
    /// within this long: `<number>` followed by s, m, h or d.
    #[arg(
        long,
        env = "HEARTH_CREDENTIALS_EXPIRY_WARNING",
        default_value = "7d",
        value_parser = parse_duration,
    )]
    pub credentials_expiry_warning: Duration,

    /// Consecutive failed probes before a Valid cluster is reported as failing, so a
    /// flapping network does not flap quota.
    #[arg(
        long,
        env = "HEARTH_FAILURE_THRESHOLD",
        default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..),
    )]
    pub failure_threshold: u32,

    /// Seconds a locked auto-discovered FournosCluster (spec.owner set, or status.locked)
    /// outlives its deleted kubeconfig Secret, so that a Secret deleted and created again
    /// (a rotation, a GitOps prune) keeps the cluster and its lock. Meanwhile it has a
    /// Warning Event and says when it goes; an unlocked one goes at once. 0: no grace.
    #[arg(long, env = "HEARTH_OFFBOARD_LOCKED_GRACE_SEC", default_value_t = 600)]
    pub offboard_locked_grace_sec: u64,
}

fn parse_secret_pattern(pattern: &str) -> Result<String, String> {
    match pattern.matches(CLUSTER_PLACEHOLDER).count() {
        1 => Ok(pattern.to_owned()),
        _ => Err(format!(
            "must contain {CLUSTER_PLACEHOLDER} exactly once, e.g. kubeconfig-{CLUSTER_PLACEHOLDER}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_runtime::testing::{assert_env_vars, parse_without_env};

    fn parse(argv: &[&str]) -> Result<DiscoveryConfig, clap::Error> {
        Ok(parse_without_env::<Args>(argv)?.config)
    }

    #[test]
    fn defaults_match_the_design_table() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.secrets_namespace, "psap-secrets");
        assert_eq!(config.kubeconfig_secret_pattern, "kubeconfig-{cluster}");
        assert_eq!(config.gpu_discovery_default_interval_sec, 300);
        assert_eq!(config.gpu_discovery_timeout_sec, 10);
        assert_eq!(config.discovery_concurrency.get(), 8);
        assert_eq!(
            config.credentials_expiry_warning,
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(config.failure_threshold, 3);
        assert_eq!(config.offboard_locked_grace_sec, 600);
    }

    #[test]
    fn env_var_names_are_the_contract() {
        assert_env_vars::<Args>(&[
            ("secrets_namespace", "HEARTH_SECRETS_NAMESPACE"),
            (
                "kubeconfig_secret_pattern",
                "HEARTH_KUBECONFIG_SECRET_PATTERN",
            ),
            (
                "gpu_discovery_default_interval_sec",
                "HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC",
            ),
            (
                "gpu_discovery_timeout_sec",
                "HEARTH_GPU_DISCOVERY_TIMEOUT_SEC",
            ),
            ("discovery_concurrency", "HEARTH_DISCOVERY_CONCURRENCY"),
            (
                "credentials_expiry_warning",
                "HEARTH_CREDENTIALS_EXPIRY_WARNING",
            ),
            ("failure_threshold", "HEARTH_FAILURE_THRESHOLD"),
            (
                "offboard_locked_grace_sec",
                "HEARTH_OFFBOARD_LOCKED_GRACE_SEC",
            ),
            ("namespace", "HEARTH_NAMESPACE"),
        ]);
    }

    #[test]
    fn flags_override_defaults() {
        let config = parse(&[
            "--secrets-namespace=s",
            "--kubeconfig-secret-pattern={cluster}-kubeconfig",
            "--discovery-concurrency=2",
            "--credentials-expiry-warning=12h",
            "--failure-threshold=1",
            "--offboard-locked-grace-sec=0",
        ])
        .unwrap();
        assert_eq!(config.secrets_namespace, "s");
        assert_eq!(config.kubeconfig_secret_pattern, "{cluster}-kubeconfig");
        assert_eq!(config.discovery_concurrency.get(), 2);
        assert_eq!(
            config.credentials_expiry_warning,
            Duration::from_secs(12 * 3_600)
        );
        assert_eq!(config.failure_threshold, 1);
        assert_eq!(config.offboard_locked_grace_sec, 0);
    }

    #[test]
    fn bad_values_are_rejected() {
        for argv in [
            "--kubeconfig-secret-pattern=kubeconfig",
            "--kubeconfig-secret-pattern={cluster}-{cluster}",
            "--discovery-concurrency=0",
            "--gpu-discovery-timeout-sec=0",
            "--gpu-discovery-default-interval-sec=0",
            "--credentials-expiry-warning=7",
            "--failure-threshold=0",
            "--offboard-locked-grace-sec=-1",
            "--offboard-locked-grace-sec=10m",
        ] {
            assert!(parse(&[argv]).is_err(), "{argv}");
        }
    }
}
