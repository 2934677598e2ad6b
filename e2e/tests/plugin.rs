//! `kubectl fournos` end to end: the built `kubectl-fournos` binary, run as a person runs
//! it (own kubeconfig, own RBAC), against the local plane's real apiserver and Kueue, with
//! Hearth's three controllers working in the test's scope. Every verb, and every refusal:
//! someone else's lock, a missing cluster, RBAC.
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test plugin
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::FournosCluster;
use hearth_api::kueue::Workload;
use hearth_e2e::hearth::{
    self, Controller, PluginRun, doctor_in_scope, kubeconfig_with_rules, run_plugin,
};
use hearth_e2e::objects::is_true;
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::process::{stdout_of, until};
use hearth_e2e::resources::{apply, dynamic_api};
use hearth_e2e::tools::Tools;
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubectl_fournos::api::Session;
use kubectl_fournos::cli::{Global, Output};
use kubectl_fournos::lock::{Plan, plan_lock};
use serde_json::{Value, json};

/// Deadline of every wait for the controllers or Kueue.
const DEADLINE: Duration = Duration::from_secs(90);
const FAST: &[(&str, &str)] = &[
    ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "5"),
    ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
];

/// What one run of the plugin printed.
type Run = PluginRun;

trait Outcome: Sized {
    fn ok(self) -> Result<Run>;
    fn failed_with(self, code: i32, needles: &[&str]) -> Result<Run>;
    fn json(&self) -> Result<Value>;
}

impl Outcome for Run {
    fn ok(self) -> Result<Run> {
        ensure!(self.code == 0, "expected success, got {self:?}");
        Ok(self)
    }

    fn failed_with(self, code: i32, needles: &[&str]) -> Result<Run> {
        ensure!(self.code == code, "expected exit code {code}, got {self:?}");
        for needle in needles {
            ensure!(
                self.stderr.contains(needle),
                "stderr lacks {needle:?}: {self:?}"
            );
        }
        Ok(self)
    }

    fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("not JSON: {self:?}"))
    }
}

/// The plugin as one user, in one scope.
struct Plugin {
    kubeconfig: PathBuf,
    scope: Isolated,
}

impl Plugin {
    async fn run(&self, args: &[&str]) -> Result<Run> {
        Ok(run_plugin(&self.kubeconfig, &self.scope, args).await?)
    }

    /// `status <cluster> -o json` until `done` holds for its row.
    async fn wait_row(
        &self,
        cluster: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        until(&format!("{cluster}: {what}"), DEADLINE, || async {
            let run = self.run(&["status", cluster, "-o", "json"]).await?;
            if run.code == 4 {
                // hearth-discovery has not created it from its Secret yet.
                return Ok(Err(run.stderr));
            }
            let row = run.ok()?.json()?[0].clone();
            Ok(if done(&row) {
                Ok(row)
            } else {
                Err(row.to_string())
            })
        })
        .await
    }
}

/// A test's scope with one FournosCluster `<base>-<id>`, created as a person would (no
/// controllers run): its API and its name.
async fn scope_with_cluster(
    plane: &ControlPlane,
    test: &str,
    base: &str,
) -> Result<(Isolated, Api<FournosCluster>, String)> {
    let scope = plane.isolated(test).await?;
    let client = plane.management_client().await?;
    let clusters: Api<FournosCluster> = Api::namespaced(client, &scope.namespace);
    let cluster = scope.cluster(base);
    let mut fc = FournosCluster::new(&cluster, Default::default());
    fc.spec.kubeconfig_secret = format!("kubeconfig-{cluster}");
    clusters.create(&PostParams::default(), &fc).await?;
    Ok((scope, clusters, cluster))
}

async fn whoami(client: &kube::Client) -> Result<String> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .context("SelfSubjectReview gave no user name")
}

async fn owner_of(
    clusters: &Api<FournosCluster>,
    name: &str,
) -> Result<(Option<String>, Option<String>)> {
    let fc = clusters.get(name).await?;
    Ok((fc.spec.owner, fc.spec.ttl))
}

