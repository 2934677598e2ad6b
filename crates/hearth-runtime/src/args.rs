//! Flags every Hearth controller takes. Each one also reads a `HEARTH_*` environment
//! variable, so a Deployment can configure a controller without touching its command line.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, ValueEnum, builder::BoolishValueParser};
use hearth_api::names::defaults;
use tracing_subscriber::EnvFilter;

/// Where the admin server (health, readiness, metrics) listens unless configured otherwise.
pub const DEFAULT_ADMIN_ADDR: &str = "0.0.0.0:8080";
/// Seconds a Lease stays valid after its last renewal: a crashed leader blocks writes
/// this long (a stopping one releases its Lease at once). A minute costs nothing to a
/// fleet whose GPUs are rediscovered every 5 minutes and keeps renewals rare.
pub const DEFAULT_LEASE_DURATION_SEC: u64 = 60;

/// Settings shared by all Hearth controllers. Flatten into a binary's arguments with
/// `#[command(flatten)]`.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Common options")]
pub struct CommonArgs {
    /// Namespace where FournosClusters live.
    #[arg(long, env = "HEARTH_NAMESPACE", default_value = defaults::NAMESPACE)]
    pub namespace: String,

    /// Seconds between full resyncs of every object. A safety net only: watches
    /// trigger reconciles as soon as something changes.
    #[arg(
        long,
        env = "HEARTH_RECONCILE_INTERVAL_SEC",
        default_value_t = defaults::RECONCILE_INTERVAL_SEC,
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    pub reconcile_interval_sec: u64,

    /// Log level (TRACE, DEBUG, INFO, WARNING, ERROR; any case), or full tracing
    /// filter directives such as `info,kube=warn,hearth_discovery=debug`.
    #[arg(long, env = "HEARTH_LOG_LEVEL", default_value = defaults::LOG_LEVEL)]
    pub log_level: LogLevel,

    /// Log line format: human-readable text or one JSON object per line.
    #[arg(
        long,
        env = "HEARTH_LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    /// Address of the admin HTTP server: /healthz, /readyz and /metrics.
    #[arg(long, env = "HEARTH_ADMIN_ADDR", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: SocketAddr,

    /// Elect a leader through a Lease so that only one replica writes. With `false`
    /// this replica always acts as leader: run exactly one replica then.
    #[arg(
        long,
        env = "HEARTH_LEADER_ELECTION",
        default_value = "true",
        value_parser = BoolishValueParser::new(),
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
    )]
    pub leader_election: bool,

    /// Namespace of the leader-election Lease (named after the controller).
    /// Defaults to --namespace.
    #[arg(long, env = "HEARTH_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Seconds the Lease stays valid after its holder last renewed it: how long a
    /// crashed leader blocks the others.
    #[arg(
        long,
        env = "HEARTH_LEASE_DURATION_SEC",
        default_value_t = DEFAULT_LEASE_DURATION_SEC,
        value_parser = clap::value_parser!(u64).range(2..=3600),
    )]
    pub lease_duration_sec: u64,

    /// Seconds between the holder's Lease renewals (a GET and a PATCH each). Must be
    /// less than --lease-duration-sec. Defaults to two thirds of it (or to duration
    /// minus --lease-grace-sec when that is set).
    #[arg(
        long,
        env = "HEARTH_LEASE_RENEW_SEC",
        value_parser = clap::value_parser!(u64).range(1..=3600),
    )]
    pub lease_renew_sec: Option<u64>,

    /// Seconds before expiry at which the holder renews the Lease, the other way to
    /// set the renewal interval (duration minus grace); also the clock skew between
    /// replicas that is tolerated.
    #[arg(
        long,
        env = "HEARTH_LEASE_GRACE_SEC",
        value_parser = clap::value_parser!(u64).range(1..=3600),
    )]
    pub lease_grace_sec: Option<u64>,

    /// This replica's identity in the Lease. Defaults to `<hostname>-<pid>`; set it
    /// to the pod name through the downward API.
    #[arg(long, env = "HEARTH_POD_NAME")]
    pub identity: Option<String>,

    /// Kubeconfig of the management cluster (a `:`-separated list is merged, like
    /// kubectl does). Without it: ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<OsString>,
}

