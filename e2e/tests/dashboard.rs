//! The chart's Grafana dashboard and alert rules against what the binaries really export:
//! the dashboard renders as a sidecar ConfigMap with a sane shape, and every metric a
//! dashboard query or an alert names is on a live `/metrics` of the three controllers,
//! started on the local plane.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test dashboard
//! ```

use std::collections::BTreeSet;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::names::condition_types::KUEUE_SYNCED;
use hearth_e2e::ControlPlane;
use hearth_e2e::chart::helm_template;
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::process::until;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);

const DASHBOARD_KEY: &str = "hearth-fleet.json";

fn rendered(kind: &str, sets: &[&str]) -> Result<Value> {
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    helm_template("hearth", &sets)?
        .into_iter()
        .find(|d| d["kind"] == kind)
        .with_context(|| format!("the chart renders no {kind} with {sets:?}"))
}

fn dashboard() -> Result<Value> {
    let config_map = rendered("ConfigMap", &["grafanaDashboard.enabled=true"])?;
    let text = config_map["data"][DASHBOARD_KEY]
        .as_str()
        .with_context(|| format!("no {DASHBOARD_KEY} in {config_map}"))?;
    Ok(serde_json::from_str(text)?)
}

/// Every PromQL expression of the dashboard's panels.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect()
}

fn alert_queries() -> Result<Vec<String>> {
    let rule = rendered("PrometheusRule", &["prometheusRule.enabled=true"])?;
    Ok(rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["expr"].as_str().map(str::to_owned))
        .collect())
}

/// The metric names (`hearth_…`) a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("hearth_") {
        let preceded_by_word = rest[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded_by_word {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The sample names an OpenMetrics text can carry, from its `# TYPE` lines: a family with
/// no labelled child yet still declares them.
fn exported_samples(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .flat_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().unwrap_or_default().to_owned();
            let suffixes: &[&str] = match parts.next().unwrap_or_default() {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_count", "_sum", "_created"],
                "info" => &["_info"],
                _ => &[""],
            };
            suffixes
                .iter()
                .map(|s| format!("{name}{s}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_dashboard_is_a_sidecar_config_map_with_a_sane_shape() -> Result<()> {
    ensure!(
        !helm_template("hearth", &[])?
            .iter()
            .any(|d| d["kind"] == "ConfigMap"),
        "the dashboard renders with default values"
    );
    let config_map = rendered(
        "ConfigMap",
        &[
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.namespace=monitoring",
        ],
    )?;
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(config_map["metadata"]["namespace"], "monitoring");

    let d = dashboard()?;
    ensure!(d["uid"] == "hearth-fleet" && d["title"].is_string(), "{d}");
    ensure!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    let variables: Vec<&str> = d["templating"]["list"]
        .as_array()
        .context("templating.list")?
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "namespace"]);

    let panels = d["panels"].as_array().context("panels")?;
    ensure!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().context("a panel without title")?;
        ensure!(
            ids.insert(p["id"].as_u64().context("panel id")?),
            "duplicate id: {title}"
        );
        ensure!(
            ["stat", "bargauge", "table", "timeseries"]
                .contains(&p["type"].as_str().unwrap_or_default()),
            "{title}: type {}",
            p["type"]
        );
        let g = &p["gridPos"];
        let (x, w, h) = (g["x"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        ensure!(
            matches!((x, w, h, g["y"].as_u64()), (Some(x), Some(w), Some(h), Some(_)) if x + w <= 24 && h > 0),
            "{title}: gridPos {g}"
        );
        ensure!(
            p["datasource"]["uid"] == "${datasource}",
            "{title}: datasource"
        );
        let targets = p["targets"].as_array().context("targets")?;
        ensure!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            ensure!(t["refId"].is_string(), "{title}: refId");
            ensure!(
                expr.contains("namespace=~\"$namespace\""),
                "{title}: {expr} ignores $namespace"
            );
            ensure!(
                !metric_names(expr).is_empty(),
                "{title}: {expr} reads no Hearth metric"
            );
        }
    }
    Ok(())
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names(
        r#"sum by (controller) (hearth_leader{job="hearth-x"} * on (instance) group_left hearth_build_info) or my_hearth_other"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["hearth_build_info", "hearth_leader"]
    );
}

/// Every `hearth_…` sample name the three controllers' `/metrics` declare now.
async fn scrape(controllers: &[Running]) -> Result<BTreeSet<String>> {
    let mut exported = BTreeSet::new();
    for running in controllers {
        exported.extend(exported_samples(&running.metrics().await?));
    }
    Ok(exported)
}

/// A family appears on `/metrics` once it has a sample, so the controllers are made to do
/// everything the queries count: onboard, lock and cordon (overdue) a cluster, then lose their rights on
/// the FournosCluster namespace and their watches (an apiserver restart), so that
/// reconcile and watch errors are counted too.
#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_is_exported_live() -> Result<()> {
    let mut queried = BTreeSet::new();
    for expr in dashboard_queries(&dashboard()?)
        .iter()
        .chain(&alert_queries()?)
    {
        queried.extend(metric_names(expr));
    }
    ensure!(queried.len() >= 15, "{queried:?}");

    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("dashboard_metrics").await?;
    let fast = [
        ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "2"),
        ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
    ];
    let mut controllers = Vec::new();
    for controller in Controller::ALL {
        controllers.push(hearth::start(plane, &scope, controller, "0", &fast).await?);
    }
    let cluster = scope.cluster("a");
    plane
        .create_kubeconfig_secret(
            &scope.secrets_namespace,
            &cluster,
            plane.target("target-a")?.node_reader_kubeconfig(),
        )
        .await?;
    let client = plane.management_client().await?;
    let clusters: Api<FournosCluster> = Api::namespaced(client.clone(), &scope.namespace);
    until("the cluster onboarded with quota", DEADLINE, || async {
        let fc = clusters.get_opt(&cluster).await?;
        let synced = fc
            .as_ref()
            .and_then(|fc| fc.status.as_ref())
            .is_some_and(|s| hearth_api::conditions::is_true(&s.conditions, KUEUE_SYNCED));
        Ok(if synced {
            Ok(())
        } else {
            Err(format!("{fc:?}"))
        })
    })
    .await?;

    // The controllers lose their rights in the cluster namespace; what they write there
    // from now on fails.
    for binding in [
        "hearth-discovery",
        "hearth-kueue-sync",
        "hearth-lock-manager",
    ] {
        Api::<RoleBinding>::namespaced(client.clone(), &scope.namespace)
            .delete(binding, &DeleteParams::default())
            .await?;
    }
    // Something for each to write: a lock, and a status.kueue kueue-sync must correct;
    // and a cordon whose end has passed (the overdue gauge has a sample only then).
    clusters
        .patch(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": {
                "owner": "alice",
                "cordon": { "reason": "rack move", "until": "2026-01-01T00:00:00Z" },
            } })),
        )
        .await?;
    clusters
        .patch_status(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "kueue": { "clusterSlots": 1 } } })),
        )
        .await?;
    // Every watch breaks; re-listing is refused.
    plane.restart_management().await?;

    until("every queried metric on /metrics", DEADLINE, || async {
        let exported = scrape(&controllers).await?;
        let missing: Vec<_> = queried.difference(&exported).cloned().collect();
        Ok(if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "queried but not exported: {missing:?}; exported: {exported:?}"
            ))
        })
    })
    .await
}