#[tokio::test]
async fn lock_wait_status_why_and_unlock_on_a_live_fleet() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("plugin_flow").await?;
    for controller in Controller::ALL {
        hearth::start(plane, &scope, controller, "0", FAST).await?;
    }
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    for (cluster, target) in [(&a, "target-a"), (&b, "target-b")] {
        let target = plane.target(target)?;
        plane
            .create_kubeconfig_secret(
                &scope.secrets_namespace,
                cluster,
                target.node_reader_kubeconfig(),
            )
            .await?;
    }
    let client = plane.management_client().await?;
    let clusters: Api<FournosCluster> = Api::namespaced(client.clone(), &scope.namespace);
    let me = whoami(&client).await?;
    let admin = Plugin {
        kubeconfig: plane.management_kubeconfig(),
        scope: scope.clone(),
    };

    // status: the onboarded fleet with its GPUs and published quota.
    for cluster in [&a, &b] {
        admin
            .wait_row(cluster, "Valid with quota", |r| {
                r["kubeconfig"] == "Valid"
                    && r["quota"]["reason"] == "Synced"
                    && r["quota"]["slots"] == 100
            })
            .await?;
    }
    let table = admin.run(&["status"]).await?.ok()?.stdout;
    let header = table.lines().next().unwrap_or_default();
    ensure!(
        header.starts_with("NAME") && header.ends_with("WAITING"),
        "{table}"
    );
    let row_a = table
        .lines()
        .find(|l| l.starts_with(&a))
        .context("a row for a")?;
    ensure!(
        row_a.contains("Valid") && row_a.contains("8 a100") && row_a.contains("100 slots"),
        "{table}"
    );

    // lock: the owner defaults to who the apiserver says we are.
    let locked = admin.run(&["lock", &a, "--ttl", "4h"]).await?.ok()?;
    ensure!(
        locked
            .stdout
            .contains(&format!("{a} locked for {me} (ttl 4h)")),
        "{locked:?}"
    );
    assert_eq!(
        owner_of(&clusters, &a).await?,
        (Some(me.clone()), Some("4h".into()))
    );

    // wait --locked returns once lock-manager holds it.
    let waited = admin
        .run(&["wait", &a, "--locked", "--timeout", "90s"])
        .await?
        .ok()?;
    ensure!(
        waited.stdout.contains(&format!("{a} is locked by {me}")),
        "{waited:?}"
    );
    let yaml = admin.run(&["status", &a, "-o", "yaml"]).await?.ok()?.stdout;
    let rows: Value = serde_saphyr::from_str(&yaml).with_context(|| yaml.clone())?;
    assert_eq!(rows[0]["lock"]["state"], "held", "{yaml}");
    assert_eq!(rows[0]["lock"]["ttl"], "4h", "{yaml}");
    ensure!(rows[0]["lock"]["expiresAt"].is_string(), "{yaml}");

    // Someone else's lock is not taken without --force.
    admin
        .run(&["lock", &a, "--owner", "bob"])
        .await?
        .failed_with(3, &[&format!("locked by {me}"), "--force"])?;
    assert_eq!(owner_of(&clusters, &a).await?.0, Some(me.clone()));
    let forced = admin
        .run(&["lock", &a, "--owner", "bob", "--force"])
        .await?
        .ok()?;
    ensure!(
        forced
            .stderr
            .contains(&format!("took the lock of {a} from {me}")),
        "{forced:?}"
    );
    assert_eq!(owner_of(&clusters, &a).await?, (Some("bob".into()), None));

    // unlock: not bob's lock as me; as bob it clears owner and ttl.
    admin
        .run(&["unlock", &a])
        .await?
        .failed_with(3, &[&format!("locked by bob, not by {me}")])?;
    admin.run(&["unlock", &a, "--owner", "bob"]).await?.ok()?;
    assert_eq!(owner_of(&clusters, &a).await?, (None, None));
    admin
        .run(&["wait", &a, "--released", "--timeout", "90s"])
        .await?
        .ok()?;
    let again = admin.run(&["unlock", &a]).await?.ok()?;
    ensure!(again.stdout.contains("is not locked"), "{again:?}");

    // A lock that waits: a running job holds one of b's slots.
    let job = scope.slot_workload("benchmark", &b, 1);
    apply(&client, &job).await?;
    let (jobs, _) = dynamic_api(&client, &job).await?;
    until("the benchmark admitted", DEADLINE, || async {
        let w = serde_json::to_value(jobs.get("benchmark").await?)?;
        Ok(if is_true(&w, "Admitted") {
            Ok(())
        } else {
            Err(w["status"].to_string())
        })
    })
    .await?;
    admin.run(&["lock", &b, "--owner", "carol"]).await?.ok()?;
    admin
        .wait_row(&b, "waiting for admission", |r| {
            r["lock"]["state"] == "waiting" && r["lock"]["waitingReason"] == "WaitingForAdmission"
        })
        .await?;
    // WaitingForAdmission is said as soon as the sentinel exists; Kueue's own answer (why
    // it does not admit it) lands on the sentinel's Workload when Kueue next schedules.
    // `why` quotes that answer, so wait for it to be there.
    let why = until("`why` quotes Kueue's answer", DEADLINE, || async {
        let why = admin.run(&["why", &b]).await?.ok()?.stdout;
        Ok(if why.contains("insufficient unused quota") {
            Ok(why)
        } else {
            Err(why)
        })
    })
    .await?;
    // Shown with --nocapture: what the README quotes.
    println!(
        "$ kubectl fournos status\n{}",
        admin.run(&["status"]).await?.stdout
    );
    println!("$ kubectl fournos why {b}\n{why}");
    for needle in [
        format!("{b}'s kubeconfig is Valid"),
        "Its quota is published".to_owned(),
        "carol's lock is not held yet (WaitingForAdmission)".to_owned(),
        "insufficient unused quota for fournos/cluster-slot".to_owned(),
        format!(
            "Admitted on {b} now: {}/benchmark.",
            scope.execution_namespace
        ),
    ] {
        ensure!(why.contains(&needle), "`why` lacks {needle:?}:\n{why}");
    }
    ensure!(why.trim().lines().count() == 1, "not one paragraph:\n{why}");
    let why_json = admin.run(&["why", &b, "-o", "json"]).await?.ok()?.json()?;
    assert_eq!(why_json["lock"]["owner"], "carol");
    ensure!(
        why_json["explanation"]
            .as_str()
            .is_some_and(|e| e.contains("carol")),
        "{why_json}"
    );
    admin
        .run(&["wait", &b, "--locked", "--timeout", "2s"])
        .await?
        .failed_with(
            6,
            &[
                "timed out after 2s",
                "carol's lock waits (WaitingForAdmission)",
            ],
        )?;

    // The job finishes: the wait ends with the lock held.
    let workloads: Api<Workload> = Api::namespaced(client.clone(), &scope.execution_namespace);
    workloads
        .delete("benchmark", &DeleteParams::default())
        .await?;
    admin
        .run(&["wait", &b, "--locked", "--timeout", "90s"])
        .await?
        .ok()?;

    // A cluster that does not exist, and the completions.
    admin
        .run(&["status", "no-such-cluster"])
        .await?
        .failed_with(4, &["no FournosCluster no-such-cluster in namespace"])?;
    admin
        .run(&["lock", "no-such-cluster"])
        .await?
        .failed_with(4, &["no FournosCluster"])?;
    // kubectl finds the plugin on $PATH and hands it its arguments.
    let plugin_dir = hearth_binary("kubectl-fournos")?
        .parent()
        .context("the plugin's directory")?
        .to_path_buf();
    let via_kubectl = tokio::process::Command::new(Tools::locate()?.kubectl)
        .args(["fournos", "status", &a, "-o", "json", "--kubeconfig"])
        .arg(plane.management_kubeconfig())
        .env("PATH", plugin_dir)
        .env("HEARTH_NAMESPACE", &scope.namespace)
        .output()
        .await?;
    ensure!(
        via_kubectl.status.success(),
        "kubectl fournos: {}",
        String::from_utf8_lossy(&via_kubectl.stderr)
    );
    let rows: Value = serde_json::from_slice(&via_kubectl.stdout)?;
    assert_eq!(rows[0]["name"], a.as_str());

    let completion = admin.run(&["completion", "bash"]).await?.ok()?.stdout;
    ensure!(
        completion.contains("kubectl-fournos") && completion.contains("unlock"),
        "{completion}"
    );
    // kubectl completes the cluster names, read with the namespace and kubeconfig typed.
    let shim_dir =
        std::env::temp_dir().join(format!("hearth-completion-flow-{}", std::process::id()));
    let path = completion_path(&shim_dir)?;
    install_shim(&shim_dir)?;
    let kubeconfig = plane.management_kubeconfig();
    let names = kubectl_with_path(
        &path,
        &[
            "__complete",
            "fournos",
            "lock",
            "-n",
            &scope.namespace,
            "--kubeconfig",
            kubeconfig.to_str().context("kubeconfig path")?,
            "",
        ],
    )?;
    std::fs::remove_dir_all(&shim_dir)?;
    for cluster in [&a, &b] {
        ensure!(
            names.lines().any(|l| l == cluster.as_str()),
            "{cluster} not completed:\n{names}"
        );
    }
    Ok(())
}

