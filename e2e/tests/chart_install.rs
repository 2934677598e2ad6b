//! The Helm chart installed on a plane: each controller's RBAC as the real authorizer of
//! the management apiserver judges it, `helm install` with the defaults and with each
//! controller off, `kubectl fournos doctor` on a good and a broken install, and the real
//! Pod Security admission of every controller's Pod.

use std::path::Path;
use std::process::Command;

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::chart::chart_dir;
use hearth_e2e::chart::helm_on;
use hearth_e2e::hearth::{Controller, service_account_kubeconfig};
use hearth_e2e::lab::{own_plane, with_controller_manager};
use hearth_e2e::process::until;
use hearth_e2e::tools::Tools;
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::OnceCell;

fn can_i(
    kubeconfig: &Path,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    sa: &str,
    ns_of_sa: &str,
) -> Result<bool> {
    let tools = Tools::locate()?;
    // `resource/name` names an object; `resource#sub` a subresource.
    let (resource, subresource) = match resource.split_once('#') {
        Some((r, sub)) => (r, Some(sub)),
        None => (resource, None),
    };
    let mut cmd = Command::new(&tools.kubectl);
    cmd.arg("--kubeconfig").arg(kubeconfig).args([
        "auth",
        "can-i",
        verb,
        resource,
        &format!("--as=system:serviceaccount:{ns_of_sa}:{sa}"),
    ]);
    if let Some(sub) = subresource {
        cmd.arg(format!("--subresource={sub}"));
    }
    match namespace {
        Some(ns) => cmd.args(["-n", ns]),
        None => cmd.arg("--all-namespaces"),
    };
    let out = cmd.output()?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl auth can-i: {answer} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[tokio::test]
async fn rbac_grants_each_controller_only_what_it_needs() -> Result<()> {
    let plane = plane().await?;
    let iso = plane.isolated("chart_rbac").await?;
    // Applies the chart's ServiceAccounts and RBAC for this scope.
    service_account_kubeconfig(plane, &iso, Controller::Discovery).await?;
    let admin = plane.management_kubeconfig();
    let ns = iso.namespace.as_str();
    let secrets = iso.secrets_namespace.as_str();
    let exec = iso.execution_namespace.as_str();
    let cq = format!("clusterqueues.kueue.x-k8s.io/{}", iso.cluster_queue);
    let crd = "customresourcedefinitions.apiextensions.k8s.io/fournosclusters.fournos.dev";
    let (d, k, l) = (
        "hearth-discovery",
        "hearth-kueue-sync",
        "hearth-lock-manager",
    );
    // (sa, verb, resource, namespace, allowed)
    let checks: Vec<(&str, &str, &str, Option<&str>, bool)> = vec![
        (d, "list", "secrets", Some(secrets), true),
        (d, "watch", "secrets", Some(secrets), true),
        (d, "get", "secrets", Some(ns), false),
        (d, "list", "secrets", Some("default"), false),
        (d, "list", "secrets", None, false),
        (d, "create", "secrets", Some(secrets), false),
        (d, "create", "fournosclusters.fournos.dev", Some(ns), true),
        (d, "delete", "fournosclusters.fournos.dev", Some(ns), true),
        (
            d,
            "patch",
            "fournosclusters.fournos.dev#status",
            Some(ns),
            true,
        ),
        (
            d,
            "create",
            "fournosclusters.fournos.dev",
            Some("default"),
            false,
        ),
        (d, "patch", &cq, None, false),
        (k, "create", "resourceflavors.kueue.x-k8s.io", None, true),
        (k, "delete", "resourceflavors.kueue.x-k8s.io", None, true),
        (k, "patch", &cq, None, true),
        (k, "update", &cq, None, false),
        (
            k,
            "patch",
            "clusterqueues.kueue.x-k8s.io/someone-elses-queue",
            None,
            false,
        ),
        (k, "delete", &cq, None, false),
        (k, "list", "workloads.kueue.x-k8s.io", Some(exec), true),
        (k, "watch", "workloads.kueue.x-k8s.io", Some(exec), true),
        (k, "list", "workloads.kueue.x-k8s.io", None, false),
        (
            k,
            "list",
            "workloads.kueue.x-k8s.io",
            Some("default"),
            false,
        ),
        (k, "update", "workloads.kueue.x-k8s.io", Some(exec), false),
        (k, "get", "secrets", Some(secrets), false),
        (k, "list", "secrets", None, false),
        (
            k,
            "patch",
            "fournosclusters.fournos.dev#status",
            Some(ns),
            true,
        ),
        (k, "create", "fournosclusters.fournos.dev", Some(ns), false),
        // Workload sentinels (the e2e default): nothing of FournosJobs.
        (l, "create", "workloads.kueue.x-k8s.io", Some(exec), true),
        (l, "delete", "fournosjobs.fournos.dev", Some(exec), false),
        (l, "patch", "fournosjobs.fournos.dev", Some(exec), false),
        (l, "patch", "fournosjobs.fournos.dev", Some(ns), false),
        (l, "get", crd, None, true),
        (
            l,
            "get",
            "customresourcedefinitions.apiextensions.k8s.io/workloads.kueue.x-k8s.io",
            None,
            false,
        ),
        (l, "update", crd, None, false),
        (
            l,
            "patch",
            "workloads.kueue.x-k8s.io#status",
            Some(exec),
            true,
        ),
        (l, "create", "workloads.kueue.x-k8s.io", Some(ns), false),
        (l, "patch", &cq, None, false),
        (l, "patch", "fournosclusters.fournos.dev", Some(ns), true),
        (l, "get", "secrets", Some(secrets), false),
        (
            l,
            "get",
            "workloadpriorityclasses.kueue.x-k8s.io",
            None,
            true,
        ),
        (
            l,
            "create",
            "workloadpriorityclasses.kueue.x-k8s.io",
            None,
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for (sa, verb, resource, namespace, allowed) in checks {
        if can_i(&admin, verb, resource, namespace, sa, ns)? != allowed {
            wrong.push(format!(
                "{sa} {verb} {resource} in {}: expected {}",
                namespace.unwrap_or("all namespaces"),
                if allowed { "yes" } else { "no" }
            ));
        }
    }
    ensure!(wrong.is_empty(), "RBAC is off:\n{}", wrong.join("\n"));
    Ok(())
}

/// This binary's plane: with kube-controller-manager, so that the Deployments Helm
/// installs become ReplicaSets and Pods (which Pod Security admission then judges).
async fn plane() -> Result<&'static ControlPlane> {
    static PLANE: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();
    own_plane(&PLANE, with_controller_manager).await
}

/// [`helm_install`] of `release` into `iso`'s namespace with its scope's values and
/// `sets`; returns helm's stdout (the NOTES).
fn install_in_scope(
    plane: &ControlPlane,
    iso: &Isolated,
    release: &str,
    sets: &[&str],
) -> Result<String> {
    let mut all = vec![
        format!("config.secretsNamespace={}", iso.secrets_namespace),
        format!("config.executionNamespace={}", iso.execution_namespace),
        format!("config.clusterQueueName={}", iso.cluster_queue),
    ];
    all.extend(sets.iter().map(|s| (*s).to_owned()));
    let out = helm_install(
        &plane.management_kubeconfig(),
        release,
        &iso.namespace,
        &all,
    )?;
    ensure!(
        out.status.success(),
        "helm install {release}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn helm_installs_with_defaults_each_controller_disabled_and_three_replicas() -> Result<()> {
    let plane = plane().await?;
    let kubeconfig = plane.management_kubeconfig();
    // The cluster-scoped WorkloadPriorityClasses come from the first release only: a
    // second release creating them would be refused by Helm (another release owns them).
    // `helm_install` leaves them out unless asked, as here, for the defaults.
    const NO_CLASSES: &str = "workloadPriorityClasses.enabled=false";
    let cases: [(&str, &[&str]); 5] = [
        ("defaults", &["workloadPriorityClasses.enabled=true"]),
        ("nodiscovery", &["discovery.enabled=false", NO_CLASSES]),
        ("nokueuesync", &["kueueSync.enabled=false", NO_CLASSES]),
        ("nolock", &["lockManager.enabled=false", NO_CLASSES]),
        (
            "replicas",
            &[
                "discovery.replicas=3",
                "kueueSync.replicas=3",
                "lockManager.replicas=3",
                NO_CLASSES,
            ],
        ),
    ];
    for (case, sets) in cases {
        let iso = plane.isolated(&format!("helm_{case}")).await?;
        let notes = install_in_scope(plane, &iso, &format!("hearth-{case}"), sets)?;
        ensure!(
            notes.contains("kubectl -n"),
            "NOTES.txt tells what to do next"
        );
        let status = helm_on(
            &kubeconfig,
            &iso.namespace,
            &["status", &format!("hearth-{case}")],
        )?;
        ensure!(
            String::from_utf8_lossy(&status.stdout).contains("STATUS: deployed"),
            "{case} not deployed"
        );
    }
    // Kueue's own CRD accepted the classes as rendered.
    let classes: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        plane.management_client().await?,
        &kube::discovery::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "kueue.x-k8s.io",
            "v1beta2",
            "WorkloadPriorityClass",
        )),
    );
    for (name, value) in [
        ("manual", 200),
        ("nightly", 100),
        ("presubmit", 50),
        ("adhoc", 10),
    ] {
        let class = classes
            .get(name)
            .await
            .with_context(|| format!("WorkloadPriorityClass {name}"))?;
        ensure!(class.data["value"] == value, "{name}: {:?}", class.data);
    }
    Ok(())
}

