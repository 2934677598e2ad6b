//! End-to-end tests of hearth-discovery on the local control plane: real kube-apiservers
//! as management cluster and as targets (with the emulated GPU fleet), no mocks.
//!
//! Each test isolates itself (own namespaces, cluster names unique to the test, its own
//! targets when it changes one; see the `hearth_e2e` crate docs) and runs its own
//! hearth-discovery process, built from this workspace, with short intervals. Every wait
//! polls against a deadline or watches; nothing sleeps to synchronise.
//!
//! Run: `cargo test -p hearth-e2e --test discovery` (the e2e kit builds the controllers
//! first; attaches to `HEARTH_E2E_PLANE_DIR` if set).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt as _;
use hearth_api::names::{
    ALLOWED_CLUSTERS_ANNOTATION, AUTO_DISCOVERED_LABEL, KUBECONFIG_SECRET_LABEL, MANAGED_BY_LABEL,
    OWNER_ANNOTATION,
    condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID},
    controllers,
};
use hearth_api::{FournosCluster, FournosClusterSpec, KubeconfigStatus};
use hearth_e2e::fleet::{GpuVendor, NodeSpec, fleet_for};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::{cluster_condition as condition, last_discovery};
use hearth_e2e::kubeconfig::{Credentials, kubeconfig_yaml};
use hearth_e2e::otlp::Receiver;
use hearth_e2e::world::World;
use hearth_e2e::{BlackHole, ControlPlane, Target, TargetFleet};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};

/// How long any one expected change may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// The field manager the tests write Secrets with, as an administrator would.
const ADMIN: &str = "e2e-admin";
/// Settings of most tests: probe every 3s, give up on a target after 3s, turn a Valid
/// cluster Unreachable on the second failure in a row.
const FAST: &[(&str, &str)] = &[
    ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3"),
    ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
    ("HEARTH_FAILURE_THRESHOLD", "2"),
];

// ---------------------------------------------------------------------------------------
// The controller under test, and the test's view of the management cluster.
// ---------------------------------------------------------------------------------------

/// One test's world: its scope on the shared plane, its discovery process, and clients.
struct Fixture {
    world: World<'static>,
    discovery: Running,
}

impl std::ops::Deref for Fixture {
    type Target = World<'static>;

    fn deref(&self) -> &World<'static> {
        &self.world
    }
}

impl Fixture {
    /// Creates the test's scope and starts discovery in it with `env` on top of the
    /// harness defaults.
    async fn start(test: &str, env: &[(&str, &str)]) -> Result<Fixture> {
        let plane = ControlPlane::shared().await?;
        let iso = plane.isolated(test).await?;
        let discovery = hearth::start(plane, &iso, Controller::Discovery, "0", env).await?;
        Ok(Fixture {
            world: World::new(plane, iso).await?,
            discovery,
        })
    }

    /// Creates or replaces Secret `name` with `kubeconfig`, labeled as a kubeconfig Secret
    /// when `labeled`, with `annotations`.
    async fn put_secret(
        &self,
        name: &str,
        kubeconfig: &str,
        labeled: bool,
        annotations: &[(&str, &str)],
    ) -> Result<()> {
        let labels: BTreeMap<&str, &str> = if labeled {
            BTreeMap::from([(KUBECONFIG_SECRET_LABEL, "true")])
        } else {
            BTreeMap::new()
        };
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": self.scope.secrets_namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "data": { "kubeconfig": B64.encode(kubeconfig) },
        });
        self.secrets
            .patch(
                name,
                &PatchParams::apply(ADMIN).force(),
                &Patch::Apply(secret),
            )
            .await
            .with_context(|| format!("applying Secret {name}"))?;
        Ok(())
    }

    async fn delete_secret(&self, name: &str) -> Result<()> {
        self.secrets
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Secret {name}"))?;
        Ok(())
    }

    /// Polls until `check` accepts FournosCluster `name`; on timeout, says what it last
    /// saw and what discovery logged.
    async fn wait_cluster(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&FournosCluster) -> std::result::Result<(), String>,
    ) -> Result<FournosCluster> {
        self.eventually(&format!("{name}: {what}"), DEADLINE, || async {
            Ok(match self.clusters.get_opt(name).await? {
                None => Err("does not exist".to_owned()),
                Some(cluster) => check(&cluster).map(|()| cluster),
            })
        })
        .await
    }

    async fn wait_status(&self, name: &str, status: KubeconfigStatus) -> Result<FournosCluster> {
        self.wait_cluster(name, &format!("kubeconfigStatus {status}"), |c| {
            let seen = kubeconfig_status(c);
            if seen == Some(status) {
                Ok(())
            } else {
                Err(format!("kubeconfigStatus {seen:?}, {}", conditions_text(c)))
            }
        })
        .await
    }

    async fn wait_gone(&self, name: &str) -> Result<()> {
        self.eventually(&format!("{name} deleted"), DEADLINE, || async {
            Ok(match self.clusters.get_opt(name).await? {
                None => Ok(()),
                Some(c) => Err(format!("still there (labels {:?})", c.metadata.labels)),
            })
        })
        .await
    }

    /// Waits for an Event with `reason` about the object `name` in `namespace`.
    async fn wait_event(&self, namespace: &str, name: &str, reason: &str) -> Result<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        self.eventually(&format!("Event {reason} on {name}"), DEADLINE, || async {
            let list = events.list(&ListParams::default()).await?;
            let about: Vec<String> = list
                .items
                .iter()
                .filter(|e| regarding(e) == Some(name))
                .map(|e| e.reason.clone().unwrap_or_default())
                .collect();
            Ok(list
                .items
                .into_iter()
                .find(|e| regarding(e) == Some(name) && e.reason.as_deref() == Some(reason))
                .ok_or_else(|| format!("Events about {name}: {about:?}")))
        })
        .await
    }

    async fn events_about(&self, namespace: &str, name: &str) -> Result<Vec<Event>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| regarding(e) == Some(name))
            .collect())
    }

    /// [`Running::until`] on discovery: its log's tail is in the time-out error.
    async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<std::result::Result<T, String>>>,
    {
        self.discovery.until(what, timeout, probe).await
    }

    async fn metrics(&self) -> Result<String> {
        Ok(self.discovery.metrics().await?)
    }
}

fn regarding(event: &Event) -> Option<&str> {
    event.regarding.as_ref().and_then(|r| r.name.as_deref())
}

fn kubeconfig_status(cluster: &FournosCluster) -> Option<KubeconfigStatus> {
    cluster.status.as_ref().and_then(|s| s.kubeconfig_status)
}

fn conditions_text(cluster: &FournosCluster) -> String {
    cluster
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|| "no status".into())
}

fn failures(cluster: &FournosCluster) -> i32 {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .map_or(0, |h| h.consecutive_failures)
}

fn total_gpus(cluster: &FournosCluster) -> i64 {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .map_or(0, |h| h.total_gpus)
}

fn secret_name(cluster: &str) -> String {
    format!("kubeconfig-{cluster}")
}

