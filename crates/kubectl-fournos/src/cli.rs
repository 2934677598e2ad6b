//! Command line: verbs, global flags and their environment variables.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hearth_api::names::{POOL_LABEL, defaults};

/// The exit codes ([`crate::error::Failure::exit_code`]), as every `--help` ends with them.
macro_rules! exit_codes {
    () => {
        "Exit codes:\n\
         \x20 0  done (or nothing to change)\n\
         \x20 1  an unexpected error (the message says what)\n\
         \x20 2  a usage error: an unknown flag or a missing argument\n\
         \x20 3  refused: someone else holds the lock or cordon (--force takes it), or a flag's value is wrong\n\
         \x20 4  not found: no such FournosCluster (wrong -n?); doctor: something Hearth needs is missing\n\
         \x20 5  not allowed: RBAC or the credentials refused a read or a write\n\
         \x20 6  wait: timed out, or the lock can no longer come (released, cluster deleted)\n"
    };
}

/// A verb's `--help` epilogue: its examples, a line each, then the exit codes.
macro_rules! examples {
    ($($line:literal),+ $(,)?) => {
        concat!("Examples:\n", $($line, "\n",)+ "\n", exit_codes!())
    };
}

/// After the top-level help: the commands people run most, and the exit codes.
const TOP_AFTER_HELP: &str = concat!(
    "Examples:\n",
    "  kubectl fournos status                         the fleet: GPUs, pool, quota, lock, cordon\n",
    "  kubectl fournos lock gpu-a --ttl 4h            lock gpu-a for yourself for 4 hours\n",
    "  kubectl fournos wait gpu-a --locked            until the lock holds the cluster's slots\n",
    "  kubectl fournos why gpu-a                      why a lock waits or a cluster has no quota\n",
    "  kubectl fournos unlock gpu-a\n",
    "  kubectl fournos cordon gpu-a --reason \"driver upgrade\" --until 4h\n",
    "  kubectl fournos doctor                         what Hearth needs on this cluster\n",
    "\n",
    "<CLUSTER> is a FournosCluster's name in --namespace (HEARTH_NAMESPACE, default hearth).\n",
    "Durations (--ttl, --until, --timeout): 90s, 30m, 1h30m, 2d.\n",
    "\n",
    exit_codes!()
);

