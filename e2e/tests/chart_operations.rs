//! What an operator relies on in the rendered chart: every object says which release it
//! is (`app.kubernetes.io/version`), each controller can have a PodDisruptionBudget, and
//! every setting of docs/configuration.md is a flag of the binaries that use it and a
//! value of the chart. No control plane needed.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test chart_operations
//! ```

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_e2e::chart::{chart_dir, helm_template, helm_template_chart};
use hearth_e2e::hearth::Controller;
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::resources::read_yaml_documents;
use serde_json::Value;

fn sets(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| (*s).to_owned()).collect()
}

fn app_version() -> Result<String> {
    let chart = read_yaml_documents(&chart_dir().join("Chart.yaml"))?.remove(0);
    Ok(chart["appVersion"]
        .as_str()
        .context("Chart.yaml has no appVersion")?
        .to_owned())
}

fn kind_name(doc: &Value) -> String {
    format!(
        "{}/{}",
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Every optional object on, so that none escapes the checks.
const EVERYTHING_ON: [&str; 8] = [
    "namespaces.create=true",
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "discovery.podDisruptionBudget.enabled=true",
    "kueueSync.podDisruptionBudget.enabled=true",
    "lockManager.podDisruptionBudget.enabled=true",
    "config.otlpEndpoint=http://collector.monitoring:4318",
];

#[test]
fn every_rendered_object_and_pod_carries_the_release_version() -> Result<()> {
    let version = app_version()?;
    let mut args = vec!["--include-crds"];
    for s in EVERYTHING_ON {
        args.extend(["--set", s]);
    }
    let docs = helm_template_chart(&chart_dir(), "hearth", &args)?;
    ensure!(docs.len() > 30, "only {} objects rendered", docs.len());
    let mut wrong = Vec::new();
    for doc in &docs {
        let mut labels = vec![("", &doc["metadata"]["labels"])];
        if let Some(template) = doc["spec"].get("template") {
            labels.push((" (pod template)", &template["metadata"]["labels"]));
        }
        for (where_, labels) in labels {
            if labels["app.kubernetes.io/version"] != version.as_str() {
                wrong.push(format!(
                    "{}{where_}: {}",
                    kind_name(doc),
                    labels["app.kubernetes.io/version"]
                ));
            }
        }
    }
    ensure!(
        wrong.is_empty(),
        "objects without app.kubernetes.io/version={version}:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

#[test]
fn pod_disruption_budgets_are_optional_and_select_their_controller_only() -> Result<()> {
    let none = helm_template("hearth", &[])?;
    ensure!(
        !none.iter().any(|d| d["kind"] == "PodDisruptionBudget"),
        "a PodDisruptionBudget rendered by default"
    );
    let docs = helm_template(
        "hearth",
        &sets(&[
            "kueueSync.podDisruptionBudget.enabled=true",
            "lockManager.podDisruptionBudget.enabled=true",
            "lockManager.podDisruptionBudget.minAvailable=1",
        ]),
    )?;
    let pdbs: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "PodDisruptionBudget")
        .map(kind_name)
        .collect();
    ensure!(
        pdbs == BTreeSet::from(
            [
                "PodDisruptionBudget/hearth-kueue-sync",
                "PodDisruptionBudget/hearth-lock-manager"
            ]
            .map(str::to_owned)
        ),
        "{pdbs:?}"
    );
    let kueue = find(&docs, "PodDisruptionBudget", "hearth-kueue-sync").context("kueue pdb")?;
    ensure!(kueue["spec"]["maxUnavailable"] == 1 && kueue["spec"].get("minAvailable").is_none());
    let lock = find(&docs, "PodDisruptionBudget", "hearth-lock-manager").context("lock pdb")?;
    ensure!(lock["spec"]["minAvailable"] == 1 && lock["spec"].get("maxUnavailable").is_none());

    // Each selects its own Deployment's pods and no other's.
    for controller in Controller::ALL {
        let pod_labels = &find(&docs, "Deployment", controller.binary()).context("deployment")?["spec"]
            ["template"]["metadata"]["labels"];
        for pdb in docs.iter().filter(|d| d["kind"] == "PodDisruptionBudget") {
            let selects = pdb["spec"]["selector"]["matchLabels"]
                .as_object()
                .context("matchLabels")?
                .iter()
                .all(|(k, v)| pod_labels[k] == *v);
            ensure!(
                selects == (pdb["metadata"]["name"] == controller.binary()),
                "{} selects {}: {selects}",
                kind_name(pdb),
                controller.binary()
            );
        }
    }

    let disabled = helm_template(
        "hearth",
        &sets(&[
            "kueueSync.podDisruptionBudget.enabled=true",
            "kueueSync.enabled=false",
        ]),
    )?;
    ensure!(
        !disabled.iter().any(|d| d["kind"] == "PodDisruptionBudget"),
        "a disabled controller has a PodDisruptionBudget"
    );
    let refused = helm_template(
        "hearth",
        &sets(&["discovery.podDisruptionBudget.maxUnavailable=half"]),
    );
    ensure!(
        refused.is_err(),
        "the schema let maxUnavailable=half through"
    );
    Ok(())
}

/// One row of docs/configuration.md's table.
#[derive(Debug)]
struct Setting {
    variable: String,
    chart_key: String,
    used_by: Vec<Controller>,
}

/// The cells of a Markdown table row.
fn cells(row: &str) -> Vec<&str> {
    row.split(" | ")
        .map(|c| c.trim_matches(['|', ' ']))
        .collect()
}

/// The settings table of docs/configuration.md, by its header's column names.
fn documented_settings(doc: &str) -> Result<Vec<Setting>> {
    let mut rows = doc.lines().filter(|l| l.starts_with('|'));
    let header = cells(rows.next().context("no table")?);
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("no {name:?} column in {header:?}"))
    };
    let (variable, chart_key, used_by) = (
        column("variable")?,
        column("chart key")?,
        column("used by")?,
    );
    let mut settings = Vec::new();
    for row in rows.skip(1) {
        let cells = cells(row);
        let users = cells[used_by].split('(').next().unwrap_or_default();
        let used_by = if users.trim() == "all" {
            Controller::ALL.to_vec()
        } else {
            Controller::ALL
                .into_iter()
                .filter(|c| users.contains(c.binary().trim_start_matches("hearth-")))
                .collect()
        };
        ensure!(!used_by.is_empty(), "{row}: used by nobody");
        settings.push(Setting {
            variable: cells[variable].trim_matches('`').to_owned(),
            chart_key: cells[chart_key].to_owned(),
            used_by,
        });
    }
    Ok(settings)
}

/// The value at a dotted `path` of values.yaml (`config.logLevel`).
fn value_at<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(values, |v, key| v.get(key))
}