/// $PATH as a user has it for completion: the plugin's directory, `shim_dir` (made here,
/// for kubectl_complete-fournos) and /bin for the shim's sh.
fn completion_path(shim_dir: &Path) -> Result<std::ffi::OsString> {
    std::fs::create_dir_all(shim_dir)?;
    let plugin = hearth_binary(hearth::PLUGIN)?;
    let plugin_dir = plugin.parent().context("the plugin's directory")?;
    Ok(std::env::join_paths([
        plugin_dir,
        shim_dir,
        Path::new("/bin"),
        Path::new("/usr/bin"),
    ])?)
}

/// `kubectl-fournos completion install --dir <shim_dir>`; its stdout.
fn install_shim(shim_dir: &Path) -> Result<String> {
    let mut install = std::process::Command::new(hearth_binary(hearth::PLUGIN)?);
    install
        .args(["completion", "install", "--dir"])
        .arg(shim_dir);
    Ok(String::from_utf8(stdout_of(&mut install)?)?)
}

/// `kubectl <args>` with `path` as $PATH; stdout.
fn kubectl_with_path(path: &std::ffi::OsStr, args: &[&str]) -> Result<String> {
    let mut kubectl = std::process::Command::new(Tools::locate()?.kubectl);
    kubectl
        .args(args)
        .env("PATH", path)
        .env_remove("KUBECONFIG");
    Ok(String::from_utf8(stdout_of(&mut kubectl)?)?)
}

