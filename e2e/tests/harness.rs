//! The harness's own helpers, as later tests will use them: a target of one's own that can
//! be stopped and started, per-test node-reader credentials that can be revoked, a black
//! hole, and the kubeconfig Secret of the contract.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::names::{KUBECONFIG_SECRET_KEY, KUBECONFIG_SECRET_LABEL};
use hearth_e2e::fleet::NodeSpec;
use hearth_e2e::kubeconfig::client_from_yaml;
use hearth_e2e::lab::{own_plane, with_controller_manager};
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::process::{is_alive, poll, until};
use hearth_e2e::{BlackHole, ControlPlane, PlaneError, TargetFleet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tokio::sync::OnceCell;

async fn list_nodes(kubeconfig: &str) -> Result<usize, kube::Error> {
    let client = client_from_yaml(kubeconfig)
        .await
        .expect("a valid kubeconfig");
    Ok(Api::<Node>::all(client)
        .list(&ListParams::default())
        .await?
        .items
        .len())
}

/// Polls until listing nodes with `kubeconfig` gives `Ok(n)` with `want(n)` or an error
/// `want_err` accepts; a deadline, never a sleep.
async fn wait_list(
    kubeconfig: &str,
    what: &str,
    accept: impl Fn(&Result<usize, kube::Error>) -> bool,
) -> Result<()> {
    poll(what, Duration::from_secs(60), || async {
        let result = list_nodes(kubeconfig).await;
        Ok(accept(&result).then_some(()))
    })
    .await?;
    Ok(())
}

fn status_code(result: &Result<usize, kube::Error>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

#[tokio::test]
async fn own_target_survives_an_outage_and_gets_new_nodes() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let fleet = TargetFleet::new(
        "outage",
        vec![NodeSpec::nvidia("outage-l4-0", "NVIDIA-L4", 1)],
    );
    let target = plane.add_target(fleet.clone()).await?;
    assert_eq!(target.fleet(), &fleet);
    let kubeconfig = target.node_reader_kubeconfig().to_string();
    assert_eq!(list_nodes(&kubeconfig).await?, 1);

    plane.stop_target("outage").await?;
    assert!(!plane.target("outage")?.is_running());
    // Stopped means nothing listens: the client fails to connect, with no HTTP status.
    let down = list_nodes(&kubeconfig).await;
    assert!(down.is_err() && status_code(&down).is_none(), "{down:?}");

    plane.start_target("outage").await?;
    let again = plane.target("outage")?;
    assert!(again.is_running());
    assert_eq!(again.server(), target.server(), "same URL after a restart");
    assert_eq!(
        list_nodes(&kubeconfig).await?,
        1,
        "same data and credentials after a restart"
    );

    again
        .add_node(&NodeSpec::nvidia("outage-l4-1", "NVIDIA-L4", 1).cordoned())
        .await?;
    assert_eq!(list_nodes(&kubeconfig).await?, 2);
    Ok(())
}

#[tokio::test]
async fn revoked_node_reader_tokens_are_rejected() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let target = plane.target("target-a")?;
    let sa = "revoke-test";
    let kubeconfig = target.issue_node_reader(sa).await?;
    assert_eq!(list_nodes(&kubeconfig).await?, target.fleet().nodes.len());

    target.revoke_node_reader(sa).await?;
    // The authenticator caches token lookups for a few seconds at most.
    wait_list(&kubeconfig, "the revoked token rejected", |r| {
        status_code(r) == Some(401)
    })
    .await?;

    let fresh = target.issue_node_reader(sa).await?;
    assert_eq!(list_nodes(&fresh).await?, target.fleet().nodes.len());
    // The shared identity is untouched.
    assert_eq!(
        list_nodes(target.node_reader_kubeconfig()).await?,
        target.fleet().nodes.len()
    );
    Ok(())
}

#[tokio::test]
async fn black_hole_never_answers() -> Result<()> {
    let hole = BlackHole::start()?;
    let target = ControlPlane::shared().await?.target("target-b")?;
    let kubeconfig = hole.kubeconfig(target.ca_pem());
    let attempt = tokio::time::timeout(Duration::from_secs(3), list_nodes(&kubeconfig)).await;
    ensure!(attempt.is_err(), "expected a hang, got {attempt:?}");
    Ok(())
}

#[tokio::test]
async fn kubeconfig_secrets_follow_the_contract() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("kubeconfig_secret").await?;
    let target = plane.target("target-b")?;
    let cluster = scope.cluster("b");
    plane
        .create_kubeconfig_secret(
            &scope.secrets_namespace,
            &cluster,
            target.node_reader_kubeconfig(),
        )
        .await?;
    let secrets: Api<Secret> =
        Api::namespaced(plane.management_client().await?, &scope.secrets_namespace);
    let secret = secrets.get(&format!("kubeconfig-{cluster}")).await?;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(KUBECONFIG_SECRET_LABEL).map(String::as_str),
        Some("true")
    );
    let data = secret.data.context("data")?;
    let stored = String::from_utf8(data[KUBECONFIG_SECRET_KEY].0.clone())?;
    assert_eq!(stored, target.node_reader_kubeconfig());
    assert_eq!(list_nodes(&stored).await?, target.fleet().nodes.len());
    Ok(())
}