/// `kubectl fournos doctor` as an administrator: exit code and stdout.
async fn doctor(plane: &ControlPlane, args: &[&str]) -> Result<(i32, String)> {
    hearth_e2e::hearth::ensure_built().await?;
    let out = tokio::process::Command::new(hearth_e2e::plane::hearth_binary(
        hearth_e2e::hearth::PLUGIN,
    )?)
    .arg("doctor")
    .args(args)
    .arg("--kubeconfig")
    .arg(plane.management_kubeconfig())
    .env_remove("KUBECONFIG")
    .output()
    .await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok((out.status.code().unwrap_or(-1), format!("{stdout}{stderr}")))
}

/// `helm install` of the chart into `namespace` with `sets`; Err carries helm's message.
/// Without the cluster-scoped WorkloadPriorityClasses unless `sets` turns them on: on this
/// shared plane they belong to the defaults release of
/// `helm_installs_with_defaults_each_controller_disabled_and_three_replicas`.
fn helm_install(
    kubeconfig: &Path,
    release: &str,
    namespace: &str,
    sets: &[String],
) -> Result<std::process::Output> {
    let chart = chart_dir();
    let mut args = vec![
        "install",
        release,
        chart.to_str().unwrap(),
        "--set",
        "workloadPriorityClasses.enabled=false",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    Ok(helm_on(kubeconfig, namespace, &args)?)
}

/// Issue 27: on a fresh cluster the chart makes the namespaces it needs when asked, and
/// keeps them on uninstall; the doctor, run as NOTES.txt prints it, passes on that
/// install, the controllers' rights included. Checked with values the install does not
/// match (a ClusterQueue that does not exist, a missing LocalQueue), it names each missing
/// piece with what to do and exits non-zero. Without namespaces.create and with a
/// namespace missing, the install fails naming it, and so does the doctor.
#[tokio::test]
async fn doctor_passes_a_good_install_and_names_what_a_broken_one_lacks() -> Result<()> {
    let plane = plane().await?;
    let iso = plane.isolated("chart_doctor").await?;
    let kubeconfig = plane.management_kubeconfig();
    // Namespaces nobody made: the chart's to create.
    let (secrets, exec) = (
        format!("{}-s", iso.namespace),
        format!("{}-x", iso.namespace),
    );
    let release = format!("doctor-{}", iso.id);
    let out = helm_install(
        &kubeconfig,
        &release,
        &iso.namespace,
        &[
            "namespaces.create=true".into(),
            // The cluster-scoped classes belong to another release on this plane.
            "workloadPriorityClasses.enabled=false".into(),
            format!("config.secretsNamespace={secrets}"),
            format!("config.executionNamespace={exec}"),
            format!("config.clusterQueueName={}", iso.cluster_queue),
        ],
    )?;
    ensure!(
        out.status.success(),
        "helm install with namespaces.create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // NOTES.txt prints the doctor's command with the values installed: run it as given.
    let notes = String::from_utf8_lossy(&out.stdout);
    let good: Vec<&str> = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("kubectl fournos doctor "))
        .with_context(|| format!("NOTES.txt gives no doctor command:\n{notes}"))?
        .split_whitespace()
        .collect();
    let (code, text) = doctor(plane, &good).await?;
    println!("$ kubectl fournos doctor (good)\n{text}");
    ensure!(code == 0, "doctor on a good install exited {code}:\n{text}");
    for needle in [
        "ok      Kueue serves kueue.x-k8s.io/v1beta2".to_owned(),
        "ok      the FournosCluster CRD".to_owned(),
        "ok      the FournosCluster CRD declares every status field the controllers write"
            .to_owned(),
        // targetCIDRs is empty by default: said, not failed.
        "warning networkPolicy.targetCIDRs is empty".to_owned(),
        "ok      the FournosJob CRD".to_owned(),
        format!("ok      namespace {secrets} exists"),
        format!("ok      namespace {exec} exists"),
        format!("ok      ClusterQueue {} exists", iso.cluster_queue),
        format!("ok      hearth-discovery may watch secrets in namespace {secrets}"),
        format!(
            "ok      hearth-kueue-sync may patch clusterqueues {}",
            iso.cluster_queue
        ),
        format!("ok      hearth-lock-manager may create fournosjobs in namespace {exec}"),
        format!(
            "ok      hearth-lock-manager may patch fournosclusters in namespace {}",
            iso.namespace
        ),
    ] {
        ensure!(text.contains(&needle), "{needle:?} not in:\n{text}");
    }

    // The same install checked with values it was not installed with.
    let (code, text) = doctor(
        plane,
        &[
            "-n",
            &iso.namespace,
            "--secrets-namespace",
            &secrets,
            "--execution-namespace",
            &exec,
            "--cluster-queue",
            "no-such-queue",
            "--sentinel",
            "workload",
            "--local-queue",
            "no-such-local-queue",
        ],
    )
    .await?;
    println!("$ kubectl fournos doctor (other values)\n{text}");
    ensure!(code == 4, "doctor with other values exited {code}:\n{text}");
    for needle in [
        "MISSING ClusterQueue no-such-queue does not exist: Hearth publishes the fleet's quota \
         into it but does not create it"
            .to_owned(),
        format!("MISSING LocalQueue no-such-local-queue in namespace {exec} does not exist"),
        format!(
            "MISSING hearth-kueue-sync (ServiceAccount {}/hearth-kueue-sync) may not patch \
             clusterqueues no-such-queue: the chart was installed with another \
             config.clusterQueueName",
            iso.namespace
        ),
        // The install is for FournosJob sentinels: only their rights are granted.
        format!(
            "MISSING hearth-lock-manager (ServiceAccount {}/hearth-lock-manager) may not create \
             workloads in namespace {exec}: the chart was installed with another \
             config.sentinel or config.executionNamespace",
            iso.namespace
        ),
        "4 prerequisite(s) missing".to_owned(),
    ] {
        ensure!(text.contains(&needle), "{needle:?} not in:\n{text}");
    }
    ensure!(
        !text.contains("FournosJob CRD"),
        "workload sentinels need no FournosJob CRD:\n{text}"
    );

    // Uninstalled, the release leaves its namespaces (and so the Secrets and locks).
    let out = helm_on(&kubeconfig, &iso.namespace, &["uninstall", &release])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = plane.management_client().await?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    for ns in [&secrets, &exec] {
        ensure!(
            namespaces.get_opt(ns).await?.is_some(),
            "helm uninstall deleted namespace {ns}, which the chart created"
        );
    }

    // Broken: the execution namespace does not exist and namespaces.create is off.
    let gone = format!("{}-gone", iso.namespace);
    let out = helm_install(
        &kubeconfig,
        &format!("broken-{}", iso.id),
        &iso.namespace,
        &[
            "workloadPriorityClasses.enabled=false".into(),
            format!("config.secretsNamespace={}", iso.secrets_namespace),
            format!("config.executionNamespace={gone}"),
            format!("config.clusterQueueName={}", iso.cluster_queue),
        ],
    )?;
    let refusal = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && refusal.contains(&format!("namespaces \"{gone}\" not found")),
        "helm install into a missing namespace: {refusal}"
    );
    let (code, text) = doctor(
        plane,
        &[
            "-n",
            &iso.namespace,
            "--secrets-namespace",
            &iso.secrets_namespace,
            "--execution-namespace",
            &gone,
            "--cluster-queue",
            &iso.cluster_queue,
        ],
    )
    .await?;
    println!("$ kubectl fournos doctor (broken)\n{text}");
    ensure!(
        code == 4,
        "doctor on a broken install exited {code}:\n{text}"
    );
    for needle in [
        format!("MISSING namespace {gone} does not exist; it is the lock sentinels' namespace"),
        format!(
            "`kubectl create namespace {gone}`, or install the chart with namespaces.create=true"
        ),
        format!("ok      namespace {} exists", iso.secrets_namespace),
    ] {
        ensure!(text.contains(&needle), "{needle:?} not in:\n{text}");
    }
    Ok(())
}

