//! Least privilege follows the chart's values, proven on what the real helm renders:
//! lock-manager's rules are those of the configured sentinel kind only; kueue-sync and
//! lock-manager reach only the API server (and DNS) once `networkPolicy.apiServerCIDRs`
//! lists it; NOTES.txt warns when discovery may connect anywhere. And the NetworkPolicies
//! themselves: one per controller, on by default.

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::chart::chart_dir;
use hearth_e2e::chart::{names_of, render};
use hearth_e2e::resources::parse_yaml_documents;
use hearth_e2e::tools::Tools;
use serde_json::{Value, json};

/// The rules of the `kind` (Role or ClusterRole) named `name`.
fn rules<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Vec<Value>> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .and_then(|d| d["rules"].as_array())
        .with_context(|| format!("no {kind} {name}"))
}

/// The verbs `rules` grant on `group`/`resource`, sorted; `None` when no rule names it.
fn verbs(rules: &[Value], group: &str, resource: &str) -> Option<Vec<String>> {
    let mut verbs: Vec<String> = rules
        .iter()
        .filter(|r| {
            r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.contains(&json!(group)))
                && r["resources"]
                    .as_array()
                    .is_some_and(|g| g.contains(&json!(resource)))
        })
        .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    verbs.sort();
    (!verbs.is_empty()).then_some(verbs)
}

fn sorted(verbs: &[&str]) -> Option<Vec<String>> {
    let mut verbs: Vec<String> = verbs.iter().map(|v| (*v).to_owned()).collect();
    verbs.sort();
    Some(verbs)
}

/// Issue 41 item 8: with FournosJob sentinels (the default) lock-manager may write
/// FournosJobs and only read Workloads (and report Fournos's Workloads ready); with
/// Workload sentinels it may write Workloads and read their WorkloadPriorityClass, and
/// nothing of FournosJobs. In both it may read the one FournosCluster CRD (its start check).
#[test]
fn lock_manager_rules_follow_the_sentinel_kind() -> Result<()> {
    const WRITE: [&str; 6] = ["create", "delete", "get", "list", "patch", "watch"];
    let sentinels = "hearth-lock-manager-sentinels-hearth";
    let cluster_role = "hearth-lock-manager-hearth";
    for (mode, fournosjobs, workloads, priority) in [
        (
            "fournosjob",
            sorted(&WRITE),
            sorted(&["get", "list", "watch"]),
            None,
        ),
        ("workload", None, sorted(&WRITE), sorted(&["get"])),
    ] {
        let docs = render(&[&format!("config.sentinel={mode}")])?;
        let namespaced = rules(&docs, "Role", sentinels)?;
        ensure!(
            verbs(namespaced, "fournos.dev", "fournosjobs") == fournosjobs,
            "{mode}: fournosjobs {:?}",
            verbs(namespaced, "fournos.dev", "fournosjobs")
        );
        ensure!(
            verbs(namespaced, "kueue.x-k8s.io", "workloads") == workloads,
            "{mode}: workloads {:?}",
            verbs(namespaced, "kueue.x-k8s.io", "workloads")
        );
        ensure!(
            verbs(namespaced, "kueue.x-k8s.io", "workloads/status") == sorted(&["get", "patch"]),
            "{mode}: both kinds report a sentinel's Workload ready"
        );
        let cluster = rules(&docs, "ClusterRole", cluster_role)?;
        ensure!(
            verbs(cluster, "kueue.x-k8s.io", "workloadpriorityclasses") == priority,
            "{mode}: workloadpriorityclasses {:?}",
            verbs(cluster, "kueue.x-k8s.io", "workloadpriorityclasses")
        );
        let crd_rule = cluster
            .iter()
            .find(|r| r["resources"] == json!(["customresourcedefinitions"]))
            .with_context(|| format!("{mode}: no rule to read the CRD"))?;
        ensure!(
            crd_rule["verbs"] == json!(["get"])
                && crd_rule["resourceNames"] == json!(["fournosclusters.fournos.dev"])
                && crd_rule["apiGroups"] == json!(["apiextensions.k8s.io"]),
            "{mode}: the CRD rule is get on fournosclusters.fournos.dev only: {crd_rule}"
        );
    }
    Ok(())
}

