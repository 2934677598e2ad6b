//! The Helm chart and the plain manifests, proven with the real helm and the real
//! RBAC authorizer of the management apiserver.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::hearth::{Controller, chart_dir, service_account_kubeconfig};
use hearth_e2e::lab::{own_plane, with_controller_manager};
use hearth_e2e::process::until;
use hearth_e2e::resources::parse_yaml_documents;
use hearth_e2e::tools::Tools;
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const KUBE_VERSION: &str = "1.36.3";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn helm(args: &[&str]) -> Result<std::process::Output> {
    let tools = Tools::locate()?;
    Ok(Command::new(&tools.helm).args(args).output()?)
}

/// `helm <args>` against the plane, in `namespace`.
fn helm_on(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Result<std::process::Output> {
    let mut args = args.to_vec();
    args.extend([
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--namespace",
        namespace,
    ]);
    helm(&args)
}

/// `helm template` with `--set` values; Err carries helm's message.
fn template(sets: &[&str]) -> Result<Vec<Value>> {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        "hearth",
        chart.to_str().unwrap(),
        "--namespace",
        "hearth",
        "--kube-version",
        KUBE_VERSION,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = helm(&args)?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(parse_yaml_documents(
        &String::from_utf8(out.stdout)?,
        "helm template",
    )?)
}

fn names_of(docs: &[Value], kind: &str) -> Vec<String> {
    let mut names: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// Everything in the rendered chart that belongs to `component` (by name prefix).
fn owned_by(docs: &[Value], component: &str) -> Vec<String> {
    docs.iter()
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(component))
        })
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn helm_lint_passes() -> Result<()> {
    let chart = chart_dir();
    let out = helm(&[
        "lint",
        chart.to_str().unwrap(),
        "--strict",
        "--kube-version",
        KUBE_VERSION,
    ])?;
    ensure!(
        out.status.success(),
        "helm lint:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(())
}

#[test]
fn each_controller_can_be_disabled_alone() -> Result<()> {
    let all = template(&[])?;
    let components = [
        ("discovery", Controller::Discovery),
        ("kueueSync", Controller::KueueSync),
        ("lockManager", Controller::LockManager),
    ];
    for (_, c) in components {
        ensure!(
            names_of(&all, "Deployment").contains(&c.binary().to_owned()),
            "{} missing by default",
            c.binary()
        );
    }
    for (key, disabled) in components {
        let docs = template(&[&format!("{key}.enabled=false")])?;
        let left = owned_by(&docs, disabled.binary());
        ensure!(
            left.is_empty(),
            "{key}.enabled=false still renders {left:?}"
        );
        for (_, other) in components.iter().filter(|(k, _)| *k != key) {
            ensure!(
                owned_by(&docs, other.binary()) == owned_by(&all, other.binary()),
                "disabling {key} changed {}",
                other.binary()
            );
        }
    }
    Ok(())
}

#[test]
fn replicas_and_hardened_pods_render() -> Result<()> {
    let docs = template(&["kueueSync.replicas=3"])?;
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "hearth-kueue-sync")
        .context("kueue-sync Deployment")?;
    ensure!(deployment["spec"]["replicas"] == 3);
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let pod = &d["spec"]["template"]["spec"];
        ensure!(pod["securityContext"]["runAsNonRoot"] == true);
        ensure!(pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault");
        let c = &pod["containers"][0];
        ensure!(c["securityContext"]["readOnlyRootFilesystem"] == true);
        ensure!(c["securityContext"]["allowPrivilegeEscalation"] == false);
        ensure!(c["securityContext"]["capabilities"]["drop"] == serde_json::json!(["ALL"]));
        ensure!(c["livenessProbe"]["httpGet"]["path"] == "/healthz");
        ensure!(c["readinessProbe"]["httpGet"]["path"] == "/readyz");
    }
    Ok(())
}

