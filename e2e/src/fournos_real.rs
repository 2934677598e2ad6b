//! The real Fournos operator on the local plane: the pinned, unmodified snapshot under
//! `HEARTH_PEERS_DIR` (default `../shared/peers` from the repository root), installed with
//! pip into a venv cached beside the other tools, its own FournosJob CRD applied, and run
//! as its packaging runs it: `python -m fournos` (which is `kopf run -m fournos.operator
//! --namespace $FOURNOS_WORKLOAD_NAMESPACE`) with kopf's liveness endpoint, against the
//! management apiserver. Its log goes to the plane's logs directory and into failure
//! messages.
//!
//! Fournos needs a plane with kube-controller-manager
//! ([`PlaneOptions::controller_manager`](crate::PlaneOptions::controller_manager)): it relies
//! on the real garbage collector (background propagation) to delete a lockOnly job's
//! Workload and its resolve Job once their FournosJob is gone (it never deletes the former
//! itself; its own label-based sweep runs only every `FOURNOS_GC_INTERVAL_SEC`, 300 s by
//! default). The plane has no kubelet and no Tekton. What Fournos needs of them is supplied
//! by [`StandIns`], and nothing more:
//! - **Tekton's API**: CRDs `pipelines` and `pipelineruns` (`tekton.dev/v1`) without a
//!   schema, and Fournos's own mock Pipelines (`dev/mock-pipelines`), whose
//!   `fournos.dev/resolve-image` annotation the resolve step reads. No Tekton controller:
//!   a PipelineRun runs until a test finishes it ([`finish_pipeline_run`]).
//! - **The resolve Job**: the job controller gives it a Pod, but no kubelet runs it, so the
//!   stand-ins report that Pod `Succeeded` (as the kubelet would for a resolve that added
//!   nothing to the spec, which Fournos accepts) and the job controller completes the Job.
//! - **Ready pods**: Kueue's WaitForPodsReady wants a running job's pods ready; the stand-ins
//!   report `PodsReady` on the Workload of a job Fournos has `Running` (a PipelineRun
//!   exists). Never on a lockOnly job's: keeping that one admitted is lock-manager's job.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::error::{Context as _, Result};
use crate::peers::{KopfProcess, Peer};
use crate::process::{self, Spawn};
use crate::resources::{apply, apply_status, create_crds, read_yaml_documents, wait_established};
use crate::{ControlPlane, Scope};

/// Label Fournos puts on everything it creates.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "fournos");
/// Field manager of the stand-ins' status writes.
const STAND_INS: &str = "fournos-stand-ins";

pub use crate::peers::{PEERS_DIR_ENV, peers_dir};

/// Fournos's source folder, or why there is none (for [`crate::peers::on_absent`]).
pub fn source() -> std::result::Result<PathBuf, String> {
    Peer::Fournos.source()
}

/// A venv with Fournos installed (see [`Peer::venv`]).
pub fn venv(source: &Path) -> Result<PathBuf> {
    Peer::Fournos.venv(source)
}

fn schemaless_crd(plural: &str, kind: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.tekton.dev") },
        "spec": {
            "group": "tekton.dev",
            "scope": "Namespaced",
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List") },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
            }],
        },
    })
}

/// Fournos's own FournosJob CRD (replacing the plane's test one) and Tekton's two CRDs.
pub async fn install_crds(client: &kube::Client, source: &Path) -> Result<()> {
    let mut docs = read_yaml_documents(&source.join("manifests/crd.yaml"))?;
    docs.push(schemaless_crd("pipelines", "Pipeline"));
    docs.push(schemaless_crd("pipelineruns", "PipelineRun"));
    let names = create_crds(client, docs).await?;
    wait_established(client, &names, Duration::from_secs(60)).await
}

/// Fournos's mock Pipelines (`dev/mock-pipelines`) in `namespace`.
pub async fn install_pipelines(
    client: &kube::Client,
    source: &Path,
    namespace: &str,
) -> Result<()> {
    let dir = source.join("dev/mock-pipelines");
    let entries = std::fs::read_dir(&dir).context(|| format!("reading {}", dir.display()))?;
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        for mut doc in read_yaml_documents(&path)? {
            if doc.get("kind").and_then(Value::as_str) == Some("Pipeline") {
                doc["metadata"]["namespace"] = namespace.into();
                apply(client, &doc).await?;
            }
        }
    }
    Ok(())
}

/// A running Fournos operator working in one scope's execution namespace.
#[derive(Debug)]
pub struct Fournos(KopfProcess);

impl std::ops::Deref for Fournos {
    type Target = KopfProcess;

    fn deref(&self) -> &KopfProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Fournos {
    fn deref_mut(&mut self) -> &mut KopfProcess {
        &mut self.0
    }
}

impl Fournos {
    /// Starts Fournos for `scope` (workload namespace = its execution namespace, secrets
    /// namespace = its secrets namespace) and waits for kopf's liveness endpoint.
    pub async fn start(
        plane: &ControlPlane,
        source: &Path,
        venv: &Path,
        scope: &Scope,
    ) -> Result<Fournos> {
        let logs = plane.logs_dir();
        let kubeconfig = plane.management_kubeconfig();
        Self::start_with(&logs, &kubeconfig, source, venv, scope).await
    }