/// Issue 24: a NetworkPolicy per controller, on by default. Ingress only to the admin
/// port from the monitoring namespaces; egress to DNS and the API server, and only
/// discovery's also to the target clusters.
#[test]
fn network_policies_are_per_controller_and_on_by_default() -> Result<()> {
    let docs = render(&[])?;
    ensure!(
        names_of(&docs, "NetworkPolicy")
            == [
                "hearth-discovery",
                "hearth-kueue-sync",
                "hearth-lock-manager"
            ],
        "{:?}",
        names_of(&docs, "NetworkPolicy")
    );
    for policy in docs.iter().filter(|d| d["kind"] == "NetworkPolicy") {
        let name = policy["metadata"]["name"].as_str().unwrap_or_default();
        let ingress = policy["spec"]["ingress"].as_array().context("ingress")?;
        ensure!(ingress.len() == 1, "{name}: one ingress rule");
        ensure!(
            ingress[0]["ports"] == json!([{"port": 8080, "protocol": "TCP"}]),
            "{name}"
        );
        ensure!(
            ingress[0]["from"].as_array().is_some_and(
                |f| !f.is_empty() && f.iter().all(|p| p.get("namespaceSelector").is_some())
            ),
            "{name}: ingress from the monitoring namespaces only"
        );
        let egress = policy["spec"]["egress"].as_array().context("egress")?;
        let open: Vec<&Value> = egress.iter().filter(|r| r.get("ports").is_none()).collect();
        if name == "hearth-discovery" {
            ensure!(
                open == [&json!({})],
                "{name}: the targets may be anywhere by default"
            );
        } else {
            ensure!(
                open.is_empty(),
                "{name} may reach only DNS and the API server: {egress:?}"
            );
        }
    }
    let narrowed = render(&[
        "networkPolicy.targetCIDRs={10.20.0.0/16}",
        "networkPolicy.apiServerCIDRs={192.0.2.10/32}",
    ])?;
    let discovery = narrowed
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy" && d["metadata"]["name"] == "hearth-discovery")
        .context("discovery's policy")?;
    let rules = discovery["spec"]["egress"].as_array().context("egress")?;
    ensure!(
        rules.iter().all(|r| r != &json!({})),
        "no open rule once the targets are listed"
    );
    ensure!(
        rules
            .iter()
            .any(|r| r["to"] == json!([{"ipBlock": {"cidr": "10.20.0.0/16"}}]))
    );
    ensure!(
        rules
            .iter()
            .any(|r| r["to"] == json!([{"ipBlock": {"cidr": "192.0.2.10/32"}}]))
    );
    ensure!(names_of(&render(&["networkPolicy.enabled=false"])?, "NetworkPolicy").is_empty());
    Ok(())
}

/// The names of the rendered objects of `kind`, sorted.
/// The egress rules of the NetworkPolicy `name`.
fn egress<'a>(docs: &'a [Value], name: &str) -> Result<&'a Vec<Value>> {
    docs.iter()
        .find(|d| d["kind"] == "NetworkPolicy" && d["metadata"]["name"] == name)
        .and_then(|d| d["spec"]["egress"].as_array())
        .with_context(|| format!("no NetworkPolicy {name}"))
}

/// A rule that allows DNS only (ports 53 and 5353, any address).
fn is_dns(rule: &Value) -> bool {
    rule.get("to").is_none()
        && rule["ports"].as_array().is_some_and(|ports| {
            ports
                .iter()
                .all(|p| [53, 5353].contains(&p["port"].as_i64().unwrap_or(0)))
        })
}