/// Every pod spec a rendered document would run, with where it is (`Kind/name`): the
/// Deployments, and any Pod (a `helm test` hook), Job or other workload added later.
fn pod_specs(docs: &[Value]) -> Vec<(String, &Value)> {
    docs.iter()
        .filter_map(|d| {
            let spec = match d["kind"].as_str()? {
                "Pod" => &d["spec"],
                "CronJob" => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                _ => d["spec"].get("template")?.get("spec")?,
            };
            Some((
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap_or_default(),
                    d["metadata"]["name"].as_str().unwrap_or_default()
                ),
                spec,
            ))
        })
        .collect()
}

/// What OpenShift's `restricted-v2` SCC and the Kubernetes `restricted` Pod Security
/// profile (which includes `baseline`) refuse in one pod spec, field by field; empty when
/// both admit it. restricted-v2: runAsUser MustRunAsRange and fsGroup MustRunAs (the
/// namespace's range, unknowable when rendering: so unset), seLinuxContext MustRunAs
/// (unset), no privileged or host namespaces or host ports, allowPrivilegeEscalation
/// false, capabilities: drop ALL, add at most NET_BIND_SERVICE, seccomp runtime/default,
/// volumes of the listed kinds. restricted: runAsNonRoot true at pod or container level,
/// never runAsUser 0, allowPrivilegeEscalation false set explicitly, seccomp RuntimeDefault
/// or Localhost, the same volumes, no hostProcess, procMount, unsafe sysctls, AppArmor
/// unconfined.
fn restricted_violations(spec: &Value) -> Vec<String> {
    const VOLUMES: [&str; 8] = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    let mut bad = Vec::new();
    let pod_sc = &spec["securityContext"];
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[host] == true {
            bad.push(format!("spec.{host} is true"));
        }
    }
    for field in ["runAsUser", "fsGroup", "seLinuxOptions"] {
        if !pod_sc[field].is_null() {
            bad.push(format!(
                "spec.securityContext.{field} is set ({}): restricted-v2 assigns it from the namespace",
                pod_sc[field]
            ));
        }
    }
    if !pod_sc["sysctls"].is_null() {
        bad.push("spec.securityContext.sysctls is set".into());
    }
    if pod_sc["windowsOptions"]["hostProcess"] == true {
        bad.push("spec.securityContext.windowsOptions.hostProcess is true".into());
    }
    if !pod_sc["appArmorProfile"].is_null() && pod_sc["appArmorProfile"]["type"] == "Unconfined" {
        bad.push("spec.securityContext.appArmorProfile is Unconfined".into());
    }
    let seccomp_ok = |sc: &Value| {
        matches!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault")
        )
    };
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        let kinds: Vec<&String> = volume
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .filter(|k| *k != "name")
            .collect();
        if !kinds.iter().all(|k| VOLUMES.contains(&k.as_str())) {
            bad.push(format!("volume {name} is of kind {kinds:?}"));
        }
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|list| spec[list].as_array().into_iter().flatten());
    let mut count = 0;
    for c in containers {
        count += 1;
        let name = c["name"].as_str().unwrap_or_default();
        let sc = &c["securityContext"];
        let at = |field: &str| format!("container {name}: securityContext.{field}");
        if sc["privileged"] == true {
            bad.push(format!("{} is true", at("privileged")));
        }
        if sc["allowPrivilegeEscalation"] != false {
            bad.push(format!("{} is not false", at("allowPrivilegeEscalation")));
        }
        let non_root = match sc["runAsNonRoot"].as_bool() {
            Some(v) => v,
            None => pod_sc["runAsNonRoot"] == true,
        };
        if !non_root {
            bad.push(format!(
                "{} is not true (nor the pod's)",
                at("runAsNonRoot")
            ));
        }
        for field in ["runAsUser", "seLinuxOptions"] {
            if !sc[field].is_null() {
                bad.push(format!("{} is set ({})", at(field), sc[field]));
            }
        }
        if !(seccomp_ok(sc) || sc["seccompProfile"].is_null() && seccomp_ok(pod_sc)) {
            bad.push(format!("{} is not RuntimeDefault", at("seccompProfile")));
        }
        if !sc["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"))
        {
            bad.push(format!("{} lacks ALL", at("capabilities.drop")));
        }
        for cap in sc["capabilities"]["add"].as_array().into_iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                bad.push(format!("{} adds {cap}", at("capabilities.add")));
            }
        }
        if sc["readOnlyRootFilesystem"] != true {
            bad.push(format!("{} is not true", at("readOnlyRootFilesystem")));
        }
        if !sc["procMount"].is_null() && sc["procMount"] != "Default" {
            bad.push(format!("{} is {}", at("procMount"), sc["procMount"]));
        }
        if sc["windowsOptions"]["hostProcess"] == true {
            bad.push(format!("{} is true", at("windowsOptions.hostProcess")));
        }
        for port in c["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_u64().is_some_and(|p| p != 0) {
                bad.push(format!("container {name}: hostPort {}", port["hostPort"]));
            }
        }
    }
    if count == 0 {
        bad.push("no containers".into());
    }
    bad
}

