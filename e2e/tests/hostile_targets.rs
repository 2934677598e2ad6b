//! Hostile targets on the local control plane: targets that echo the request (and with it
//! the planted token) in every place a target's words can go, and a target reporting
//! dozens of GPU models. Each must get a clear answer in status, never crash a controller,
//! never take the shared queue from a healthy cluster, and never leak the planted token
//! into a status, an Event, a log or a span.
//!
//! Run: `cargo build --workspace --bins && cargo test -p hearth-e2e --test hostile_targets`.

use anyhow::{Result, ensure};
use hearth_api::KubeconfigStatus;
use hearth_api::names::condition_types;
use hearth_e2e::hearth::Controller;
use hearth_e2e::hostile::{DEADLINE, Hostile, PLANTED, condition};
use hearth_e2e::process::eventually;
use hearth_e2e::{Answer, HostileTarget};
use serde_json::{Value, json};

/// Issue 15, findings 2 and 6: targets that echo the request (its `Authorization` header
/// with the planted token) in every place a target's words can go — a `/version` that is
/// not JSON, a version string, a 401, a 404, a 403 `Status` message, a 500 text body, a
/// GPU product label — get their verdicts, with an excerpt of what they said where it
/// helps, and the token appears nowhere: not in discovery's log at `debug` with no
/// per-crate filter, nor in Events, status, the ClusterQueue or exported spans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoing_targets_leak_nothing_at_debug() -> Result<()> {
    let otlp = hearth_e2e::otlp::Receiver::start().await?;
    let endpoint = otlp.endpoint();
    let mut w = Hostile::new("hostile_echo").await?;
    w.start_with(
        &[Controller::Discovery, Controller::KueueSync],
        &[
            ("HEARTH_LOG_LEVEL", "debug"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ],
    )
    .await?;

    fn echo(asked: &hearth_e2e::Asked) -> String {
        asked.headers.join("\n")
    }
    fn status(code: u16, message: &str) -> Answer {
        Answer::json(
            code,
            json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "code": code, "message": message })
            .to_string(),
        )
    }
    fn node_with_product(product: &str) -> Answer {
        let list = json!({ "kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [{
            "metadata": { "name": "echo", "labels": { "nvidia.com/gpu.product": product } },
            "status": { "allocatable": { "nvidia.com/gpu": "2" },
                        "conditions": [{ "type": "Ready", "status": "True" }] },
        }]});
        Answer::json(200, list.to_string())
    }
    let empty_list = || {
        Answer::json(
            200,
            r#"{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[]}"#,
        )
    };
    type Respond = Box<dyn Fn(&hearth_e2e::Asked) -> Answer + Send + Sync>;
    let version_then = |nodes: Respond| -> Respond {
        Box::new(move |asked| {
            if asked.path.starts_with("/version") {
                Answer::version()
            } else {
                nodes(asked)
            }
        })
    };
    let cases: Vec<(&str, Respond)> = vec![
        ("textversion", Box::new(|a| Answer::text(200, echo(a)))),
        (
            "jsonversion",
            Box::new(move |a| {
                if a.path.starts_with("/version") {
                    Answer::json(200, json!({ "gitVersion": echo(a) }).to_string())
                } else {
                    empty_list()
                }
            }),
        ),
        ("unauthorized", Box::new(|a| status(401, &echo(a)))),
        ("notfound", Box::new(|a| Answer::text(404, echo(a)))),
        (
            "forbidden",
            version_then(Box::new(|a| status(403, &echo(a)))),
        ),
        (
            "servererror",
            version_then(Box::new(|a| Answer::text(500, echo(a)))),
        ),
        (
            "label",
            version_then(Box::new(|_| node_with_product(PLANTED))),
        ),
    ];
    let mut targets = Vec::new();
    for (base, respond) in cases {
        let target = HostileTarget::start(respond).await?;
        w.onboard_hostile(&w.scope.cluster(base), &target).await?;
        targets.push((base, target));
    }

    let mut report = Vec::new();
    let message = w
        .wait_kubeconfig(
            &w.scope.cluster("textversion"),
            KubeconfigStatus::Unreachable,
        )
        .await?;
    ensure!(message.contains("not a Kubernetes version"), "{message}");
    report.push(message);
    let c = w
        .wait_cluster(
            &w.scope.cluster("jsonversion"),
            "Valid with a version",
            |c| {
                let s = c.status.as_ref().ok_or("no status")?;
                (s.kubeconfig_status == Some(KubeconfigStatus::Valid)
                    && condition(c, condition_types::GPU_DISCOVERED)
                        .is_some_and(|g| g.status == "True"))
                .then_some(())
                .ok_or_else(|| format!("{:?}", s.kubeconfig_status))
            },
        )
        .await?;
    report.push(serde_json::to_string(&c.status)?);
    report.push(
        w.wait_kubeconfig(
            &w.scope.cluster("unauthorized"),
            KubeconfigStatus::Unauthorized,
        )
        .await?,
    );
    let message = w
        .wait_kubeconfig(&w.scope.cluster("notfound"), KubeconfigStatus::Unreachable)
        .await?;
    ensure!(
        message.contains("HTTP 404 (not found)") && message.contains("[REDACTED]"),
        "{message}"
    );
    report.push(message);
    let message = w
        .wait_discovery_failed(&w.scope.cluster("forbidden"), "Forbidden", "[REDACTED]")
        .await?;
    report.push(message);
    let message = w
        .wait_discovery_failed(
            &w.scope.cluster("servererror"),
            "DiscoveryFailed",
            "HTTP 500 (server error) on page 1",
        )
        .await?;
    ensure!(message.contains("[REDACTED]"), "{message}");
    report.push(message);
    let c = w
        .wait_cluster(&w.scope.cluster("label"), "GPUs counted", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.hardware.as_ref())
                .is_some_and(|h| !h.gpus.is_empty())
                .then_some(())
                .ok_or_else(|| "no GPUs".into())
        })
        .await?;
    let gpus = c
        .status
        .and_then(|s| s.hardware)
        .map(|h| h.gpus)
        .unwrap_or_default();
    ensure!(
        gpus.len() == 1 && gpus[0].model == "NVIDIA" && gpus[0].count == 2,
        "a product label holding the token is counted as an unnamed NVIDIA GPU: {gpus:?}"
    );
    println!("{}", report.join("\n"));
    for (base, target) in &targets {
        ensure!(target.requests() > 0, "{base} was never asked");
    }

    w.assert_alive().await?;
    // A graceful stop flushes the batched spans.
    let discovery = w.controllers[0].clone();
    let log = discovery.log();
    ensure!(log.contains(" DEBUG "), "the log is not at debug level");
    discovery.stop(w.plane).await?;
    eventually("spans exported", DEADLINE, || async {
        Ok((!otlp.requests().is_empty()).then_some(()))
    })
    .await?;
    let spans: Vec<u8> = otlp.requests().into_iter().flat_map(|r| r.body).collect();
    ensure!(
        !String::from_utf8_lossy(&spans).contains(PLANTED),
        "the planted token leaked into exported spans"
    );
    w.assert_nothing_leaked().await?;
    Ok(())
}

