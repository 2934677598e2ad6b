//! Helm and the chart as the chart's tests drive them: `helm` itself, rendering with
//! `--set` values, and reading names out of what it rendered.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::error::{PlaneError, Result};
use crate::plane::Isolated;
use crate::resources::parse_yaml_documents;
use crate::tools::Tools;

/// The Kubernetes version the chart is rendered for (`--kube-version`).
pub const KUBE_VERSION: &str = "1.36.3";

/// `helm <args>`, as it ran (the caller reads its status and output).
pub fn helm(args: &[&str]) -> Result<Output> {
    let tools = Tools::locate()?;
    Command::new(&tools.helm)
        .args(args)
        .output()
        .map_err(|e| PlaneError::Tools(format!("running helm: {e}")))
}

/// `helm <args>` against the cluster of `kubeconfig`, in `namespace`.
pub fn helm_on(kubeconfig: &Path, namespace: &str, args: &[&str]) -> Result<Output> {
    let mut args = args.to_vec();
    args.extend([
        "--kubeconfig",
        kubeconfig.to_str().unwrap_or_default(),
        "--namespace",
        namespace,
    ]);
    helm(&args)
}

/// The chart rendered as release `hearth` in namespace `hearth` with `--set` values; Err
/// carries helm's message.
pub fn render(sets: &[&str]) -> Result<Vec<Value>> {
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    helm_template("hearth", &sets)
}

/// The names of the rendered objects of `kind`, sorted.
pub fn names_of(docs: &[Value], kind: &str) -> Vec<String> {
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

/// The chart's directory in this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/hearth")
}

/// `helm template` of the chart for `iso`'s scope: release namespace = the test's
/// FournosCluster namespace, and the test's secrets/execution namespaces and queue.
pub fn render_chart(iso: &Isolated, extra: &[(&str, &str)]) -> Result<Vec<serde_json::Value>> {
    let mut set = vec![
        format!("config.namespace={}", iso.namespace),
        format!("config.secretsNamespace={}", iso.secrets_namespace),
        format!("config.executionNamespace={}", iso.execution_namespace),
        format!("config.clusterQueueName={}", iso.cluster_queue),
        format!("config.localQueueName={}", iso.local_queue),
        "config.sentinel=workload".to_owned(),
    ];
    set.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
    helm_template(&iso.namespace, &set)
}

/// `helm template hearth <chart> --namespace <namespace> --set <each of set>`, parsed.
pub fn helm_template(namespace: &str, set: &[String]) -> Result<Vec<serde_json::Value>> {
    let mut args = Vec::new();
    for s in set {
        args.extend(["--set", s.as_str()]);
    }
    helm_template_chart(&chart_dir(), namespace, &args)
}

/// `helm template hearth <chart> --namespace <namespace> --kube-version <the tested one>
/// <args>` (values files, `--include-crds`, …) of any chart, parsed.
pub fn helm_template_chart(
    chart: &Path,
    namespace: &str,
    args: &[&str],
) -> Result<Vec<serde_json::Value>> {
    let tools = Tools::locate()?;
    let out = std::process::Command::new(&tools.helm)
        .args(["template", "hearth"])
        .arg(chart)
        .args([
            "--namespace",
            namespace,
            "--kube-version",
            crate::chart::KUBE_VERSION,
        ])
        .args(args)
        .output()
        .map_err(|e| PlaneError::Tools(format!("running helm: {e}")))?;
    if !out.status.success() {
        return Err(PlaneError::Tools(format!(
            "helm template failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    parse_yaml_documents(&String::from_utf8_lossy(&out.stdout), "helm template")
}
