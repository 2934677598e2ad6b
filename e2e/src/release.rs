//! A Helm release of the chart whose Deployments run as processes: the plane has no
//! kubelet, so each Deployment's Pod is a process ([`hearth::start`]: the chart's
//! ServiceAccount) started with the literal environment of the Deployment's container as
//! the apiserver stores it. A rollout is modelled as one: [`Pods::roll_out`] replaces each
//! process whose Deployment's environment changed (SIGTERM, then a new one), one
//! controller after another. And [`Sampler`], which checks invariants all along a
//! procedure.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use crate::docs::run_sh;
use crate::hearth::{self, Controller, Running};
use crate::lab::LockLab;
use crate::{ControlPlane, Isolated};

/// `helm install hearth <chart> -n <iso's namespace> <args>` as a person types it (with
/// the pinned helm), the Deployments' processes started, and `cluster` of the plane's
/// fleet onboarded (its node-reader kubeconfig Secret in the secrets namespace). Returns
/// the processes and a lab in `iso`'s scope.
pub async fn install(
    plane: &'static ControlPlane,
    iso: &Isolated,
    chart: &Path,
    args: &str,
    cluster: &str,
) -> Result<(Pods, LockLab)> {
    let chart = chart.display().to_string();
    run_sh(
        &format!("helm install hearth \"$CHART\" -n \"$NAMESPACE\" {args}"),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &plane.management_kubeconfig(),
        &[("CHART", &chart), ("NAMESPACE", &iso.namespace)],
    )?;
    let pods = Pods::start(plane, iso).await?;
    let lab = LockLab::with_scope(plane, iso.clone()).await?;
    let target = plane.target(cluster)?;
    plane
        .onboard_onto(&iso.secrets_namespace, cluster, &target)
        .await?;
    Ok((pods, lab))
}

/// The literal (`value:`) environment of Deployment `name`'s first container, as a Pod of
/// it would get it; the admin address is the plane's to choose (one port per process).
pub async fn deployment_env(
    deployments: &Api<Deployment>,
    name: &str,
) -> Result<Vec<(String, String)>> {
    let deployment = deployments.get(name).await?;
    let containers = deployment
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers)
        .unwrap_or_default();
    let container = containers.first().context("a container")?;
    Ok(container
        .env
        .iter()
        .flatten()
        .filter(|e| e.name != "HEARTH_ADMIN_ADDR")
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect())
}

/// The release's controllers as its Deployments' Pods, with what each was started with.
pub struct Pods {
    plane: &'static ControlPlane,
    iso: Isolated,
    deployments: Api<Deployment>,
    pub running: BTreeMap<Controller, (Running, Vec<(String, String)>)>,
}

impl Pods {
    /// Starts a process for each controller's Deployment in `iso`'s namespace.
    pub async fn start(plane: &'static ControlPlane, iso: &Isolated) -> Result<Pods> {
        let client = plane.management_client().await?;
        let mut pods = Pods {
            plane,
            iso: iso.clone(),
            deployments: Api::namespaced(client, &iso.namespace),
            running: BTreeMap::new(),
        };
        for controller in Controller::ALL {
            pods.start_one(controller).await?;
        }
        Ok(pods)
    }

    async fn start_one(&mut self, controller: Controller) -> Result<()> {
        let env = deployment_env(&self.deployments, controller.binary()).await?;
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let running = hearth::start(self.plane, &self.iso, controller, "0", &pairs).await?;
        self.running.insert(controller, (running, env));
        Ok(())
    }

    /// A rollout: each controller whose Deployment's environment changed is replaced, one
    /// after another. Returns those replaced.
    pub async fn roll_out(&mut self) -> Result<Vec<Controller>> {
        let mut replaced = Vec::new();
        for controller in Controller::ALL {
            let env = deployment_env(&self.deployments, controller.binary()).await?;
            let (running, old) = &self.running[&controller];
            if *old == env {
                continue;
            }
            running.stop(self.plane).await?;
            self.start_one(controller).await?;
            replaced.push(controller);
        }
        Ok(replaced)
    }

    /// Stops every process, as deleting the Deployments (`helm uninstall`) stops the Pods.
    pub async fn stop_all(&mut self) -> Result<()> {
        for (running, _) in std::mem::take(&mut self.running).into_values() {
            running.stop(self.plane).await?;
        }
        Ok(())
    }

    /// The tail of each process's log, for failure messages.
    pub fn logs(&self) -> String {
        let tails: Vec<String> = self.running.values().map(|(r, _)| r.log_tail(30)).collect();
        tails.join("\n")
    }

    /// The environment the process of `running` really has (`/proc/<pid>/environ`).
    pub fn process_env(&self, running: &Running) -> Result<String> {
        let process = self
            .plane
            .state()
            .processes
            .into_iter()
            .rfind(|p| p.name == running.name())
            .with_context(|| format!("no process {}", running.name()))?;
        let environ = std::fs::read(format!("/proc/{}/environ", process.pid))?;
        Ok(String::from_utf8_lossy(&environ).replace('\0', "\n"))
    }
}

#[derive(Default)]
struct Seen {
    samples: usize,
    violations: Vec<String>,
}

/// Runs a check (its violations, empty when all holds) every ~50 ms in the background
/// until [`finish`](Self::finish).
pub struct Sampler {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<Seen>>,
}

impl Sampler {
    pub fn start<F, Fut>(check: F) -> Sampler
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<String>>> + Send,
    {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    let result = check().await;
                    {
                        let mut seen = seen.lock().expect("poisoned");
                        seen.samples += 1;
                        match result {
                            Ok(bad) => seen.violations.extend(bad),
                            Err(e) => seen.violations.push(format!("sampling failed: {e:#}")),
                        }
                    }
                    // The sampling pace; nothing waits on it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        Sampler { task, seen }
    }

    /// Stops sampling; fails with every violation seen, or when fewer than 10 samples
    /// were taken (too few to mean anything). Returns the number of samples.
    pub fn finish(self, during: &str) -> Result<usize> {
        self.task.abort();
        let seen = std::mem::take(&mut *self.seen.lock().expect("poisoned"));
        ensure!(
            seen.violations.is_empty(),
            "during {during} ({} samples): {:#?}",
            seen.samples,
            seen.violations
        );
        ensure!(seen.samples >= 10, "too few samples: {}", seen.samples);
        Ok(seen.samples)
    }
}
