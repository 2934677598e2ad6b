//! The harness of the tests that run hearth-lock-manager with `fournosjob` sentinels next
//! to the real, unmodified Fournos operator ([`crate::fournos_real`]): the plane with
//! Fournos's CRDs, shared by a test binary, and a [`FournosLab`] per test with Fournos, the stand-ins
//! it needs and lock-manager running in its scope. Every look at a cluster that says
//! `locked=true` probes it ([`LockLab::probe`]): a one-slot job must not be admitted.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::ControlPlane;
use crate::downstream;
use crate::fournos_real::{self, Fournos, StandIns};
use crate::hearth::{self, Controller, Running};
use crate::invariants::workload_is;
use crate::lab::{DEADLINE, LockLab, Mode, SLOTS, is_held, lock_plane, start_lock_manager};
use crate::peers::{self, Absent};
use crate::process::until;
use crate::resources::apply;

/// The label Fournos puts on a job's Workload, naming the job (a fact of Fournos's, not
/// Hearth's): anyone who may write Workloads may write it too.
pub const JOB_NAME_LABEL: &str = "fournos.dev/job-name";

// ---------------------------------------------------------------------------------------
// Shared: the plane, Fournos's venv and CRDs
// ---------------------------------------------------------------------------------------

pub struct Shared {
    pub plane: &'static ControlPlane,
    pub source: PathBuf,
    pub venv: PathBuf,
}

static SHARED: OnceCell<std::result::Result<Shared, String>> = OnceCell::const_new();

/// The plane with Fournos's CRDs, or `None` (after one skip line) without Fournos.
pub async fn shared() -> Result<Option<&'static Shared>> {
    let source = match fournos_real::source() {
        Ok(source) => source,
        Err(why) => {
            // The test binary's name, for the one line it prints.
            let binary = std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.file_stem()?.to_str()?.to_owned()))
                .map(|stem| stem.split('-').next().unwrap_or_default().to_owned())
                .unwrap_or_else(|| "fournos".to_owned());
            return match peers::on_absent(&binary, &why) {
                // One line for the whole binary, so that `./dev test` shows that these
                // were skipped.
                skip @ Absent::Skip(_) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| drop(skip.skip_or_fail()));
                    Ok(None)
                }
                // Every test that needs Fournos fails, each with the reason.
                Absent::Fail(message) => Err(anyhow!(message)),
            };
        }
    };
    let shared = SHARED
        .get_or_init(|| async move {
            let venv_source = source.clone();
            let venv = tokio::task::spawn_blocking(move || fournos_real::venv(&venv_source))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            let plane = lock_plane().await.map_err(|e| format!("{e:#}"))?;
            let client = plane.management_client().await.map_err(|e| e.to_string())?;
            fournos_real::install_crds(&client, &source)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Shared {
                plane,
                source,
                venv,
            })
        })
        .await;
    shared
        .as_ref()
        .map(Some)
        .map_err(|e| anyhow!("setting up the plane with Fournos failed: {e}"))
}

// ---------------------------------------------------------------------------------------
// Reading state
// ---------------------------------------------------------------------------------------

pub fn phase(job: &FournosJob) -> Option<&str> {
    job.status.as_ref()?.phase.as_deref()
}

pub fn job_message(job: &FournosJob) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.other.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------
// A test's world
// ---------------------------------------------------------------------------------------

/// The shared [`LockLab`] (probing: every look at a `locked=true` cluster tries a job),
/// with Fournos and the stand-ins it needs running in its scope.
pub struct FournosLab {
    pub lab: LockLab,
    pub shared: &'static Shared,
    pub fournos: tokio::sync::Mutex<Fournos>,
    stand_ins: tokio::task::JoinHandle<Result<()>>,
    pub lock_manager: tokio::sync::Mutex<Option<Running>>,
}

impl std::ops::Deref for FournosLab {
    type Target = LockLab;