/// Issue 27: the real kubectl completes `kubectl fournos …` once `completion install` has
/// written kubectl_complete-fournos (and not before), and the plugin's usage lines say
/// `kubectl fournos`.
#[tokio::test]
async fn kubectl_completes_kubectl_fournos_after_completion_install() -> Result<()> {
    hearth::ensure_built().await?;
    let plugin = hearth_binary(hearth::PLUGIN)?;
    let shim_dir = std::env::temp_dir().join(format!("hearth-completion-{}", std::process::id()));
    let path = completion_path(&shim_dir)?;
    let complete = |words: &[&str]| {
        let mut args = vec!["__complete", "fournos"];
        args.extend(words);
        kubectl_with_path(&path, &args)
    };
    let before = complete(&[""])?;
    ensure!(
        !before.lines().any(|l| l.starts_with("lock")),
        "completed without the shim?\n{before}"
    );
    let installed = install_shim(&shim_dir)?;
    ensure!(
        installed.contains("kubectl_complete-fournos"),
        "{installed}"
    );
    let verbs = complete(&[""])?;
    for verb in [
        "lock\t", "unlock\t", "status\t", "why\t", "wait\t", "doctor\t",
    ] {
        ensure!(
            verbs.lines().any(|l| l.starts_with(verb)),
            "{verb:?} not completed:\n{verbs}"
        );
    }
    let ttl = complete(&["lock", "mycluster", "--t"])?;
    ensure!(ttl.lines().any(|l| l.starts_with("--ttl")), "{ttl}");
    let output = complete(&["status", "-o", "j"])?;
    ensure!(output.lines().next() == Some("json"), "{output}");
    // Installed twice, the shim is replaced, not refused.
    install_shim(&shim_dir)?;
    std::fs::remove_dir_all(&shim_dir)?;

    let run = |arg: &str| tokio::process::Command::new(&plugin).arg(arg).output();
    let usage = run("lock").await?;
    let stderr = String::from_utf8_lossy(&usage.stderr);
    ensure!(
        usage.status.code() == Some(2) && stderr.contains("Usage: kubectl fournos lock"),
        "{stderr}"
    );
    let help = run("--help").await?;
    let help = String::from_utf8_lossy(&help.stdout);
    ensure!(
        help.contains("Usage: kubectl fournos [OPTIONS] <COMMAND>"),
        "{help}"
    );
    Ok(())
}

