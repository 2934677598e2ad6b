//! Objects the management cluster starts with, and the per-test copies of them.

use std::path::Path;
use std::time::Duration;

use hearth_api::names::defaults;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::error::{Context, Result};
use crate::objects::KUEUE_API_VERSION;
use crate::process::poll;
use crate::resources::{
    self, apply, create_crds, parse_yaml_documents, read_yaml_documents, wait_established,
};

/// Namespace label a ClusterQueue's `namespaceSelector` matches: Workloads may be queued
/// only from namespaces carrying it.
pub const QUEUE_ACCESS_LABEL: &str = "fournos.dev/queue-access";
/// WorkloadPriorityClass for lock sentinels: above everything else.
pub const LOCK_PRIORITY_CLASS: &str = "fournos-lock";
pub const LOCK_PRIORITY: i64 = 1_000_000;
/// WorkloadPriorityClass for ordinary jobs.
pub const DEFAULT_PRIORITY_CLASS: &str = "fournos-default";
pub const DEFAULT_PRIORITY: i64 = 0;

/// The FournosJob CRD written for Hearth's tests (Fournos's own is not available here).
pub const FOURNOS_JOB_CRD: &str = include_str!("../fixtures/fournosjob-crd.yaml");

/// A set of namespaces and queues Hearth works in: the base one the plane starts with, or
/// a test's own (see [`crate::ControlPlane::isolated`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scope {
    /// Where FournosClusters live (`HEARTH_NAMESPACE`).
    pub namespace: String,
    /// Where kubeconfig Secrets live (`HEARTH_SECRETS_NAMESPACE`).
    pub secrets_namespace: String,
    /// Where sentinels and LocalQueue live (`HEARTH_EXECUTION_NAMESPACE`).
    pub execution_namespace: String,
    /// `HEARTH_KUEUE_CLUSTER_QUEUE_NAME`.
    pub cluster_queue: String,
    /// The LocalQueue in the execution namespace (`HEARTH_LOCAL_QUEUE_NAME`).
    pub local_queue: String,
}

impl Scope {
    /// [`slot_workload`](crate::objects::slot_workload) in this scope's execution namespace
    /// and LocalQueue.
    pub fn slot_workload(&self, name: &str, cluster: &str, slots: i64) -> Value {
        crate::objects::slot_workload(
            &self.execution_namespace,
            name,
            &self.local_queue,
            cluster,
            slots,
        )
    }

    /// The plane's base scope, with the contract's default names.
    pub fn base() -> Scope {
        Scope {
            namespace: defaults::NAMESPACE.into(),
            secrets_namespace: defaults::SECRETS_NAMESPACE.into(),
            execution_namespace: defaults::EXECUTION_NAMESPACE.into(),
            cluster_queue: defaults::CLUSTER_QUEUE_NAME.into(),
            local_queue: defaults::CLUSTER_QUEUE_NAME.into(),
        }
    }

    /// A test's scope: `hearth-<id>`, `secrets-<id>`, `exec-<id>`, `cq-<id>`.
    pub fn isolated(id: &str) -> Scope {
        Scope {
            namespace: format!("hearth-{id}"),
            secrets_namespace: format!("secrets-{id}"),
            execution_namespace: format!("exec-{id}"),
            cluster_queue: format!("cq-{id}"),
            local_queue: defaults::CLUSTER_QUEUE_NAME.into(),
        }
    }

    /// The environment a Hearth controller needs to work in this scope.
    pub fn controller_env(&self) -> Vec<(String, String)> {
        vec![
            ("HEARTH_NAMESPACE".into(), self.namespace.clone()),
            (
                "HEARTH_SECRETS_NAMESPACE".into(),
                self.secrets_namespace.clone(),
            ),
            (
                "HEARTH_EXECUTION_NAMESPACE".into(),
                self.execution_namespace.clone(),
            ),
            (
                "HEARTH_KUEUE_CLUSTER_QUEUE_NAME".into(),
                self.cluster_queue.clone(),
            ),
            ("HEARTH_LOCAL_QUEUE_NAME".into(), self.local_queue.clone()),
        ]
    }

    /// Creates the namespaces, the ClusterQueue (no flavors: Hearth adds them) and the
    /// LocalQueue, then waits until Kueue has reconciled the ClusterQueue.
    pub async fn create(&self, client: &kube::Client, timeout: Duration) -> Result<()> {
        for ns in [&self.namespace, &self.secrets_namespace] {
            apply(client, &namespace(ns, false)).await?;
        }
        apply(client, &namespace(&self.execution_namespace, true)).await?;
        apply(client, &cluster_queue(&self.cluster_queue)).await?;
        apply(
            client,
            &local_queue(
                &self.execution_namespace,
                &self.local_queue,
                &self.cluster_queue,
            ),
        )
        .await?;
        wait_cluster_queue_reconciled(client, &self.cluster_queue, timeout).await
    }
}

fn namespace(name: &str, queue_access: bool) -> Value {
    let mut ns = json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
    if queue_access {
        ns["metadata"]["labels"] = json!({ QUEUE_ACCESS_LABEL: "true" });
    }
    ns
}

/// A ClusterQueue open to namespaces labeled [`QUEUE_ACCESS_LABEL`], with no resource groups
/// (the CRD allows none; Hearth publishes them).
pub fn cluster_queue(name: &str) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": { "name": name },
        "spec": { "namespaceSelector": { "matchLabels": { QUEUE_ACCESS_LABEL: "true" } } },
    })
}

pub fn local_queue(namespace: &str, name: &str, cluster_queue: &str) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "clusterQueue": cluster_queue },
    })
}