/// `(vendor, model) → count` as status.hardware reports it.
fn reported_gpus(cluster: &FournosCluster) -> BTreeMap<(String, String), i64> {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .map(|h| {
            h.gpus
                .iter()
                .map(|g| ((g.vendor.clone(), g.model.clone()), g.count))
                .collect()
        })
        .unwrap_or_default()
}

/// `(vendor, model) → count` the fleet table says a target's schedulable, Ready nodes hold.
fn expected_gpus(fleet: &TargetFleet) -> BTreeMap<(String, String), i64> {
    fleet
        .schedulable_gpus()
        .into_iter()
        .map(|((vendor, model), count)| {
            let vendor = match vendor {
                GpuVendor::Nvidia => "NVIDIA",
                GpuVendor::Amd => "AMD",
            };
            ((vendor.to_owned(), model), i64::from(count))
        })
        .collect()
}

/// GPU nodes the fleet table says are cordoned or not Ready.
fn expected_excluded(fleet: &TargetFleet) -> i32 {
    let n = fleet
        .nodes
        .iter()
        .filter(|n| n.gpus.is_some() && !n.counts_toward_quota())
        .count();
    i32::try_from(n).expect("a small fleet")
}

/// A kubeconfig for `target` whose user is `credentials`.
fn kubeconfig_for(target: &Target, credentials: Credentials) -> String {
    kubeconfig_yaml(
        target.name(),
        target.server(),
        target.ca_pem(),
        "hearth",
        &credentials,
    )
}

/// `(kubeconfigStatus, hardware.consecutiveFailures)` of one version of a cluster.
type Seen = (Option<KubeconfigStatus>, i32);

/// Every version of one FournosCluster's status the watch delivered.
struct History {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl History {
    fn record(api: &Api<FournosCluster>, name: &str) -> History {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .applied_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Ok(cluster) = item {
                    let entry = (kubeconfig_status(&cluster), failures(&cluster));
                    let mut seen = record.lock().expect("history");
                    if seen.last() != Some(&entry) {
                        seen.push(entry);
                    }
                }
            }
        });
        History { seen, task }
    }

    fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().expect("history").clone()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Onboarding and discovery.
// ---------------------------------------------------------------------------------------