/// Issue 27: one duration grammar wherever a duration is typed: `--ttl 1h30m` as
/// `--timeout 1h30m`. What `--ttl` writes is what the real apiserver's CRD pattern admits
/// (in one unit: 1h30m as 90m); what it refuses is refused before anything is sent. And
/// the field itself: the apiserver admits exactly what the controllers' parser reads.
#[tokio::test]
async fn ttl_and_timeout_take_the_same_durations_and_the_crd_agrees() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let (scope, clusters, cluster) = scope_with_cluster(plane, "plugin_durations", "d").await?;
    let admin = Plugin {
        kubeconfig: plane.management_kubeconfig(),
        scope: scope.clone(),
    };
    for (typed, stored) in [
        ("1h30m", Some("90m")),
        ("90m", Some("90m")),
        ("2d12h", Some("60h")),
        ("120s", Some("2m")),
        ("99999d", Some("99999d")),
        ("90s", None),
        ("0m", None),
        ("100000m", None),
        ("1 hour", None),
        ("4x", None),
    ] {
        let run = admin
            .run(&["lock", &cluster, "--owner", "dana", "--ttl", typed])
            .await?;
        match stored {
            Some(stored) => {
                run.ok()?;
                assert_eq!(
                    owner_of(&clusters, &cluster).await?,
                    (Some("dana".into()), Some(stored.into())),
                    "--ttl {typed}"
                );
            }
            None => {
                let run = run.failed_with(3, &["--ttl"])?;
                ensure!(!run.stderr.contains("apiserver"), "{typed}: sent: {run:?}");
            }
        }
    }
    // --timeout reads the same grammar: the lock is not held (no controllers), so the
    // wait times out after the 1s it was given, whichever way that is written.
    for typed in ["1s", "0m1s"] {
        admin
            .run(&["wait", &cluster, "--locked", "--timeout", typed])
            .await?
            .failed_with(6, &[&format!("timed out after {typed}")])?;
    }
    admin
        .run(&["wait", &cluster, "--locked", "--timeout", "1 hour"])
        .await?
        .failed_with(3, &["--timeout \"1 hour\""])?;

    // The field as stored: the apiserver's pattern and the parser the controllers read it
    // with give the same answer on every input.
    for ttl in [
        "1m", "90m", "99999d", "100000m", "0m", "05m", "1h30m", "30s", " 5m", "5m ", "5", "5M",
    ] {
        let accepted = clusters
            .patch(
                &cluster,
                &PatchParams {
                    dry_run: true,
                    ..Default::default()
                },
                &Patch::Merge(json!({"spec": {"ttl": ttl}})),
            )
            .await
            .is_ok();
        ensure!(
            accepted == hearth_api::duration::parse_duration(ttl).is_ok(),
            "spec.ttl {ttl:?}: the apiserver {} it, the parser does not agree",
            if accepted { "admits" } else { "refuses" }
        );
    }
    Ok(())
}