#[tokio::test]
async fn isolated_scopes_are_distinct_and_reconciled() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let a = plane.isolated("isolation").await?;
    let b = plane.isolated("isolation").await?;
    assert_ne!(a.id, b.id);
    assert_ne!(a.cluster_queue, b.cluster_queue);
    assert_ne!(a.cluster("x"), b.cluster("x"));
    let env = a.controller_env();
    assert!(env.contains(&(
        "HEARTH_EXECUTION_NAMESPACE".into(),
        a.execution_namespace.clone()
    )));
    // The error type tests see carries the component's words.
    let missing = plane.target("no-such-target").unwrap_err();
    assert!(matches!(missing, PlaneError::Invalid(_)), "{missing}");
    Ok(())
}

#[tokio::test]
async fn controllers_run_under_the_supervisor_and_can_be_killed() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("controller").await?;
    let program = hearth_binary(hearth_api::names::controllers::DISCOVERY)?;
    let name = format!("discovery-{}", scope.id);
    let started = plane
        .start_controller(&name, &program, scope.controller_env())
        .await?;
    assert!(started.ready && started.running, "{started:?}");
    let pid_of = |plane: &ControlPlane| {
        plane
            .state()
            .processes
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.pid)
    };
    let pid = pid_of(plane).context("a registered pid")?;
    assert!(is_alive(pid));

    // A crash at an arbitrary instant; the request returns once the process is gone.
    plane.kill_controller(&name).await?;
    assert!(!is_alive(pid));
    assert_eq!(pid_of(plane), None);

    let restarted = plane
        .start_controller(&name, &program, scope.controller_env())
        .await?;
    assert!(restarted.ready);
    let second = pid_of(plane).context("a registered pid")?;
    assert_ne!(second, pid);
    plane.stop_controller(&name).await?;
    assert!(!is_alive(second));
    Ok(())
}

/// A plane asked for kube-controller-manager has a working one, and only such a plane:
/// there a ConfigMap owned by another is collected once its owner is deleted (garbage
/// collector), a new namespace gets its `default` ServiceAccount (serviceaccount
/// controller), and a deleted namespace with something in it is emptied and goes
/// (namespace controller). On the shared plane, which does not ask, a deleted namespace
/// stays `Terminating`.
#[tokio::test]
async fn controller_manager_runs_only_where_asked() -> Result<()> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    let with = own_plane(&PLANE, with_controller_manager).await?;
    let without = ControlPlane::shared().await?;
    let deadline = Duration::from_secs(60);

    let client = with.management_client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = "kcm-probe";
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let owner = maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?,
        )
        .await?;
    let dependent: ConfigMap = serde_json::from_value(json!({ "metadata": {
        "name": "dependent",
        "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid() }],
    }}))?;
    maps.create(&PostParams::default(), &dependent).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    until("the default ServiceAccount", deadline, || async {
        Ok(accounts
            .get_opt("default")
            .await?
            .map(drop)
            .ok_or("none yet".to_owned()))
    })
    .await?;
    maps.delete("owner", &DeleteParams::default()).await?;
    until("the dependent collected", deadline, || async {
        Ok(match maps.get_opt("dependent").await? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        })
    })
    .await?;
    namespaces.delete(ns, &DeleteParams::default()).await?;
    until("the namespace gone", deadline, || async {
        Ok(match namespaces.get_opt(ns).await? {
            None => Ok(()),
            Some(n) => Err(format!("{:?}", n.status.and_then(|s| s.phase))),
        })
    })
    .await?;

    let namespaces: Api<Namespace> = Api::all(without.management_client().await?);
    let ns = format!("kcm-absent-{}", std::process::id());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": ns } }))?,
        )
        .await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    let left = namespaces.get(&ns).await?;
    ensure!(
        left.status.and_then(|s| s.phase).as_deref() == Some("Terminating"),
        "without kube-controller-manager a deleted namespace stays Terminating"
    );
    Ok(())
}

/// Kueue runs with its admission webhooks on, as users run it: a ClusterQueue whose flavor
/// lists its resources out of `coveredResources` order passes the CRD's rules, and only
/// Kueue's webhook refuses it. The refusal reaches the writer, naming the webhook.
#[tokio::test]
async fn kueue_webhooks_refuse_what_kueue_refuses() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("webhooks").await?;
    let client = plane.management_client().await?;
    let name = format!("{}-out-of-order", scope.cluster_queue);
    let queue = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": { "name": name },
        "spec": { "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{ "name": "default", "resources": [
                { "name": "memory", "nominalQuota": "1Gi" },
                { "name": "cpu", "nominalQuota": "1" },
            ]}],
        }]},
    });
    let refused = hearth_e2e::resources::apply(&client, &queue)
        .await
        .expect_err("Kueue's webhook admitted a ClusterQueue whose resources are out of order");
    let message = format!("{refused:#}");
    ensure!(
        message.contains("vclusterqueue.kb.io") && message.contains("coveredResources"),
        "{message}"
    );
    Ok(())
}