/// Every target of the plane onboarded from its Secret: a FournosCluster per Secret with
/// the contract's labels and spec, `Valid`, and exactly the GPUs the fleet table says;
/// an `Onboarded` Event; metrics per cluster and model; and later probes with the same
/// result move timestamps only (no condition transition, no new Event). A person's spec
/// change is never reverted.
#[tokio::test]
async fn onboards_the_whole_fleet_with_correct_gpu_counts() -> Result<()> {
    let f = Fixture::start("onboard_fleet", FAST).await?;
    // The plane's own fleet (`target-a`, `target-b`, …), not targets other tests added.
    let targets: Vec<Target> = (0..)
        .map(fleet_for)
        .map_while(|fleet| f.plane.target(&fleet.name).ok())
        .collect();
    ensure!(
        targets.len() >= 2,
        "the plane has {} targets",
        targets.len()
    );
    let mut names = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let cluster = f.scope.cluster(target.name());
        let owner = format!("owner-{i}");
        let annotations: Vec<(&str, &str)> = if i == 0 {
            vec![(OWNER_ANNOTATION, owner.as_str())]
        } else {
            vec![]
        };
        f.put_secret(
            &secret_name(&cluster),
            target.node_reader_kubeconfig(),
            true,
            &annotations,
        )
        .await?;
        names.push((cluster, target.clone()));
    }

    for (i, (cluster, target)) in names.iter().enumerate() {
        let expected = expected_gpus(target.fleet());
        let excluded = expected_excluded(target.fleet());
        let found = f
            .wait_cluster(cluster, "Valid with the fleet's GPUs", |c| {
                let gpus = reported_gpus(c);
                if kubeconfig_status(c) == Some(KubeconfigStatus::Valid)
                    && gpus == expected
                    && c.status
                        .as_ref()
                        .and_then(|s| s.hardware.as_ref())
                        .map(|h| h.excluded_nodes)
                        == Some(excluded)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{:?} {gpus:?}; {}",
                        kubeconfig_status(c),
                        conditions_text(c)
                    ))
                }
            })
            .await?;
        let labels = found.metadata.labels.clone().unwrap_or_default();
        ensure!(
            labels.get(AUTO_DISCOVERED_LABEL).map(String::as_str) == Some("true"),
            "{labels:?}"
        );
        ensure!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some("hearth"),
            "{labels:?}"
        );
        ensure!(found.spec.kubeconfig_secret == secret_name(cluster));
        let owner = (i == 0).then(|| "owner-0".to_owned());
        ensure!(found.spec.owner == owner, "owner {:?}", found.spec.owner);
        let status = found.status.clone().context("status")?;
        let total: i64 = expected.values().sum();
        ensure!(status.hardware.as_ref().map(|h| h.total_gpus) == Some(total));
        ensure!(status.gpu_summary.is_some(), "gpuSummary");
        ensure!(status.next_probe_at.is_some(), "nextProbeAt");
        let gpus = condition(&found, GPU_DISCOVERED).context("GPUDiscovered")?;
        ensure!(
            gpus.status == "True" && gpus.reason == "Discovered",
            "{gpus:?}"
        );
        let valid = condition(&found, KUBECONFIG_VALID).context("KubeconfigValid")?;
        ensure!(valid.status == "True", "{valid:?}");
        // Driver versions per model, as the fleet's labellers write them (one label, or
        // NVIDIA's major/minor/revision), and the target's Kubernetes version.
        let hardware = status.hardware.as_ref().context("hardware")?;
        for g in &hardware.gpus {
            let fleet_driver = target
                .fleet()
                .nodes
                .iter()
                .filter_map(|n| n.gpus.as_ref())
                .find(|n| n.model == g.model)
                .map(|n| n.driver_version().to_owned());
            ensure!(
                g.driver_versions == fleet_driver.into_iter().collect::<Vec<_>>(),
                "{}: driver versions {:?}",
                g.model,
                g.driver_versions
            );
        }
        let version = hardware.kubernetes_version.as_deref().unwrap_or_default();
        ensure!(
            version.starts_with("v1.") && hearth_api::cluster::is_version_text(version),
            "kubernetesVersion {version:?}"
        );
        // Short names are valid Kueue resource names.
        for g in &hardware.gpus {
            ensure!(
                !g.short_name.is_empty()
                    && g.short_name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "short name {:?}",
                g.short_name
            );
        }
        f.wait_event(&f.scope.namespace, cluster, "Onboarded")
            .await?;
    }

    // Later probes with the same result: timestamps move, nothing else does.
    let (first, _) = &names[0];
    let before = f.clusters.get(first).await?;
    let since = last_discovery(&before);
    let after = f
        .wait_cluster(first, "probed again", |c| {
            if last_discovery(c) > since {
                Ok(())
            } else {
                Err("not probed again yet".into())
            }
        })
        .await?;
    ensure!(
        condition(&after, KUBECONFIG_VALID).map(|c| &c.last_transition_time)
            == condition(&before, KUBECONFIG_VALID).map(|c| &c.last_transition_time),
        "a probe with the same result moved a transition time"
    );
    let valid_events = f
        .events_about(&f.scope.namespace, first)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("KubeconfigValid"))
        .count();
    ensure!(valid_events == 1, "{valid_events} KubeconfigValid Events");

    // A person's spec is theirs: discovery never writes it back.
    f.clusters
        .patch(
            first,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": "someone-else" } })),
        )
        .await?;
    f.wait_cluster(first, "probed after the spec change", |c| {
        if last_discovery(c) > last_discovery(&after) {
            Ok(())
        } else {
            Err("not probed again yet".into())
        }
    })
    .await?;
    let kept = f.clusters.get(first).await?;
    ensure!(
        kept.spec.owner.as_deref() == Some("someone-else"),
        "spec overwritten: {:?}",
        kept.spec
    );

    let metrics = f.metrics().await?;
    for needle in [
        r#"hearth_discovery_probes_total{result="Discovered"}"#.to_owned(),
        r#"hearth_discovery_probe_duration_seconds_count{result="Discovered"}"#.to_owned(),
        r#"hearth_discovery_clusters{kubeconfig_status="Valid"}"#.to_owned(),
        format!(r#"hearth_discovery_gpus{{cluster="{}""#, names[1].0),
    ] {
        ensure!(
            metrics.contains(&needle),
            "/metrics lacks {needle}:\n{metrics}"
        );
    }
    let valid_line = metrics
        .lines()
        .find(|l| l.starts_with(r#"hearth_discovery_clusters{kubeconfig_status="Valid"}"#))
        .context("clusters gauge")?;
    ensure!(
        valid_line.ends_with(&format!(" {}", names.len())),
        "{valid_line}"
    );
    Ok(())
}

/// Rotation takes effect at once: with an hour-long interval, only the Secret change can
/// cause the probes seen here. Valid → Invalid (the refused field named) → Valid → a
/// kubeconfig whose server is down (Unreachable at once: a new kubeconfig gets no grace)
/// → Valid.
#[tokio::test]
async fn a_rotated_secret_is_probed_at_once() -> Result<()> {
    let f = Fixture::start(
        "rotation",
        &[
            ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3600"),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
            ("HEARTH_FAILURE_THRESHOLD", "3"),
        ],
    )
    .await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("rotate");
    let secret = secret_name(&cluster);
    let good = target.node_reader_kubeconfig().to_owned();
    f.put_secret(&secret, &good, true, &[]).await?;
    f.wait_status(&cluster, KubeconfigStatus::Valid).await?;

    // An exec plugin is refused, and the condition names the field.
    let mut hostile: Value = serde_saphyr::from_str(&good)?;
    hostile["users"][0]["user"] = json!({
        "exec": { "apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh", "args": ["-c", "touch /tmp/hearth-pwned"] },
    });
    let started = Instant::now();
    f.put_secret(&secret, &hostile.to_string(), true, &[])
        .await?;
    let invalid = f.wait_status(&cluster, KubeconfigStatus::Invalid).await?;
    let message = condition(&invalid, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message
        .clone();
    ensure!(message.contains(".exec` is refused"), "{message}");
    ensure!(
        started.elapsed() < Duration::from_secs(30),
        "rotation took {:?}",
        started.elapsed()
    );
    f.wait_event(&f.scope.namespace, &cluster, "KubeconfigInvalid")
        .await?;

    f.put_secret(&secret, &good, true, &[]).await?;
    f.wait_status(&cluster, KubeconfigStatus::Valid).await?;

    // A server that is not there: a new kubeconfig has no Valid past, so no grace.
    let port = hearth_e2e::process::free_port()?;
    let down = good.replace(target.server(), &format!("https://127.0.0.1:{port}"));
    ensure!(down != good, "the kubeconfig names {}", target.server());
    f.put_secret(&secret, &down, true, &[]).await?;
    let unreachable = f
        .wait_status(&cluster, KubeconfigStatus::Unreachable)
        .await?;
    ensure!(
        failures(&unreachable) == 1,
        "failures {}",
        failures(&unreachable)
    );
    let message = &condition(&unreachable, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message;
    ensure!(message.contains("connection refused"), "{message}");

    f.put_secret(&secret, &good, true, &[]).await?;
    let back = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    ensure!(failures(&back) == 0);
    ensure!(
        !Path::new("/tmp/hearth-pwned").exists(),
        "the exec plugin ran"
    );
    Ok(())
}

/// Nothing is kept in memory that a restart could lose: a restarted controller resumes
/// the schedule in status instead of probing every target at once, and a Secret rotated
/// while it was down is probed as soon as it is back.
#[tokio::test]
async fn a_restarted_controller_resumes_the_schedule_and_catches_up() -> Result<()> {
    const ENV: &[(&str, &str)] = &[
        ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3600"),
        ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
    ];
    let mut f = Fixture::start("restart", ENV).await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("steady");
    let secret = secret_name(&cluster);
    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let before = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;

    f.discovery.stop(f.plane).await?;
    f.discovery = hearth::start(f.plane, &f.scope, Controller::Discovery, "1", ENV).await?;
    // Its first reconcile of the cluster decides (debug log): not due, or probed.
    let span = format!("cluster={cluster}}}");
    let decision = f
        .eventually(
            "the restarted controller's first look at the cluster",
            DEADLINE,
            || async {
                let log = f.discovery.log();
                let line = log.lines().find(|l| {
                    l.contains(&span) && (l.contains("not due yet") || l.contains("probed"))
                });
                Ok(line
                    .map(str::to_owned)
                    .ok_or_else(|| "no decision logged yet".to_owned()))
            },
        )
        .await?;
    ensure!(
        decision.contains("not due yet"),
        "the restart probed a cluster that was not due: {decision}"
    );
    let after = f.clusters.get(&cluster).await?;
    let status = |c: &FournosCluster| {
        c.status.as_ref().map(|s| {
            (
                s.next_probe_at.clone(),
                s.hardware.as_ref().and_then(|h| h.last_discovery.clone()),
            )
        })
    };
    ensure!(
        status(&after) == status(&before),
        "the restart probed a cluster that was not due: {:?} → {:?}",
        status(&before),
        status(&after)
    );

    // Rotated while nobody watched.
    f.discovery.stop(f.plane).await?;
    let mut hostile: Value = serde_saphyr::from_str(target.node_reader_kubeconfig())?;
    hostile["users"][0]["user"]["tokenFile"] =
        json!("/var/run/secrets/kubernetes.io/serviceaccount/token");
    f.put_secret(&secret, &hostile.to_string(), true, &[])
        .await?;
    f.discovery = hearth::start(f.plane, &f.scope, Controller::Discovery, "2", ENV).await?;
    let invalid = f.wait_status(&cluster, KubeconfigStatus::Invalid).await?;
    let message = &condition(&invalid, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message;
    ensure!(message.contains(".tokenFile` is refused"), "{message}");
    Ok(())
}

/// A token revoked on the target: `Unauthorized` on the next probe (a definite answer,
/// no threshold), with the JWT's expiry in status; a fresh token makes it `Valid` again.
#[tokio::test]
async fn a_revoked_token_is_unauthorized() -> Result<()> {
    let f = Fixture::start(
        "revoked_token",
        &[
            ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "2"),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
            ("HEARTH_FAILURE_THRESHOLD", "3"),
            // The harness's tokens live a year: inside this window, so the expiry warns.
            ("HEARTH_CREDENTIALS_EXPIRY_WARNING", "400d"),
        ],
    )
    .await?;
    let target = f.plane.target("target-a")?;
    let sa = format!("revoke-{}", f.scope.id);
    let cluster = f.scope.cluster("revoke");
    let secret = secret_name(&cluster);
    f.put_secret(&secret, &target.issue_node_reader(&sa).await?, true, &[])
        .await?;
    let valid = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    let status = valid.status.clone().context("status")?;
    ensure!(
        status.credentials_expire_at.is_some(),
        "credentialsExpireAt from the JWT's exp"
    );
    let kc = condition(&valid, KUBECONFIG_VALID).context("KubeconfigValid")?;
    ensure!(
        kc.status == "True" && kc.reason == "CredentialsExpiringSoon",
        "{kc:?}"
    );
    f.wait_event(&f.scope.namespace, &cluster, "CredentialsExpiringSoon")
        .await?;

    target.revoke_node_reader(&sa).await?;
    let rejected = f
        .wait_status(&cluster, KubeconfigStatus::Unauthorized)
        .await?;
    ensure!(
        failures(&rejected) == 1,
        "a 401 is definite: failures {}",
        failures(&rejected)
    );
    let kc = condition(&rejected, KUBECONFIG_VALID).context("KubeconfigValid")?;
    ensure!(kc.message.contains("HTTP 401"), "{}", kc.message);
    f.wait_event(&f.scope.namespace, &cluster, "KubeconfigUnauthorized")
        .await?;

    f.put_secret(&secret, &target.issue_node_reader(&sa).await?, true, &[])
        .await?;
    f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    Ok(())
}

/// Credentials the target accepts but that may not list nodes: `Valid`, and
/// `GPUDiscovered=False` reason `Forbidden` with the target's explanation.
#[tokio::test]
async fn an_identity_that_may_not_list_nodes_is_forbidden() -> Result<()> {
    let f = Fixture::start("forbidden", FAST).await?;
    let target = f.plane.target("target-b")?;
    let admin = target.admin_client().await?;
    let sa = format!("noperm-{}", f.scope.id);
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    let mut account = ServiceAccount::default();
    account.metadata.name = Some(sa.clone());
    match sas.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let token = hearth_e2e::node_reader::token(&admin, &sa).await?;
    let cluster = f.scope.cluster("forbidden");
    f.put_secret(
        &secret_name(&cluster),
        &kubeconfig_for(&target, Credentials::Token(token)),
        true,
        &[],
    )
    .await?;
    let found = f
        .wait_cluster(
            &cluster,
            "GPUDiscovered=False Forbidden",
            |c| match condition(c, GPU_DISCOVERED) {
                Some(g) if g.reason == "Forbidden" => Ok(()),
                _ => Err(conditions_text(c)),
            },
        )
        .await?;
    ensure!(kubeconfig_status(&found) == Some(KubeconfigStatus::Valid));
    let message = &condition(&found, GPU_DISCOVERED)
        .context("GPUDiscovered")?
        .message;
    ensure!(
        message.contains(&sa),
        "the target's explanation names the identity: {message}"
    );
    f.wait_event(&f.scope.namespace, &cluster, "Forbidden")
        .await?;
    Ok(())
}

/// A target that stops: the failures are counted while the cluster stays `Valid` (the
/// threshold keeps a flapping network from flapping quota), then `Unreachable` at the
/// threshold, with the last GPU count kept; `Valid` again once the target is back.
#[tokio::test]
async fn a_stopped_target_turns_unreachable_after_the_threshold_and_recovers() -> Result<()> {
    let f = Fixture::start(
        "stopped_target",
        &[
            ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "2"),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "2"),
            ("HEARTH_FAILURE_THRESHOLD", "3"),
        ],
    )
    .await?;
    let name = f.scope.cluster("outage");
    let fleet = TargetFleet::new(
        name.clone(),
        vec![NodeSpec::nvidia("outage-l4-0", "NVIDIA-L4", 2)],
    );
    let target = f.plane.add_target(fleet).await?;
    f.put_secret(
        &secret_name(&name),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&name, KubeconfigStatus::Valid).await?;
    let history = History::record(&f.clusters, &name);

    f.plane.stop_target(target.name()).await?;
    let down = f.wait_status(&name, KubeconfigStatus::Unreachable).await?;
    ensure!(
        total_gpus(&down) == 2,
        "the last count is kept while unreachable"
    );
    f.wait_event(&f.scope.namespace, &name, "KubeconfigUnreachable")
        .await?;
    let seen = history.snapshot();
    let valid = Some(KubeconfigStatus::Valid);
    for held in [1, 2] {
        ensure!(
            seen.contains(&(valid, held)),
            "failure {held} should have been held back as Valid; history {seen:?}"
        );
    }
    let first_unreachable = seen
        .iter()
        .find(|(s, _)| *s == Some(KubeconfigStatus::Unreachable))
        .context("Unreachable in history")?;
    ensure!(
        first_unreachable.1 == 3,
        "Unreachable at the threshold; history {seen:?}"
    );

    f.plane.start_target(target.name()).await?;
    // Recovered means counted again. `Valid` alone can come first: a target apiserver
    // that has just started answers who you are before it lists nodes, and that probe
    // is a `Valid` cluster whose discovery failed once more (failures > 0).
    let back = f
        .wait_cluster(&name, "Valid and counted again", |c| {
            let status = kubeconfig_status(c);
            if status == Some(KubeconfigStatus::Valid) && failures(c) == 0 {
                Ok(())
            } else {
                Err(format!(
                    "kubeconfigStatus {status:?}, {} failures, {}",
                    failures(c),
                    conditions_text(c)
                ))
            }
        })
        .await?;
    ensure!(total_gpus(&back) == 2, "counted again after the outage");
    f.wait_event(&f.scope.namespace, &name, "KubeconfigValid")
        .await?;
    Ok(())
}

/// A target that accepts TCP and never answers: its probe ends at the deadline as
/// `Unreachable`, and another target's probe, started after it, finishes long before.
#[tokio::test]
async fn a_black_hole_does_not_delay_another_target() -> Result<()> {
    const TIMEOUT_SECS: u64 = 8;
    let timeout = TIMEOUT_SECS.to_string();
    let f = Fixture::start(
        "black_hole",
        &[
            ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "3600"),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", timeout.as_str()),
            ("HEARTH_DISCOVERY_CONCURRENCY", "2"),
        ],
    )
    .await?;
    let hole = BlackHole::start()?;
    let target = f.plane.target("target-b")?;
    let hole_cluster = f.scope.cluster("hole");
    let healthy = f.scope.cluster("healthy");
    let into_hole = kubeconfig_yaml(
        "hole",
        &hole.url(),
        target.ca_pem(),
        "u",
        &Credentials::Token("t".into()),
    );

    let started = Instant::now();
    f.put_secret(&secret_name(&hole_cluster), &into_hole, true, &[])
        .await?;
    // Let the hole's probe start first.
    f.wait_cluster(&hole_cluster, "created", |_| Ok(())).await?;
    let healthy_started = Instant::now();
    f.put_secret(
        &secret_name(&healthy),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&healthy, KubeconfigStatus::Valid).await?;
    let healthy_took = healthy_started.elapsed();
    let hole_status = f.clusters.get(&hole_cluster).await?;
    ensure!(
        healthy_took < Duration::from_secs(TIMEOUT_SECS - 2),
        "the healthy target took {healthy_took:?}, as if it waited for the black hole"
    );
    ensure!(
        kubeconfig_status(&hole_status).is_none(),
        "the black hole's probe should still be running: {}",
        conditions_text(&hole_status)
    );

    let down = f
        .wait_status(&hole_cluster, KubeconfigStatus::Unreachable)
        .await?;
    let took = started.elapsed();
    ensure!(
        took >= Duration::from_secs(TIMEOUT_SECS - 1)
            && took < Duration::from_secs(TIMEOUT_SECS + 15),
        "the black hole's probe took {took:?}; its deadline is {TIMEOUT_SECS}s"
    );
    let error = down
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .and_then(|h| h.last_error.clone())
        .unwrap_or_default();
    ensure!(
        error.contains(&format!("no answer within {TIMEOUT_SECS}s")),
        "{error}"
    );
    drop(hole);
    Ok(())
}

/// A node added to a target shows up in status within one interval (plus one probe).
#[tokio::test]
async fn a_node_added_to_a_target_shows_up_within_one_interval() -> Result<()> {
    const INTERVAL_SECS: u64 = 4;
    const TIMEOUT_SECS: u64 = 3;
    let (interval, timeout) = (INTERVAL_SECS.to_string(), TIMEOUT_SECS.to_string());
    let f = Fixture::start(
        "node_added",
        &[
            (
                "HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC",
                interval.as_str(),
            ),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", timeout.as_str()),
        ],
    )
    .await?;
    let name = f.scope.cluster("grow");
    let fleet = TargetFleet::new(
        name.clone(),
        vec![NodeSpec::nvidia("grow-l4-0", "NVIDIA-L4", 1)],
    );
    let target = f.plane.add_target(fleet).await?;
    f.put_secret(
        &secret_name(&name),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_cluster(&name, "1 GPU", |c| match total_gpus(c) {
        1 => Ok(()),
        n => Err(format!("{n} GPUs, {}", conditions_text(c))),
    })
    .await?;

    target
        .add_node(&NodeSpec::nvidia("grow-h100-cordoned", "NVIDIA-H100-80GB-HBM3", 8).cordoned())
        .await?;
    target
        .add_node(&NodeSpec::nvidia("grow-l4-1", "NVIDIA-L4", 2))
        .await?;
    let added = Instant::now();
    let excluded = |c: &FournosCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.hardware.as_ref())
            .map_or(0, |h| h.excluded_nodes)
    };
    let grown = f
        .wait_cluster(&name, "3 GPUs, 1 node left out", |c| {
            match (total_gpus(c), excluded(c)) {
                (3, 1) => Ok(()),
                (n, x) => Err(format!("{n} GPUs, {x} left out")),
            }
        })
        .await?;
    let took = added.elapsed();
    ensure!(
        took <= Duration::from_secs(INTERVAL_SECS + TIMEOUT_SECS + 2),
        "the new node took {took:?} to show up; the interval is {INTERVAL_SECS}s"
    );
    let hardware = grown
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .context("hardware")?;
    ensure!(
        hardware.excluded_nodes == 1,
        "the cordoned node is left out and counted"
    );
    ensure!(
        grown.status.as_ref().and_then(|s| s.gpu_summary.as_deref()) == Some("3x NVIDIA-L4"),
        "{:?}",
        grown.status.as_ref().and_then(|s| s.gpu_summary.as_deref())
    );
    f.wait_event(&f.scope.namespace, &name, "GPUsChanged")
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Offboarding and bad input.
// ---------------------------------------------------------------------------------------

/// Deleting a Secret, or taking its label away, deletes its auto-discovered
/// FournosCluster, with an `Offboarded` Event on the way.
#[tokio::test]
async fn offboarding_by_secret_deletion_or_unlabeling() -> Result<()> {
    let f = Fixture::start("offboarding", FAST).await?;
    let target = f.plane.target("target-a")?;
    let deleted = f.scope.cluster("deleted");
    let unlabeled = f.scope.cluster("unlabeled");
    for cluster in [&deleted, &unlabeled] {
        f.put_secret(
            &secret_name(cluster),
            target.node_reader_kubeconfig(),
            true,
            &[],
        )
        .await?;
        f.wait_status(cluster, KubeconfigStatus::Valid).await?;
    }

    f.delete_secret(&secret_name(&deleted)).await?;
    f.wait_gone(&deleted).await?;
    let event = f
        .wait_event(&f.scope.namespace, &deleted, "Offboarded")
        .await?;
    let note = event.note.unwrap_or_default();
    ensure!(note.contains(&secret_name(&deleted)), "{note}");

    f.put_secret(
        &secret_name(&unlabeled),
        target.node_reader_kubeconfig(),
        false,
        &[],
    )
    .await?;
    f.wait_gone(&unlabeled).await?;
    f.wait_event(&f.scope.namespace, &unlabeled, "Offboarded")
        .await?;

    // Labeled again: onboarded again.
    f.put_secret(
        &secret_name(&unlabeled),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&unlabeled, KubeconfigStatus::Valid).await?;
    Ok(())
}

/// A labeled Secret whose name does not match the pattern, or names an invalid cluster,
/// gets a Warning Event and nothing else.
#[tokio::test]
async fn a_secret_not_matching_the_pattern_gets_a_warning_and_nothing_else() -> Result<()> {
    let f = Fixture::start("pattern_mismatch", FAST).await?;
    let target = f.plane.target("target-a")?;
    let mismatched = format!("creds-{}", f.scope.id);
    let bad_name = format!("kubeconfig-a.b-{}", f.scope.id);
    f.put_secret(&mismatched, target.node_reader_kubeconfig(), true, &[])
        .await?;
    f.put_secret(&bad_name, target.node_reader_kubeconfig(), true, &[])
        .await?;

    let event = f
        .wait_event(
            &f.scope.secrets_namespace,
            &mismatched,
            "SecretNameMismatch",
        )
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
    let note = event.note.unwrap_or_default();
    ensure!(note.contains("kubeconfig-{cluster}"), "{note}");
    let event = f
        .wait_event(&f.scope.secrets_namespace, &bad_name, "InvalidClusterName")
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");

    // The sweep that warned would have created them; a control Secret proves a later one ran.
    let control = f.scope.cluster("control");
    f.put_secret(
        &secret_name(&control),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_cluster(&control, "created", |_| Ok(())).await?;
    let names: Vec<String> = f
        .clusters
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    ensure!(
        names == [control.clone()],
        "only the control cluster exists: {names:?}"
    );
    // Warned once per Secret version, not once per sweep.
    let warnings = f
        .events_about(&f.scope.secrets_namespace, &mismatched)
        .await?;
    let count: i32 = warnings
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    ensure!(count == 1, "{count} warnings about {mismatched}");
    Ok(())
}

/// A FournosCluster made by hand is never deleted: it reports `Missing` while its
/// Secret is absent (or unlabeled), `Invalid/SecretNotForThisCluster` while the Secret
/// (not named for it) does not list it in `fournos.dev/allowed-clusters`, `Valid` once
/// it does, and `Missing` again when the Secret goes, while an auto-discovered
/// neighbour is offboarded.
#[tokio::test]
async fn a_hand_made_cluster_is_never_deleted_and_reports_missing() -> Result<()> {
    let f = Fixture::start("hand_made", FAST).await?;
    let target = f.plane.target("target-a")?;
    let hand = f.scope.cluster("hand");
    let secret = format!("hand-kubeconfig-{}", f.scope.id);
    let mut cluster = FournosCluster::new(
        &hand,
        FournosClusterSpec {
            kubeconfig_secret: secret.clone(),
            ..Default::default()
        },
    );
    cluster.metadata.namespace = Some(f.scope.namespace.clone());
    f.clusters.create(&PostParams::default(), &cluster).await?;
    let missing = f.wait_status(&hand, KubeconfigStatus::Missing).await?;
    let message = &condition(&missing, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message;
    ensure!(message.contains(&secret), "{message}");

    // Unlabeled: invisible to discovery, so still Missing, probe after probe.
    f.put_secret(&secret, target.node_reader_kubeconfig(), false, &[])
        .await?;
    let seen = failures(&missing);
    let later = f
        .wait_cluster(&hand, "probed twice more", |c| {
            if failures(c) >= seen + 2 {
                Ok(())
            } else {
                Err(format!("failures {}", failures(c)))
            }
        })
        .await?;
    ensure!(
        kubeconfig_status(&later) == Some(KubeconfigStatus::Missing),
        "{}",
        conditions_text(&later)
    );
    // Labeled, but its name is not the pattern's for this cluster: refused until the
    // Secret says it is meant for it.
    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let refused = f.wait_status(&hand, KubeconfigStatus::Invalid).await?;
    let reason = &condition(&refused, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .reason;
    ensure!(reason == "SecretNotForThisCluster", "{reason}");
    f.put_secret(
        &secret,
        target.node_reader_kubeconfig(),
        true,
        &[(ALLOWED_CLUSTERS_ANNOTATION, &hand)],
    )
    .await?;
    f.wait_status(&hand, KubeconfigStatus::Valid).await?;

    let neighbour = f.scope.cluster("auto");
    f.put_secret(
        &secret_name(&neighbour),
        target.node_reader_kubeconfig(),
        true,
        &[],
    )
    .await?;
    f.wait_status(&neighbour, KubeconfigStatus::Valid).await?;

    f.delete_secret(&secret).await?;
    f.delete_secret(&secret_name(&neighbour)).await?;
    f.wait_gone(&neighbour).await?;
    f.wait_status(&hand, KubeconfigStatus::Missing).await?;
    ensure!(
        f.clusters.get_opt(&hand).await?.is_some(),
        "the hand-made cluster was deleted"
    );
    // The Secret's name matches no pattern, but a cluster uses it: no warning.
    let warned: Vec<Option<String>> = f
        .events_about(&f.scope.secrets_namespace, &secret)
        .await?
        .into_iter()
        .map(|e| e.reason)
        .collect();
    ensure!(
        warned.is_empty(),
        "a Secret in use was warned about: {warned:?}"
    );
    Ok(())
}

/// `(uid, spec.owner)` of one version of a cluster.
type Incarnation = (String, Option<String>);

/// Every incarnation (uid) and owner one FournosCluster had while recorded, and whether
/// the watch saw it deleted.
struct Lifetime {
    seen: Arc<Mutex<(Vec<Incarnation>, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Lifetime {
    fn record(api: &Api<FournosCluster>, name: &str) -> Lifetime {
        let seen = Arc::new(Mutex::new((Vec::new(), false)));
        let record = seen.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let mut seen = record.lock().expect("lifetime");
                match item {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                        let entry = (c.metadata.uid.clone().unwrap_or_default(), c.spec.owner);
                        if seen.0.last() != Some(&entry) {
                            seen.0.push(entry);
                        }
                    }
                    Ok(watcher::Event::Delete(_)) => seen.1 = true,
                    _ => {}
                }
            }
        });
        Lifetime { seen, task }
    }

    /// `Ok` when the cluster only ever was `uid`, owned by `owner`, and never deleted.
    fn only(&self, uid: &str, owner: &str) -> std::result::Result<(), String> {
        let (versions, deleted) = self.seen.lock().expect("lifetime").clone();
        let expected = [(uid.to_owned(), Some(owner.to_owned()))];
        if deleted || versions != expected {
            Err(format!("deleted {deleted}, (uid, owner) seen {versions:?}"))
        } else {
            Ok(())
        }
    }
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn missing_since(cluster: &FournosCluster) -> Option<k8s_openapi::jiff::Timestamp> {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.secret_missing_since.as_ref())
        .map(|t| t.0)
}

/// Locks `cluster` for `owner` as a lock user would (lock-manager need not run: the
/// offboarding rule reads `spec.owner`), and waits until the watch shows it.
async fn set_owner(f: &Fixture, cluster: &str, owner: &str) -> Result<()> {
    f.clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "owner": owner } })),
        )
        .await
        .with_context(|| format!("locking {cluster} for {owner}"))?;
    f.wait_cluster(cluster, &format!("owned by {owner}"), |c| {
        (c.spec.owner.as_deref() == Some(owner))
            .then_some(())
            .ok_or_else(|| format!("owner {:?}", c.spec.owner))
    })
    .await?;
    Ok(())
}