/// Issue 27: the chart runs under OpenShift's restricted-v2 SCC and the restricted Pod
/// Security profile with OpenShift-style values (images from the internal registry, the
/// optional monitoring objects on), and pins a UID only when a value asks for one.
#[test]
fn every_pod_is_admitted_by_restricted_v2_and_restricted_pod_security() -> Result<()> {
    let openshift = [
        "image.registry=image-registry.openshift-image-registry.svc:5000/hearth",
        "imagePullSecrets[0].name=registry-pull",
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
        "discovery.replicas=2",
    ];
    let docs = template(&openshift)?;
    let pods = pod_specs(&docs);
    ensure!(
        pods.len() == 3,
        "one pod spec per controller: {:?}",
        pods.iter().map(|(w, _)| w).collect::<Vec<_>>()
    );
    for (workload, spec) in &pods {
        let bad = restricted_violations(spec);
        ensure!(
            bad.is_empty(),
            "{workload} would be refused:\n{}",
            bad.join("\n")
        );
    }
    // The checker is not blind: a pinned UID (a value asks for it) is what restricted-v2
    // refuses, and so is a container that may escalate.
    let pinned = template(&[openshift[0], "podSecurityContext.runAsUser=65532"])?;
    for (workload, spec) in pod_specs(&pinned) {
        ensure!(spec["securityContext"]["runAsUser"] == 65532, "{workload}");
        ensure!(
            spec["securityContext"]["runAsNonRoot"] == true,
            "{workload}"
        );
        let bad = restricted_violations(spec);
        ensure!(
            bad.len() == 1 && bad[0].contains("spec.securityContext.runAsUser"),
            "{workload}: {bad:?}"
        );
    }
    let mut escalating = pods[0].1.clone();
    escalating["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(null);
    escalating["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
    let bad = restricted_violations(&escalating);
    ensure!(bad.len() == 2, "{bad:?}");
    Ok(())
}

/// The value of `name` in the container env of Deployment `deployment`, if set.
fn env_of(docs: &[Value], deployment: &str, name: &str) -> Option<String> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == deployment)?["spec"]
        ["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[test]
fn pool_label_keys_render_as_one_comma_list() -> Result<()> {
    let key = "HEARTH_POOL_LABEL_KEYS";
    let default = template(&[])?;
    ensure!(env_of(&default, "hearth-kueue-sync", key).as_deref() == Some("fournos.dev/pool"));
    let two = template(&["config.poolLabelKeys={fournos.dev/pool,example.com/team}"])?;
    ensure!(
        env_of(&two, "hearth-kueue-sync", key).as_deref()
            == Some("fournos.dev/pool,example.com/team")
    );
    // `--set k={}` makes [""], which the schema refuses; null (or [] in a values file)
    // turns pools off.
    let none = template(&["config.poolLabelKeys=null"])?;
    ensure!(
        env_of(&none, "hearth-kueue-sync", key).as_deref() == Some(""),
        "no keys turn pools off"
    );
    Ok(())
}

#[test]
fn leader_election_can_be_switched_off_per_single_replica_controller() -> Result<()> {
    let all = template(&[])?;
    for c in Controller::ALL {
        let name = c.binary();
        ensure!(env_of(&all, name, "HEARTH_LEADER_ELECTION").as_deref() == Some("true"));
        ensure!(env_of(&all, name, "HEARTH_LEASE_DURATION_SEC").as_deref() == Some("60"));
        ensure!(env_of(&all, name, "HEARTH_LEASE_RENEW_SEC").as_deref() == Some("40"));
        ensure!(
            names_of(&all, "Role").contains(&format!("{name}-lease")),
            "{name}: no Lease Role by default"
        );
    }
    let docs = template(&["kueueSync.leaderElection=false", "config.leaseRenewSec=20"])?;
    let off = Controller::KueueSync.binary();
    ensure!(env_of(&docs, off, "HEARTH_LEADER_ELECTION").as_deref() == Some("false"));
    ensure!(env_of(&docs, off, "HEARTH_LEASE_RENEW_SEC").is_none());
    ensure!(
        !names_of(&docs, "Role").contains(&format!("{off}-lease")),
        "{off} keeps Lease RBAC it no longer uses"
    );
    for on in [Controller::Discovery, Controller::LockManager] {
        ensure!(env_of(&docs, on.binary(), "HEARTH_LEADER_ELECTION").as_deref() == Some("true"));
        ensure!(env_of(&docs, on.binary(), "HEARTH_LEASE_RENEW_SEC").as_deref() == Some("20"));
    }
    match template(&["kueueSync.leaderElection=false", "kueueSync.replicas=2"]) {
        Ok(_) => bail!("two replicas without leader election were accepted"),
        Err(e) => ensure!(
            e.to_string()
                .contains("kueueSync.leaderElection=false needs kueueSync.replicas <= 1"),
            "unclear refusal: {e}"
        ),
    }
    Ok(())
}

#[test]
fn optional_service_monitor() -> Result<()> {
    let off = template(&[])?;
    ensure!(names_of(&off, "ServiceMonitor").is_empty());
    let on = template(&["serviceMonitor.enabled=true", "lockManager.enabled=false"])?;
    ensure!(
        names_of(&on, "ServiceMonitor") == ["hearth-discovery", "hearth-kueue-sync"],
        "one ServiceMonitor per enabled controller: {:?}",
        names_of(&on, "ServiceMonitor")
    );
    Ok(())
}

/// The four classes the Python Hearth ships (its `deploy/workload-priorities.yaml`), so
/// a GitOps cut-over keeps what Fournos jobs name in `spec.priority`; off where another
/// tool (or another release) owns them.
#[test]
fn workload_priority_classes_render_as_the_python_hearth_ships_them() -> Result<()> {
    let docs = template(&[])?;
    let classes: Vec<(String, i64)> = docs
        .iter()
        .filter(|d| d["kind"] == "WorkloadPriorityClass")
        .map(|d| {
            (
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d["value"].as_i64().unwrap_or(i64::MIN),
            )
        })
        .collect();
    ensure!(
        classes
            == [
                ("manual".to_owned(), 200),
                ("nightly".to_owned(), 100),
                ("presubmit".to_owned(), 50),
                ("adhoc".to_owned(), 10)
            ],
        "{classes:?}"
    );
    for d in docs.iter().filter(|d| d["kind"] == "WorkloadPriorityClass") {
        ensure!(
            d["apiVersion"] == "kueue.x-k8s.io/v1beta2",
            "{}",
            d["apiVersion"]
        );
        ensure!(
            d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
            "jobs still name the class after an uninstall: {d}"
        );
        ensure!(d["description"].is_string(), "{d}");
    }
    let off = template(&["workloadPriorityClasses.enabled=false"])?;
    ensure!(names_of(&off, "WorkloadPriorityClass").is_empty());
    Ok(())
}

#[test]
fn invalid_values_are_refused_with_a_clear_message() -> Result<()> {
    for (set, expect) in [
        ("discovery.replicas=-1", "replicas"),
        ("config.leaseRenewSec=0", "leaseRenewSec"),
        (
            "config.leaseRenewSec=60",
            "must be less than config.leaseDurationSec",
        ),
        ("config.sentinel=job", "sentinel"),
        ("config.logFormat=xml", "logFormat"),
        (
            "config.kubeconfigSecretPattern=kubeconfig",
            "kubeconfigSecretPattern",
        ),
        ("unknownKey=1", "unknownKey"),
        (
            "workloadPriorityClasses.classes[0].name=Night_ly",
            "workloadPriorityClasses/classes/0/name",
        ),
        (
            "workloadPriorityClasses.classes[0].value=high",
            "workloadPriorityClasses/classes/0/value",
        ),
        ("workloadPriorityClasses.classes[0].priority=1", "priority"),
        ("config.poolLabelKeys[0]=Not A Key", "poolLabelKeys/0"),
        (
            "config.poolLabelKeys[0]=fournos.dev/cluster",
            "poolLabelKeys/0",
        ),
        ("config.poolLabelKeys={a,b,c,d,e,f,g,h}", "poolLabelKeys"),
        ("config.poolLabelKeys={a,a}", "poolLabelKeys"),
    ] {
        match template(&[set]) {
            Ok(_) => bail!("{set} was accepted"),
            Err(e) => ensure!(
                e.to_string().contains(expect),
                "{set}: unclear refusal: {e}"
            ),
        }
    }
    Ok(())
}

#[test]
fn chart_crd_is_the_generated_crd() -> Result<()> {
    let chart = std::fs::read_to_string(chart_dir().join("crds/fournosclusters.yaml"))?;
    let manifests = std::fs::read_to_string(repo().join("manifests/crd.yaml"))?;
    ensure!(
        chart == manifests,
        "charts/hearth/crds/fournosclusters.yaml differs from manifests/crd.yaml: run `just manifests`"
    );
    Ok(())
}

#[test]
fn plain_install_is_the_rendered_chart() -> Result<()> {
    let generated = Command::new(repo().join("manifests/render.sh"))
        .env("HELM", Tools::locate()?.helm)
        .output()?;
    ensure!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let on_disk = std::fs::read(repo().join("manifests/install.yaml"))?;
    ensure!(
        generated.stdout == on_disk,
        "manifests/install.yaml is stale: run `just manifests`"
    );
    Ok(())
}

#[test]
fn containerfiles_build_the_binaries_the_chart_runs() -> Result<()> {
    let docs = template(&[])?;
    let ignore = std::fs::read_to_string(repo().join(".containerignore"))?;
    // A clean clone builds: the builder stage compiles from the sources the context admits.
    for admitted in [
        "!Cargo.toml",
        "!Cargo.lock",
        "!crates/",
        "!tools/container-build.sh",
    ] {
        ensure!(
            ignore.lines().any(|l| l == admitted),
            ".containerignore does not admit {admitted}"
        );
    }
    for (file, binary) in [
        ("Containerfile.discovery", "hearth-discovery"),
        ("Containerfile.kueue", "hearth-kueue-sync"),
        ("Containerfile.lock", "hearth-lock-manager"),
    ] {
        let text = std::fs::read_to_string(repo().join(file))?;
        // Multi-stage: a Rust builder stage, then the base and the binary it compiled.
        ensure!(
            text.contains("FROM ${BUILDER_IMAGE} AS builder\n")
                && text.contains("tools/container-build.sh /out\n")
                && text.contains("FROM ${BASE_IMAGE}\n"),
            "{file} is not a builder stage and a final stage on BASE_IMAGE"
        );
        ensure!(
            text.contains(&format!(
                "COPY --from=builder --chown=0:0 --chmod=0755 /out/{binary} /usr/local/bin/{binary}\n"
            )),
            "{file} does not copy {binary} from the builder stage"
        );
        // OpenShift's restricted SCC: an arbitrary non-root UID in the root group.
        let user = text
            .lines()
            .find_map(|l| l.strip_prefix("USER "))
            .with_context(|| format!("{file} sets no USER"))?;
        ensure!(
            user.split_once(':')
                .is_some_and(|(uid, gid)| uid.parse::<u32>().is_ok_and(|u| u > 0) && gid == "0"),
            "{file}'s USER {user} is not a non-root UID with GID 0"
        );
        ensure!(
            text.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{binary}\"]")),
            "{file}'s entrypoint is not {binary}"
        );
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == binary)
            .context(binary)?;
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        ensure!(container["name"] == binary);
        ensure!(
            container["image"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("/{binary}:")),
            "chart image for {binary}: {}",
            container["image"]
        );
        ensure!(
            container.get("command").is_none(),
            "the chart must rely on the image's entrypoint"
        );
    }
    Ok(())
}

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

