//! `kubectl fournos doctor`: what Hearth needs on the management cluster, checked rather
//! than guessed, each missing piece said with what to do. [`diagnose`] decides from what
//! was observed (pure); `api` observes.

use hearth_api::crd::{StatusWriter, apply_crd_hint, missing_status_fields};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;

use hearth_api::names::controllers::{KUEUE_SYNC, LOCK_MANAGER};

use crate::cli::Sentinel;
use crate::error::Failure;

/// The Kubernetes minor version Hearth's end-to-end tests run (e2e/tools/kube/go.mod; a
/// test keeps them equal). Another version is not refused, only said.
pub const TESTED_KUBERNETES: (u32, u32) = (1, 36);
/// The Kueue API version Hearth reads and writes.
pub const KUEUE_API: &str = "kueue.x-k8s.io/v1beta2";

/// What the doctor is asked to check, as the chart's values name it.
#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    pub secrets_namespace: String,
    pub execution_namespace: String,
    pub cluster_queue: String,
    pub sentinel: Sentinel,
    pub local_queue: String,
    /// Where the chart's ServiceAccounts are.
    pub install_namespace: String,
}

/// One right a controller needs for these settings, asked of the apiserver for the
/// controller's ServiceAccount: a chart installed with other values (or RBAC changed
/// since) shows here, before the controller fails at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Right {
    /// The controller, and so its ServiceAccount's name.
    pub controller: &'static str,
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// The chart value that decides where the right is granted.
    pub value: &'static str,
    /// What the controller needs the right for and exactly what to apply when it lacks
    /// it, when the chart grants it whatever the values (a release of an older chart, or
    /// a Role lost since); `None`: the chart grants it where `value` says.
    pub fix: Option<String>,
}

/// What the apiserver answered about a [`Right`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    Yes,
    No,
    /// The controller's ServiceAccount does not exist: not installed (yet), disabled, or
    /// installed in another namespace.
    NoServiceAccount,
    Unknown(String),
}

/// The rights the chart grants that depend on the values the doctor checks, and those
/// a controller checks or reads at start that an older release's RBAC lacks.
pub fn rights(settings: &Settings) -> Vec<Right> {
    use hearth_api::names::controllers::DISCOVERY;
    let sentinel = match settings.sentinel {
        Sentinel::Fournosjob => ("fournos.dev", "fournosjobs"),
        Sentinel::Workload => ("kueue.x-k8s.io", "workloads"),
    };
    let mut rights = vec![
        Right {
            controller: DISCOVERY,
            verb: "watch",
            group: "",
            resource: "secrets",
            name: None,
            namespace: Some(settings.secrets_namespace.clone()),
            value: "config.secretsNamespace",
            fix: None,
        },
        Right {
            controller: KUEUE_SYNC,
            verb: "patch",
            group: "kueue.x-k8s.io",
            resource: "clusterqueues",
            name: Some(settings.cluster_queue.clone()),
            namespace: None,
            value: "config.clusterQueueName",
            fix: None,
        },
        Right {
            controller: LOCK_MANAGER,
            verb: "create",
            group: sentinel.0,
            resource: sentinel.1,
            name: None,
            namespace: Some(settings.execution_namespace.clone()),
            // The chart grants only the configured sentinel kind's rights.
            value: "config.sentinel or config.executionNamespace",
            fix: None,
        },
        Right {
            controller: LOCK_MANAGER,
            verb: "patch",
            group: "fournos.dev",
            resource: "fournosclusters",
            name: None,
            namespace: Some(settings.namespace.clone()),
            value: "config.namespace",
            fix: None,
        },
        Right {
            controller: LOCK_MANAGER,
            verb: "list",
            group: "fournos.dev",
            resource: "reservations",
            name: None,
            namespace: Some(settings.namespace.clone()),
            value: "the chart's version",
            fix: None,
        },
        Right {
            controller: LOCK_MANAGER,
            verb: "get",
            group: "apiextensions.k8s.io",
            resource: "customresourcedefinitions",
            name: Some(hearth_api::names::CRD_NAME.into()),
            namespace: None,
            value: "the chart's version",
            fix: Some(crd_read_fix(&settings.install_namespace)),
        },
    ];
    for verb in ["list", "watch"] {
        rights.push(Right {
            controller: KUEUE_SYNC,
            verb,
            group: hearth_api::kueue::KUEUE_GROUP,
            resource: "workloads",
            name: None,
            namespace: Some(settings.execution_namespace.clone()),
            value: "config.executionNamespace",
            fix: Some(workload_read_fix(settings)),
        });
    }
    rights
}

