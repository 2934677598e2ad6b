//! [`World`]: one test's (or the chaos tool's) scope on a plane, the APIs its checks read,
//! and the controllers it started, whose logs end a failed wait. The one type the hostile
//! tests, the migration test and `hearth-chaos` read the management cluster through.

use std::time::Duration;

use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::{ClusterQueue, ResourceFlavor, Workload};
use hearth_api::names::CLUSTER_LOCK_LABEL;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::error::{Context as _, Result};
use crate::fixtures::cluster_queue;
use crate::hearth::{self, Controller, Running};
use crate::process::until;
use crate::resources::dynamic_api;
use crate::{ControlPlane, Isolated};

pub struct World<'p> {
    pub plane: &'p ControlPlane,
    pub scope: Isolated,
    pub client: kube::Client,
    /// FournosClusters of the scope.
    pub clusters: Api<FournosCluster>,
    /// The scope's kubeconfig Secrets.
    pub secrets: Api<Secret>,
    /// ClusterQueues (cluster-scoped; the scope's is `scope.cluster_queue`).
    pub queues: Api<ClusterQueue>,
    pub flavors: Api<ResourceFlavor>,
    /// Workloads of the execution namespace.
    pub workloads: Api<Workload>,
    /// FournosJobs of the execution namespace.
    pub jobs: Api<FournosJob>,
    /// Controllers started through [`start`](Self::start), in order.
    pub controllers: Vec<Running>,
    /// How long [`wait_cluster`](Self::wait_cluster) waits (default [`DEADLINE`]).
    pub deadline: Duration,
}

/// How long one expected change of a FournosCluster may take, unless a test says otherwise.
pub const DEADLINE: Duration = Duration::from_secs(60);

impl<'p> World<'p> {
    pub async fn new(plane: &'p ControlPlane, scope: Isolated) -> Result<World<'p>> {
        let client = plane.management_client().await?;
        Ok(World {
            clusters: Api::namespaced(client.clone(), &scope.namespace),
            secrets: Api::namespaced(client.clone(), &scope.secrets_namespace),
            queues: Api::all(client.clone()),
            flavors: Api::all(client.clone()),
            workloads: Api::namespaced(client.clone(), &scope.execution_namespace),
            jobs: Api::namespaced(client.clone(), &scope.execution_namespace),
            client,
            plane,
            scope,
            controllers: Vec::new(),
            deadline: DEADLINE,
        })
    }

    /// Starts `controller` in the scope (see [`hearth::start`]) and keeps it in
    /// [`controllers`](Self::controllers).
    pub async fn start(
        &mut self,
        controller: Controller,
        instance: &str,
        env: &[(&str, &str)],
    ) -> Result<Running> {
        let running = hearth::start(self.plane, &self.scope, controller, instance, env).await?;
        self.controllers.push(running.clone());
        Ok(running)
    }

    /// The tail of every started controller's log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        let logs: Vec<String> = self.controllers.iter().map(|c| c.log_tail(lines)).collect();
        logs.join("\n")
    }

    /// The e2e kit's wait on a FournosCluster: polls `name` until it exists and `check`
    /// accepts it, for at most [`deadline`](Self::deadline). A time-out says what `check`
    /// last said and ends with the log of every controller [`start`](Self::start)ed.
    pub async fn wait_cluster(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&FournosCluster) -> std::result::Result<(), String>,
    ) -> anyhow::Result<FournosCluster> {
        self.wait_cluster_opt(name, what, |found| match found {
            None => Err("does not exist".to_owned()),
            Some(cluster) => check(&cluster).map(|()| cluster),
        })
        .await
    }

    /// [`wait_cluster`](Self::wait_cluster) for a check that also judges absence (`None`)
    /// and returns what it found.
    pub async fn wait_cluster_opt<T>(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(Option<FournosCluster>) -> std::result::Result<T, String>,
    ) -> anyhow::Result<T> {
        until(&format!("{name}: {what}"), self.deadline, || async {
            Ok(check(self.clusters.get_opt(name).await?))
        })
        .await
        .map_err(|e| hearth::with_logs(e, &self.controllers))
    }

    /// The scope's ClusterQueue.
    pub async fn queue(&self) -> Result<ClusterQueue> {
        let name = &self.scope.cluster_queue;
        self.queues
            .get(name)
            .await
            .context(|| format!("reading ClusterQueue {name}"))
    }

    /// A merge patch to the scope's ClusterQueue, as a GitOps tool or a person writes it.
    pub async fn patch_queue(&self, patch: &serde_json::Value) -> Result<()> {
        let name = &self.scope.cluster_queue;
        self.queues
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .context(|| format!("patching ClusterQueue {name}"))?;
        Ok(())
    }

    /// The scope's ClusterQueue as the apiserver stores it (quantities as written, which
    /// may be numbers when another tool wrote them).
    pub async fn queue_json(&self) -> Result<serde_json::Value> {
        let (api, name) =
            dynamic_api(&self.client, &cluster_queue(&self.scope.cluster_queue)).await?;
        let queue = api
            .get(&name)
            .await
            .context(|| format!("reading ClusterQueue {name}"))?;
        serde_json::to_value(queue).context(|| "serializing the ClusterQueue".into())
    }

    /// Live (not Terminating) FournosJob sentinels labeled for `cluster`.
    pub async fn sentinel_jobs(&self, cluster: &str) -> Result<Vec<FournosJob>> {
        let lp = ListParams::default().labels(&format!("{CLUSTER_LOCK_LABEL}={cluster}"));
        Ok(self
            .jobs
            .list(&lp)
            .await
            .context(|| format!("listing the sentinels of {cluster}"))?
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .collect())
    }
}
