//! The Helm chart and the plain manifests as the real helm renders them: values,
//! hardening, refusals, and that the plain install and the CRD are the generated ones.
//! No control plane needed (the chart installed on one: `chart_install.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::chart::chart_dir;
use hearth_e2e::chart::{KUBE_VERSION, helm, names_of, render};
use hearth_e2e::hearth::Controller;
use hearth_e2e::tools::Tools;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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
    let all = render(&[])?;
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
        let docs = render(&[&format!("{key}.enabled=false")])?;
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
    let docs = render(&["kueueSync.replicas=3"])?;
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
    let docs = render(&openshift)?;
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
    let pinned = render(&[openshift[0], "podSecurityContext.runAsUser=65532"])?;
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
    let default = render(&[])?;
    ensure!(env_of(&default, "hearth-kueue-sync", key).as_deref() == Some("fournos.dev/pool"));
    let two = render(&["config.poolLabelKeys={fournos.dev/pool,example.com/team}"])?;
    ensure!(
        env_of(&two, "hearth-kueue-sync", key).as_deref()
            == Some("fournos.dev/pool,example.com/team")
    );
    // `--set k={}` makes [""], which the schema refuses; null (or [] in a values file)
    // turns pools off.
    let none = render(&["config.poolLabelKeys=null"])?;
    ensure!(
        env_of(&none, "hearth-kueue-sync", key).as_deref() == Some(""),
        "no keys turn pools off"
    );
    Ok(())
}

#[test]
fn leader_election_can_be_switched_off_per_single_replica_controller() -> Result<()> {
    let all = render(&[])?;
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
    let docs = render(&["kueueSync.leaderElection=false", "config.leaseRenewSec=20"])?;
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
    match render(&["kueueSync.leaderElection=false", "kueueSync.replicas=2"]) {
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
    let off = render(&[])?;
    ensure!(names_of(&off, "ServiceMonitor").is_empty());
    let on = render(&["serviceMonitor.enabled=true", "lockManager.enabled=false"])?;
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
    let docs = render(&[])?;
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
    let off = render(&["workloadPriorityClasses.enabled=false"])?;
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
        match render(&[set]) {
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
fn chart_crds_are_the_generated_crds() -> Result<()> {
    for (chart_file, generated) in [
        ("crds/fournosclusters.yaml", "manifests/crd.yaml"),
        ("crds/reservations.yaml", "manifests/reservation-crd.yaml"),
    ] {
        let chart = std::fs::read_to_string(chart_dir().join(chart_file))?;
        let manifests = std::fs::read_to_string(repo().join(generated))?;
        ensure!(
            chart == manifests,
            "charts/hearth/{chart_file} differs from {generated}: run `just manifests`"
        );
    }
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
    let docs = render(&[])?;
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
    ensure!(names_of(&render(&[])?, "Namespace").is_empty());
    let docs = render(&["namespaces.create=true", "namespaces.labels.team=gpu"])?;
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
    let shared = render(&[
        "namespaces.create=true",
        "config.executionNamespace=psap-secrets",
        "config.namespace=fleet",
    ])?;
    ensure!(
        names_of(&shared, "Namespace") == ["fleet", "psap-secrets"],
        "{:?}",
        names_of(&shared, "Namespace")
    );
    let in_release = render(&["namespaces.create=true", "config.secretsNamespace=hearth"])?;
    ensure!(
        names_of(&in_release, "Namespace") == ["psap-automation"],
        "the release's namespace is Helm's to make: {:?}",
        names_of(&in_release, "Namespace")
    );
    Ok(())
}