/// What lock-manager's right to read the FournosCluster CRD is for, and how to grant it:
/// the chart's ClusterRole has it from the release that added the start-up check.
fn crd_read_fix(install: &str) -> String {
    let (sa, crd) = (LOCK_MANAGER, hearth_api::names::CRD_NAME);
    let role = format!("{sa}-crd-{install}");
    format!(
        "it checks at start that the served CRD declares every status field it writes (an \
         older CRD prunes them from every write), and without this right skips the check with \
         a warning. The chart's ClusterRole {sa}-{install} grants it: upgrade the release \
         (`helm upgrade`), or apply it alone: `kubectl create clusterrole {role} --verb=get \
         --resource=customresourcedefinitions.apiextensions.k8s.io --resource-name={crd}` \
         and `kubectl create clusterrolebinding {role} --clusterrole={role} \
         --serviceaccount={install}:{sa}`."
    )
}

/// What kueue-sync's right to read the execution namespace's Workloads is for, and how
/// to grant it: the chart's Role there has it when installed with that namespace.
fn workload_read_fix(settings: &Settings) -> String {
    let (sa, install, ns) = (
        KUEUE_SYNC,
        &settings.install_namespace,
        &settings.execution_namespace,
    );
    let role = format!("{sa}-workloads-{install}");
    format!(
        "it watches them (a cordoned cluster counts those still admitted on its flavor), and \
         without this right its caches never sync: it never gets ready and publishes no quota. \
         The chart's Role {role} in namespace {ns} grants it when installed with \
         config.executionNamespace={ns} (a namespace made after the install gets it only with \
         `helm upgrade`), or apply it alone: `kubectl create role {role}-read -n {ns} \
         --verb=get,list,watch --resource=workloads.kueue.x-k8s.io` and `kubectl create \
         rolebinding {role}-read -n {ns} --role={role}-read --serviceaccount={install}:{sa}`."
    )
}

/// Whether an object exists, or why it could not be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    Present,
    Missing,
    /// The apiserver would not say (RBAC, an error): the text says what it answered.
    Unknown(String),
}

/// What the doctor observed on the cluster.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The apiserver's gitVersion (`v1.36.3`), if it answered.
    pub kubernetes_version: Option<String>,
    /// The versions of kueue.x-k8s.io the apiserver serves (empty: none).
    pub kueue_versions: Vec<String>,
    /// The resources fournos.dev/v1 serves (fournosclusters, fournosjobs…).
    pub fournos_resources: Vec<String>,
    /// Each namespace checked, in [`Settings`] order.
    pub namespaces: Vec<(String, Seen)>,
    /// `None` when not checked (Kueue's API is not served).
    pub cluster_queue: Option<Seen>,
    /// Only for workload sentinels.
    pub local_queue: Option<Seen>,
    /// Each of [`rights`], answered.
    pub rights: Vec<(Right, Allowed)>,
    /// The served FournosCluster CRD, or why it could not be read; `None` when it does
    /// not exist.
    pub fournos_cluster_crd: Option<Result<CustomResourceDefinition, String>>,
    /// hearth-discovery's NetworkPolicy in the install namespace, or why it could not be
    /// read; `None` when there is none.
    pub discovery_policy: Option<Result<NetworkPolicy, String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Present but not what Hearth is tested with: said, not failed.
    Warning,
    Missing,
    /// Could not be told (e.g. RBAC): fails, since it may be missing.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub verdict: Verdict,
    pub message: String,
}

/// The check named `check`, with what it found.
fn check(check: &str, (verdict, message): (Verdict, String)) -> Check {
    Check {
        check: check.to_owned(),
        verdict,
        message,
    }
}