/// Lock, unlock and inspect the GPU clusters Hearth manages (FournosClusters), with your
/// own kubeconfig and RBAC.
#[derive(Debug, Parser)]
// bin_name: kubectl runs the plugin as `kubectl fournos`, so usage and help say that.
#[command(
    name = "kubectl-fournos",
    bin_name = "kubectl fournos",
    version,
    after_help = TOP_AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Namespace of the FournosClusters.
    #[arg(
        short = 'n',
        long,
        global = true,
        env = "HEARTH_NAMESPACE",
        default_value = defaults::NAMESPACE
    )]
    pub namespace: String,

    /// Namespace of the lock sentinels and their Kueue Workloads (read by `why`).
    #[arg(
        long,
        global = true,
        env = "HEARTH_EXECUTION_NAMESPACE",
        default_value = defaults::EXECUTION_NAMESPACE
    )]
    pub execution_namespace: String,

    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_hint = clap::ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable table or sentence.
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Lock a cluster for yourself (sets spec.owner and spec.ttl).
    #[command(after_help = examples!(
        "  kubectl fournos lock gpu-a --ttl 4h      lock gpu-a for yourself for 4 hours",
        "  kubectl fournos lock gpu-a               until you unlock it",
        "  kubectl fournos wait gpu-a --locked      then wait until the lock holds its slots",
    ))]
    Lock {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
        /// How long the lock lasts, in whole minutes: e.g. 30m, 4h, 1h30m, 2d (written to
        /// spec.ttl in one unit: 1h30m as 90m). Without it the lock lasts until you unlock.
        #[arg(long)]
        ttl: Option<String>,
        /// Lock in this name (default: your user name as the apiserver knows it).
        #[arg(long)]
        owner: Option<String>,
        /// Take the lock even if someone else holds it.
        #[arg(long)]
        force: bool,
    },
    /// Release your lock on a cluster (clears spec.owner and spec.ttl).
    #[command(after_help = examples!(
        "  kubectl fournos unlock gpu-a",
        "  kubectl fournos unlock gpu-a --force     release someone else's lock",
    ))]
    Unlock {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
        /// The owner name you locked with (default: your user name as the apiserver knows it).
        #[arg(long)]
        owner: Option<String>,
        /// Release the lock even if someone else holds it.
        #[arg(long)]
        force: bool,
    },
    /// Cordon a cluster for maintenance (sets spec.cordon): Kueue admits no new job there,
    /// jobs already admitted keep running, quota is unchanged. `status` and `why` say how
    /// many are left (Drained once none is).
    #[command(after_help = examples!(
        "  kubectl fournos cordon gpu-a --reason \"driver upgrade, OPS-1234\" --until 4h",
        "  kubectl fournos status gpu-a             CORDON counts down to drained",
    ))]
    Cordon {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
        /// Why, for everyone whose jobs now wait elsewhere (e.g. "driver upgrade, OPS-1234").
        #[arg(long)]
        reason: String,
        /// When the maintenance should end: a time (2026-11-26T08:00:00Z) or a duration
        /// from now (90m, 4h, 1h30m, 2d: the grammar of --ttl and --timeout). Past it
        /// Hearth reports the cordon overdue; it never lifts it.
        #[arg(long)]
        until: Option<String>,
        /// Cordon in this name (default: your user name as the apiserver knows it).
        #[arg(long)]
        by: Option<String>,
        /// Take over someone else's cordon.
        #[arg(long)]
        force: bool,
    },
    /// Lift your cordon (clears spec.cordon): Kueue admits new jobs there again.
    #[command(after_help = examples!(
        "  kubectl fournos uncordon gpu-a",
        "  kubectl fournos uncordon gpu-a --force   lift someone else's cordon",
    ))]
    Uncordon {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
        /// The name you cordoned with (default: your user name as the apiserver knows it).
        #[arg(long)]
        by: Option<String>,
        /// Lift someone else's cordon.
        #[arg(long)]
        force: bool,
    },
    /// The fleet (or one cluster): GPUs, pool, kubeconfig validity, quota, lock, waiting
    /// reason.
    #[command(after_help = examples!(
        "  kubectl fournos status                   the whole fleet",
        "  kubectl fournos status gpu-a -o yaml     one cluster, as YAML",
        "  kubectl fournos status -l fournos.dev/pool=b",
    ))]
    Status {
        /// One FournosCluster's name, in --namespace; without it, every cluster.
        cluster: Option<String>,
        /// Only the clusters matching this label selector, e.g. fournos.dev/pool=b.
        #[arg(short = 'l', long, conflicts_with = "cluster")]
        selector: Option<String>,
        /// FournosCluster labels shown as the POOL column, comma-separated (the pool label
        /// keys kueue-sync publishes).
        #[arg(long, env = "HEARTH_POOL_LABEL_KEYS", default_value = POOL_LABEL)]
        pool_label_keys: String,
    },
    /// Explain in one paragraph why a cluster's lock waits or why it has no quota.
    #[command(after_help = examples!(
        "  kubectl fournos why gpu-a",
    ))]
    Why {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
    },
    /// Wait until a cluster's lock is held (or released).
    #[command(after_help = examples!(
        "  kubectl fournos wait gpu-a --locked --timeout 30m",
        "  kubectl fournos wait gpu-a --released",
    ))]
    Wait {
        /// The FournosCluster's name, in --namespace (`kubectl fournos status` lists them;
        /// the shell completes it).
        cluster: String,
        #[command(flatten)]
        until: WaitUntil,
        /// Give up after this long (e.g. 30s, 10m, 1h30m).
        #[arg(long, default_value = "10m")]
        timeout: String,
    },
    /// Steps of the migration from the Python (kopf) Hearth (see docs/migration.md).
    Migrate {
        #[command(subcommand)]
        step: MigrateStep,
    },
    /// Check what Hearth needs on this cluster, and say what to do about what is missing.
    ///
    /// Kueue's API, the ClusterQueue, the namespaces, the CRDs (FournosJob's when
    /// sentinels are FournosJobs), the LocalQueue of workload sentinels. Says what to do
    /// about each missing piece; exits 4 when something is missing, 5 when a read was
    /// refused. `helm install` prints the command with the values it installed.
    Doctor(DoctorArgs),
    /// Completion: `install` lets kubectl complete `kubectl fournos …`.
    ///
    /// `install` writes kubectl_complete-fournos next to the plugin (or into --dir), which
    /// kubectl runs to complete `kubectl fournos …`. A shell name prints that shell's
    /// completion script for the kubectl-fournos command itself.
    Completion {
        #[arg(value_enum)]
        target: CompletionTarget,
        /// With `install`: where to write kubectl_complete-fournos (a directory on $PATH;
        /// default: the directory on $PATH kubectl runs kubectl-fournos from, krew's
        /// ~/.krew/bin included).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompletionTarget {
    Install,
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// The settings `doctor` checks, named as the chart's values set them.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Namespace of the kubeconfig Secrets (chart: config.secretsNamespace).
    #[arg(long, env = "HEARTH_SECRETS_NAMESPACE", default_value = defaults::SECRETS_NAMESPACE)]
    pub secrets_namespace: String,
    /// The shared ClusterQueue (chart: config.clusterQueueName).
    #[arg(long, env = "HEARTH_KUEUE_CLUSTER_QUEUE_NAME", default_value = defaults::CLUSTER_QUEUE_NAME)]
    pub cluster_queue: String,
    /// The lock sentinel's kind (chart: config.sentinel).
    #[arg(long, env = "HEARTH_SENTINEL", value_enum, default_value_t = Sentinel::Fournosjob)]
    pub sentinel: Sentinel,
    /// The LocalQueue of workload sentinels, in the execution namespace (chart:
    /// config.localQueueName).
    #[arg(long, env = "HEARTH_LOCAL_QUEUE_NAME", default_value = defaults::CLUSTER_QUEUE_NAME)]
    pub local_queue: String,
    /// Where the chart is installed (its ServiceAccounts), when not the FournosClusters'
    /// namespace (chart: config.namespace set).
    #[arg(long)]
    pub install_namespace: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sentinel {
    /// A FournosJob (needs Fournos).
    Fournosjob,
    /// A bare Kueue Workload through a LocalQueue.
    Workload,
}

#[derive(Debug, Subcommand)]
pub enum MigrateStep {
    /// Report and remove the kopf annotations the Python Hearth left on kubeconfig Secrets
    /// (`kopf.zalando.org/last-handled-configuration` holds a copy of the Secret's data,
    /// token included). Run it after the Python Hearth is stopped. Prints Secret names and
    /// annotation keys, never their values.
    ScrubSecrets {
        /// Namespace of the kubeconfig Secrets.
        #[arg(long, env = "HEARTH_SECRETS_NAMESPACE", default_value = defaults::SECRETS_NAMESPACE)]
        secrets_namespace: String,
        /// Only report what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
    /// Report and remove what kopf left on the FournosClusters of the namespace: its
    /// finalizer (which nothing removes once the Python Hearth is gone, so deleting such a
    /// cluster hangs) and its annotations. Run it after the Python Hearth is stopped.
    ScrubClusters {
        /// Only report what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct WaitUntil {
    /// Until the lock sentinel is admitted and holds the cluster's slots.
    #[arg(long)]
    pub locked: bool,
    /// Until nobody owns the cluster and its slots are free.
    #[arg(long)]
    pub released: bool,
}

/// Parses `--timeout` in Hearth's one typed grammar: `90s`, `10m`, `2h`, `1h30m`.
pub fn parse_timeout(input: &str) -> Result<std::time::Duration, String> {
    hearth_api::duration::parse_flag_duration(input)
        .map_err(|e| format!("--timeout {input:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn wait_needs_exactly_one_target_state() {
        assert!(Cli::try_parse_from(["kubectl-fournos", "wait", "a"]).is_err());
        assert!(
            Cli::try_parse_from(["kubectl-fournos", "wait", "a", "--locked", "--released"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["kubectl-fournos", "wait", "a", "--locked"]).is_ok());
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from(["kubectl-fournos", "status", "-n", "fleet", "-o", "json"])
            .unwrap();
        assert_eq!(cli.global.namespace, "fleet");
        assert_eq!(cli.global.output, Output::Json);
    }

    #[test]
    fn scrub_secrets_takes_a_dry_run_and_a_namespace() {
        let cli = Cli::try_parse_from([
            "kubectl-fournos",
            "migrate",
            "scrub-secrets",
            "--dry-run",
            "--secrets-namespace",
            "s",
        ])
        .unwrap();
        match cli.command {
            Command::Migrate {
                step:
                    MigrateStep::ScrubSecrets {
                        secrets_namespace,
                        dry_run,
                    },
            } => assert!(dry_run && secrets_namespace == "s"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timeouts_take_seconds_minutes_and_hours() {
        assert_eq!(parse_timeout("90s"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(
            parse_timeout("1h30m"),
            Ok(std::time::Duration::from_secs(5400))
        );
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("1 hour").is_err());
    }

    /// Every code a failure exits with is explained in every `--help`, with clap's 2.
    #[test]
    fn help_gives_examples_and_every_exit_code() {
        use crate::error::Failure;
        let codes: Vec<u8> = [
            Failure::Refused(String::new()),
            Failure::NotFound(String::new()),
            Failure::Forbidden(String::new()),
            Failure::TimedOut(String::new()),
            Failure::WaitFailed(String::new()),
        ]
        .iter()
        .map(Failure::exit_code)
        .chain([0, 1, 2])
        .collect();
        let mut command = Cli::command();
        let top = command.render_help().to_string();
        assert!(top.contains("Examples:\n  kubectl fournos status"), "{top}");
        assert!(
            top.contains("<CLUSTER> is a FournosCluster's name"),
            "{top}"
        );
        for sub in [
            "lock", "unlock", "cordon", "uncordon", "status", "why", "wait",
        ] {
            let help = command
                .find_subcommand_mut(sub)
                .unwrap()
                .render_help()
                .to_string();
            assert!(
                help.contains(&format!("  kubectl fournos {sub} ")),
                "{sub}: {help}"
            );
            let cluster = help
                .lines()
                .find(|l| {
                    l.trim_start().starts_with("[CLUSTER]")
                        || l.trim_start().starts_with("<CLUSTER>")
                })
                .unwrap_or_default();
            assert!(
                cluster.contains("FournosCluster's name"),
                "{sub}'s <CLUSTER> is undescribed: {help}"
            );
            for text in [&top, &help] {
                for code in &codes {
                    assert!(
                        text.contains(&format!("\n  {code}  ")),
                        "{sub}: exit code {code}"
                    );
                }
            }
        }
    }

    #[test]
    fn usage_says_kubectl_fournos() {
        let err = Cli::try_parse_from(["kubectl-fournos", "lock"]).unwrap_err();
        let text = err.render().to_string();
        assert!(text.contains("Usage: kubectl fournos lock"), "{text}");
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("Usage: kubectl fournos"), "{help}");
        assert!(!help.contains("kubectl-fournos ["), "{help}");
    }
}