/// Installed with Helm into namespaces that enforce Pod Security's `restricted` profile,
/// every controller's Deployment gets a Pod: kube-controller-manager's ReplicaSet
/// controller creates it and the apiserver's Pod Security admission lets it in (a refused
/// Pod is never stored; its ReplicaSet would say `ReplicaFailure` with the refusal). There
/// is no kubelet on the plane, so the Pods stay `Pending`, unscheduled: admission is what
/// this checks, not that they run. In the same namespace a Pod without the restricted
/// settings is refused, so the label is enforced and not merely present.
#[tokio::test]
async fn restricted_pod_security_admits_every_controller_pod() -> Result<()> {
    let plane = plane().await?;
    let iso = plane.isolated("chart_restricted").await?;
    let client = plane.management_client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [
        &iso.namespace,
        &iso.secrets_namespace,
        &iso.execution_namespace,
    ] {
        let label = json!({ "metadata": { "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }}});
        namespaces
            .patch(ns, &PatchParams::default(), &Patch::Merge(&label))
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &iso.namespace);
    let privileged: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "not-restricted" },
        "spec": { "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }] },
    }))?;
    match pods.create(&PostParams::default(), &privileged).await {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("restricted") => {}
        other => bail!("a Pod without the restricted settings was not refused: {other:?}"),
    }

    // The cluster-scoped WorkloadPriorityClasses belong to another release on this plane.
    install_in_scope(
        plane,
        &iso,
        "hearth",
        &["workloadPriorityClasses.enabled=false"],
    )?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &iso.namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &iso.namespace);
    let names: Vec<String> = deployments
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    ensure!(
        names.len() == Controller::ALL.len(),
        "one Deployment per controller: {names:?}"
    );
    for name in &names {
        let selector = format!("app.kubernetes.io/name={name}");
        let pod = until(
            &format!("a Pod of {name}"),
            Duration::from_secs(90),
            || async {
                let found = pods.list(&ListParams::default().labels(&selector)).await?;
                if let Some(pod) = found.items.into_iter().next() {
                    return Ok(Ok(pod));
                }
                // Why not, in words: the ReplicaSet's ReplicaFailure names the refusal.
                let sets = replica_sets
                    .list(&ListParams::default().labels(&selector))
                    .await?;
                let failures: Vec<String> = sets
                    .items
                    .iter()
                    .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
                    .map(|c| format!("{}: {}", c.type_, c.message.clone().unwrap_or_default()))
                    .collect();
                Ok(Err(format!(
                    "{} ReplicaSet(s), conditions {failures:?}",
                    sets.items.len()
                )))
            },
        )
        .await?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        ensure!(
            phase.as_deref() == Some("Pending"),
            "{name}: without a kubelet its Pod stays Pending, got {phase:?}"
        );
    }
    Ok(())
}
