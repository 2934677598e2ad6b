//! The three binaries as people run them: `--help` documents every setting, and a
//! binary started with a kubeconfig serves its admin endpoints, elects a leader
//! through a real Lease, and exports traces over OTLP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_e2e::ControlPlane;
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::otlp::Receiver;
use hearth_e2e::plane::hearth_binary;
use hearth_e2e::process::{eventually, http_get};

fn admin(running: &Running) -> SocketAddr {
    running.admin_addr().expect("admin address")
}

#[test]
fn help_lists_every_setting_with_its_variable() -> Result<()> {
    let common = [
        "HEARTH_NAMESPACE",
        "HEARTH_RECONCILE_INTERVAL_SEC",
        "HEARTH_LOG_LEVEL",
        "HEARTH_ADMIN_ADDR",
        "HEARTH_LEADER_ELECTION",
    ];
    let own: BTreeMap<Controller, &[&str]> = [
        (
            Controller::Discovery,
            &[
                "HEARTH_SECRETS_NAMESPACE",
                "HEARTH_KUBECONFIG_SECRET_PATTERN",
                "HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC",
                "HEARTH_GPU_DISCOVERY_TIMEOUT_SEC",
            ][..],
        ),
        (
            Controller::KueueSync,
            &[
                "HEARTH_KUEUE_CLUSTER_QUEUE_NAME",
                "HEARTH_GPU_RESOURCE_PREFIX",
                "HEARTH_POOL_LABEL_KEYS",
                "HEARTH_EXECUTION_NAMESPACE",
            ][..],
        ),
        (
            Controller::LockManager,
            &["HEARTH_EXECUTION_NAMESPACE", "HEARTH_SENTINEL"][..],
        ),
    ]
    .into();
    for (controller, vars) in own {
        let out = std::process::Command::new(hearth_binary(controller.binary())?)
            .arg("--help")
            .output()?;
        ensure!(
            out.status.success(),
            "{} --help failed",
            controller.binary()
        );
        let help = String::from_utf8(out.stdout)?;
        for var in common.iter().chain(vars) {
            ensure!(
                help.contains(var),
                "{} --help does not mention {var}",
                controller.binary()
            );
        }
        ensure!(help.contains("[default: hearth]"), "defaults are shown");
    }
    Ok(())
}

#[tokio::test]
async fn each_binary_serves_health_and_metrics() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let iso = plane.isolated("admin_endpoints").await?;
    for controller in Controller::ALL {
        let running = hearth::start(plane, &iso, controller, "0", &[]).await?;
        let addr = admin(&running);
        let (code, _) = http_get(addr, "/healthz").await?;
        ensure!(
            code == 200,
            "{}: /healthz answered {code}",
            controller.binary()
        );
        // Ready once its caches have synced.
        wait_ready(addr)
            .await
            .with_context(|| format!("{}:\n{}", controller.binary(), running.log()))?;
        let metrics = running.metrics().await?;
        for family in ["hearth_build_info", "hearth_leader"] {
            ensure!(
                metrics.contains(family),
                "{}: /metrics lacks {family}:\n{metrics}",
                controller.binary()
            );
        }
        running.stop(plane).await?;
    }
    Ok(())
}

async fn wait_ready(addr: SocketAddr) -> Result<()> {
    eventually(
        "/readyz to answer 200",
        Duration::from_secs(30),
        || async move { Ok((http_get(addr, "/readyz").await?.0 == 200).then_some(())) },
    )
    .await
}

fn leader_gauge(metrics: &str) -> Option<u8> {
    metrics
        .lines()
        .find(|l| l.starts_with("hearth_leader"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn one_replica_leads_and_a_standby_takes_over() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let iso = plane.isolated("leader_election").await?;
    let env = [
        ("HEARTH_LEADER_ELECTION", "true"),
        ("HEARTH_LEASE_NAMESPACE", iso.namespace.as_str()),
        ("HEARTH_LEASE_DURATION_SEC", "4"),
        ("HEARTH_LEASE_GRACE_SEC", "2"),
    ];
    let mut replicas = Vec::new();
    for i in ["0", "1"] {
        replicas.push(hearth::start(plane, &iso, Controller::KueueSync, i, &env).await?);
    }
    let leaders = |replicas: Vec<Running>| async move {
        let mut gauges = Vec::new();
        for r in &replicas {
            let metrics = r
                .metrics()
                .await
                .context("a standby must stay ready and serve metrics")?;
            gauges.push(leader_gauge(&metrics));
        }
        anyhow::Ok(gauges)
    };
    let first = eventually("exactly one leader", Duration::from_secs(30), || {
        let replicas = replicas.clone();
        async move {
            let g = leaders(replicas).await?;
            Ok((g.iter().filter(|v| **v == Some(1)).count() == 1).then_some(g))
        }
    })
    .await?;
    let leader = first.iter().position(|v| *v == Some(1)).context("leader")?;
    // Every replica, leader or not, is ready.
    for r in &replicas {
        wait_ready(admin(r)).await.context("standby not ready")?;
    }

    replicas[leader].kill(plane).await?;
    let standby = replicas[1 - leader].clone();
    eventually("the standby takes over", Duration::from_secs(30), || {
        let standby = standby.clone();
        async move {
            let metrics = standby.metrics().await?;
            Ok((leader_gauge(&metrics) == Some(1)).then_some(()))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_binary_exports_its_spans_over_otlp() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let iso = plane.isolated("otlp_export").await?;
    let receiver = Receiver::start().await?;
    let endpoint = receiver.endpoint();
    let running = hearth::start(
        plane,
        &iso,
        Controller::LockManager,
        "0",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())],
    )
    .await?;
    // Spans are batched; a graceful stop flushes them.
    running.stop(plane).await?;
    eventually("a trace export", Duration::from_secs(20), || {
        let receiver = receiver.clone();
        async move {
            Ok(receiver
                .requests()
                .iter()
                .any(|r| r.path == "/v1/traces" && !r.body.is_empty())
                .then_some(()))
        }
    })
    .await
    .with_context(|| format!("controller log:\n{}", running.log()))?;
    Ok(())
}