/// What the check of an object Hearth needs and does not make found: `what` names it,
/// `missing` ends the sentence that says it does not exist with what to do. `None`: not
/// looked for, since Kueue's API is not served.
fn presence(what: &str, seen: Option<&Seen>, missing: &str) -> (Verdict, String) {
    match seen {
        Some(Seen::Present) => (Verdict::Ok, format!("{what} exists")),
        Some(Seen::Missing) => (Verdict::Missing, format!("{what} does not exist{missing}")),
        Some(Seen::Unknown(why)) => (
            Verdict::Unknown,
            format!("cannot tell whether {what} exists: {why}"),
        ),
        None => (
            Verdict::Unknown,
            format!("{what} not checked: Kueue's API is not served"),
        ),
    }
}

/// `ok` when `present`, else `missing`.
fn installed(present: bool, ok: &str, missing: &str) -> (Verdict, String) {
    match present {
        true => (Verdict::Ok, ok.to_owned()),
        false => (Verdict::Missing, missing.to_owned()),
    }
}

/// The namespaces to check: the FournosClusters', the Secrets', the sentinels'.
pub fn namespaces(settings: &Settings) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in [
        &settings.namespace,
        &settings.secrets_namespace,
        &settings.execution_namespace,
    ] {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// `(major, minor)` of a gitVersion such as `v1.36.3` or `v1.32.5+ocp`.
fn minor_version(git_version: &str) -> Option<(u32, u32)> {
    let mut parts = git_version.strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Whether `versions` (of kueue.x-k8s.io, as the apiserver serves them) has [`KUEUE_API`].
pub fn serves_kueue(versions: &[String]) -> bool {
    versions
        .iter()
        .any(|v| v == hearth_api::kueue::KUEUE_VERSION)
}

/// Every check, in the order a person fixes them.
pub fn diagnose(settings: &Settings, observed: &Observed) -> Vec<Check> {
    let (tested_major, tested_minor) = TESTED_KUBERNETES;
    let tested = format!("{tested_major}.{tested_minor}");
    let kubernetes = match observed.kubernetes_version.as_deref() {
        Some(v) if minor_version(v) == Some(TESTED_KUBERNETES) => {
            (Verdict::Ok, format!("Kubernetes {v} (tested: {tested}.x)"))
        }
        Some(v) => (
            Verdict::Warning,
            format!(
                "Kubernetes {v} is not a version Hearth is tested on (tested: {tested}.x); it may \
                 work. docs/support.md lists what is tested."
            ),
        ),
        None => (
            Verdict::Unknown,
            "the apiserver did not say its version (/version)".into(),
        ),
    };
    let kueue = if serves_kueue(&observed.kueue_versions) {
        (Verdict::Ok, format!("Kueue serves {KUEUE_API}"))
    } else if observed.kueue_versions.is_empty() {
        (
            Verdict::Missing,
            format!(
                "Kueue is not installed: no kueue.x-k8s.io API is served. Install Kueue (tested: \
                 v0.19.2, which serves {KUEUE_API}); see docs/support.md."
            ),
        )
    } else {
        (
            Verdict::Missing,
            format!(
                "Kueue serves kueue.x-k8s.io {}, not {KUEUE_API}, which Hearth uses: upgrade \
                 Kueue (tested: v0.19.2).",
                observed.kueue_versions.join(", ")
            ),
        )
    };
    let crd = |resource: &str| observed.fournos_resources.iter().any(|r| r == resource);
    let mut checks = vec![
        check("kubernetes", kubernetes),
        check("kueue", kueue),
        check(
            "fournosclusters-crd",
            installed(
                crd("fournosclusters"),
                "the FournosCluster CRD (fournosclusters.fournos.dev/v1) is installed",
                "the FournosCluster CRD is not installed: `helm install` installs it from the \
                 chart's crds/, or `kubectl apply -f manifests/crd.yaml`.",
            ),
        ),
        check(
            "reservations-crd",
            installed(
                crd("reservations"),
                "the Reservation CRD (reservations.fournos.dev/v1) is installed",
                "the Reservation CRD is not installed, so hearth-lock-manager decides no \
                 reservation (it warns and retries): Helm installs crds/ only on a first \
                 install. `kubectl apply --server-side -f charts/hearth/crds/` from this \
                 release's chart, or `kubectl apply -f manifests/reservation-crd.yaml`.",
            ),
        ),
    ];
    if let Some(served) = &observed.fournos_cluster_crd {
        checks.push(check("fournosclusters-crd-fields", crd_fields(served)));
    }
    if settings.sentinel == Sentinel::Fournosjob {
        let found = installed(
            crd("fournosjobs"),
            "the FournosJob CRD (fournosjobs.fournos.dev/v1) is installed",
            "the FournosJob CRD is not installed, and lock sentinels are FournosJobs \
             (config.sentinel=fournosjob): install Fournos, or set config.sentinel=workload \
             to lock with bare Kueue Workloads.",
        );
        checks.push(check("fournosjobs-crd", found));
    }
    for (name, seen) in &observed.namespaces {
        let role = if *name == settings.secrets_namespace {
            "the kubeconfig Secrets' namespace (config.secretsNamespace)"
        } else if *name == settings.execution_namespace {
            "the lock sentinels' namespace (config.executionNamespace)"
        } else {
            "the FournosClusters' namespace"
        };
        let found = presence(
            &format!("namespace {name}"),
            Some(seen),
            &format!(
                "; it is {role}: `kubectl create namespace {name}`, or install the chart with \
                 namespaces.create=true."
            ),
        );
        checks.push(check("namespace", found));
    }
    let queue = &settings.cluster_queue;
    let found = presence(
        &format!("ClusterQueue {queue}"),
        observed.cluster_queue.as_ref(),
        ": Hearth publishes the fleet's quota into it but does not create it. Create it \
         (docs/support.md shows one), or point config.clusterQueueName at yours.",
    );
    checks.push(check("clusterqueue", found));
    if settings.sentinel == Sentinel::Workload {
        let (lq, ns) = (&settings.local_queue, &settings.execution_namespace);
        let found = presence(
            &format!("LocalQueue {lq} in namespace {ns}"),
            observed.local_queue.as_ref(),
            &format!(
                "; workload sentinels (config.sentinel=workload) queue through it: create it, \
                 pointing at ClusterQueue {queue}."
            ),
        );
        checks.push(check("localqueue", found));
    }
    let egress = discovery_egress(settings, observed.discovery_policy.as_ref());
    checks.push(check("discovery-egress", egress));
    for (right, allowed) in &observed.rights {
        let found = right_check(&settings.install_namespace, right, allowed);
        checks.push(check("rbac", found));
    }
    checks
}

/// What the check of one right of a controller's ServiceAccount (in namespace `install`)
/// found.
fn right_check(install: &str, right: &Right, allowed: &Allowed) -> (Verdict, String) {
    let Right {
        controller,
        verb,
        resource,
        value,
        ..
    } = right;
    let object = match (&right.name, &right.namespace) {
        (Some(name), _) => format!("{resource} {name}"),
        (None, Some(ns)) => format!("{resource} in namespace {ns}"),
        (None, None) => (*resource).to_owned(),
    };
    match allowed {
        Allowed::Yes => (Verdict::Ok, format!("{controller} may {verb} {object}")),
        Allowed::No => {
            let fix = right.fix.clone().unwrap_or_else(|| {
                format!(
                    "the chart was installed with another {value}, or its RBAC is missing (a \
                     namespace made after the install gets its Role only with `helm upgrade`). \
                     Check with the values installed (`helm get values`), or upgrade the \
                     release with this one."
                )
            });
            (
                Verdict::Missing,
                format!(
                    "{controller} (ServiceAccount {install}/{controller}) may not {verb} \
                     {object}: {fix}"
                ),
            )
        }
        Allowed::NoServiceAccount => (
            Verdict::Warning,
            format!(
                "{controller} is not installed in namespace {install} (no ServiceAccount): its \
                 rights were not checked. Disabled, not installed yet, or installed elsewhere \
                 (--install-namespace)."
            ),
        ),
        Allowed::Unknown(why) => (
            Verdict::Unknown,
            format!("cannot tell whether {controller} may {verb} {object}: {why}"),
        ),
    }
}

/// Whether the served CRD declares every status field the controllers write; a field it
/// lacks is pruned from every write, silently.
fn crd_fields(served: &Result<CustomResourceDefinition, String>) -> (Verdict, String) {
    let crd = match served {
        Ok(crd) => crd,
        Err(why) => {
            return (
                Verdict::Unknown,
                format!(
                    "cannot tell whether the FournosCluster CRD declares the status fields the \
                     controllers write: {why}"
                ),
            );
        }
    };
    let stale: Vec<String> = StatusWriter::ALL
        .into_iter()
        .filter_map(|writer| {
            let missing = missing_status_fields(crd, writer);
            (!missing.is_empty())
                .then(|| format!("{} writes {}", writer.controller(), missing.join(", ")))
        })
        .collect();
    if stale.is_empty() {
        (
            Verdict::Ok,
            "the FournosCluster CRD declares every status field the controllers write".into(),
        )
    } else {
        (
            Verdict::Missing,
            format!(
                "the FournosCluster CRD is older than this Hearth and the apiserver drops status \
                 fields it does not declare ({}); hearth-lock-manager refuses to start on it. \
                 To fix: {}.",
                stale.join("; "),
                apply_crd_hint()
            ),
        )
    }
}

/// Whether hearth-discovery's egress is narrowed to the target clusters: with
/// `networkPolicy.targetCIDRs` empty it may connect anywhere, and it connects wherever a
/// labeled Secret's kubeconfig points. Said, not failed: the targets may really be anywhere.
fn discovery_egress(
    settings: &Settings,
    policy: Option<&Result<NetworkPolicy, String>>,
) -> (Verdict, String) {
    let (install, secrets) = (&settings.install_namespace, &settings.secrets_namespace);
    let risk = format!(
        "whoever may create a labeled kubeconfig Secret in namespace {secrets} gets an HTTPS \
         client and port scanner inside the cluster. List the target clusters' API server \
         networks in networkPolicy.targetCIDRs."
    );
    match policy {
        Some(Ok(policy)) if egress_is_open(policy) => (
            Verdict::Warning,
            format!(
                "networkPolicy.targetCIDRs is empty: NetworkPolicy {install}/hearth-discovery \
                 lets it connect to any address on any port, so {risk}"
            ),
        ),
        Some(Ok(_)) => (
            Verdict::Ok,
            "hearth-discovery may connect only to the networks networkPolicy.targetCIDRs lists \
             (and DNS, the API server)"
                .into(),
        ),
        None => (
            Verdict::Warning,
            format!(
                "no NetworkPolicy hearth-discovery in namespace {install} (networkPolicy.enabled \
                 is false, or discovery is not installed there): it may connect anywhere, so {risk}"
            ),
        ),
        Some(Err(why)) => (
            Verdict::Warning,
            format!("cannot tell where hearth-discovery may connect: {why}"),
        ),
    }
}

/// Whether an egress rule of `policy` allows every address and port (`{}`).
fn egress_is_open(policy: &NetworkPolicy) -> bool {
    let Some(spec) = &policy.spec else {
        return false;
    };
    spec.egress.iter().flatten().any(|rule| {
        rule.to.as_ref().is_none_or(Vec::is_empty) && rule.ports.as_ref().is_none_or(Vec::is_empty)
    })
}

/// One line a check, and a last line that sums up.
pub fn render(checks: &[Check]) -> String {
    let tag = |verdict| match verdict {
        Verdict::Ok => "ok",
        Verdict::Warning => "warning",
        Verdict::Missing => "MISSING",
        Verdict::Unknown => "UNKNOWN",
    };
    checks
        .iter()
        .map(|c| format!("{:<8}{}\n", tag(c.verdict), c.message))
        .collect()
}

/// How a run ends: nothing missing; something missing (exit 4); nothing missing but
/// something could not be read (exit 5).
pub fn outcome(checks: &[Check]) -> Result<(), Failure> {
    let count = |verdict| checks.iter().filter(|c| c.verdict == verdict).count();
    match (count(Verdict::Missing), count(Verdict::Unknown)) {
        (0, 0) => Ok(()),
        (0, u) => Err(Failure::Forbidden(format!(
            "{u} prerequisite(s) not checked: the UNKNOWN lines need a user who may read them \
             (e.g. a cluster admin)"
        ))),
        (m, 0) => Err(Failure::NotFound(format!(
            "{m} prerequisite(s) missing: fix the MISSING lines above"
        ))),
        (m, u) => Err(Failure::NotFound(format!(
            "{m} prerequisite(s) missing and {u} not checked: fix the MISSING lines; the \
             UNKNOWN ones need a user who may read them (e.g. a cluster admin)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::FournosCluster;
    use kube::CustomResourceExt as _;
    use serde_json::json;

    fn settings(sentinel: Sentinel) -> Settings {
        Settings {
            namespace: "hearth".into(),
            secrets_namespace: "psap-secrets".into(),
            execution_namespace: "psap-automation".into(),
            cluster_queue: "fournos-queue".into(),
            sentinel,
            local_queue: "fournos-queue".into(),
            install_namespace: "hearth".into(),
        }
    }

    fn good(settings: &Settings) -> Observed {
        Observed {
            kubernetes_version: Some("v1.36.3".into()),
            kueue_versions: vec!["v1beta2".into(), "v1beta1".into()],
            fournos_resources: vec![
                "fournosclusters".into(),
                "fournosjobs".into(),
                "reservations".into(),
            ],
            namespaces: namespaces(settings)
                .into_iter()
                .map(|n| (n, Seen::Present))
                .collect(),
            cluster_queue: Some(Seen::Present),
            local_queue: Some(Seen::Present),
            rights: rights(settings)
                .into_iter()
                .map(|r| (r, Allowed::Yes))
                .collect(),
            fournos_cluster_crd: Some(Ok(FournosCluster::crd())),
            discovery_policy: Some(Ok(policy(&[
                json!({ "ports": [{ "port": 53, "protocol": "UDP" }] }),
                json!({ "to": [{ "ipBlock": { "cidr": "10.20.0.0/16" } }] }),
            ]))),
        }
    }

    fn policy(egress: &[serde_json::Value]) -> NetworkPolicy {
        serde_json::from_value(json!({
            "metadata": { "name": "hearth-discovery", "namespace": "hearth" },
            "spec": { "podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": egress },
        }))
        .unwrap()
    }

    /// The generated CRD without `status.lockJobUID`: the CRD of a release before it.
    fn crd_without_lock_job_uid() -> CustomResourceDefinition {
        let mut crd = serde_json::to_value(FournosCluster::crd()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]
            .as_object_mut()
            .unwrap()
            .remove("lockJobUID")
            .unwrap();
        serde_json::from_value(crd).unwrap()
    }

    /// Asserts that the rendered report of `checks` holds every one of `needles`.
    #[track_caller]
    fn assert_says(checks: &[Check], needles: &[&str]) {
        let text = render(checks);
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} not in:\n{text}");
        }
    }

    #[test]
    fn a_crd_that_would_prune_a_written_field_is_missing_with_what_to_apply() {
        let s = settings(Sentinel::Fournosjob);
        let mut o = good(&s);
        o.fournos_cluster_crd = Some(Ok(crd_without_lock_job_uid()));
        let checks = diagnose(&s, &o);
        assert_says(
            &checks,
            &[
                "MISSING the FournosCluster CRD is older than this Hearth",
                "(hearth-lock-manager writes status.lockJobUID)",
                "hearth-lock-manager refuses to start on it",
                "`kubectl apply --server-side --force-conflicts -f charts/hearth/crds/`",
            ],
        );
        assert_eq!(outcome(&checks).unwrap_err().exit_code(), 4);
        o.fournos_cluster_crd = Some(Err("you may not get customresourcedefinitions".into()));
        assert_says(
            &diagnose(&s, &o),
            &["UNKNOWN cannot tell whether the FournosCluster CRD declares"],
        );
    }

    #[test]
    fn discovery_egress_anywhere_is_warned_not_failed() {
        let s = settings(Sentinel::Fournosjob);
        let mut o = good(&s);
        assert_says(
            &diagnose(&s, &o),
            &["ok      hearth-discovery may connect only"],
        );
        o.discovery_policy = Some(Ok(policy(&[
            json!({ "ports": [{ "port": 53, "protocol": "UDP" }] }),
            json!({}),
        ])));
        let checks = diagnose(&s, &o);
        assert_says(
            &checks,
            &[
                "warning networkPolicy.targetCIDRs is empty: NetworkPolicy hearth/hearth-discovery \
               lets it connect to any address on any port, so whoever may create a labeled \
               kubeconfig Secret in namespace psap-secrets gets an HTTPS client and port scanner",
            ],
        );
        assert!(outcome(&checks).is_ok());
        o.discovery_policy = None;
        assert_says(
            &diagnose(&s, &o),
            &["warning no NetworkPolicy hearth-discovery in namespace hearth"],
        );
    }

    #[test]
    fn a_good_install_passes_every_check() {
        for sentinel in [Sentinel::Fournosjob, Sentinel::Workload] {
            let s = settings(sentinel);
            let checks = diagnose(&s, &good(&s));
            assert!(
                checks.iter().all(|c| c.verdict == Verdict::Ok),
                "{checks:?}"
            );
            assert!(outcome(&checks).is_ok());
        }
    }

    #[test]
    fn each_missing_piece_is_named_with_what_to_do() {
        let s = settings(Sentinel::Fournosjob);
        let mut o = good(&s);
        o.kueue_versions = vec!["v1beta1".into()];
        o.fournos_resources = vec!["fournosclusters".into()];
        o.namespaces[1].1 = Seen::Missing;
        o.cluster_queue = Some(Seen::Missing);
        assert_says(
            &diagnose(&s, &o),
            &[
                "MISSING Kueue serves kueue.x-k8s.io v1beta1, not kueue.x-k8s.io/v1beta2",
                "MISSING the Reservation CRD is not installed",
                "kubectl apply -f manifests/reservation-crd.yaml",
                "MISSING the FournosJob CRD is not installed",
                "install Fournos, or set config.sentinel=workload",
                "MISSING namespace psap-secrets does not exist",
                "`kubectl create namespace psap-secrets`, or install the chart with namespaces.create=true",
                "MISSING ClusterQueue fournos-queue does not exist",
            ],
        );
        let failure = outcome(&diagnose(&s, &o)).unwrap_err();
        assert_eq!(failure.exit_code(), 4);
        assert!(
            failure.to_string().starts_with("5 prerequisite"),
            "{failure}"
        );
    }

    #[test]
    fn an_untested_kubernetes_is_said_not_failed() {
        let s = settings(Sentinel::Fournosjob);
        let mut o = good(&s);
        o.kubernetes_version = Some("v1.32.5+ocp".into());
        let checks = diagnose(&s, &o);
        assert_eq!(checks[0].verdict, Verdict::Warning);
        assert!(checks[0].message.contains("tested: 1.36.x"), "{checks:?}");
        assert!(outcome(&checks).is_ok());
    }

    #[test]
    fn what_cannot_be_read_is_not_passed() {
        let s = settings(Sentinel::Workload);
        let mut o = good(&s);
        o.kueue_versions.clear();
        o.cluster_queue = None;
        o.local_queue = None;
        o.namespaces[0].1 = Seen::Unknown("you may not get namespaces".into());
        let checks = diagnose(&s, &o);
        assert!(checks.iter().all(|c| c.check != "fournosjobs-crd"));
        assert_says(
            &checks,
            &[
                "MISSING Kueue is not installed",
                "UNKNOWN cannot tell whether namespace hearth",
            ],
        );
        let failure = outcome(&checks).unwrap_err();
        assert!(failure.to_string().contains("not checked"), "{failure}");
        assert_eq!(failure.exit_code(), 4);
        o.kueue_versions = vec!["v1beta2".into()];
        o.cluster_queue = Some(Seen::Present);
        o.local_queue = Some(Seen::Present);
        assert_eq!(outcome(&diagnose(&s, &o)).unwrap_err().exit_code(), 5);
    }

    #[test]
    fn rights_the_install_lacks_for_these_values_are_named() {
        let s = settings(Sentinel::Workload);
        let mut o = good(&s);
        assert!(
            o.rights
                .iter()
                .any(|(r, _)| r.resource == "workloads" && r.verb == "create")
        );
        o.rights[1].1 = Allowed::No;
        o.rights[0].1 = Allowed::NoServiceAccount;
        let checks = diagnose(&s, &o);
        assert_says(
            &checks,
            &[
                "MISSING hearth-kueue-sync (ServiceAccount hearth/hearth-kueue-sync) may not \
                 patch clusterqueues fournos-queue: the chart was installed with another \
                 config.clusterQueueName",
                "warning hearth-discovery is not installed in namespace hearth",
                "ok      hearth-lock-manager may create workloads in namespace psap-automation",
            ],
        );
        assert_eq!(outcome(&checks).unwrap_err().exit_code(), 4);
    }

    #[test]
    fn rights_read_at_start_say_exactly_what_to_apply() {
        let mut s = settings(Sentinel::Fournosjob);
        s.install_namespace = "hearth-system".into();
        let mut o = good(&s);
        let missing = |r: &Right| {
            (r.resource == "customresourcedefinitions" && r.verb == "get")
                || (r.resource == "workloads" && r.controller == KUEUE_SYNC)
        };
        let mut denied = 0;
        for (right, allowed) in &mut o.rights {
            if missing(right) {
                *allowed = Allowed::No;
                denied += 1;
            }
        }
        assert_eq!(denied, 3, "get the CRD; list and watch Workloads");
        let checks = diagnose(&s, &o);
        assert_says(
            &checks,
            &[
                "MISSING hearth-lock-manager (ServiceAccount hearth-system/hearth-lock-manager) may \
             not get customresourcedefinitions fournosclusters.fournos.dev: it checks at start",
                "The chart's ClusterRole hearth-lock-manager-hearth-system grants it",
                "`kubectl create clusterrole hearth-lock-manager-crd-hearth-system --verb=get \
             --resource=customresourcedefinitions.apiextensions.k8s.io \
             --resource-name=fournosclusters.fournos.dev` and `kubectl create \
             clusterrolebinding hearth-lock-manager-crd-hearth-system \
             --clusterrole=hearth-lock-manager-crd-hearth-system \
             --serviceaccount=hearth-system:hearth-lock-manager`",
                "MISSING hearth-kueue-sync (ServiceAccount hearth-system/hearth-kueue-sync) may not \
             list workloads in namespace psap-automation: it watches them",
                "MISSING hearth-kueue-sync (ServiceAccount hearth-system/hearth-kueue-sync) may not \
             watch workloads in namespace psap-automation",
                "The chart's Role hearth-kueue-sync-workloads-hearth-system in namespace \
             psap-automation grants it when installed with \
             config.executionNamespace=psap-automation",
                "`kubectl create role hearth-kueue-sync-workloads-hearth-system-read -n \
             psap-automation --verb=get,list,watch --resource=workloads.kueue.x-k8s.io` and \
             `kubectl create rolebinding hearth-kueue-sync-workloads-hearth-system-read -n \
             psap-automation --role=hearth-kueue-sync-workloads-hearth-system-read \
             --serviceaccount=hearth-system:hearth-kueue-sync`",
            ],
        );
        assert_eq!(outcome(&checks).unwrap_err().exit_code(), 4);
    }

    #[test]
    fn each_namespace_is_checked_once() {
        let mut s = settings(Sentinel::Fournosjob);
        s.execution_namespace = "psap-secrets".into();
        assert_eq!(namespaces(&s), ["hearth", "psap-secrets"]);
    }

    /// The version said as tested is the one the e2e plane runs.
    #[test]
    fn the_tested_kubernetes_is_the_pinned_one() {
        let pins = include_str!("../../../e2e/tools/kube/go.mod");
        let pinned = pins
            .lines()
            .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
            .expect("k8s.io/kubernetes in e2e/tools/kube/go.mod");
        assert_eq!(minor_version(pinned), Some(TESTED_KUBERNETES), "{pinned}");
        let kueue = pins
            .lines()
            .find_map(|l| l.trim().strip_prefix("sigs.k8s.io/kueue "))
            .expect("sigs.k8s.io/kueue in e2e/tools/kube/go.mod");
        let s = settings(Sentinel::Fournosjob);
        let mut o = good(&s);
        o.kueue_versions.clear();
        assert_says(&diagnose(&s, &o), &[&format!("tested: {kueue}")]);
    }
}
