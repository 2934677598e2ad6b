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

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hearth_api::names::{
    AUTO_DISCOVERED_LABEL, MANAGED_BY_LABEL, OWNER_ANNOTATION,
    condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID},
};
use hearth_api::{FournosCluster, KubeconfigStatus};
use hearth_e2e::discovery::{
    DEADLINE, FAST, Fixture, History, conditions_text, expected_excluded, expected_gpus, failures,
    kubeconfig_for, kubeconfig_status, reported_gpus, secret_name, total_gpus,
};
use hearth_e2e::fleet::{NodeSpec, fleet_for};
use hearth_e2e::hearth::{self, Controller, metric};
use hearth_e2e::invariants::{cluster_condition as condition, last_discovery};
use hearth_e2e::kubeconfig::{Credentials, kubeconfig_yaml};
use hearth_e2e::otlp::Receiver;
use hearth_e2e::{BlackHole, Target, TargetFleet};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

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
    let expires = status
        .credentials_expire_at
        .clone()
        .context("credentialsExpireAt from the JWT's exp")?
        .0;
    // What an alert reads (HearthCredentialsExpiring): seconds from the scrape to that
    // expiry, exact at the scrape. The gauge is read from discovery's watch cache at the
    // scrape, which may not show the status just read from the apiserver: wait for the
    // cluster's sample to be exported.
    let sample = format!("hearth_discovery_credentials_expiry_seconds{{cluster=\"{cluster}\"}}");
    let (scraped, seconds) = f
        .discovery
        .until("the cluster's expiry gauge exported", DEADLINE, || async {
            let scraped = k8s_openapi::jiff::Timestamp::now();
            Ok(match metric(&f.discovery.metrics().await?, &sample) {
                Some(seconds) => Ok((scraped, seconds)),
                None => Err("not exported yet".to_owned()),
            })
        })
        .await?;
    let want = (expires.as_second() - scraped.as_second()) as f64;
    ensure!(
        (want - 5.0..=want + 5.0).contains(&seconds) && seconds > 0.0,
        "credentials_expiry_seconds {seconds}, expected about {want}"
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
    let into_hole = hole.kubeconfig(target.ca_pem());

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
