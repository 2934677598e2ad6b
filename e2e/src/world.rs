//! [`World`]: one test's (or the chaos tool's) scope on a plane, the APIs its checks read,
//! and the controllers it started, whose logs end a failed wait. The one type the hostile
//! tests, the migration test and `hearth-chaos` read the management cluster through.

use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::{ClusterQueue, ResourceFlavor, Workload};
use hearth_api::names::CLUSTER_LOCK_LABEL;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::error::{Context as _, Result};
use crate::fixtures::cluster_queue;
use crate::hearth::{self, Controller, Running};
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
}

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
