//! hearth-discovery under test, for its end-to-end tests: one test's [`Fixture`] (its
//! scope on the shared plane, its own discovery process, Secrets written as an
//! administrator would) and what the tests read from FournosClusters, Events and the
//! fleet table. Every wait polls against a deadline or watches.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt as _;
use hearth_api::names::KUBECONFIG_SECRET_LABEL;
use hearth_api::{FournosCluster, Hardware, KubeconfigStatus};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;

use crate::fleet::GpuVendor;
use crate::hearth::{Controller, Running};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};
pub use crate::world::DEADLINE;
use crate::world::World;
use crate::{ControlPlane, Target, TargetFleet};

/// The field manager the tests write Secrets with, as an administrator would.
const ADMIN: &str = "e2e-admin";
/// Settings of most tests: probe every 3s, give up on a target after 3s, turn a Valid
/// cluster Unreachable on the second failure in a row.
pub const FAST: &[(&str, &str)] = &[
    ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3"),
    ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
    ("HEARTH_FAILURE_THRESHOLD", "2"),
];

// ---------------------------------------------------------------------------------------
// The controller under test, and the test's view of the management cluster.
// ---------------------------------------------------------------------------------------

/// One test's world: its scope on the shared plane, its discovery process, and clients.
pub struct Fixture {
    pub world: World<'static>,
    pub discovery: Running,
}

impl std::ops::Deref for Fixture {
    type Target = World<'static>;

    fn deref(&self) -> &World<'static> {
        &self.world
    }
}

impl Fixture {
    /// Creates the test's scope and starts discovery in it with `env` on top of the
    /// harness defaults.
    pub async fn start(test: &str, env: &[(&str, &str)]) -> Result<Fixture> {
        let plane = ControlPlane::shared().await?;
        let iso = plane.isolated(test).await?;
        let mut world = World::new(plane, iso).await?;
        let discovery = world.start(Controller::Discovery, "0", env).await?;
        Ok(Fixture { world, discovery })
    }

    /// Creates or replaces Secret `name` with `kubeconfig`, labeled as a kubeconfig Secret
    /// when `labeled`, with `annotations`.
    pub async fn put_secret(
        &self,
        name: &str,
        kubeconfig: &str,
        labeled: bool,
        annotations: &[(&str, &str)],
    ) -> Result<()> {
        let labels: BTreeMap<&str, &str> = if labeled {
            BTreeMap::from([(KUBECONFIG_SECRET_LABEL, "true")])
        } else {
            BTreeMap::new()
        };
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": self.scope.secrets_namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "data": { "kubeconfig": B64.encode(kubeconfig) },
        });
        self.secrets
            .patch(
                name,
                &PatchParams::apply(ADMIN).force(),
                &Patch::Apply(secret),
            )
            .await
            .with_context(|| format!("applying Secret {name}"))?;
        Ok(())
    }

    pub async fn delete_secret(&self, name: &str) -> Result<()> {
        self.secrets
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Secret {name}"))?;
        Ok(())
    }

    pub async fn wait_status(
        &self,
        name: &str,
        status: KubeconfigStatus,
    ) -> Result<FournosCluster> {
        self.wait_cluster(name, &format!("kubeconfigStatus {status}"), |c| {
            let seen = kubeconfig_status(c);
            if seen == Some(status) {
                Ok(())
            } else {
                Err(format!("kubeconfigStatus {seen:?}, {}", conditions_text(c)))
            }
        })
        .await
    }

    pub async fn wait_gone(&self, name: &str) -> Result<()> {
        self.eventually(&format!("{name} deleted"), DEADLINE, || async {
            Ok(match self.clusters.get_opt(name).await? {
                None => Ok(()),
                Some(c) => Err(format!("still there (labels {:?})", c.metadata.labels)),
            })
        })
        .await
    }

    /// Waits for an Event with `reason` about the object `name` in `namespace`.
    pub async fn wait_event(&self, namespace: &str, name: &str, reason: &str) -> Result<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        self.eventually(&format!("Event {reason} on {name}"), DEADLINE, || async {
            let list = events.list(&ListParams::default()).await?;
            let about: Vec<String> = list
                .items
                .iter()
                .filter(|e| regarding(e) == Some(name))
                .map(|e| e.reason.clone().unwrap_or_default())
                .collect();
            Ok(list
                .items
                .into_iter()
                .find(|e| regarding(e) == Some(name) && e.reason.as_deref() == Some(reason))
                .ok_or_else(|| format!("Events about {name}: {about:?}")))
        })
        .await
    }

    pub async fn events_about(&self, namespace: &str, name: &str) -> Result<Vec<Event>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| regarding(e) == Some(name))
            .collect())
    }

    /// [`Running::until`] on discovery: its log's tail is in the time-out error.
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<std::result::Result<T, String>>>,
    {
        self.discovery.until(what, timeout, probe).await
    }

    pub async fn metrics(&self) -> Result<String> {
        Ok(self.discovery.metrics().await?)
    }
}