    fn deref(&self) -> &LockLab {
        &self.lab
    }
}

impl Drop for FournosLab {
    fn drop(&mut self) {
        self.stand_ins.abort();
    }
}

impl FournosLab {
    /// A scope with Fournos (and the stand-ins it needs) running in it, or `None` to skip.
    pub async fn new(test: &str) -> Result<Option<FournosLab>> {
        let Some(shared) = shared().await? else {
            return Ok(None);
        };
        let lab = LockLab::new(shared.plane, test).await?.probing();
        let (client, scope) = (&lab.client, &lab.scope);
        fournos_real::install_pipelines(client, &shared.source, &scope.execution_namespace).await?;
        let stand_ins = tokio::spawn(StandIns::new(client, &scope.execution_namespace).run());
        let fournos = Fournos::start(shared.plane, &shared.source, &shared.venv, scope)
            .await
            .context("starting Fournos")?;
        eprintln!(
            "{test}: Fournos is up (log: {})",
            fournos.log_path().display()
        );
        lab.show_log(fournos.log_path());
        Ok(Some(FournosLab {
            lab,
            shared,
            fournos: tokio::sync::Mutex::new(fournos),
            stand_ins,
            lock_manager: Default::default(),
        }))
    }

    /// hearth-lock-manager with `fournosjob` sentinels, as the chart's ServiceAccount.
    pub async fn start_lock_manager(&self) -> Result<Running> {
        let running = start_lock_manager(&self.lab, Mode::FournosJob).await?;
        *self.lock_manager.lock().await = Some(running.clone());
        Ok(running)
    }

    /// Workloads of the execution namespace as a Fournos user reaches them (their own
    /// RBAC, [`LockLab::fournos_user`]): how every attack writes, never as admin.
    pub async fn user_workloads(&self) -> Result<Api<Workload>> {
        Ok(Api::namespaced(
            self.fournos_user().await?,
            &self.scope.execution_namespace,
        ))
    }

    pub async fn metric(&self, name: &str) -> Result<f64> {
        let guard = self.lock_manager.lock().await;
        let running = guard.as_ref().context("lock-manager not started")?;
        Ok(running.metric(name).await?)
    }

    /// A FournosCluster with its flavor, queue entry and `status.kueue` as kueue-sync
    /// makes them, and the kubeconfig Secret Fournos copies for a job that runs there.
    pub async fn cluster(&self, name: &str) -> Result<String> {
        self.queue_cluster(name).await?;
        self.publish_slots(name, SLOTS).await?;
        self.kubeconfig_secret(name).await?;
        Ok(name.to_owned())
    }