/// Issue 15, findings 4 and 5: a target reporting 70 GPU models (63-character names)
/// would take every free resource of the shared queue and make a status the apiserver
/// refuses. Its probe fails with a reason instead and publishes no GPU resource; a real
/// cluster onboarded after it gets its quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_with_dozens_of_gpu_models_cannot_fill_the_queue() -> Result<()> {
    let mut w = Hostile::new("hostile_models").await?;
    w.start(&[Controller::Discovery, Controller::KueueSync])
        .await?;
    let items: Vec<Value> = (0..70)
        .map(|i| {
            json!({
                "metadata": { "name": format!("n{i}"), "labels": {
                    "nvidia.com/gpu.product": format!("MODEL{i:02}-{}", "X".repeat(55)) } },
                "status": { "allocatable": { "nvidia.com/gpu": "8" },
                            "conditions": [{ "type": "Ready", "status": "True" }] },
            })
        })
        .collect();
    let list = Answer::json(
        200,
        json!({ "kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items })
            .to_string(),
    );
    let target = HostileTarget::start(move |asked| {
        if asked.path.starts_with("/version") {
            Answer::version()
        } else {
            list.clone()
        }
    })
    .await?;
    let models = w.scope.cluster("models");
    w.onboard_hostile(&models, &target).await?;
    let message = w
        .wait_discovery_failed(&models, "DiscoveryFailed", "more than 8 GPU models")
        .await?;
    println!("{models}: {message}");

    let healthy = w.scope.cluster("healthy");
    w.onboard_healthy(&healthy).await?;
    w.assert_healthy(&healthy).await?;
    let cq = w.queues.get(&w.scope.cluster_queue).await?;
    let covered: Vec<&String> = cq
        .spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.covered_resources)
        .collect();
    ensure!(
        !covered.iter().any(|r| r.contains("model")),
        "a GPU resource of the hostile target was published: {covered:?}"
    );
    let c = w.clusters.get(&models).await?;
    let size = serde_json::to_string(&c.status)?.len();
    ensure!(size < 16 * 1024, "status is {size} bytes");
    w.assert_alive().await?;
    w.assert_nothing_leaked().await?;
    Ok(())
}