impl CommonArgs {
    /// Namespace of the leader-election Lease.
    pub fn lease_namespace(&self) -> &str {
        self.lease_namespace.as_deref().unwrap_or(&self.namespace)
    }

    /// Period of the resync safety net.
    pub fn reconcile_interval(&self) -> Duration {
        Duration::from_secs(self.reconcile_interval_sec)
    }

    /// Identity of this replica in the Lease (and in traces).
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(default_identity)
    }

    /// Kubeconfig files to merge, in order; empty means "infer".
    pub fn kubeconfig_paths(&self) -> Vec<PathBuf> {
        self.kubeconfig
            .as_ref()
            .map(|paths| {
                std::env::split_paths(paths)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `<hostname>-<pid>`: unique per process on a node, stable enough to read in a Lease.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Log output format.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// A validated tracing filter, built from `HEARTH_LOG_LEVEL`.
///
/// Accepts the Python controller's level names (`INFO`, `WARNING`, `CRITICAL`, any case)
/// as well as tracing `EnvFilter` directives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLevel {
    directives: String,
}

impl LogLevel {
    /// The normalised `EnvFilter` directives, e.g. `info` or `info,kube=warn`.
    pub fn directives(&self) -> &str {
        &self.directives
    }

    /// A fresh filter (EnvFilter is neither Clone nor cheap to share between layers).
    pub fn to_filter(&self) -> EnvFilter {
        EnvFilter::try_new(&self.directives)
            .expect("directives were validated when the LogLevel was parsed")
    }
}

/// A log level that is neither a level name nor valid filter directives.
#[derive(Debug, thiserror::Error)]
pub enum LogLevelError {
    /// A bare word in a tracing filter selects a *target*, so a typo such as `INFOO`
    /// would silently turn all logs off; only level names are accepted bare.
    #[error(
        "unknown log level {0:?}: use TRACE, DEBUG, INFO, WARNING or ERROR, \
         or directives such as `info,kube=warn`"
    )]
    UnknownLevel(String),
    #[error("invalid log filter {input:?}: {source}")]
    Directives {
        input: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
}

/// The tracing name of a level, accepting Python's logging names too.
fn level_name(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_lowercase().as_str() {
        "trace" | "notset" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "critical" | "fatal" => "error",
        "off" => "off",
        _ => return None,
    })
}