#[tokio::test]
async fn rbac_refusals_name_the_missing_right() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("plugin_rbac").await?;
    let client = plane.management_client().await?;
    let ns = &scope.namespace;
    let cluster = scope.cluster("x");
    let mut fc = FournosCluster::new(&cluster, Default::default());
    fc.spec.kubeconfig_secret = format!("kubeconfig-{cluster}");
    Api::<FournosCluster>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &fc)
        .await?;

    // A viewer may read FournosClusters (nothing else); a getter may only get them; a
    // stranger may do nothing.
    let clusters_may = |verbs: &[&str]| json!([{ "apiGroups": ["fournos.dev"], "resources": ["fournosclusters"], "verbs": verbs }]);
    let as_user = |kubeconfig: PathBuf| Plugin {
        kubeconfig,
        scope: scope.clone(),
    };
    let viewer = as_user(
        kubeconfig_with_rules(plane, ns, "viewer", clusters_may(&["get", "list", "watch"])).await?,
    );
    let stranger = as_user(kubeconfig_with_rules(plane, ns, "stranger", json!([])).await?);

    let status = viewer.run(&["status"]).await?.ok()?;
    ensure!(status.stdout.contains(&cluster), "{status:?}");
    let refused = viewer.run(&["lock", &cluster]).await?.failed_with(
        5,
        &[&format!(
            "you may not patch fournosclusters.fournos.dev in namespace {ns}"
        )],
    )?;
    ensure!(
        refused.stderr.contains(&format!(
            "kubectl auth can-i patch fournosclusters.fournos.dev -n {ns}"
        )),
        "{refused:?}"
    );
    let (owner, _) = owner_of(&Api::namespaced(client.clone(), ns), &cluster).await?;
    assert_eq!(owner, None);

    // `why` still answers with what it may read, and says what it could not.
    let why = viewer.run(&["why", &cluster]).await?.ok()?.stdout;
    ensure!(
        why.contains(&format!("Events in {ns}: forbidden by RBAC")),
        "{why}"
    );

    // `wait` watches: get alone is not enough, and the message says what is missing.
    let getter = as_user(kubeconfig_with_rules(plane, ns, "getter", clusters_may(&["get"])).await?);
    getter
        .run(&["wait", &cluster, "--released", "--timeout", "10s"])
        .await?
        .ok()?;
    getter
        .run(&["wait", &cluster, "--locked", "--timeout", "10s"])
        .await?
        .failed_with(6, &["nobody owns the cluster"])?;
    Api::<FournosCluster>::namespaced(client.clone(), ns)
        .patch(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": "dana" } })),
        )
        .await?;
    getter
        .run(&["wait", &cluster, "--locked", "--timeout", "10s"])
        .await?
        .failed_with(
            5,
            &[&format!(
                "you may not list fournosclusters.fournos.dev in namespace {ns}"
            )],
        )?;

    stranger.run(&["status"]).await?.failed_with(
        5,
        &[&format!(
            "you may not list fournosclusters.fournos.dev in namespace {ns}"
        )],
    )?;
    stranger
        .run(&["why", &cluster])
        .await?
        .failed_with(5, &["you may not get fournosclusters.fournos.dev"])?;
    Ok(())
}