/// Issue 27: `helm template` without a cluster (ArgoCD, a person offline) renders, and
/// what the chart is tested with is said in docs/support.md rather than claimed by a
/// kubeVersion range nothing tests.
#[test]
fn plain_helm_template_renders_without_a_cluster_version() -> Result<()> {
    let chart = chart_dir();
    let out = helm(&["template", "hearth", chart.to_str().unwrap()])?;
    ensure!(
        out.status.success(),
        "helm template without --kube-version: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chart_yaml = std::fs::read_to_string(chart.join("Chart.yaml"))?;
    ensure!(
        !chart_yaml.lines().any(|l| l.starts_with("kubeVersion:")),
        "Chart.yaml claims a kubeVersion range: only what is tested goes in docs/support.md"
    );
    let pins = std::fs::read_to_string(repo().join("e2e/tools/kube/go.mod"))?;
    let support = std::fs::read_to_string(repo().join("docs/support.md"))?;
    for module in ["k8s.io/kubernetes", "sigs.k8s.io/kueue"] {
        let version = pins
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{module} ")))
            .with_context(|| format!("{module} is not pinned"))?;
        ensure!(
            support
                .lines()
                .any(|l| l.contains(version) && l.contains("tested in CI")),
            "docs/support.md does not say that {module} {version} (the pinned one) is tested"
        );
    }
    Ok(())
}

/// Issue 27: namespaces.create makes the secrets and execution namespaces (never the
/// release's), kept on uninstall and on an ArgoCD prune; off by default.
#[test]
fn namespaces_are_created_only_when_asked() -> Result<()> {
    ensure!(names_of(&template(&[])?, "Namespace").is_empty());
    let docs = template(&["namespaces.create=true", "namespaces.labels.team=gpu"])?;
    ensure!(
        names_of(&docs, "Namespace") == ["psap-automation", "psap-secrets"],
        "{:?}",
        names_of(&docs, "Namespace")
    );
    for ns in docs.iter().filter(|d| d["kind"] == "Namespace") {
        let annotations = &ns["metadata"]["annotations"];
        ensure!(annotations["helm.sh/resource-policy"] == "keep", "{ns}");
        ensure!(
            annotations["argocd.argoproj.io/sync-options"] == "Prune=false,Delete=false",
            "{ns}"
        );
        ensure!(ns["metadata"]["labels"]["team"] == "gpu", "{ns}");
    }
    let shared = template(&[
        "namespaces.create=true",
        "config.executionNamespace=psap-secrets",
        "config.namespace=fleet",
    ])?;
    ensure!(
        names_of(&shared, "Namespace") == ["fleet", "psap-secrets"],
        "{:?}",
        names_of(&shared, "Namespace")
    );
    let in_release = template(&["namespaces.create=true", "config.secretsNamespace=hearth"])?;
    ensure!(
        names_of(&in_release, "Namespace") == ["psap-automation"],
        "the release's namespace is Helm's to make: {:?}",
        names_of(&in_release, "Namespace")
    );
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
    helm_on(kubeconfig, namespace, &args)
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