impl std::str::FromStr for LogLevel {
    type Err = LogLevelError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let directives = input
            .split(',')
            .map(str::trim)
            .filter(|directive| !directive.is_empty())
            .map(|directive| match directive.rsplit_once('=') {
                // `target=level` / `target[span]=level`: normalise the level, keep the rest.
                Some((selector, level)) => Ok(match level_name(level.trim()) {
                    Some(level) => format!("{selector}={level}"),
                    None => directive.to_owned(),
                }),
                None if directive.starts_with('[') => Ok(directive.to_owned()),
                None => level_name(directive)
                    .map(str::to_owned)
                    .ok_or_else(|| LogLevelError::UnknownLevel(directive.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(",");
        if directives.is_empty() {
            return Err(LogLevelError::UnknownLevel(input.to_owned()));
        }
        EnvFilter::try_new(&directives).map_err(|source| LogLevelError::Directives {
            input: input.to_owned(),
            source,
        })?;
        Ok(Self { directives })
    }
}

/// `<number><unit>` with unit `s`, `m`, `h` or `d` (e.g. `7d`): a clap `value_parser`.
pub use hearth_api::duration::{
    FlagDurationError as DurationError, parse_flag_duration as parse_duration,
};

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse_without_env(argv: &[&str]) -> Result<CommonArgs, clap::Error> {
        Ok(crate::testing::parse_without_env::<Cli>(argv)?.common)
    }

    #[test]
    fn defaults_match_the_design_table() {
        let args = parse_without_env(&[]).unwrap();
        assert_eq!(args.namespace, "hearth");
        assert_eq!(args.reconcile_interval_sec, 30);
        assert_eq!(args.reconcile_interval(), Duration::from_secs(30));
        assert_eq!(args.log_level.directives(), "info");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.admin_addr, "0.0.0.0:8080".parse().unwrap());
        assert!(args.leader_election);
        assert_eq!(args.lease_namespace, None);
        assert_eq!(args.lease_namespace(), "hearth");
        assert_eq!(args.lease_duration_sec, 60);
        assert_eq!(args.lease_renew_sec, None);
        assert_eq!(args.lease_grace_sec, None);
        assert_eq!(args.identity, None);
        assert_eq!(args.kubeconfig, None);
        assert!(args.kubeconfig_paths().is_empty());
    }

    #[test]
    fn env_var_names_are_the_contract() {
        crate::testing::assert_env_vars::<Cli>(&[
            ("namespace", "HEARTH_NAMESPACE"),
            ("reconcile_interval_sec", "HEARTH_RECONCILE_INTERVAL_SEC"),
            ("log_level", "HEARTH_LOG_LEVEL"),
            ("log_format", "HEARTH_LOG_FORMAT"),
            ("admin_addr", "HEARTH_ADMIN_ADDR"),
            ("leader_election", "HEARTH_LEADER_ELECTION"),
            ("lease_namespace", "HEARTH_LEASE_NAMESPACE"),
            ("lease_duration_sec", "HEARTH_LEASE_DURATION_SEC"),
            ("lease_renew_sec", "HEARTH_LEASE_RENEW_SEC"),
            ("lease_grace_sec", "HEARTH_LEASE_GRACE_SEC"),
            ("identity", "HEARTH_POD_NAME"),
            ("kubeconfig", "KUBECONFIG"),
        ]);
    }

    /// Marker that makes `env_child` do its work: it only runs inside the child process
    /// started by `env_vars_override_defaults`, whose environment the test controls.
    const CHILD_MARKER: &str = "HEARTH_RUNTIME_ARGS_ENV_CHILD";

    #[test]
    fn env_vars_override_defaults() {
        // Setting variables in this process would race other tests (and needs `unsafe`),
        // so run the check in a child copy of this test binary with a clean environment.
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "args::tests::env_child", "--nocapture"])
            .env_clear()
            .env(CHILD_MARKER, "1")
            .env("HEARTH_NAMESPACE", "fleet")
            .env("HEARTH_RECONCILE_INTERVAL_SEC", "7")
            .env("HEARTH_LOG_LEVEL", "Warning")
            .env("HEARTH_LOG_FORMAT", "JSON")
            .env("HEARTH_ADMIN_ADDR", "127.0.0.1:9090")
            .env("HEARTH_LEADER_ELECTION", "false")
            .env("HEARTH_LEASE_NAMESPACE", "leases")
            .env("HEARTH_LEASE_DURATION_SEC", "20")
            .env("HEARTH_LEASE_GRACE_SEC", "4")
            .env("HEARTH_LEASE_RENEW_SEC", "16")
            .env("HEARTH_POD_NAME", "hearth-discovery-abc12")
            .env("KUBECONFIG", "/a/config:/b/config")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed or did not run:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    #[test]
    fn env_child() {
        if std::env::var_os(CHILD_MARKER).is_none() {
            return;
        }
        let args = Cli::try_parse_from(["test"]).unwrap().common;
        assert_eq!(args.namespace, "fleet");
        assert_eq!(args.reconcile_interval_sec, 7);
        assert_eq!(args.log_level.directives(), "warn");
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.admin_addr, "127.0.0.1:9090".parse().unwrap());
        assert!(!args.leader_election);
        assert_eq!(args.lease_namespace(), "leases");
        assert_eq!(args.lease_duration_sec, 20);
        assert_eq!(args.lease_grace_sec, Some(4));
        assert_eq!(args.lease_renew_sec, Some(16));
        assert_eq!(args.identity(), "hearth-discovery-abc12");
        assert_eq!(
            args.kubeconfig_paths(),
            vec![PathBuf::from("/a/config"), PathBuf::from("/b/config")]
        );
        // Flags still win over the environment.
        let args = Cli::try_parse_from(["test", "--namespace", "cli", "--leader-election"])
            .unwrap()
            .common;
        assert_eq!(args.namespace, "cli");
        assert!(args.leader_election);
    }

    #[test]
    fn leader_election_flag_forms() {
        assert!(
            parse_without_env(&["--leader-election"])
                .unwrap()
                .leader_election
        );
        assert!(
            !parse_without_env(&["--leader-election=false"])
                .unwrap()
                .leader_election
        );
        assert!(
            !parse_without_env(&["--leader-election=no"])
                .unwrap()
                .leader_election
        );
        assert!(
            parse_without_env(&["--leader-election=1"])
                .unwrap()
                .leader_election
        );
        assert!(parse_without_env(&["--leader-election=maybe"]).is_err());
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        assert!(parse_without_env(&["--reconcile-interval-sec", "0"]).is_err());
        assert!(parse_without_env(&["--lease-grace-sec", "0"]).is_err());
        assert!(parse_without_env(&["--lease-renew-sec", "0"]).is_err());
        assert!(parse_without_env(&["--lease-duration-sec", "1"]).is_err());
        assert!(parse_without_env(&["--lease-duration-sec", "3601"]).is_err());
        assert!(parse_without_env(&["--admin-addr", "localhost"]).is_err());
        assert!(parse_without_env(&["--log-format", "yaml"]).is_err());
        assert!(parse_without_env(&["--log-level", "loud"]).is_err());
    }

    #[test]
    fn identity_defaults_to_host_and_pid() {
        let args = parse_without_env(&[]).unwrap();
        let identity = args.identity();
        assert!(
            identity.ends_with(&format!("-{}", std::process::id())),
            "{identity}"
        );
        assert!(identity.len() > format!("-{}", std::process::id()).len());
        let args = parse_without_env(&["--identity", ""]).unwrap();
        assert_eq!(args.identity(), identity, "empty identity falls back");
    }

    #[test]
    fn log_levels_accept_python_names_in_any_case() {
        for (input, directives) in [
            ("INFO", "info"),
            ("info", "info"),
            ("Debug", "debug"),
            ("WARNING", "warn"),
            ("warn", "warn"),
            ("ERROR", "error"),
            ("CRITICAL", "error"),
            (" TRACE ", "trace"),
            ("off", "off"),
        ] {
            let level: LogLevel = input.parse().unwrap();
            assert_eq!(level.directives(), directives, "{input}");
        }
    }

    #[test]
    fn log_levels_accept_filter_directives() {
        let level: LogLevel = "info,kube=warn,hearth_discovery=debug".parse().unwrap();
        assert_eq!(level.directives(), "info,kube=warn,hearth_discovery=debug");
        assert_eq!(
            level.to_filter().to_string(),
            "hearth_discovery=debug,kube=warn,info"
        );
        let level: LogLevel = "WARNING, kube=DEBUG ,[reconcile]".parse().unwrap();
        assert_eq!(level.directives(), "warn,kube=debug,[reconcile]");
    }

    #[test]
    fn bad_log_levels_are_rejected() {
        // A bare typo would otherwise be read as a target name and silence every log.
        for input in ["loud", "INFOO", "info,kube", "info,kube=shouty", "", " , "] {
            assert!(input.parse::<LogLevel>().is_err(), "{input}");
        }
    }
}
