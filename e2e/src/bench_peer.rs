//! The real Python (kopf) Hearth as `hearth-bench` runs it, side by side with this
//! project on the same plane: installed from the pinned peers folder
//! ([`Peer::HearthPy`](crate::peers::Peer)), under its packaged RBAC (`deploy/clusterrole.yaml`
//! and `deploy/secrets-role.yaml`, namespaces mapped to the bench's scope) as a
//! ServiceAccount of its own, so that the audit log tells its requests apart.
//!
//! Its image runs `python -m hearth`, which is `kopf.run(namespaces=[HEARTH_NAMESPACE,
//! HEARTH_SECRETS_NAMESPACE])` with the liveness endpoint pinned to `0.0.0.0:8080`. The
//! bench runs the same thing through kopf's CLI (`python -m kopf run -m hearth.operator -n … -n …`)
//! only to put that endpoint on a free loopback port: another test may run one too.
//!
//! It appends flavors to `resourceGroups[0]` of the ClusterQueue and does nothing on a
//! queue without one, so its queue is pre-seeded with one group ([`seed_resource_group`]),
//! as its deployment expects.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Context as _, Result};
use crate::process::{self, Managed, Spawn};
use crate::resources::{apply, parse_yaml_documents};
use crate::{ControlPlane, Isolated};

/// Its ServiceAccount in the scope's namespace.
pub const SERVICE_ACCOUNT: &str = "hearth-py";
/// The placeholder flavor of the pre-seeded resource group.
pub const SEED_FLAVOR: &str = "hearth-py-seed";

/// A running Python Hearth for one scope.
#[derive(Debug)]
pub struct PyHearth {
    managed: Managed,
    /// Its audit-log username.
    pub user: String,
}

impl PyHearth {
    /// Installs its RBAC for `iso`, starts it with `env` on top of the scope's settings
    /// and waits for kopf's liveness endpoint.
    pub async fn start(
        plane: &ControlPlane,
        iso: &Isolated,
        source: &Path,
        venv: &Path,
        env: &[(&str, &str)],
    ) -> Result<PyHearth> {
        let client = plane.management_client().await?;
        for object in rbac(iso, source)? {
            apply(&client, &object).await?;
        }
        let kubeconfig =
            crate::hearth::service_account_token_kubeconfig(plane, &iso.namespace, SERVICE_ACCOUNT)
                .await?;
        let liveness = process::free_port()?;
        let mut spec = Spawn::new(
            format!("hearth-py-{}", iso.id),
            // Not bin/kopf: its shebang names the folder the venv was built in.
            venv.join("bin/python"),
            plane.logs_dir().join(format!("hearth-py-{}.log", iso.id)),
        )
        .arg("-m")
        .arg("kopf")
        .arg("run")
        .arg("-m")
        .arg("hearth.operator")
        .arg("--namespace")
        .arg(&iso.namespace)
        .arg("--namespace")
        .arg(&iso.secrets_namespace)
        .arg(format!("--liveness=http://127.0.0.1:{liveness}/healthz"))
        .env("KUBECONFIG", kubeconfig.to_string_lossy())
        .env("PYTHONUNBUFFERED", "1");
        for (k, v) in iso.controller_env() {
            spec = spec.env(k, v);
        }
        for (k, v) in env {
            spec = spec.env(*k, *v);
        }
        let managed = process::spawn(spec)?;
        let mut py = PyHearth {
            managed,
            user: format!("system:serviceaccount:{}:{SERVICE_ACCOUNT}", iso.namespace),
        };
        py.managed
            .wait_healthz("Python Hearth liveness", liveness, Duration::from_secs(90))
            .await?;
        Ok(py)
    }

    pub fn pid(&self) -> u32 {
        self.managed.pid
    }

    /// The last lines of its log.
    pub fn log(&self) -> String {
        crate::error::tail(&self.managed.spec.log, 40)
    }

    /// SIGTERM (kopf's graceful shutdown), SIGKILL after 10 s.
    pub async fn stop(&mut self) {
        self.managed.stop(Duration::from_secs(10)).await;
    }
}

/// Its ServiceAccount, its packaged ClusterRole bound to it, and its packaged Secrets
/// Roles moved from `psap-secrets`/`hearth` to the scope's namespaces.
fn rbac(iso: &Isolated, source: &Path) -> Result<Vec<Value>> {
    let read = |file: &str| -> Result<Vec<Value>> {
        let path = source.join("deploy").join(file);
        let text =
            std::fs::read_to_string(&path).context(|| format!("reading {}", path.display()))?;
        parse_yaml_documents(&text, &path.display().to_string())
    };
    let subject = json!([{
        "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": iso.namespace,
    }]);
    let mut out = vec![json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": { "name": SERVICE_ACCOUNT, "namespace": iso.namespace },
    })];
    for role in read("clusterrole.yaml")? {
        let name = role["metadata"]["name"].clone();
        out.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("hearth-py-{}", iso.id) },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
            "subjects": subject,
        }));
        out.push(role);
    }
    for mut role in read("secrets-role.yaml")? {
        let namespace = match role["metadata"]["namespace"].as_str() {
            Some("psap-secrets") => iso.secrets_namespace.clone(),
            _ => iso.namespace.clone(),
        };
        role["metadata"]["namespace"] = json!(namespace);
        out.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": role["metadata"]["name"], "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"] },
            "subjects": subject,
        }));
        out.push(role);
    }
    Ok(out)
}

/// Gives `cluster_queue` one resource group holding only [`SEED_FLAVOR`] (with its
/// ResourceFlavor), covering `fournos/cluster-slot` with no quota.
pub async fn seed_resource_group(client: &kube::Client, cluster_queue: &str) -> Result<()> {
    apply(
        client,
        &json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": { "name": SEED_FLAVOR },
        }),
    )
    .await?;
    let queues: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "kueue.x-k8s.io",
            "v1beta2",
            "ClusterQueue",
        )),
    );
    queues
        .patch(
            cluster_queue,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": { "resourceGroups": [{
                "coveredResources": ["fournos/cluster-slot"],
                "flavors": [{ "name": SEED_FLAVOR, "resources": [
                    { "name": "fournos/cluster-slot", "nominalQuota": 0 },
                ]}],
            }]}})),
        )
        .await
        .context(|| format!("seeding ClusterQueue {cluster_queue}"))?;
    Ok(())
}

/// The sentinel FournosJob the Python Hearth locks `cluster` with; the real Fournos names
/// its Workload the same.
pub fn sentinel_name(cluster: &str) -> String {
    format!("hearth-lock-{cluster}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_is_named_as_the_python_hearth_names_it() {
        assert_eq!(sentinel_name("c0-ab12"), "hearth-lock-c0-ab12");
    }
}