/// Takes the rules on `resource` out of Role or ClusterRole `name`, as the RBAC of a
/// release older than them.
async fn drop_rules<K>(api: &Api<K>, name: &str, resource: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut role = serde_json::to_value(api.get(name).await?)?;
    let rules = role["rules"].as_array_mut().context("a role with rules")?;
    let before = rules.len();
    rules.retain(|r| {
        !r["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|x| x == resource))
    });
    ensure!(rules.len() < before, "no rule on {resource} in {name}");
    let patch = json!({ "rules": rules });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Runs the doctor until it prints every one of `lines` (RBAC reaches the apiserver's
/// authorizer through its informers): its exit code and what it printed.
async fn doctor_until(
    plane: &ControlPlane,
    scope: &Isolated,
    lines: &[String],
) -> Result<(i32, String)> {
    until("the doctor's lines", DEADLINE, || async {
        let (code, text) = doctor_in_scope(plane, scope).await?;
        let absent: Vec<&String> = lines.iter().filter(|l| !text.contains(*l)).collect();
        Ok(if absent.is_empty() {
            Ok((code, text))
        } else {
            Err(format!("{absent:?} not in:\n{text}"))
        })
    })
    .await
}

/// Issue 41: the doctor checks the rights lock-manager and kueue-sync use at start that a
/// release's RBAC may lack: lock-manager's `get` of the FournosCluster CRD (its schema
/// check) and kueue-sync's `list` and `watch` of the execution namespace's Workloads. With
/// the chart's RBAC they pass; with each rule taken out, the doctor names it with the
/// commands to apply; run as printed, the commands make it pass again.
#[tokio::test]
async fn doctor_names_each_start_up_right_missing_with_commands_that_grant_it() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("plugin_doctor").await?;
    let (ns, exec) = (&scope.namespace, &scope.execution_namespace);
    // The chart's ServiceAccounts and RBAC for this scope, as helm renders them.
    hearth::service_account_kubeconfig(plane, &scope, Controller::LockManager).await?;
    let rights = [
        (
            "hearth-lock-manager",
            "get customresourcedefinitions fournosclusters.fournos.dev".to_owned(),
        ),
        (
            "hearth-kueue-sync",
            format!("list workloads in namespace {exec}"),
        ),
        (
            "hearth-kueue-sync",
            format!("watch workloads in namespace {exec}"),
        ),
    ];
    let granted: Vec<String> = rights
        .iter()
        .map(|(sa, right)| format!("ok      {sa} may {right}"))
        .collect();
    doctor_until(plane, &scope, &granted).await?;

    let client = plane.management_client().await?;
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let crd_rule = "customresourcedefinitions";
    drop_rules(
        &cluster_roles,
        &format!("hearth-lock-manager-{ns}"),
        crd_rule,
    )
    .await?;
    let roles: Api<Role> = Api::namespaced(client.clone(), exec);
    drop_rules(
        &roles,
        &format!("hearth-kueue-sync-workloads-{ns}"),
        "workloads",
    )
    .await?;
    let missing: Vec<String> = rights
        .iter()
        .map(|(sa, right)| format!("MISSING {sa} (ServiceAccount {ns}/{sa}) may not {right}: "))
        .collect();
    let (code, text) = doctor_until(plane, &scope, &missing).await?;
    println!("$ kubectl fournos doctor (rules taken out)\n{text}");
    ensure!(code == 4, "doctor without the rules exited {code}:\n{text}");

    // The commands it prints, run as printed.
    let mut commands: Vec<&str> = Vec::new();
    for command in text
        .lines()
        .filter(|l| l.starts_with("MISSING"))
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .filter(|c| c.starts_with("kubectl create "))
    {
        if !commands.contains(&command) {
            commands.push(command);
        }
    }
    ensure!(
        commands.len() == 4,
        "a role and its binding per rule: {commands:?}"
    );
    let kubectl = Tools::locate()?.kubectl;
    for command in commands {
        let mut run = std::process::Command::new(&kubectl);
        run.args(command.split_whitespace().skip(1))
            .arg("--kubeconfig")
            .arg(plane.management_kubeconfig())
            .env_remove("KUBECONFIG");
        stdout_of(&mut run)?;
    }
    doctor_until(plane, &scope, &granted).await?;
    Ok(())
}

/// The instant between the plugin's read and its write: someone else locks the cluster
/// then. The plugin's patch carries the resourceVersion it read, so the apiserver refuses
/// it (409) instead of overwriting the other lock, and the plugin reads again and refuses.
#[tokio::test]
async fn a_lock_taken_between_read_and_write_is_not_overwritten() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let (scope, clusters, cluster) = scope_with_cluster(plane, "plugin_race", "r").await?;

    let session = Session::connect(&Global {
        namespace: scope.namespace.clone(),
        execution_namespace: scope.execution_namespace.clone(),
        kubeconfig: Some(plane.management_kubeconfig()),
        context: None,
        output: Output::Table,
    })
    .await?;
    let read = session.get(&cluster).await?;
    clusters
        .patch(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": "bob" } })),
        )
        .await?;
    let Plan::Patch { patch, .. } = plan_lock(&read, "alice", Some("4h"), false) else {
        anyhow::bail!("a free cluster must be lockable");
    };
    ensure!(
        session.patch(&cluster, &patch).await?.is_none(),
        "the stale patch was applied"
    );
    assert_eq!(
        owner_of(&clusters, &cluster).await?,
        (Some("bob".into()), None)
    );

    // What the plugin does next: read again, and refuse.
    let again = session.get(&cluster).await?;
    ensure!(
        matches!(
            plan_lock(&again, "alice", Some("4h"), false),
            Plan::Refused(_)
        ),
        "bob's lock would be taken"
    );
    Ok(())
}

/// Whatever someone writes into an Event or a condition, `why` and `status` print no
/// character that drives a terminal or reorders what is shown: no control character
/// other than the newline (no ESC, BEL, DEL, C1), no bidirectional or zero-width
/// character. `-o json` still gives the text back exactly.
#[tokio::test]
async fn why_prints_no_terminal_controls_from_the_cluster() -> Result<()> {
    const HOSTILE: &str = "probe failed\u{1b}[31m RED\u{1b}]0;pwned\u{7}\u{7f}\u{9b}2J\r\u{8}\u{202e}desrever\u{202c}\u{2066}\u{200b}\u{feff} end";
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("plugin_hostile").await?;
    let client = plane.management_client().await?;
    let ns = &scope.namespace;
    let clusters: Api<FournosCluster> = Api::namespaced(client.clone(), ns);
    let cluster = scope.cluster("h");
    let mut fc = FournosCluster::new(&cluster, Default::default());
    fc.spec.kubeconfig_secret = format!("kubeconfig-{cluster}");
    clusters.create(&PostParams::default(), &fc).await?;
    clusters
        .patch_status(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": {
                "kubeconfigStatus": "Unreachable",
                "gpuSummary": HOSTILE,
                "hardware": { "totalGPUs": 8, "gpus": [{
                    "vendor": "NVIDIA", "model": "A100", "shortName": HOSTILE, "count": 8, "nodeCount": 1,
                }] },
                "conditions": [{
                    "type": "KubeconfigValid", "status": "False", "reason": "Unreachable",
                    "message": HOSTILE, "lastTransitionTime": "2026-11-23T10:00:00Z",
                }],
            } })),
        )
        .await?;
    // Created, not applied: server-side apply decodes as YAML, which refuses control
    // characters; JSON carries them, as an Event writer's does.
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": { "name": format!("{cluster}.hostile"), "namespace": ns },
        "involvedObject": { "apiVersion": "fournos.dev/v1", "kind": "FournosCluster", "name": cluster, "namespace": ns },
        "type": "Warning", "reason": "ProbeFailed", "message": HOSTILE,
        "lastTimestamp": "2026-11-23T10:00:00Z",
    }))?;
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &event)
        .await?;
    let admin = Plugin {
        kubeconfig: plane.management_kubeconfig(),
        scope: scope.clone(),
    };

    let shown = |out: &str| -> Result<()> {
        let hidden: Vec<char> = out
            .chars()
            .filter(|&c| {
                (c != '\n' && c.is_control())
                    || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                        | '\u{2060}'..='\u{206f}' | '\u{feff}')
            })
            .collect();
        ensure!(hidden.is_empty(), "printed {hidden:?}:\n{out:?}");
        Ok(())
    };
    let why = admin.run(&["why", &cluster]).await?.ok()?.stdout;
    shown(&why)?;
    for said in [
        "Latest warning Event",
        "ProbeFailed",
        "pwned",
        "desrever",
        "end",
    ] {
        ensure!(why.contains(said), "`why` lacks {said:?}:\n{why}");
    }
    ensure!(why.trim().lines().count() == 1, "not one paragraph:\n{why}");
    let table = admin.run(&["status", &cluster]).await?.ok()?.stdout;
    shown(&table)?;
    ensure!(table.contains("8 probe failed"), "{table}");

    // json and yaml give the cluster's text back exactly, its hidden characters escaped.
    for output in ["json", "yaml"] {
        let run = admin.run(&["status", &cluster, "-o", output]).await?.ok()?;
        shown(&run.stdout)?;
        let rows: Value = if output == "json" {
            run.json()?
        } else {
            serde_saphyr::from_str(&run.stdout).with_context(|| format!("not YAML: {run:?}"))?
        };
        ensure!(rows[0]["gpus"][HOSTILE] == 8, "{output}: {rows}");
    }
    Ok(())
}