/// A Secret deleted and created again (a rotation done that way, a GitOps prune) does
/// not offboard a locked cluster: it stays, the same object with the same owner, says
/// when it would go and how to let it go now (a Warning Event and `KubeconfigValid`),
/// keeps that time across a restart of discovery, and is `Valid` again once the Secret
/// is back.
#[tokio::test]
async fn a_locked_cluster_survives_its_secret_deleted_and_recreated() -> Result<()> {
    let mut f = Fixture::start("held_back", FAST).await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("locked");
    let secret = secret_name(&cluster);
    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let valid = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    let uid = valid.metadata.uid.clone().context("uid")?;
    set_owner(&f, &cluster, "alice").await?;
    let lifetime = Lifetime::record(&f.clusters, &cluster);

    f.delete_secret(&secret).await?;
    let held = f
        .wait_cluster(&cluster, "Missing, held back for alice", |c| {
            let message = condition(c, KUBECONFIG_VALID).map(|c| c.message.clone());
            match (kubeconfig_status(c), missing_since(c), message) {
                (Some(KubeconfigStatus::Missing), Some(_), Some(m))
                    if m.contains("locked by alice") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await?;
    let since = missing_since(&held).context("secretMissingSince")?;
    let message = condition(&held, KUBECONFIG_VALID)
        .context("KubeconfigValid")?
        .message
        .clone();
    ensure!(
        message.contains("unless the Secret returns") && message.contains("unlock it"),
        "{message}"
    );
    let event = f
        .wait_event(&f.scope.namespace, &cluster, "OffboardingHeldBack")
        .await?;
    ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
    ensure!(
        event.note.as_deref() == Some(message.as_str()),
        "{:?} vs {message}",
        event.note
    );

    // A restart forgets nothing: the grace still counts from the first loss.
    f.discovery.stop(f.plane).await?;
    f.discovery = hearth::start(f.plane, &f.scope, Controller::Discovery, "1", FAST).await?;
    let seen = failures(&held);
    let later = f
        .wait_cluster(&cluster, "probed again after the restart", |c| {
            if failures(c) > seen {
                Ok(())
            } else {
                Err(format!("failures {}", failures(c)))
            }
        })
        .await?;
    ensure!(
        missing_since(&later) == Some(since),
        "secretMissingSince moved: {since} → {:?}",
        missing_since(&later)
    );

    f.put_secret(&secret, target.node_reader_kubeconfig(), true, &[])
        .await?;
    let back = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    ensure!(missing_since(&back).is_none(), "{:?}", back.status);
    f.eventually(
        "the same cluster, never deleted, owner alice",
        DEADLINE,
        || async { Ok(lifetime.only(&uid, "alice")) },
    )
    .await?;
    Ok(())
}

/// The grace period is bounded: a locked cluster whose Secret stays gone is offboarded
/// once it has passed, and an unlocked one at once, as before.
#[tokio::test]
async fn a_locked_cluster_is_offboarded_after_the_grace_and_an_unlocked_one_at_once() -> Result<()>
{
    const GRACE_SEC: i64 = 15;
    let grace = GRACE_SEC.to_string();
    let env: Vec<(&str, &str)> = FAST
        .iter()
        .copied()
        .chain([("HEARTH_OFFBOARD_LOCKED_GRACE_SEC", grace.as_str())])
        .collect();
    let f = Fixture::start("grace", &env).await?;
    let target = f.plane.target("target-a")?;
    let locked = f.scope.cluster("locked");
    let unlocked = f.scope.cluster("unlocked");
    for cluster in [&locked, &unlocked] {
        f.put_secret(
            &secret_name(cluster),
            target.node_reader_kubeconfig(),
            true,
            &[],
        )
        .await?;
        f.wait_status(cluster, KubeconfigStatus::Valid).await?;
    }
    set_owner(&f, &locked, "bob").await?;

    f.delete_secret(&secret_name(&unlocked)).await?;
    f.delete_secret(&secret_name(&locked)).await?;
    f.wait_gone(&unlocked).await?;
    f.wait_event(&f.scope.namespace, &locked, "OffboardingHeldBack")
        .await?;
    let held = f.clusters.get(&locked).await?;
    let since = missing_since(&held).context("secretMissingSince")?;

    f.wait_gone(&locked).await?;
    let gone_at = k8s_openapi::jiff::Timestamp::now();
    ensure!(
        gone_at.as_second() >= since.as_second() + GRACE_SEC,
        "offboarded at {gone_at}, before the grace from {since} had passed"
    );
    let event = f
        .wait_event(&f.scope.namespace, &locked, "Offboarded")
        .await?;
    ensure!(event.type_.as_deref() == Some("Normal"), "{event:?}");
    Ok(())
}

/// A FournosCluster someone created before its Secret arrived is not adopted: a Warning
/// Event on the cluster and on the Secret names it and says it was not created from the
/// Secret; it gets no auto-discovered label, its spec (owner, hardware) stays its
/// creator's (discovery never writes spec), and discovery writes its own status fields
/// only.
#[tokio::test]
async fn a_hand_made_cluster_is_not_adopted_by_a_secret_that_comes_later() -> Result<()> {
    let f = Fixture::start("squat", FAST).await?;
    let target = f.plane.target("target-a")?;
    let cluster = f.scope.cluster("squat");
    let secret = secret_name(&cluster);
    let squatter_hardware: hearth_api::Hardware = serde_json::from_value(json!({
        "gpus": [{
            "vendor": "NVIDIA", "model": "NVIDIA-H200", "shortName": "h200",
            "count": 64, "nodeCount": 8,
        }],
        "totalGPUs": 64,
    }))?;
    let mut squat = FournosCluster::new(
        &cluster,
        FournosClusterSpec {
            kubeconfig_secret: secret.clone(),
            owner: Some("mallory".into()),
            hardware: Some(squatter_hardware.clone()),
            ..Default::default()
        },
    );
    squat.metadata.namespace = Some(f.scope.namespace.clone());
    let created = f.clusters.create(&PostParams::default(), &squat).await?;
    f.wait_status(&cluster, KubeconfigStatus::Missing).await?;

    f.put_secret(
        &secret,
        target.node_reader_kubeconfig(),
        true,
        &[(OWNER_ANNOTATION, "alice")],
    )
    .await?;
    let on_cluster = f
        .wait_event(&f.scope.namespace, &cluster, "ClusterNotCreatedFromSecret")
        .await?;
    let on_secret = f
        .wait_event(
            &f.scope.secrets_namespace,
            &secret,
            "ClusterNotCreatedFromSecret",
        )
        .await?;
    for event in [&on_cluster, &on_secret] {
        ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
        let note = event.note.as_deref().unwrap_or_default();
        ensure!(
            note.contains(&format!(
                "FournosCluster {}/{cluster} was not created from Secret",
                f.scope.namespace
            )) && note.contains("spec.owner (mallory)")
                && note.contains("fournos.dev/owner (alice) is not applied"),
            "{note}"
        );
    }

    let valid = f.wait_status(&cluster, KubeconfigStatus::Valid).await?;
    ensure!(
        valid.metadata.uid == created.metadata.uid,
        "the cluster was replaced"
    );
    let labels = valid.metadata.labels.clone().unwrap_or_default();
    ensure!(
        !labels.contains_key(AUTO_DISCOVERED_LABEL),
        "labelled as Hearth's: {labels:?}"
    );
    ensure!(
        valid.spec.owner.as_deref() == Some("mallory")
            && valid.spec.hardware.as_ref() == Some(&squatter_hardware),
        "spec changed: {:?}",
        valid.spec
    );
    // Discovery counted the target itself; the squatter's 64 H200s are nowhere in status.
    ensure!(
        reported_gpus(&valid) == expected_gpus(target.fleet()),
        "status.hardware {:?}",
        valid.status.as_ref().and_then(|s| s.hardware.clone())
    );
    let discovery_writes: Vec<(Option<String>, Option<String>)> = valid
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.manager.as_deref() == Some(controllers::DISCOVERY))
        .map(|m| (m.operation, m.subresource))
        .collect();
    ensure!(
        !discovery_writes.is_empty()
            && discovery_writes
                .iter()
                .all(|(_, subresource)| subresource.as_deref() == Some("status")),
        "discovery wrote more than status: {discovery_writes:?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Secrets never leave.
// ---------------------------------------------------------------------------------------

/// The pieces of secret material to look for: the token itself, and each base64 line of
/// a private key (as PEM), plus the key's base64 as the kubeconfig carries it.
fn secret_needles(kubeconfig: &str) -> Result<Vec<String>> {
    let doc: Value = serde_saphyr::from_str(kubeconfig)?;
    let user = &doc["users"][0]["user"];
    let mut needles = Vec::new();
    if let Some(token) = user["token"].as_str() {
        needles.push(token.to_owned());
    }
    if let Some(key) = user["client-key-data"].as_str() {
        // A stretch of the key's own bytes (the start is a fixed PEM and ASN.1 header).
        needles.push(key[key.len() / 2..(key.len() / 2 + 48).min(key.len())].to_owned());
        let pem = String::from_utf8(B64.decode(key)?)?;
        needles.extend(
            pem.lines()
                .filter(|l| !l.starts_with("-----") && l.len() >= 32)
                .map(str::to_owned),
        );
    }
    ensure!(!needles.is_empty(), "no secret material in the kubeconfig");
    Ok(needles)
}

/// Everything discovery emitted during a run with every outcome that touches credentials
/// (Valid with a token and with a client certificate, Unauthorized after a revocation,
/// Invalid with a token beside an exec plugin, Forbidden, Unreachable): its stdout and
/// stderr at trace level, its OTLP traces, the Events and the FournosClusters it wrote,
/// and its metrics. None of it holds a token or key.
#[tokio::test]
async fn no_token_or_key_leaks_into_logs_traces_events_or_status() -> Result<()> {
    let otlp = Receiver::start().await?;
    let endpoint = otlp.endpoint();
    let f = Fixture::start(
        "no_leak",
        &[
            ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "2"),
            ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "2"),
            ("HEARTH_FAILURE_THRESHOLD", "1"),
            ("HEARTH_LOG_LEVEL", "trace"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ],
    )
    .await?;
    let a = f.plane.target("target-a")?;
    let b = f.plane.target("target-b")?;
    let mut needles = Vec::new();

    // A token the target accepts, then revokes.
    let sa = format!("leak-{}", f.scope.id);
    let revoked = f.scope.cluster("revoked");
    let token_kubeconfig = a.issue_node_reader(&sa).await?;
    needles.extend(secret_needles(&token_kubeconfig)?);
    f.put_secret(&secret_name(&revoked), &token_kubeconfig, true, &[])
        .await?;
    // A client certificate and key (the target's admin identity).
    let cert = f.scope.cluster("cert");
    let cert_kubeconfig = std::fs::read_to_string(b.admin_kubeconfig())?;
    needles.extend(secret_needles(&cert_kubeconfig)?);
    f.put_secret(&secret_name(&cert), &cert_kubeconfig, true, &[])
        .await?;
    // A token next to an exec plugin: Invalid, and the token must not be quoted.
    let invalid = f.scope.cluster("invalid");
    let mut hostile: Value = serde_saphyr::from_str(&token_kubeconfig)?;
    let planted = format!("planted-token-{}-0123456789abcdef", f.scope.id);
    hostile["users"][0]["user"] = json!({ "token": planted, "exec": { "command": "/bin/true" } });
    needles.push(planted);
    f.put_secret(&secret_name(&invalid), &hostile.to_string(), true, &[])
        .await?;
    // A token that may not list nodes: the target's 403 is quoted in status.
    let admin = a.admin_client().await?;
    let noperm = format!("leak-noperm-{}", f.scope.id);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some(noperm.clone());
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "kube-system");
    match sas.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let forbidden_token = hearth_e2e::node_reader::token(&admin, &noperm).await?;
    needles.push(forbidden_token.clone());
    let forbidden = f.scope.cluster("forbidden");
    f.put_secret(
        &secret_name(&forbidden),
        &kubeconfig_for(&a, Credentials::Token(forbidden_token)),
        true,
        &[],
    )
    .await?;
    // A token sent to a server that is not there.
    let down = f.scope.cluster("down");
    let port = hearth_e2e::process::free_port()?;
    let down_token = format!("down-token-{}-fedcba9876543210", f.scope.id);
    needles.push(down_token.clone());
    let down_kubeconfig = kubeconfig_yaml(
        "down",
        &format!("https://127.0.0.1:{port}"),
        a.ca_pem(),
        "u",
        &Credentials::Token(down_token),
    );
    f.put_secret(&secret_name(&down), &down_kubeconfig, true, &[])
        .await?;

    f.wait_status(&revoked, KubeconfigStatus::Valid).await?;
    f.wait_status(&cert, KubeconfigStatus::Valid).await?;
    f.wait_status(&invalid, KubeconfigStatus::Invalid).await?;
    f.wait_status(&down, KubeconfigStatus::Unreachable).await?;
    f.wait_cluster(&forbidden, "Forbidden", |c| {
        match condition(c, GPU_DISCOVERED) {
            Some(g) if g.reason == "Forbidden" => Ok(()),
            _ => Err(conditions_text(c)),
        }
    })
    .await?;
    a.revoke_node_reader(&sa).await?;
    f.wait_status(&revoked, KubeconfigStatus::Unauthorized)
        .await?;
    // Offboarding too.
    f.delete_secret(&secret_name(&cert)).await?;
    f.wait_gone(&cert).await?;
    let metrics = f.metrics().await?;

    // A graceful stop flushes the batched spans.
    f.discovery.stop(f.plane).await?;
    f.eventually("trace export", Duration::from_secs(20), || async {
        Ok(if otlp.requests().is_empty() {
            Err("no OTLP request yet".to_owned())
        } else {
            Ok(())
        })
    })
    .await?;

    let log = f.discovery.log();
    let bodies: Vec<u8> = otlp.requests().into_iter().flat_map(|r| r.body).collect();
    let traces = String::from_utf8_lossy(&bodies).into_owned();
    let events: Api<Event> = Api::namespaced(f.client.clone(), &f.scope.namespace);
    let secret_events: Api<Event> = Api::namespaced(f.client.clone(), &f.scope.secrets_namespace);
    let mut events_json = serde_json::to_string(&events.list(&ListParams::default()).await?.items)?;
    events_json.push_str(&serde_json::to_string(
        &secret_events.list(&ListParams::default()).await?.items,
    )?);
    let clusters_json =
        serde_json::to_string(&f.clusters.list(&ListParams::default()).await?.items)?;

    // The haystacks are real: trace-level logs of every probe, spans, Events, statuses.
    ensure!(log.contains("TRACE"), "the log is not at trace level");
    ensure!(
        log.contains(&revoked) && log.contains(&forbidden),
        "the log does not mention the clusters"
    );
    ensure!(
        traces.contains("reconcile"),
        "no reconcile spans were exported"
    );
    ensure!(events_json.contains("KubeconfigUnauthorized") && events_json.contains("Offboarded"));
    ensure!(
        clusters_json.contains("Forbidden") && clusters_json.contains(&noperm),
        "the 403 is quoted"
    );

    let mut leaks = Vec::new();
    for (i, needle) in needles.iter().enumerate() {
        for (what, haystack) in [
            ("log", &log),
            ("traces", &traces),
            ("events", &events_json),
            ("status", &clusters_json),
            ("metrics", &metrics),
        ] {
            if haystack.contains(needle.as_str()) {
                // Which needle, not the needle: a failure report must not leak either.
                leaks.push(format!("{what} holds secret #{i}"));
            }
        }
    }
    ensure!(leaks.is_empty(), "secret material leaked: {leaks:?}");
    Ok(())
}
