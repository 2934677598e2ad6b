//! The chart's PrometheusRule: rendered by the pinned helm, checked by the pinned promtool
//! (`promtool check rules`), and unit-tested with `promtool test rules` on the cases in
//! `e2e/fixtures/alerts/hearth.test.yaml`, where every alert fires from sample series.
//! No control plane needed.
//!
//! ```text
//! cargo test -p hearth-e2e --test alerts
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use hearth_e2e::chart::helm_template;
use hearth_e2e::resources::{parse_yaml_documents, to_yaml};
use hearth_e2e::tools::Tools;
use serde_json::{Value, json};

/// Where the cases expect `runbook_url` to point (`prometheusRule.runbookURL`).
const RUNBOOK_COPY: &str = "https://runbooks.example/docs/operations.md";

fn cases_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/alerts/hearth.test.yaml")
}

/// The PrometheusRule the chart renders with alerts on (and a routing label on every alert).
fn prometheus_rule() -> Result<Value> {
    let docs = helm_template(
        "hearth",
        &[
            "prometheusRule.enabled=true".to_owned(),
            "prometheusRule.alertLabels.team=gpu-platform".to_owned(),
            format!("prometheusRule.runbookURL={RUNBOOK_COPY}"),
        ],
    )?;
    docs.into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .context("the chart renders no PrometheusRule with prometheusRule.enabled=true")
}

fn alert_names(rule: &Value) -> BTreeSet<String> {
    rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

fn promtool(dir: &Path, args: &[&str]) -> Result<String> {
    let tools = Tools::locate()?;
    let out = Command::new(&tools.promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .context("running promtool")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    Ok(text)
}

#[test]
fn every_alert_passes_promtool_and_fires_in_a_rule_test() -> Result<()> {
    let rule = prometheus_rule()?;
    let dir = std::env::temp_dir().join(format!("hearth-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("rules.yaml"),
        to_yaml(&json!({ "groups": rule["spec"]["groups"] })),
    )?;
    std::fs::copy(cases_file(), dir.join("hearth.test.yaml"))?;

    let checked = promtool(&dir, &["check", "rules", "rules.yaml"])?;
    ensure!(checked.contains("SUCCESS"), "{checked}");
    promtool(&dir, &["test", "rules", "hearth.test.yaml"])?;

    // promtool passes a case whose alert never fires if it expects none: make sure every
    // alert is expected to fire somewhere.
    let cases = parse_yaml_documents(&std::fs::read_to_string(cases_file())?, "rule tests")?;
    let fired: BTreeSet<String> = cases[0]["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str().map(str::to_owned))
        .collect();
    let alerts = alert_names(&rule);
    let untested: Vec<_> = alerts.difference(&fired).collect();
    ensure!(
        untested.is_empty(),
        "alerts never fired in a test: {untested:?}"
    );
    ensure!(alerts.len() >= 11, "{alerts:?}");

    // What the runbook must explain: every alert has a section in docs/operations.md.
    let runbook = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )?;
    let sections: BTreeSet<&str> = runbook
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    let undocumented: Vec<_> = alerts
        .iter()
        .filter(|a| !sections.contains(a.as_str()))
        .collect();
    ensure!(
        undocumented.is_empty(),
        "alerts without a runbook section (a heading named after the alert) in docs/operations.md: {undocumented:?}"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn every_alert_says_what_it_is_and_what_to_do() -> Result<()> {
    let rule = prometheus_rule()?;
    for group in rule["spec"]["groups"].as_array().context("groups")? {
        for r in group["rules"].as_array().context("rules")? {
            let name = r["alert"].as_str().context("only alerts here")?;
            let summary = r["annotations"]["summary"].as_str().unwrap_or_default();
            let description = r["annotations"]["description"].as_str().unwrap_or_default();
            ensure!(!summary.is_empty(), "{name} has no summary");
            ensure!(
                description.contains("kubectl"),
                "{name}'s description does not say what to run: {description}"
            );
            ensure!(
                r["labels"]["severity"].is_string(),
                "{name} has no severity"
            );
            ensure!(
                r["labels"]["team"] == "gpu-platform",
                "{name} lacks prometheusRule.alertLabels"
            );
        }
    }
    Ok(())
}

#[test]
fn alerts_are_off_by_default() -> Result<()> {
    let docs = helm_template("hearth", &[])?;
    ensure!(
        !docs.iter().any(|d| d["kind"] == "PrometheusRule"),
        "a PrometheusRule rendered with default values"
    );
    Ok(())
}

/// The anchor GitHub gives a Markdown heading: lower case, punctuation other than `-` and
/// `_` dropped, spaces as `-`.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every alert's `runbook_url` points at its own section of docs/operations.md: by default
/// in this release's tag on GitHub, or in the copy `prometheusRule.runbookURL` names.
#[test]
fn every_alert_links_its_runbook_section() -> Result<()> {
    let runbook = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )?;
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| github_anchor(l.trim_start_matches('#')))
        .collect();
    let chart: Value = parse_yaml_documents(
        &std::fs::read_to_string(hearth_e2e::chart::chart_dir().join("Chart.yaml"))?,
        "Chart.yaml",
    )?
    .remove(0);
    let tagged = format!(
        "https://github.com/hearth-dev/hearth/blob/v{}/docs/operations.md",
        chart["appVersion"].as_str().context("appVersion")?
    );
    let default_rule = helm_template("hearth", &["prometheusRule.enabled=true".to_owned()])?
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .context("no PrometheusRule")?;
    for (rule, base) in [
        (default_rule, tagged.as_str()),
        (prometheus_rule()?, RUNBOOK_COPY),
    ] {
        for name in alert_names(&rule) {
            let alert = rule["spec"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .find(|r| r["alert"] == name.as_str())
                .context("alert")?;
            let url = alert["annotations"]["runbook_url"]
                .as_str()
                .with_context(|| format!("{name} has no runbook_url"))?;
            let (page, anchor) = url
                .split_once('#')
                .with_context(|| format!("{name}: {url} names no section"))?;
            ensure!(page == base, "{name}: {url} is not in {base}");
            ensure!(
                anchor == github_anchor(&name) && anchors.contains(anchor),
                "{name}: #{anchor} is not its section of docs/operations.md"
            );
        }
    }
    Ok(())
}
