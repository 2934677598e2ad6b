//! hearth-lock-manager's command line: the common runtime options plus its own.

use std::num::NonZeroU16;

use clap::{Parser, ValueEnum};
use hearth_api::names::defaults;
use hearth_runtime::CommonArgs;

/// LocalQueue a `workload` sentinel is submitted to, in the execution namespace. Named
/// like the default ClusterQueue, as a one-queue Kueue setup usually does.
pub const DEFAULT_LOCAL_QUEUE_NAME: &str = "fournos-queue";

#[derive(Parser, Debug)]
#[command(
    name = "hearth-lock-manager",
    version,
    about = "Locks a cluster for its owner with a sentinel that holds all of the \
             cluster's Kueue slots."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub config: LockManagerConfig,
}

/// What holds a locked cluster's slots.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentinelKind {
    /// A lockOnly FournosJob `cluster-lock-<cluster>`, which Fournos turns into a
    /// Workload requesting all slots.
    #[value(name = "fournosjob")]
    FournosJob,
    /// A bare Kueue Workload requesting all slots, for installations without Fournos.
    Workload,
}

/// Settings of the lock-manager controller.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Lock manager options")]
pub struct LockManagerConfig {
    /// Namespace where sentinels are created.
    #[arg(long, env = "HEARTH_EXECUTION_NAMESPACE", default_value = defaults::EXECUTION_NAMESPACE)]
    pub execution_namespace: String,

    /// Kind of sentinel that holds a locked cluster's slots.
    #[arg(
        long,
        env = "HEARTH_SENTINEL",
        value_enum,
        ignore_case = true,
        default_value_t = SentinelKind::FournosJob
    )]
    pub sentinel: SentinelKind,

    /// LocalQueue (in the execution namespace) that `workload` sentinels are submitted
    /// to. Unused with `fournosjob` sentinels, whose queue Fournos picks.
    #[arg(long, env = "HEARTH_LOCAL_QUEUE_NAME", default_value = DEFAULT_LOCAL_QUEUE_NAME)]
    pub local_queue_name: String,

    /// WorkloadPriorityClass of `workload` sentinels; none by default. Its value is
    /// read from the API when a sentinel is created (Kueue v1beta2 needs both
    /// `priorityClassRef` and `priority`). Unused with `fournosjob` sentinels.
    #[arg(long, env = "HEARTH_SENTINEL_PRIORITY_CLASS")]
    pub sentinel_priority_class: Option<String>,

    /// Clusters reconciled at the same time.
    #[arg(long, env = "HEARTH_LOCK_CONCURRENCY", default_value = "4")]
    pub lock_concurrency: NonZeroU16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_runtime::testing::{assert_env_vars, parse_without_env};

    fn parse(argv: &[&str]) -> Result<LockManagerConfig, clap::Error> {
        Ok(parse_without_env::<Args>(argv)?.config)
    }

    #[test]
    fn defaults_match_the_design_table() {
        assert_eq!(
            parse(&[]).unwrap(),
            LockManagerConfig {
                execution_namespace: "psap-automation".into(),
                sentinel: SentinelKind::FournosJob,
                local_queue_name: "fournos-queue".into(),
                sentinel_priority_class: None,
                lock_concurrency: NonZeroU16::new(4).unwrap(),
            }
        );
    }

    #[test]
    fn env_var_names_are_the_contract() {
        assert_env_vars::<Args>(&[
            ("execution_namespace", "HEARTH_EXECUTION_NAMESPACE"),
            ("sentinel", "HEARTH_SENTINEL"),
            ("local_queue_name", "HEARTH_LOCAL_QUEUE_NAME"),
            ("sentinel_priority_class", "HEARTH_SENTINEL_PRIORITY_CLASS"),
            ("lock_concurrency", "HEARTH_LOCK_CONCURRENCY"),
            ("namespace", "HEARTH_NAMESPACE"),
        ]);
    }

    #[test]
    fn sentinel_kinds_parse() {
        assert_eq!(
            parse(&["--sentinel=workload"]).unwrap().sentinel,
            SentinelKind::Workload
        );
        assert_eq!(
            parse(&["--sentinel=FournosJob"]).unwrap().sentinel,
            SentinelKind::FournosJob
        );
        assert!(parse(&["--sentinel=pod"]).is_err());
        assert!(parse(&["--lock-concurrency=0"]).is_err());
        let config = parse(&["--sentinel-priority-class=cluster-lock"]).unwrap();
        assert_eq!(
            config.sentinel_priority_class.as_deref(),
            Some("cluster-lock")
        );
    }
}