    /// [`start`](Self::start) with the plane's logs directory and admin kubeconfig given
    /// (the supervisor's own use).
    pub async fn start_with(
        logs: &Path,
        kubeconfig: &Path,
        source: &Path,
        venv: &Path,
        scope: &Scope,
    ) -> Result<Fournos> {
        let liveness = process::free_port()?;
        let spec = Spawn::new(
            format!("fournos-{}", scope.execution_namespace),
            venv.join("bin/python"),
            logs.join(format!("fournos-{}.log", scope.execution_namespace)),
        )
        .arg("-m")
        .arg("fournos")
        .arg(KopfProcess::liveness_arg(liveness))
        .env("KUBECONFIG", kubeconfig.to_string_lossy())
        .env("FOURNOS_WORKLOAD_NAMESPACE", &scope.execution_namespace)
        .env("FOURNOS_SECRETS_NAMESPACE", &scope.secrets_namespace)
        // Read at import relative to the working directory (`config/…` in its image).
        .env(
            "FOURNOS_RESOLVE_JOB_TEMPLATE",
            source
                .join("config/forge/resolve_job.yaml")
                .to_string_lossy(),
        )
        .env("PYTHONUNBUFFERED", "1");
        Ok(Fournos(KopfProcess::start(spec, liveness).await?))
    }
}

/// Marks the PipelineRun `name` finished (`Succeeded=True`), as Tekton would.
pub async fn finish_pipeline_run(client: &kube::Client, namespace: &str, name: &str) -> Result<()> {
    let (api, _) = crate::resources::dynamic_api(
        client,
        &json!({ "apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": { "namespace": namespace } }),
    )
    .await?;
    let patch = json!({ "status": { "conditions": [{
        "type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "finished by the test",
        "lastTransitionTime": now(),
    }]}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context(|| format!("finishing PipelineRun {name}"))?;
    Ok(())
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn workload_is(w: &Workload, type_: &str) -> bool {
    w.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

type OwnerReference = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The (lockOnly, phase) of the listed FournosJob among `refs`' owners, if any.
fn owning_job<'a>(
    refs: &[OwnerReference],
    jobs: &'a HashMap<String, (bool, Option<String>)>,
) -> Option<&'a (bool, Option<String>)> {
    refs.iter()
        .filter(|o| o.kind == "FournosJob")
        .find_map(|o| jobs.get(o.uid.as_str()))
}

/// Owned by a FournosJob that is not (or no longer) listed: the garbage collector's.
fn orphaned(refs: &[OwnerReference], jobs: &HashMap<String, (bool, Option<String>)>) -> bool {
    refs.iter().any(|o| o.kind == "FournosJob") && owning_job(refs, jobs).is_none()
}

/// What the plane lacks for Fournos, in one namespace (see the module docs).
pub struct StandIns {
    jobs: Api<FournosJob>,
    workloads: Api<Workload>,
    batch: Api<Job>,
    pods: Api<Pod>,
}

impl StandIns {
    pub fn new(client: &kube::Client, namespace: &str) -> StandIns {
        StandIns {
            jobs: Api::namespaced(client.clone(), namespace),
            workloads: Api::namespaced(client.clone(), namespace),
            batch: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
        }
    }

    /// Runs until dropped (spawn it; abort it at the end of the test).
    pub async fn run(self) -> anyhow::Result<()> {
        loop {
            // A failed round (the apiserver restarting, a Workload it cannot read) is
            // retried, as a controller would; the stand-ins must not silently stop.
            if let Err(error) = self.round().await {
                tracing::warn!(%error, "Fournos stand-ins round failed; retrying");
            }
            // The stand-ins' own pace, as a controller's; nothing waits on it by sleeping.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn round(&self) -> anyhow::Result<()> {
        // By UID: (lockOnly, phase).
        let jobs: HashMap<String, (bool, Option<String>)> = self
            .jobs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|j| {
                let uid = j.uid()?;
                Some((
                    uid,
                    (
                        j.spec.lock_only == Some(true),
                        j.status.and_then(|s| s.phase),
                    ),
                ))
            })
            .collect();
        for w in self.workloads.list(&ListParams::default()).await?.items {
            // A Workload whose job is gone is the garbage collector's.
            let Some((false, Some(phase))) = owning_job(w.owner_references(), &jobs) else {
                continue;
            };
            if phase == "Running" && workload_is(&w, "Admitted") && !workload_is(&w, "PodsReady") {
                let patch = json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "status": { "conditions": [{
                        "type": "PodsReady", "status": "True", "reason": "Started",
                        "message": "the job's pods run (kubelet stand-in)", "lastTransitionTime": now(),
                    }]},
                });
                apply_status(&self.workloads, &w.name_any(), STAND_INS, &patch).await?;
            }
        }
        let managed = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        for job in self.batch.list(&managed).await?.items {
            // A Job whose FournosJob is gone is the garbage collector's.
            if orphaned(job.owner_references(), &jobs) {
                continue;
            }
            let done = job
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Complete" && c.status == "True")
                });
            if done {
                continue;
            }
            // The job controller made its Pod; the kubelet would run it to completion.
            let own = ListParams::default()
                .labels(&format!("batch.kubernetes.io/job-name={}", job.name_any()));
            for pod in self.pods.list(&own).await?.items {
                if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
                    continue;
                }
                let patch = json!({ "status": {
                    "phase": "Succeeded",
                    "conditions": [{ "type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now() }],
                }});
                self.pods
                    .patch_status(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
            }
        }
        Ok(())
    }
}