    /// The kubeconfig Secret Fournos copies for a job that runs on cluster `name`.
    async fn kubeconfig_secret(&self, name: &str) -> Result<()> {
        apply(
            &self.client,
            &json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": format!("kubeconfig-{name}"), "namespace": self.scope.secrets_namespace },
                "stringData": { "kubeconfig": "not used: no pipeline runs here" },
            }),
        )
        .await?;
        Ok(())
    }

    /// hearth-kueue-sync in the lab's scope, as the chart's ServiceAccount: its Workload
    /// cache watches the lab's execution namespace (`HEARTH_EXECUTION_NAMESPACE` from the
    /// scope), where Fournos makes its Workloads. `HEARTH_SENTINEL=fournosjob` only keeps
    /// the chart's RBAC of this scope as lock-manager needs it (the kit renders it once per
    /// sentinel kind); kueue-sync makes no sentinel.
    pub async fn start_kueue_sync(&self) -> Result<Running> {
        hearth::start(
            self.shared.plane,
            &self.scope,
            Controller::KueueSync,
            "0",
            &[
                ("HEARTH_SENTINEL", "fournosjob"),
                ("HEARTH_LOG_LEVEL", "info"),
            ],
        )
        .await
        .context("starting hearth-kueue-sync (cargo build --workspace --bins first)")
    }

    /// FournosCluster `name` as a person and hearth-discovery make it (`Valid`, `gpus`),
    /// once the running kueue-sync `ks` has given it its flavor and queue entry
    /// (`KueueSynced=True/Synced`); and its kubeconfig Secret.
    pub async fn synced_cluster(
        &self,
        name: &str,
        gpus: &[hearth_api::GpuInfo],
        ks: &Running,
    ) -> Result<String> {
        self.kubeconfig_secret(name).await?;
        downstream::onboard(&self.clusters, name, gpus).await?;
        downstream::wait_reason(&self.clusters, name, "Synced", ks).await?;
        Ok(name.to_owned())
    }

    pub async fn set_owner(
        &self,
        name: &str,
        owner: Option<&str>,
        ttl: Option<&str>,
    ) -> Result<()> {
        let mut spec = json!({ "owner": owner });
        if let Some(ttl) = ttl {
            spec["ttl"] = ttl.into();
        }
        self.set_spec(name, spec).await
    }

    /// The cluster's lock FournosJob (by the contract's label), once there is exactly one
    /// that satisfies `done`.
    pub async fn wait_sentinel(
        &self,
        cluster: &str,
        what: &str,
        done: impl Fn(&FournosJob) -> bool,
    ) -> Result<FournosJob> {
        self.wait_one_sentinel(cluster, what, done, |job: &FournosJob| {
            format!("{:?} {:?}", phase(job), job_message(job))
        })
        .await
        .map_err(|e| self.lab.with_logs(e))
    }

    /// The Workload Fournos made for `job` (owned by it), once `done`.
    pub async fn wait_job_workload(
        &self,
        job: &FournosJob,
        what: &str,
        done: impl Fn(&Workload) -> bool,
    ) -> Result<Workload> {
        let uid = job.uid().unwrap_or_default();
        until(
            &format!("Workload of {}: {what}", job.name_any()),
            DEADLINE,
            || async {
                let found = self
                    .workloads
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .find(|w| w.owner_references().iter().any(|o| o.uid == uid));
                Ok(match found {
                    Some(w) if done(&w) => Ok(w),
                    Some(w) => Err(format!("{:?}", w.status.map(|s| s.conditions))),
                    None => Err("none".into()),
                })
            },
        )
        .await
        .map_err(|e| self.lab.with_logs(e))
    }

    pub async fn no_workload_named(&self, name: &str) -> Result<()> {
        until(&format!("Workload {name} gone"), DEADLINE, || async {
            Ok(match self.workloads.get_opt(name).await? {
                None => Ok(()),
                Some(w) => Err(format!("{:?}", w.status.map(|s| s.conditions))),
            })
        })
        .await
    }

    /// An ordinary FournosJob for `cluster` (not exclusive), as a user submits it.
    pub async fn submit_job(&self, name: &str, cluster: &str) -> Result<()> {
        apply(
            &self.client,
            &json!({
                "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
                "metadata": { "name": name, "namespace": self.scope.execution_namespace },
                "spec": {
                    "cluster": cluster, "exclusive": false, "owner": "carol",
                    "pipeline": "fournos-full",
                    "executionEngine": { "forge": { "project": "e2e", "args": ["noop"] } },
                },
            }),
        )
        .await?;
        Ok(())
    }

    pub async fn wait_job(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(&FournosJob) -> bool,
    ) -> Result<FournosJob> {
        until(&format!("FournosJob {name}: {what}"), DEADLINE, || async {
            let job = self.jobs.get(name).await?;
            Ok(if done(&job) {
                Ok(job)
            } else {
                Err(format!("{:?}: {}", phase(&job), job_message(&job)))
            })
        })
        .await
        .map_err(|e| self.lab.with_logs(e))
    }

    /// Lock `cluster` for `owner` and wait until it is held; the sentinel and its Workload.
    pub async fn lock(&self, cluster: &str, owner: &str) -> Result<(FournosJob, Workload)> {
        self.set_owner(cluster, Some(owner), None).await?;
        let started = Instant::now();
        self.wait_lock(cluster, "held", is_held).await?;
        let job = self
            .wait_sentinel(cluster, "Admitted", |j| phase(j) == Some("Admitted"))
            .await?;
        let workload = self
            .wait_job_workload(&job, "admitted", |w| workload_is(w, "Admitted"))
            .await?;
        eprintln!(
            "{cluster}: held for {owner} {:?} after the owner was set",
            started.elapsed()
        );
        Ok((job, workload))
    }
}

