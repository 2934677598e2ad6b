//! The chart as Argo CD runs it: what must survive a deleted Application carries
//! `Delete=false` (and nothing else does), the shipped Application example
//! (`deploy/argocd/application.yaml`) renders through the chart as Argo CD renders it, and a
//! wrapper chart (a parent chart with `hearth` as a dependency and `global` values, a
//! common Argo CD pattern) installs on a real apiserver.
//!
//! ```text
//! cargo test -p hearth-e2e --test argocd
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use hearth_e2e::ControlPlane;
use hearth_e2e::chart::{chart_dir, helm_template_chart};
use hearth_e2e::resources::{read_yaml_documents, to_yaml};
use hearth_e2e::tools::Tools;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use serde_json::Value;

const SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example_path() -> PathBuf {
    repo().join("deploy/argocd/application.yaml")
}

/// The shipped Application.
fn example() -> Result<Value> {
    let docs = read_yaml_documents(&example_path())?;
    ensure!(docs.len() == 1, "one Application, found {}", docs.len());
    let app = docs.into_iter().next().context("empty")?;
    ensure!(app["kind"] == "Application", "{}", app["kind"]);
    ensure!(app["apiVersion"] == "argoproj.io/v1alpha1");
    Ok(app)
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("hearth-argocd-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Argo CD sync options an object carries, split on commas as Argo CD does.
fn sync_options(doc: &Value) -> BTreeSet<String> {
    doc["metadata"]["annotations"][SYNC_OPTIONS]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
        .collect()
}

fn kind_name(doc: &Value) -> String {
    format!(
        "{}/{}",
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Every rendered object carrying `option`, as `Kind/name`.
fn carrying(docs: &[Value], option: &str) -> BTreeSet<String> {
    docs.iter()
        .filter(|d| sync_options(d).contains(option))
        .map(kind_name)
        .collect()
}

/// What a deleted Application must leave: the CRDs (every FournosCluster, every
/// Reservation), the created
/// namespaces (`namespaces`: the kubeconfig Secrets, the lock sentinels) and the
/// WorkloadPriorityClasses that Fournos jobs name.
fn must_survive(namespaces: &[&str]) -> BTreeSet<String> {
    let mut kept: BTreeSet<String> = namespaces
        .iter()
        .map(|n| format!("Namespace/{n}"))
        .collect();
    kept.extend(CRDS.map(str::to_owned));
    for class in ["manual", "nightly", "presubmit", "adhoc"] {
        kept.insert(format!("WorkloadPriorityClass/{class}"));
    }
    kept
}

/// Hearth's CRDs, as the rendered objects are named here.
const CRDS: [&str; 2] = [
    "CustomResourceDefinition/fournosclusters.fournos.dev",
    "CustomResourceDefinition/reservations.fournos.dev",
];

/// Every optional object on: nothing of it may carry `Delete=false` either.
const EVERYTHING_ON: [&str; 5] = [
    "namespaces.create=true",
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "grafanaDashboard.enabled=true",
    "workloadPriorityClasses.enabled=true",
];

fn render_with_crds(sets: &[&str]) -> Result<Vec<Value>> {
    let mut args = vec!["--include-crds"];
    for s in sets {
        args.extend(["--set", s]);
    }
    Ok(helm_template_chart(&chart_dir(), "hearth", &args)?)
}

#[test]
fn exactly_what_an_application_delete_must_keep_carries_delete_false() -> Result<()> {
    let docs = render_with_crds(&EVERYTHING_ON)?;
    let kept = carrying(&docs, "Delete=false");
    let expected = must_survive(&["psap-secrets", "psap-automation"]);
    ensure!(
        kept == expected,
        "Delete=false on {kept:?}, expected exactly {expected:?}"
    );
    // What Helm keeps on uninstall, Argo CD keeps on prune: Prune=false stays beside it.
    let unpruned = carrying(&docs, "Prune=false");
    let namespaces_and_classes: BTreeSet<String> = expected
        .iter()
        .filter(|k| !k.starts_with("CustomResourceDefinition/"))
        .cloned()
        .collect();
    ensure!(
        unpruned == namespaces_and_classes,
        "Prune=false on {unpruned:?}"
    );

    // A third namespace (config.namespace) is created, and kept, too.
    let docs = render_with_crds(&["namespaces.create=true", "config.namespace=fleet"])?;
    let kept = carrying(&docs, "Delete=false");
    let expected = must_survive(&["psap-secrets", "psap-automation", "fleet"]);
    ensure!(kept == expected, "{kept:?}");
    Ok(())
}

#[test]
fn the_crds_are_applied_server_side_by_argocd() -> Result<()> {
    let docs = render_with_crds(&[])?;
    let crds: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    ensure!(crds.len() == CRDS.len(), "--include-crds renders the CRDs");
    for crd in crds {
        let options = sync_options(crd);
        ensure!(
            options.contains("ServerSideApply=true") && options.contains("Delete=false"),
            "{options:?}"
        );
    }
    ensure!(
        carrying(&docs, "ServerSideApply=true") == BTreeSet::from(CRDS.map(str::to_owned)),
        "only the CRDs ask for a server-side apply"
    );
    Ok(())
}

/// The example's Helm values, rendered as Argo CD renders them (`helm template
/// --include-crds --kube-version`, the release name and namespace it names).
fn render_example(app: &Value) -> Result<Vec<Value>> {
    let helm = &app["spec"]["source"]["helm"];
    let scratch = Scratch::new("values")?;
    let values = scratch.0.join("values.yaml");
    std::fs::write(&values, to_yaml(&helm["valuesObject"]))?;
    let namespace = app["spec"]["destination"]["namespace"]
        .as_str()
        .context("destination.namespace")?;
    let release = helm["releaseName"].as_str().context("helm.releaseName")?;
    ensure!(
        release == "hearth",
        "the chart's objects are named for `hearth`"
    );
    Ok(helm_template_chart(
        &chart_dir(),
        namespace,
        &["--include-crds", "-f", values.to_str().context("path")?],
    )?)
}

#[test]
fn the_argocd_example_renders_through_the_chart_and_keeps_the_fleet() -> Result<()> {
    let app = example()?;
    let source = &app["spec"]["source"];
    let path = source["path"].as_str().context("source.path")?;
    ensure!(
        repo().join(path).join("Chart.yaml").exists(),
        "source.path {path} is not the chart"
    );
    let chart: Value = read_yaml_documents(&chart_dir().join("Chart.yaml"))?.remove(0);
    let tag = format!("v{}", chart["appVersion"].as_str().unwrap_or_default());
    ensure!(
        source["targetRevision"] == tag.as_str(),
        "targetRevision {} is not this release's tag {tag}",
        source["targetRevision"]
    );
    ensure!(
        app["metadata"]["finalizers"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f == "resources-finalizer.argocd.argoproj.io")),
        "the example shows the cascading delete it is safe against"
    );
    let options: Vec<&str> = app["spec"]["syncPolicy"]["syncOptions"]
        .as_array()
        .context("syncOptions")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for needed in ["RespectIgnoreDifferences=true", "CreateNamespace=true"] {
        ensure!(options.contains(&needed), "{needed} missing: {options:?}");
    }

    let docs = render_example(&app)?;
    let values = &source["helm"]["valuesObject"];
    let namespaces = [
        values["config"]["secretsNamespace"]
            .as_str()
            .context("secretsNamespace")?,
        values["config"]["executionNamespace"]
            .as_str()
            .context("executionNamespace")?,
    ];
    let kept = carrying(&docs, "Delete=false");
    ensure!(kept == must_survive(&namespaces), "{kept:?}");
    for controller in [
        "hearth-discovery",
        "hearth-kueue-sync",
        "hearth-lock-manager",
    ] {
        ensure!(
            docs.iter()
                .any(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == controller),
            "{controller} not rendered"
        );
    }
    Ok(())
}

/// Hearth owns one resource group of the shared ClusterQueue (the one covering
/// fournos/cluster-slot, crates/hearth-kueue-sync/README.md): the example ignores that
/// element, selected by its content, and nothing else of the queue.
#[test]
fn the_argocd_example_ignores_only_hearths_resource_group() -> Result<()> {
    let app = example()?;
    let ignored = app["spec"]["ignoreDifferences"]
        .as_array()
        .context("ignoreDifferences")?;
    ensure!(ignored.len() == 1, "{ignored:?}");
    let entry = &ignored[0];
    ensure!(entry["group"] == "kueue.x-k8s.io" && entry["kind"] == "ClusterQueue");
    let queue = &app["spec"]["source"]["helm"]["valuesObject"]["config"]["clusterQueueName"];
    ensure!(
        entry["name"] == *queue,
        "the entry names {}, the values {queue}",
        entry["name"]
    );
    ensure!(
        entry.get("jsonPointers").is_none() && entry.get("managedFieldsManagers").is_none(),
        "a pointer or a manager would ignore more than Hearth's group: {entry}"
    );
    let expressions = entry["jqPathExpressions"]
        .as_array()
        .context("jqPathExpressions")?;
    let expected = format!(
        ".spec.resourceGroups[]? | select(.coveredResources | index(\"{CLUSTER_SLOT_RESOURCE}\"))"
    );
    ensure!(
        expressions.len() == 1 && expressions[0] == expected.as_str(),
        "{expressions:?}, expected [{expected}]"
    );
    Ok(())
}

/// A parent chart in `dir` with the repository's chart as its `hearth` dependency (from
/// its local path) and `global` values, its dependency built as Argo CD builds it.
fn wrapper_chart(dir: &Path) -> Result<()> {
    std::fs::write(
        dir.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: fleet\nversion: 0.0.1\ndependencies:\n  - name: hearth\n    \
             version: \"*\"\n    repository: file://{}\n",
            chart_dir().canonicalize()?.display()
        ),
    )?;
    std::fs::write(
        dir.join("values.yaml"),
        "global:\n  imageRegistry: registry.example.com\nhearth:\n  workloadPriorityClasses:\n    \
         enabled: false\n",
    )?;
    let out = Command::new(Tools::locate()?.helm)
        .args(["dependency", "build"])
        .arg(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "helm dependency build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn a_wrapper_chart_with_global_values_installs() -> Result<()> {
    let scratch = Scratch::new("wrapper")?;
    wrapper_chart(&scratch.0)?;
    let docs = helm_template_chart(&scratch.0, "hearth", &[])?;
    ensure!(
        docs.iter().filter(|d| d["kind"] == "Deployment").count() == 3,
        "the wrapper renders the three controllers"
    );

    let plane = ControlPlane::shared().await?;
    let iso = plane.isolated("argocd_wrapper").await?;
    let kubeconfig = plane.management_kubeconfig();
    let sets = [
        format!("hearth.config.secretsNamespace={}", iso.secrets_namespace),
        format!(
            "hearth.config.executionNamespace={}",
            iso.execution_namespace
        ),
        format!("hearth.config.clusterQueueName={}", iso.cluster_queue),
        "global.team=gpu-platform".to_owned(),
    ];
    let mut install = Command::new(Tools::locate()?.helm);
    install
        .args(["install", "fleet"])
        .arg(&scratch.0)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", &iso.namespace]);
    for s in &sets {
        install.args(["--set", s]);
    }
    let out = install.output()?;
    ensure!(
        out.status.success(),
        "helm install of the wrapper chart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployments: Api<Deployment> =
        Api::namespaced(plane.management_client().await?, &iso.namespace);
    let names: BTreeSet<String> = deployments
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    ensure!(
        names
            == BTreeSet::from(
                [
                    "hearth-discovery",
                    "hearth-kueue-sync",
                    "hearth-lock-manager"
                ]
                .map(str::to_owned)
            ),
        "{names:?}"
    );
    Ok(())
}
