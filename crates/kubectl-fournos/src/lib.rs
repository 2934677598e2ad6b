//! `kubectl fournos`: the daily verbs on FournosClusters (lock, unlock, cordon, uncordon,
//! status, why, wait) for people, the prerequisites check (`doctor`), the migration steps from the
//! Python Hearth (`migrate`) and completion, through their own kubeconfig and RBAC. It only reads FournosClusters,
//! Events and Kueue Workloads and patches `spec.owner`/`spec.ttl`/`spec.cordon`; the controllers do the
//! rest. The deciding and formatting ([`lock`], [`view`], [`explain`], [`error`]) is pure;
//! [`api`] does the I/O; everything written for a person goes through [`print`].

pub mod api;
pub mod cli;
pub mod complete;
pub mod cordon;
pub mod doctor;
pub mod error;
pub mod explain;
pub mod lock;
pub mod print;
pub mod scrub;
pub mod view;

use std::io::Write as _;

use anyhow::Result;
use clap::{CommandFactory as _, Parser as _};
use hearth_api::text::bounded;
use jiff::Timestamp;
use serde::Serialize;

use crate::api::Session;
use crate::cli::{Cli, Command, CompletionTarget, MigrateStep, Output};
use crate::error::Failure;
use crate::explain::{Explanation, Progress, Target};
use crate::lock::Plan;

/// Reads and patches are retried this often when someone else changed the cluster
/// between our read and our write (409 Conflict), each time re-deciding from the new state.
pub(crate) const CONFLICT_RETRIES: usize = 5;

pub async fn run(cli: Cli) -> Result<()> {
    let output = cli.global.output;
    if let Command::Completion { target, dir } = cli.command {
        return completion(target, dir);
    }
    let session = Session::connect(&cli.global).await?;
    match cli.command {
        Command::Completion { .. } => unreachable!("handled above"),
        Command::Doctor(args) => {
            let settings = doctor::Settings {
                namespace: cli.global.namespace.clone(),
                secrets_namespace: args.secrets_namespace,
                execution_namespace: cli.global.execution_namespace.clone(),
                cluster_queue: args.cluster_queue,
                sentinel: args.sentinel,
                local_queue: args.local_queue,
                install_namespace: args
                    .install_namespace
                    .unwrap_or_else(|| cli.global.namespace.clone()),
            };
            let checks = doctor::diagnose(&settings, &session.observe(&settings).await);
            emit(output, &checks, &doctor::render(&checks))?;
            Ok(doctor::outcome(&checks)?)
        }
        Command::Migrate { step } => {
            let report = match step {
                MigrateStep::ScrubSecrets {
                    secrets_namespace,
                    dry_run,
                } => session.scrub_secrets(&secrets_namespace, dry_run).await?,
                MigrateStep::ScrubClusters { dry_run } => session.scrub_clusters(dry_run).await?,
            };
            emit(output, &report, &report.render())
        }
        Command::Status {
            cluster,
            selector,
            pool_label_keys,
        } => {
            let clusters = match cluster {
                Some(name) => vec![session.get(&name).await?],
                None => session.list(selector.as_deref()).await?,
            };
            let keys = view::pool_keys(&pool_label_keys);
            let rows: Vec<_> = clusters
                .iter()
                .map(|fc| view::row(fc).with_pools(fc, &keys))
                .collect();
            let text = if rows.is_empty() {
                format!(
                    "No FournosClusters in namespace {}{}.\n",
                    cli.global.namespace,
                    view::prefixed(" matching ", selector.map(|s| bounded(&s, 253)))
                )
            } else {
                view::table(&rows, Timestamp::now())
            };
            emit(output, &rows, &text)
        }
        Command::Lock {
            cluster,
            ttl,
            owner,
            force,
        } => {
            let me = owner_or_me(&session, owner).await?;
            let plan = |fc: &_| lock::plan_lock(fc, &me, ttl.as_deref(), force);
            write(&session, &cluster, output, LOCK, plan).await
        }
        Command::Cordon {
            cluster,
            reason,
            until,
            by,
            force,
        } => {
            let me = owner_or_me(&session, by).await?;
            let plan = |fc: &_| {
                cordon::plan_cordon(fc, &me, &reason, until.as_deref(), force, Timestamp::now())
            };
            write(&session, &cluster, output, CORDON, plan).await
        }
        Command::Uncordon { cluster, by, force } => {
            let me = owner_or_me(&session, by).await?;
            let plan = |fc: &_| cordon::plan_uncordon(fc, &me, force);
            write(&session, &cluster, output, CORDON, plan).await
        }
        Command::Unlock {
            cluster,
            owner,
            force,
        } => {
            let me = owner_or_me(&session, owner).await?;
            let plan = |fc: &_| lock::plan_unlock(fc, &me, force);
            write(&session, &cluster, output, LOCK, plan).await
        }
        Command::Why { cluster } => {
            let fc = session.get(&cluster).await?;
            let evidence = session.evidence(&fc).await;
            let explanation = Explanation {
                cluster: cluster.clone(),
                explanation: explain::explain(&fc, &evidence, Timestamp::now()),
                row: view::row(&fc),
            };
            let text = format!("{}\n", explanation.explanation);
            emit(output, &explanation, &text)
        }
        Command::Wait {
            cluster,
            until,
            timeout,
        } => {
            let limit = cli::parse_timeout(&timeout).map_err(Failure::Refused)?;
            let target = if until.locked {
                Target::Locked
            } else {
                Target::Released
            };
            match session.wait(&cluster, target, limit).await? {
                Progress::Done => {
                    let fc = session.get(&cluster).await?;
                    let row = view::row(&fc);
                    let text = match target {
                        Target::Locked => format!(
                            "{cluster} is locked by {}\n",
                            row.lock.owner.clone().unwrap_or_default()
                        ),
                        Target::Released => format!("{cluster} is not locked\n"),
                    };
                    emit(output, &row, &text)
                }
                Progress::Pending(last) => Err(Failure::TimedOut(format!(
                    "timed out after {timeout} waiting for {cluster}: {last}. \
                     `kubectl fournos why {cluster}` explains why."
                ))
                .into()),
                Progress::Failed(why) => {
                    Err(Failure::WaitFailed(format!("{cluster}: {why}")).into())
                }
            }
        }
    }
}