/// A FournosLab with one cluster (named from `base`) and lock-manager running, or `None` (after
/// one skip line) without Fournos.
pub async fn lab_with_cluster(test: &str, base: &str) -> Result<Option<(FournosLab, String)>> {
    let Some(lab) = FournosLab::new(test).await? else {
        return Ok(None);
    };
    let cluster = lab.cluster(&lab.scope.cluster(base)).await?;
    lab.start_lock_manager().await?;
    Ok(Some((lab, cluster)))
}

/// A FournosLab with hearth-kueue-sync running (flavors, queue entries, `status.kueue` and a
/// cordoned cluster's `Schedulable` count, all its own), one cluster it synced with `gpus`
/// (named from `base`) and lock-manager running; or `None` (after one skip line) without
/// Fournos.
pub async fn lab_with_kueue_sync(
    test: &str,
    base: &str,
    gpus: &[hearth_api::GpuInfo],
) -> Result<Option<(FournosLab, String, Running)>> {
    let Some(lab) = FournosLab::new(test).await? else {
        return Ok(None);
    };
    let ks = lab.start_kueue_sync().await?;
    let cluster = lab
        .synced_cluster(&lab.scope.cluster(base), gpus, &ks)
        .await?;
    lab.start_lock_manager().await?;
    Ok(Some((lab, cluster, ks)))
}

/// A lock test's world in either [`Mode`]: for `workload`, a probing [`LockLab`]; for
/// `fournosjob`, a [`FournosLab`], with the real Fournos running in its scope. A test body takes
/// one, so that each attack runs in both modes.
pub enum ModeLab {
    Workload(Box<LockLab>),
    FournosJob(Box<FournosLab>),
}

impl std::ops::Deref for ModeLab {
    type Target = LockLab;

    fn deref(&self) -> &LockLab {
        match self {
            ModeLab::Workload(lab) => lab,
            ModeLab::FournosJob(lab) => lab,
        }
    }
}

impl ModeLab {
    /// A new scope for `test` in `mode`, or `None` (after one skip line for the test
    /// binary) for `fournosjob` without Fournos, unless the peers are required.
    pub async fn new(mode: Mode, test: &str) -> Result<Option<ModeLab>> {
        Ok(match mode {
            Mode::Workload => {
                let lab = LockLab::new(lock_plane().await?, test).await?.probing();
                Some(ModeLab::Workload(Box::new(lab)))
            }
            Mode::FournosJob => FournosLab::new(test)
                .await?
                .map(|lab| ModeLab::FournosJob(Box::new(lab))),
        })
    }

    /// A queued cluster named from `base`, with `status.kueue` as kueue-sync leaves it
    /// (and, for `fournosjob`, what Fournos needs of it: [`FournosLab::cluster`]).
    pub async fn cluster(&self, base: &str) -> Result<String> {
        match self {
            ModeLab::Workload(lab) => lab.synced_cluster(base).await,
            ModeLab::FournosJob(lab) => lab.cluster(&lab.scope.cluster(base)).await,
        }
    }

    /// hearth-lock-manager in the lab's scope and mode.
    pub async fn lock_manager(&self) -> Result<Running> {
        match self {
            ModeLab::Workload(lab) => start_lock_manager(lab, Mode::Workload).await,
            ModeLab::FournosJob(lab) => lab.start_lock_manager().await,
        }
    }
}