fn priority_class(name: &str, value: i64, description: &str) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": { "name": name },
        "value": value,
        "description": description,
    })
}

/// Installs every CRD the plane serves: Kueue's (from the pinned module), the test
/// FournosJob, and Hearth's FournosCluster when `manifests/crd.yaml` exists, with
/// Hearth's Reservation CRD beside it (generated from this build's types).
pub async fn install_crds(
    client: &kube::Client,
    kueue_crds: &Path,
    fournos_cluster_crd: Option<&Path>,
    timeout: Duration,
) -> Result<()> {
    let mut docs = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(kueue_crds)
        .context(|| format!("reading {}", kueue_crds.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    entries.sort();
    for path in &entries {
        docs.extend(read_yaml_documents(path)?);
    }
    docs.extend(parse_yaml_documents(
        FOURNOS_JOB_CRD,
        "fixtures/fournosjob-crd.yaml",
    )?);
    match fournos_cluster_crd {
        Some(path) if path.exists() => {
            docs.extend(read_yaml_documents(path)?);
            docs.push(
                serde_json::to_value(hearth_api::crd::reservation_crd()).expect("a CRD serializes"),
            );
        }
        Some(path) => {
            tracing::warn!(path = %path.display(), "FournosCluster CRD not found; the plane runs without it")
        }
        None => {}
    }
    let names = create_crds(client, docs).await?;
    tracing::info!(count = names.len(), "CRDs created");
    wait_established(client, &names, timeout).await
}

/// The base fixtures: Kueue's namespace, the base [`Scope`] and the priority classes.
/// Kueue must be running (the ClusterQueue is waited on).
pub async fn install_base(client: &kube::Client, timeout: Duration) -> Result<()> {
    apply(client, &namespace(crate::kueue::KUEUE_NAMESPACE, false)).await?;
    apply(
        client,
        &priority_class(
            LOCK_PRIORITY_CLASS,
            LOCK_PRIORITY,
            "Hearth lock sentinels: hold a whole cluster",
        ),
    )
    .await?;
    apply(
        client,
        &priority_class(
            DEFAULT_PRIORITY_CLASS,
            DEFAULT_PRIORITY,
            "Ordinary Fournos jobs",
        ),
    )
    .await?;
    Scope::base().create(client, timeout).await
}

/// Waits until Kueue has written conditions on the ClusterQueue: proof that Kueue is not
/// only up but reconciling.
pub async fn wait_cluster_queue_reconciled(
    client: &kube::Client,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    let api: Api<DynamicObject> = resources::dynamic_api(client, &cluster_queue(name))
        .await?
        .0;
    poll(
        &format!("Kueue reconciling ClusterQueue {name}"),
        timeout,
        || async {
            let cq = api
                .get(name)
                .await
                .context(|| format!("reading ClusterQueue {name}"))?;
            let reconciled = cq.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| !c.is_empty());
            Ok(reconciled.then_some(()))
        },
    )
    .await
}

/// What hearth-kueue-sync makes for a cluster, for tests that run lock-manager without it:
/// the ResourceFlavor, the ClusterQueue's resource groups for `queued` (every cluster of
/// the scope with its slots, `name` included), and the FournosCluster `name` itself (its
/// kubeconfig Secret named `kubeconfig-<name>`, not created here).
pub async fn queued_cluster(
    client: &kube::Client,
    scope: &Scope,
    name: &str,
    queued: &[(&str, i64)],
) -> Result<()> {
    use hearth_api::{FournosCluster, FournosClusterSpec};
    use kube::api::{Patch, PatchParams, PostParams};
    apply(client, &crate::objects::resource_flavor(name)).await?;
    let (queues, _) = resources::dynamic_api(client, &cluster_queue(&scope.cluster_queue)).await?;
    queues
        .patch(
            &scope.cluster_queue,
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "resourceGroups": crate::objects::slot_resource_groups(queued) } }),
            ),
        )
        .await
        .context(|| format!("adding flavor {name} to the ClusterQueue"))?;
    let mut fc = FournosCluster::new(
        name,
        FournosClusterSpec {
            kubeconfig_secret: format!("kubeconfig-{name}"),
            ..Default::default()
        },
    );
    fc.metadata.namespace = Some(scope.namespace.clone());
    Api::<FournosCluster>::namespaced(client.clone(), &scope.namespace)
        .create(&PostParams::default(), &fc)
        .await
        .context(|| format!("creating FournosCluster {name}"))?;
    Ok(())
}

/// `status.kueue` of FournosCluster `name` as hearth-kueue-sync publishes it (under its
/// field manager): the flavor, the scope's ClusterQueue, `quota` cluster slots in the
/// queue and `slots` as `clusterSlots`.
pub async fn publish_kueue_status(
    client: &kube::Client,
    scope: &Scope,
    name: &str,
    quota: i64,
    slots: i64,
) -> Result<()> {
    use hearth_api::FournosCluster;
    use hearth_api::names::CLUSTER_SLOT_RESOURCE;
    let patch = json!({
        "apiVersion": "fournos.dev/v1",
        "kind": "FournosCluster",
        "status": { "kueue": {
            "flavor": name,
            "clusterQueue": scope.cluster_queue,
            "quotas": { CLUSTER_SLOT_RESOURCE: quota },
            "clusterSlots": slots,
        }},
    });
    let clusters = Api::<FournosCluster>::namespaced(client.clone(), &scope.namespace);
    resources::apply_status(&clusters, name, "hearth-kueue-sync", &patch)
        .await
        .context(|| format!("publishing status.kueue of {name}"))?;
    Ok(())
}