/// The FournosClusters whose names start with the query's prefix, read as the command
/// would (same kubeconfig, context, namespace), for completion. Quiet: nothing when they
/// cannot be read within [`COMPLETION_READ_LIMIT`].
pub async fn cluster_names(query: &complete::ClusterQuery) -> Vec<String> {
    let argv = ["kubectl-fournos", "status"]
        .into_iter()
        .map(str::to_owned)
        .chain(query.flags.iter().cloned());
    let Ok(cli) = Cli::try_parse_from(argv) else {
        return Vec::new();
    };
    let list = async { Session::connect(&cli.global).await?.list(None).await };
    match tokio::time::timeout(COMPLETION_READ_LIMIT, list).await {
        Ok(Ok(clusters)) => clusters
            .into_iter()
            .filter_map(|fc| fc.metadata.name)
            .filter(|name| name.starts_with(&query.prefix))
            .collect(),
        _ => Vec::new(),
    }
}

/// How long completion waits for the apiserver: a TAB that hangs is worse than none.
const COMPLETION_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `completion install`: the kubectl_complete-fournos kubectl runs to complete
/// `kubectl fournos …`; `completion <shell>`: that shell's script for `kubectl-fournos`.
fn completion(target: CompletionTarget, dir: Option<std::path::PathBuf>) -> Result<()> {
    use clap_complete::Shell;
    let shell = match target {
        CompletionTarget::Install => {
            let dir = match dir {
                Some(dir) => dir,
                None => complete::plugin_dir(
                    std::env::var_os("PATH").as_deref(),
                    std::env::current_exe().ok().as_deref(),
                )
                .ok_or_else(|| anyhow::anyhow!("the plugin's directory is unknown: pass --dir"))?,
            };
            let path = complete::install(&dir)?;
            println!(
                "Wrote {}. kubectl now completes `kubectl fournos …` wherever kubectl's own \
                 completion is loaded (e.g. `source <(kubectl completion bash)`) and {} is on \
                 $PATH.",
                path.display(),
                dir.display()
            );
            return Ok(());
        }
        CompletionTarget::Bash => Shell::Bash,
        CompletionTarget::Zsh => Shell::Zsh,
        CompletionTarget::Fish => Shell::Fish,
        CompletionTarget::Elvish => Shell::Elvish,
        CompletionTarget::Powershell => Shell::PowerShell,
    };
    let mut out = std::io::stdout();
    writeln!(
        out,
        "# Completion of the kubectl-fournos command. For `kubectl fournos …`, run \
         `kubectl fournos completion install` once and load kubectl's own completion."
    )?;
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-fournos", &mut out);
    Ok(())
}