fn regarding(event: &Event) -> Option<&str> {
    event.regarding.as_ref().and_then(|r| r.name.as_deref())
}

pub fn kubeconfig_status(cluster: &FournosCluster) -> Option<KubeconfigStatus> {
    cluster.status.as_ref().and_then(|s| s.kubeconfig_status)
}

pub fn conditions_text(cluster: &FournosCluster) -> String {
    cluster
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "no status".into())
}

/// `status.hardware`: what discovery wrote of the cluster's GPUs, if anything.
pub fn hardware(cluster: &FournosCluster) -> Option<&Hardware> {
    cluster.status.as_ref()?.hardware.as_ref()
}

pub fn failures(cluster: &FournosCluster) -> i32 {
    hardware(cluster).map_or(0, |h| h.consecutive_failures)
}

pub fn total_gpus(cluster: &FournosCluster) -> i64 {
    hardware(cluster).map_or(0, |h| h.total_gpus)
}

pub fn secret_name(cluster: &str) -> String {
    format!("kubeconfig-{cluster}")
}

/// `(vendor, model) → count` as status.hardware reports it.
pub fn reported_gpus(cluster: &FournosCluster) -> BTreeMap<(String, String), i64> {
    hardware(cluster)
        .map(|h| {
            h.gpus
                .iter()
                .map(|g| ((g.vendor.clone(), g.model.clone()), g.count))
                .collect()
        })
        .unwrap_or_default()
}

/// `(vendor, model) → count` the fleet table says a target's schedulable, Ready nodes hold.
pub fn expected_gpus(fleet: &TargetFleet) -> BTreeMap<(String, String), i64> {
    fleet
        .schedulable_gpus()
        .into_iter()
        .map(|((vendor, model), count)| {
            let vendor = match vendor {
                GpuVendor::Nvidia => "NVIDIA",
                GpuVendor::Amd => "AMD",
            };
            ((vendor.to_owned(), model), i64::from(count))
        })
        .collect()
}

/// GPU nodes the fleet table says are cordoned or not Ready.
pub fn expected_excluded(fleet: &TargetFleet) -> i32 {
    let n = fleet
        .nodes
        .iter()
        .filter(|n| n.gpus.is_some() && !n.counts_toward_quota())
        .count();
    i32::try_from(n).expect("a small fleet")
}

/// A kubeconfig for `target` whose user is `credentials`.
pub fn kubeconfig_for(target: &Target, credentials: Credentials) -> String {
    kubeconfig_yaml(
        target.name(),
        target.server(),
        target.ca_pem(),
        "hearth",
        &credentials,
    )
}

/// `(kubeconfigStatus, hardware.consecutiveFailures)` of one version of a cluster.
pub type Seen = (Option<KubeconfigStatus>, i32);

/// Every version of one FournosCluster's status the watch delivered.
pub struct History {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    pub fn record(api: &Api<FournosCluster>, name: &str) -> History {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Ok(cluster) = item {
                    let entry = (kubeconfig_status(&cluster), failures(&cluster));
                    let mut seen = record.lock().expect("history");
                    if seen.last() != Some(&entry) {
                        seen.push(entry);
                    }
                }
            }
        });
        History { seen, task }
    }

    pub fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().expect("history").clone()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}