/// The environment variables `controller`'s container is given.
fn env_names(docs: &[Value], controller: Controller) -> Result<BTreeSet<String>> {
    let deployment = find(docs, "Deployment", controller.binary()).context("deployment")?;
    Ok(
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .context("env")?
            .iter()
            .filter_map(|e| e["name"].as_str().map(str::to_owned))
            .collect(),
    )
}

/// Each setting is a flag of each binary that uses it (`--help` names its variable), and
/// the chart gives it to those binaries from the value the "chart key" column names (or
/// sets it itself, where the column says so); every variable a binary's `--help` names is
/// documented.
#[test]
fn every_documented_setting_is_a_flag_and_a_chart_value() -> Result<()> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )?;
    let settings = documented_settings(&doc)?;
    ensure!(settings.len() >= 25, "{} rows", settings.len());
    let values = read_yaml_documents(&chart_dir().join("values.yaml"))?.remove(0);
    // Optional settings the chart passes only when set, set here.
    let docs = helm_template(
        "hearth",
        &sets(&[
            "config.otlpEndpoint=http://collector.monitoring:4318",
            "config.sentinelPriorityClass=nightly",
        ]),
    )?;
    let mut helps = Vec::new();
    for controller in Controller::ALL {
        let out = std::process::Command::new(hearth_binary(controller.binary())?)
            .arg("--help")
            .output()?;
        ensure!(out.status.success(), "{} --help", controller.binary());
        helps.push((controller, String::from_utf8(out.stdout)?));
    }

    for setting in &settings {
        let var = &setting.variable;
        for controller in &setting.used_by {
            let help = &helps
                .iter()
                .find(|(c, _)| c == controller)
                .context("help")?
                .1;
            // The OpenTelemetry SDK reads its standard variables itself, not clap.
            ensure!(
                var.starts_with("OTEL_") || help.contains(&format!("[env: {var}=")),
                "{var} is documented for {} but its --help does not name it",
                controller.binary()
            );
        }
        let key = &setting.chart_key;
        if key.starts_with('`') {
            let path = key.split('`').nth(1).context("key")?;
            let paths: Vec<String> = if path.starts_with("<controller>.") {
                ["discovery", "kueueSync", "lockManager"]
                    .iter()
                    .map(|c| path.replace("<controller>", c))
                    .collect()
            } else {
                vec![path.to_owned()]
            };
            for path in paths {
                ensure!(
                    value_at(&values, &path).is_some(),
                    "{var}: chart key {path} is not in values.yaml"
                );
            }
        } else if key.starts_with("set by the chart") {
        } else if key.starts_with('—') && var == "KUBECONFIG" {
            // In the cluster a controller uses its ServiceAccount: nothing to set.
            continue;
        } else {
            bail!("{var}: the chart key column says neither a key nor who sets it: {key:?}");
        }
        for controller in &setting.used_by {
            ensure!(
                env_names(&docs, *controller)?.contains(var),
                "{var}: the chart does not give it to {}",
                controller.binary()
            );
        }
    }

    // And nothing a binary takes is missing from the page.
    for (controller, help) in &helps {
        for var in help
            .split("[env: ")
            .skip(1)
            .filter_map(|rest| rest.split('=').next())
        {
            ensure!(
                doc.contains(&format!("`{var}`")),
                "{} --help takes {var}, which docs/configuration.md does not document",
                controller.binary()
            );
        }
    }
    Ok(())
}