/// `--owner`, else who the apiserver says the user is.
async fn owner_or_me(session: &Session, owner: Option<String>) -> Result<String> {
    match owner {
        Some(owner) => Ok(owner),
        None => session.whoami().await,
    }
}

/// What `lock`/`unlock` say once the patch is in.
fn lock_done(cluster: &str, row: &view::ClusterRow) -> String {
    match &row.lock.owner {
        Some(owner) => format!(
            "{cluster} locked for {owner}{}. The lock is held once Kueue admits \
             its sentinel: `kubectl fournos wait {cluster} --locked`.\n",
            lock::ttl_note(row.lock.ttl.as_deref())
        ),
        None => format!("{cluster} unlocked.\n"),
    }
}

/// What `cordon`/`uncordon` say once the patch is in.
fn cordon_done(cluster: &str, row: &view::ClusterRow) -> String {
    match &row.cordon {
        Some(c) => format!(
            "{cluster} cordoned by {}{}: Kueue admits no new job there; admitted ones keep \
             running. `kubectl fournos status {cluster}` shows how many are left (Drained \
             once none is).\n",
            c.by.as_deref().unwrap_or("?"),
            view::prefixed(" until ", c.until.as_deref())
        ),
        None => format!("{cluster} uncordoned: Kueue admits new jobs there again.\n"),
    }
}

/// What a write changes: its name, as `--force` took it over, and what is said once the
/// patch is in.
type Subject = (&'static str, fn(&str, &view::ClusterRow) -> String);
const LOCK: Subject = ("lock", lock_done);
const CORDON: Subject = ("cordon", cordon_done);

/// Read, plan, patch guarded by the version read; on a conflict read and plan again.
async fn write(
    session: &Session,
    cluster: &str,
    output: Output,
    (what, done): Subject,
    plan: impl Fn(&hearth_api::FournosCluster) -> Plan,
) -> Result<()> {
    for attempt in 0..CONFLICT_RETRIES {
        if attempt > 0 {
            // The controllers write a cluster's status in short bursts (a lock changing
            // hands, a cordon): let a burst pass before reading again.
            tokio::time::sleep(std::time::Duration::from_millis(150 << attempt)).await;
        }
        let fc = session.get(cluster).await?;
        match plan(&fc) {
            Plan::Refused(message) => return Err(Failure::Refused(message).into()),
            Plan::Unchanged(message) => {
                return emit(output, &view::row(&fc), &format!("{message}\n"));
            }
            Plan::Patch { patch, taken_from } => {
                let Some(updated) = session.patch(cluster, &patch).await? else {
                    continue;
                };
                if let Some(previous) = taken_from {
                    eprintln!(
                        "{}",
                        print::lines(&format!(
                            "warning: took the {what} of {cluster} from {previous} (--force)"
                        ))
                    );
                }
                let row = view::row(&updated);
                return emit(output, &row, &done(cluster, &row));
            }
        }
    }
    anyhow::bail!(
        "{cluster} kept changing while we tried to write it ({CONFLICT_RETRIES} conflicts); \
         try again"
    )
}

fn emit<T: Serialize>(output: Output, value: &T, text: &str) -> Result<()> {
    let rendered = print::render(output, value, text)?;
    std::io::stdout().write_all(rendered.as_bytes())?;
    Ok(())
}