/// Issue 41 item 8: with `apiServerCIDRs` set, kueue-sync and lock-manager may connect to
/// those addresses (on 443 and 6443) and DNS, nothing else; without it, to 443 and 6443
/// anywhere (the chart cannot know where the API server is), never to any port.
#[test]
fn kueue_sync_and_lock_manager_reach_only_the_listed_api_server() -> Result<()> {
    let api_ports = json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]);
    let narrowed = render(&[
        "networkPolicy.apiServerCIDRs={192.0.2.10/32,198.51.100.0/24}",
        "networkPolicy.targetCIDRs={10.20.0.0/16}",
    ])?;
    let open = render(&[])?;
    for name in ["hearth-kueue-sync", "hearth-lock-manager"] {
        let rules = egress(&narrowed, name)?;
        let others: Vec<&Value> = rules.iter().filter(|r| !is_dns(r)).collect();
        ensure!(
            others
                == [&json!({
                    "ports": api_ports,
                    "to": [
                        {"ipBlock": {"cidr": "192.0.2.10/32"}},
                        {"ipBlock": {"cidr": "198.51.100.0/24"}},
                    ],
                })],
            "{name}: with apiServerCIDRs, DNS and the API server only: {rules:?}"
        );
        let others: Vec<&Value> = egress(&open, name)?.iter().filter(|r| !is_dns(r)).collect();
        ensure!(
            others == [&json!({ "ports": api_ports })],
            "{name}: without apiServerCIDRs, the API server's ports only: {others:?}"
        );
    }
    Ok(())
}

/// The rendered NOTES.txt. `helm template` leaves NOTES.txt out, and `helm install
/// --dry-run` wants a cluster, so a copy of the chart (made once) has it as a named
/// template too, rendered into a document of its own.
fn notes(sets: &[&str]) -> Result<String> {
    static COPY: std::sync::OnceLock<std::result::Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    let copy = COPY
        .get_or_init(|| copy_with_notes().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("copying the chart: {e}"))?;
    let mut cmd = std::process::Command::new(Tools::locate()?.helm);
    cmd.args(["template", "hearth"]).arg(copy).args([
        "--namespace",
        "hearth",
        "--kube-version",
        "1.36.3",
        "--show-only",
        "templates/zz-notes.yaml",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("helm template: {}", String::from_utf8_lossy(&out.stderr));
    }
    let docs = parse_yaml_documents(&String::from_utf8(out.stdout)?, "helm template")?;
    docs.first()
        .and_then(|d| d["notes"].as_str())
        .map(str::to_owned)
        .context("no notes rendered")
}

fn copy_with_notes() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("hearth-chart-notes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(chart_dir())
        .arg(&dir)
        .status()?;
    ensure!(copied.success(), "cp -r {}", chart_dir().display());
    let notes = std::fs::read_to_string(dir.join("templates/NOTES.txt"))?;
    std::fs::write(
        dir.join("templates/_zz-notes.tpl"),
        format!("{{{{- define \"test.notes\" -}}}}\n{notes}\n{{{{- end -}}}}\n"),
    )?;
    std::fs::write(
        dir.join("templates/zz-notes.yaml"),
        "notes: {{ include \"test.notes\" . | toJson }}\n",
    )?;
    Ok(dir)
}

/// Issue 41 item 8: discovery connects wherever a labeled Secret's kubeconfig points; with
/// `targetCIDRs` empty (the default) or no NetworkPolicy, NOTES.txt says what that gives
/// whoever may create such a Secret, and how to narrow it. Listed targets, or discovery
/// disabled: no warning.
#[test]
fn notes_warn_when_discovery_may_connect_anywhere() -> Result<()> {
    let warning = "WARNING: hearth-discovery may connect to any address on any port";
    let default = notes(&[])?;
    for needle in [
        "WARNING: hearth-discovery may connect to any address on any port (networkPolicy.targetCIDRs is empty)",
        "whoever may create one in psap-secrets gets an HTTPS client and port scanner inside the cluster",
        "List the target clusters' API server networks in networkPolicy.targetCIDRs.",
    ] {
        ensure!(
            default.contains(needle),
            "{needle:?} not in NOTES:\n{default}"
        );
    }
    let no_policy = notes(&["networkPolicy.enabled=false"])?;
    ensure!(
        no_policy.contains(&format!("{warning} (networkPolicy.enabled is false)")),
        "{no_policy}"
    );
    for quiet in [
        notes(&["networkPolicy.targetCIDRs={10.20.0.0/16}"])?,
        notes(&["discovery.enabled=false"])?,
    ] {
        ensure!(!quiet.contains(warning), "{quiet}");
    }
    Ok(())
}
