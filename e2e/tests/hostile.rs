//! Hostile input on the local control plane: malformed and malicious kubeconfig Secrets,
//! junk node labels on a target, odd FournosCluster specs and Kueue objects that look like
//! Hearth's but are not. Each must get a clear answer in status or an Event, never crash a
//! controller, never disturb a healthy cluster running alongside, and never leak the
//! planted token into a status, an Event or a log.
//!
//! The small inputs are checked in under `e2e/fixtures/hostile/`; the large ones are
//! generated (`generated_*`, in `hearth_e2e::hostile` and here), deterministically.
//!
//! Run: `cargo build --workspace --bins && cargo test -p hearth-e2e --test hostile`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use hearth_api::KubeconfigStatus;
use hearth_api::names::{MANAGED_BY_LABEL, condition_types, is_label_name};
use hearth_e2e::hearth::Controller;
use hearth_e2e::hostile::{
    ADMIN, DEADLINE, Hostile, condition, garbage, generated_binary_garbage, generated_deep_nesting,
    generated_double_base64_garbage, generated_one_mib_kubeconfig, hostile,
};
use hearth_e2e::invariants::{entry, is_active, kueue_problems, last_discovery};
use hearth_e2e::objects::foreign_widget_group;
use hearth_e2e::process::{eventually, http_get, is_alive};
use hearth_e2e::resources::apply;
use hearth_e2e::{Answer, HostileTarget, TargetFleet};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_kubeconfig_secrets_get_a_clear_status_and_leak_nothing() -> Result<()> {
    let mut w = Hostile::new("hostile_secrets").await?;
    w.start(&[Controller::Discovery, Controller::KueueSync])
        .await?;
    let healthy = w.scope.cluster("healthy");
    w.onboard_healthy(&healthy).await?;
    w.assert_healthy(&healthy).await?;

    let target = w.plane.targets()[0].clone();
    let (server, ca) = (target.server().to_owned(), target.ca_pem().to_owned());
    let invalid = KubeconfigStatus::Invalid;
    let cases: Vec<(&str, &str, Vec<u8>, KubeconfigStatus, &str)> = vec![
        // (cluster base, key, data, status, words the message must hold)
        (
            "garbage",
            "kubeconfig",
            generated_binary_garbage(),
            invalid,
            "",
        ),
        (
            "big",
            "kubeconfig",
            generated_one_mib_kubeconfig(target.node_reader_kubeconfig()),
            KubeconfigStatus::Valid,
            "",
        ),
        (
            "nested",
            "kubeconfig",
            generated_deep_nesting(),
            invalid,
            "",
        ),
        (
            "laughs",
            "kubeconfig",
            hostile("billion-laughs.yaml", &server, &ca)?,
            invalid,
            "",
        ),
        (
            "exec",
            "kubeconfig",
            hostile("exec-plugin.yaml", &server, &ca)?,
            invalid,
            "exec",
        ),
        (
            "authprov",
            "kubeconfig",
            hostile("auth-provider.yaml", &server, &ca)?,
            invalid,
            "auth-provider",
        ),
        (
            "tokenfile",
            "kubeconfig",
            hostile("token-file.yaml", &server, &ca)?,
            invalid,
            "tokenFile",
        ),
        (
            "paths",
            "kubeconfig",
            hostile("client-cert-paths.yaml", &server, &ca)?,
            invalid,
            "certificate-authority",
        ),
        (
            "http",
            "kubeconfig",
            hostile("plain-http.yaml", &server, &ca)?,
            invalid,
            "",
        ),
        (
            "password",
            "kubeconfig",
            hostile("password-and-proxy.yaml", &server, &ca)?,
            invalid,
            "",
        ),
        (
            "wrongtype",
            "kubeconfig",
            hostile("token-wrong-type.json", &server, &ca)?,
            invalid,
            "token",
        ),
        (
            "rejected",
            "kubeconfig",
            hostile("rejected-token.yaml", &server, &ca)?,
            KubeconfigStatus::Unauthorized,
            "",
        ),
        (
            "doubleb64",
            "kubeconfig",
            generated_double_base64_garbage(),
            invalid,
            "",
        ),
        (
            "wrongkey",
            "config",
            target.node_reader_kubeconfig().as_bytes().to_vec(),
            KubeconfigStatus::Missing,
            "kubeconfig",
        ),
        ("empty", "kubeconfig", Vec::new(), invalid, ""),
    ];
    for (base, key, data, _, _) in &cases {
        let cluster = w.scope.cluster(base);
        w.put_secret(&format!("kubeconfig-{cluster}"), key, data.clone())
            .await?;
    }
    // Labeled, but not named like a kubeconfig Secret: a Warning Event and nothing else.
    let stray = format!("not-a-kubeconfig-{}", w.scope.id);
    w.put_secret(
        &stray,
        "kubeconfig",
        hostile("exec-plugin.yaml", &server, &ca)?,
    )
    .await?;

    let mut report = Vec::new();
    for (base, _, _, status, words) in &cases {
        let cluster = w.scope.cluster(base);
        let message = w.wait_kubeconfig(&cluster, *status).await?;
        ensure!(
            message.contains(words),
            "{cluster}: message {message:?} does not mention {words:?}"
        );
        report.push(format!("{base}: {status} — {message}"));
    }
    println!("{}", report.join("\n"));

    let events: Api<Event> = Api::namespaced(w.client.clone(), &w.scope.secrets_namespace);
    eventually("a Warning Event on the stray Secret", DEADLINE, || async {
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(stray.as_str())
                    && e.type_.as_deref() == Some("Warning")
            }))
    })
    .await?;
    let all = w.clusters.list(&ListParams::default()).await?.items;
    ensure!(
        all.len() == cases.len() + 1,
        "{} FournosClusters for {} kubeconfig Secrets",
        all.len(),
        cases.len() + 1
    );

    w.assert_alive().await?;
    w.assert_healthy(&healthy).await?;
    w.assert_nothing_leaked().await?;
    Ok(())
}

/// A Node with `labels` and `allocatable` exactly as given (a kubelet would never
/// write most of them; a hostile or broken node agent could).
async fn put_junk_node(
    nodes: &Api<Node>,
    name: &str,
    labels: &[(&str, &str)],
    allocatable: &[(&str, &str)],
) -> Result<bool> {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": labels },
    });
    match nodes
        .create(&PostParams::default(), &serde_json::from_value(node)?)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 422 => {
            println!("apiserver refused node {name}: {}", e.message);
            return Ok(false);
        }
        Err(e) => return Err(e).with_context(|| format!("creating node {name}")),
    }
    let mut resources: BTreeMap<&str, &str> =
        BTreeMap::from([("cpu", "8"), ("memory", "64Gi"), ("pods", "110")]);
    resources.extend(allocatable.iter().copied());
    let status = json!({ "status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady",
                         "message": "hostile", "lastHeartbeatTime": now(), "lastTransitionTime": now() }],
    }});
    match nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        Ok(_) => Ok(true),
        // The apiserver's own validation is the first line of defence; a value it
        // refuses never reaches Hearth.
        Err(kube::Error::Api(e)) if e.code == 422 => {
            println!("apiserver refused node {name}: {}", e.message);
            Ok(false)
        }
        Err(e) => Err(e).with_context(|| format!("status of node {name}")),
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_node_labels_and_allocatable_are_counted_sanely() -> Result<()> {
    let mut w = Hostile::new("hostile_nodes").await?;
    let target = w
        .plane
        .add_target(TargetFleet::new(format!("junk-{}", w.scope.id), vec![]))
        .await?;
    let nodes: Api<Node> = Api::all(target.admin_client().await?);
    let long_model = "X".repeat(63);
    // Each value is one the apiserver lets through (label values ≤ 63 characters of
    // `[A-Za-z0-9_.-]`, non-negative integer extended resources) but no labeller writes.
    let accepted = [
        put_junk_node(
            &nodes,
            "garbage-product",
            &[("nvidia.com/gpu.product", "x__--..--__x")],
            &[("nvidia.com/gpu", "4")],
        )
        .await?,
        put_junk_node(
            &nodes,
            "long-product",
            &[("nvidia.com/gpu.product", &long_model)],
            &[("nvidia.com/gpu", "2")],
        )
        .await?,
        put_junk_node(
            &nodes,
            "huge-count",
            &[
                ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
                ("nvidia.com/gpu.count", "99999999999999999999999"),
                ("nvidia.com/gpu.replicas", "x4"),
            ],
            &[("nvidia.com/gpu", "9223372036854775807")],
        )
        .await?,
        // MIG single: a memory size that overflowed i64 arithmetic (panicked in debug
        // builds). 7 devices of an unknown-size slice: at least 1 per GPU, so 7 GPUs.
        put_junk_node(
            &nodes,
            "mig-overflow",
            &[(
                "nvidia.com/gpu.product",
                "NVIDIA-A100-SXM4-40GB-MIG-1g.4611686018427387904gb",
            )],
            &[("nvidia.com/gpu", "7")],
        )
        .await?,
        // MIG mixed: a profile wider than a GPU (one GPU per device at most; was 714 GPUs),
        // a profile without compute slices (one slice each), and a quantity over i64
        // (ignored).
        put_junk_node(
            &nodes,
            "mig-mixed-junk",
            &[
                ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB"),
                ("nvidia.com/mig-999g.1gb.replicas", "0"),
            ],
            &[
                ("nvidia.com/mig-999g.1gb", "5"),
                ("nvidia.com/mig-junk", "3"),
                ("nvidia.com/mig-1g.5gb", "1e30"),
            ],
        )
        .await?,
        put_junk_node(
            &nodes,
            "amd-junk",
            &[
                ("amd.com/gpu.product-name.MI300X", "99999999999999999999"),
                ("amd.com/gpu.product-name.X_Y", "2"),
            ],
            &[("amd.com/gpu", "2")],
        )
        .await?,
        // Refused by the apiserver itself: never reach Hearth.
        put_junk_node(
            &nodes,
            "negative",
            &[("nvidia.com/gpu.product", "NVIDIA-L40S")],
            &[("nvidia.com/gpu", "-3")],
        )
        .await?,
        put_junk_node(
            &nodes,
            "fractional",
            &[("nvidia.com/gpu.product", "NVIDIA-L40S")],
            &[("nvidia.com/gpu", "1500m")],
        )
        .await?,
        put_junk_node(
            &nodes,
            "bad-label",
            &[("nvidia.com/gpu.product", "<script>alert(1)</script>")],
            &[("nvidia.com/gpu", "1")],
        )
        .await?,
    ];
    ensure!(
        accepted == [true, true, true, true, true, true, false, false, false],
        "the apiserver accepted {accepted:?}"
    );
    println!("nodes the apiserver accepted a status for: {accepted:?}");

    w.start(&[Controller::Discovery, Controller::KueueSync])
        .await?;
    let healthy = w.scope.cluster("healthy");
    w.onboard_healthy(&healthy).await?;
    let junk = w.scope.cluster("junk");
    w.put_secret(
        &format!("kubeconfig-{junk}"),
        "kubeconfig",
        target.node_reader_kubeconfig().as_bytes().to_vec(),
    )
    .await?;

    let cluster = w
        .wait_cluster(&junk, "Valid with GPUs discovered", |c| {
            let s = c.status.as_ref().ok_or("no status")?;
            let discovered =
                condition(c, condition_types::GPU_DISCOVERED).is_some_and(|c| c.status == "True");
            (s.kubeconfig_status == Some(KubeconfigStatus::Valid) && discovered)
                .then_some(())
                .ok_or_else(|| format!("{:?}", s.kubeconfig_status))
        })
        .await?;
    let hardware = cluster
        .status
        .as_ref()
        .and_then(|s| s.hardware.clone())
        .context("no hardware")?;
    println!("{hardware:#?}");
    let counts: BTreeMap<&str, i64> = hardware
        .gpus
        .iter()
        .map(|g| (g.model.as_str(), g.count))
        .collect();
    let expected = BTreeMap::from([
        ("x__--..--__x", 4),
        (long_model.as_str(), 2),
        ("NVIDIA-H100-80GB-HBM3", i64::MAX),
        // 7 (mig-overflow) + 6 (mig-mixed-junk: 5 devices of at most one GPU = 35
        // slices, 3 devices of an unknown profile = 3 slices; 38 slices ÷ 7, rounded up)
        ("NVIDIA-A100-SXM4-40GB", 13),
        ("X_Y", 2),
    ]);
    ensure!(
        counts == expected,
        "counted {counts:?}, expected {expected:?}"
    );
    for g in &hardware.gpus {
        ensure!(g.count > 0, "{g:?}");
        ensure!(
            is_label_name(&format!("gpu-{}", g.short_name)),
            "short name {:?} is not a valid resource name part",
            g.short_name
        );
    }
    ensure!(
        hardware.total_gpus == i64::MAX,
        "total saturates: {}",
        hardware.total_gpus
    );

    // The junk cluster's quota reaches a queue Kueue accepts, and the healthy cluster
    // next to it keeps its own.
    let queue = w.scope.cluster_queue.clone();
    eventually(
        "the junk cluster's entry in a valid queue",
        DEADLINE,
        || async {
            let Some(cq) = w.queues.get_opt(&queue).await? else {
                return Ok(None);
            };
            Ok(
                (entry(&cq, &junk).is_some() && kueue_problems(&cq).is_empty() && is_active(&cq))
                    .then_some(()),
            )
        },
    )
    .await
    .with_context(|| w.describe(&junk))?;
    w.assert_healthy(&healthy).await?;
    w.assert_alive().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_specs_and_foreign_kueue_objects_get_a_clear_answer() -> Result<()> {
    let mut w = Hostile::new("hostile_specs").await?;
    let queue = w.scope.cluster_queue.clone();

    // A foreign flavor and group in the queue before Hearth starts, and a foreign flavor
    // squatting on the name of a cluster that is onboarded later.
    let foreign = format!("foreign-{}", w.scope.id);
    let squatted = w.scope.cluster("squatted");
    for name in [&foreign, &squatted] {
        apply(
            &w.client,
            &json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": { "name": name, "labels": { "team": "someone-else" } },
                "spec": { "nodeLabels": { "pool": "theirs" } },
            }),
        )
        .await?;
    }
    w.queues
        .patch(
            &queue,
            &PatchParams::default(),
            &Patch::Merge(foreign_widget_group(&foreign)),
        )
        .await
        .context("adding a foreign group")?;

    w.start(&[
        Controller::Discovery,
        Controller::KueueSync,
        Controller::LockManager,
    ])
    .await?;
    let healthy = w.scope.cluster("healthy");
    w.onboard_healthy(&healthy).await?;
    w.assert_healthy(&healthy).await?;

    // Bad durations and owners never get in: the CRD refuses them, naming the field.
    let bad_specs: Vec<(&str, Value)> = [
        "forever",
        "5x",
        "-1h",
        "1.5h",
        "",
        "0m",
        "00h",
        "99999999999999999999m",
    ]
    .iter()
    .flat_map(|d| [("ttl", json!(d)), ("gpuDiscoveryInterval", json!(d))])
    .chain([
        ("owner", json!("o".repeat(300 * 1024))),
        ("owner", json!("alice\nINFO lock granted to mallory")),
        ("owner", json!("alice\u{0}")),
        ("owner", json!("alice\u{202e}ecila")),
    ])
    .collect();
    for (field, value) in &bad_specs {
        let mut spec = json!({ "kubeconfigSecret": "kubeconfig-nothing" });
        spec[field] = value.clone();
        let fc = json!({
            "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
            "metadata": { "name": w.scope.cluster("badspec"), "namespace": w.scope.namespace },
            "spec": spec,
        });
        let shown: String = value.to_string().chars().take(40).collect();
        match w
            .clusters
            .create(&PostParams::default(), &serde_json::from_value(fc)?)
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 422 => {
                ensure!(e.message.contains(field), "{field} {shown}: {}", e.message);
            }
            other => bail!("{field} {shown} was not refused: {:?}", other.map(drop)),
        }
    }

    // The squatted name: Hearth must not take over the foreign flavor.
    w.onboard_healthy(&squatted).await?;
    let c = w
        .wait_cluster(&squatted, "KueueSynced=False", |c| {
            condition(c, condition_types::KUEUE_SYNCED)
                .filter(|k| k.status == "False" && !k.message.is_empty())
                .map(drop)
                .ok_or_else(|| "not yet".into())
        })
        .await?;
    println!(
        "squatted: {:?}",
        condition(&c, condition_types::KUEUE_SYNCED).map(|k| (k.reason, k.message))
    );
    let flavor = w.flavors.get(&squatted).await?;
    ensure!(
        flavor
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key(MANAGED_BY_LABEL)),
        "Hearth took over the foreign flavor {squatted}"
    );

    // A sentinel the apiserver refuses (here: its namespace is being deleted, which
    // never finishes without a controller manager) shows in the Locked condition with
    // the apiserver's reason, not as `WaitingForFlavor`.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(w.client.clone());
    namespaces
        .delete(&w.scope.execution_namespace, &Default::default())
        .await
        .context("deleting the execution namespace")?;
    w.clusters
        .patch(
            &healthy,
            &PatchParams::apply(ADMIN),
            &Patch::Apply(json!({
                "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
                "spec": { "owner": "alice" },
            })),
        )
        .await
        .context("setting an owner")?;
    let c = w
        .wait_cluster(&healthy, "Locked=False SentinelCreateFailed", |c| {
            let l = condition(c, condition_types::LOCKED).ok_or("no Locked")?;
            (l.status == "False" && l.reason == "SentinelCreateFailed")
                .then_some(())
                .ok_or_else(|| format!("{}: {}", l.reason, l.message))
        })
        .await?;
    let message = condition(&c, condition_types::LOCKED)
        .map(|l| l.message)
        .unwrap_or_default();
    println!("refused sentinel: {message}");
    ensure!(
        message.contains("being terminated") && message.contains("403"),
        "{message}"
    );
    ensure!(
        c.status.as_ref().and_then(|s| s.locked) != Some(true),
        "locked without a sentinel"
    );

    // Foreign objects survive; the healthy cluster keeps its quota; nobody crashed.
    let cq = w.queues.get(&queue).await?;
    ensure!(
        entry(&cq, &foreign).is_some_and(|q| q.get("example.com/widget") == Some(&7)),
        "foreign group lost: {:?}",
        cq.spec.resource_groups
    );
    ensure!(
        entry(&cq, &squatted).is_none(),
        "squatted flavor in the queue"
    );
    ensure!(w.flavors.get_opt(&foreign).await?.is_some());
    w.assert_healthy(&healthy).await?;
    w.assert_alive().await?;
    Ok(())
}

/// Peak resident memory of a process so far (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM")?;
    Ok(kib / 1024)
}

/// `{"items":[{},{},…]}` of about `bytes` bytes: the cheapest bytes on the wire for the
/// most items.
fn generated_empty_items(bytes: usize) -> Vec<u8> {
    let mut body = b"{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"items\":[{}".to_vec();
    while body.len() + 3 < bytes {
        body.extend_from_slice(b",{}");
    }
    body.extend_from_slice(b"]}");
    body
}

/// The chart's memory limit of hearth-discovery (`charts/hearth/values.yaml`).
const CHART_MEMORY_LIMIT_MIB: u64 = 128;

/// Issue 24: 100 labelled Secrets of 900 KiB each (a CA bundle beside the kubeconfig),
/// there before discovery starts: discovery lists them a page at a time and caches only
/// the kubeconfig key, so it onboards all of them and stays under the chart's limit (one
/// unpaged list of them alone is over 100 MiB of JSON).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_large_secrets_fit_under_the_chart_limit() -> Result<()> {
    const SECRETS: usize = 100;
    let mut w = Hostile::new("hostile_secret_memory").await?;
    for i in 0..SECRETS {
        let name = format!("kubeconfig-{}", w.scope.cluster(&format!("big{i}")));
        w.put_secret_data(
            &name,
            BTreeMap::from([
                (
                    "kubeconfig".to_owned(),
                    ByteString(b"not a kubeconfig".to_vec()),
                ),
                (
                    "ca-bundle.pem".to_owned(),
                    ByteString(vec![b'x'; 900 * 1024]),
                ),
            ]),
        )
        .await?;
    }
    w.start(&[Controller::Discovery]).await?;
    let pid = w.pid_of(Controller::Discovery)?;
    eventually("every large Secret onboarded", DEADLINE, || async {
        let n = w.clusters.list(&Default::default()).await?.items.len();
        Ok((n >= SECRETS).then_some(()))
    })
    .await?;
    let peak = peak_rss_mib(pid)?;
    println!("{SECRETS} Secrets of 900 KiB: discovery peaked at {peak} MiB");
    ensure!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "discovery peaked at {peak} MiB with {SECRETS} large Secrets; the chart allows {CHART_MEMORY_LIMIT_MIB} Mi"
    );
    w.assert_alive().await?;
    Ok(())
}

/// Issue 15, finding 1: node lists that once took discovery past its memory limit (1 MiB
/// and 60 MiB of `{}` items, 60 MiB of junk) each cost only their own probe, which fails
/// with a reason; discovery stays up, under the chart's limit, and keeps probing the
/// healthy cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_node_list_costs_only_its_own_probe() -> Result<()> {
    let mut w = Hostile::new("hostile_pages").await?;
    w.start(&[Controller::Discovery, Controller::KueueSync])
        .await?;
    let healthy = w.scope.cluster("healthy");
    w.onboard_healthy(&healthy).await?;
    w.assert_healthy(&healthy).await?;

    let nodes_answer = |body: Vec<u8>| {
        let nodes = Answer::json(200, body);
        move |asked: &hearth_e2e::Asked| {
            if asked.path.starts_with("/version") {
                Answer::version()
            } else {
                nodes.clone()
            }
        }
    };
    let cases = [
        (
            "empties1m",
            HostileTarget::start(nodes_answer(generated_empty_items(1024 * 1024))).await?,
            "refused: it holds more than the 100 nodes asked for",
        ),
        (
            "empties60m",
            HostileTarget::start(nodes_answer(generated_empty_items(60 * 1024 * 1024))).await?,
            "larger than 4 MiB",
        ),
        (
            "junk60m",
            HostileTarget::start(nodes_answer(garbage(60 * 1024 * 1024, 0x6a75_6e6b))).await?,
            "larger than 4 MiB",
        ),
    ];
    for (base, target, _) in &cases {
        w.onboard_hostile(&w.scope.cluster(base), target).await?;
    }
    for (base, target, words) in &cases {
        let message = w
            .wait_discovery_failed(&w.scope.cluster(base), "DiscoveryFailed", words)
            .await?;
        println!("{base}: {message}");
        ensure!(target.requests() > 0, "{base} was never asked");
    }
    // Probes of the hostile targets go on (every 5 s); the healthy one is still probed.
    let before = w.clusters.get(&healthy).await?;
    let last = last_discovery;
    let seen = last(&before);
    w.wait_cluster(&healthy, "probed again", |c| {
        (last(c) != seen)
            .then_some(())
            .ok_or_else(|| "not yet".into())
    })
    .await?;
    w.assert_alive().await?;
    w.assert_healthy(&healthy).await?;
    let peak = peak_rss_mib(w.pid_of(Controller::Discovery)?)?;
    println!("hearth-discovery peak RSS: {peak} MiB");
    ensure!(
        peak < CHART_MEMORY_LIMIT_MIB,
        "discovery peaked at {peak} MiB, over the chart's {CHART_MEMORY_LIMIT_MIB} Mi limit"
    );
    w.assert_nothing_leaked().await?;
    Ok(())
}

/// Measurement, not a check (`--ignored`): discovery's peak RSS while it probes one
/// hostile target answering `HEARTH_E2E_HOSTILE_BODY` (`empties1m`, `empties60m` or
/// `junk60m`) to every node list, after the target has been asked 3 times. Runs
/// whatever `hearth-discovery` binary sits next to the test binary, so it measures an
/// older build as well (see `bench-results/*/HOSTILE-MEMORY.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run by hand"]
async fn measure_discovery_memory_against_a_hostile_target() -> Result<()> {
    let which = std::env::var("HEARTH_E2E_HOSTILE_BODY").unwrap_or_else(|_| "empties1m".into());
    let body = match which.as_str() {
        "empties1m" => generated_empty_items(1024 * 1024),
        "empties60m" => generated_empty_items(60 * 1024 * 1024),
        "junk60m" => garbage(60 * 1024 * 1024, 0x6a75_6e6b),
        other => bail!("unknown HEARTH_E2E_HOSTILE_BODY {other}"),
    };
    let mut w = Hostile::new("hostile_measure").await?;
    w.start(&[Controller::Discovery]).await?;
    let pid = w.pid_of(Controller::Discovery)?;
    let idle = peak_rss_mib(pid)?;
    let nodes = Answer::json(200, body);
    let target = HostileTarget::start(move |asked| {
        if asked.path.starts_with("/version") {
            Answer::version()
        } else {
            nodes.clone()
        }
    })
    .await?;
    w.onboard_hostile(&w.scope.cluster(&which), &target).await?;
    // Node lists asked for; `/version` is the other request of each probe.
    let asked = eventually("3 probes of the hostile target", DEADLINE, || async {
        Ok((target.requests() >= 6 || !is_alive(pid)).then(|| target.requests()))
    })
    .await?;
    let alive = is_alive(pid);
    let peak = if alive { peak_rss_mib(pid)? } else { 0 };
    println!(
        "{which}: idle peak {idle} MiB; after {asked} requests: peak {peak} MiB; alive: {alive}"
    );
    Ok(())
}

/// Issue 15, finding 3: a FournosCluster made by hand that names another cluster's
/// Secret is refused (`Invalid/SecretNotForThisCluster`) and publishes no quota over
/// that cluster's hardware; the owner of the Secret can allow it explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_cannot_borrow_another_clusters_secret() -> Result<()> {
    let mut w = Hostile::new("hostile_borrow").await?;
    w.start(&[Controller::Discovery, Controller::KueueSync])
        .await?;
    let victim = w.scope.cluster("victim");
    w.onboard_healthy(&victim).await?;
    w.assert_healthy(&victim).await?;

    let thief = w.scope.cluster("thief");
    let fc = json!({
        "apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
        "metadata": { "name": thief, "namespace": w.scope.namespace },
        "spec": { "kubeconfigSecret": format!("kubeconfig-{victim}") },
    });
    w.clusters
        .create(&PostParams::default(), &serde_json::from_value(fc)?)
        .await
        .context("creating the borrowing cluster")?;
    let message = w.wait_kubeconfig(&thief, KubeconfigStatus::Invalid).await?;
    println!("{thief}: {message}");
    ensure!(
        message.starts_with("SecretNotForThisCluster:")
            && message.contains(&format!("kubeconfig-{thief}"))
            && message.contains("fournos.dev/allowed-clusters"),
        "{message}"
    );
    // kueue-sync has answered for the thief; whatever it published holds no GPU or slot.
    w.wait_cluster(&thief, "a KueueSynced answer", |c| {
        condition(c, condition_types::KUEUE_SYNCED)
            .map(drop)
            .ok_or_else(|| "no KueueSynced".into())
    })
    .await?;
    let cq = w.queues.get(&w.scope.cluster_queue).await?;
    let stolen = entry(&cq, &thief).unwrap_or_default();
    ensure!(
        stolen.values().all(|q| *q == 0),
        "the borrowing cluster got quota: {stolen:?}"
    );
    w.assert_healthy(&victim).await?;

    // Allowed on purpose by whoever controls the Secret: the same hardware twice, by choice.
    w.secrets
        .patch(
            &format!("kubeconfig-{victim}"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                hearth_api::names::ALLOWED_CLUSTERS_ANNOTATION: thief } } })),
        )
        .await?;
    w.wait_kubeconfig(&thief, KubeconfigStatus::Valid).await?;
    w.assert_healthy(&victim).await?;
    w.assert_alive().await?;
    w.assert_nothing_leaked().await?;
    Ok(())
}

/// Issue 24, item 7: anyone on the pod network may open connections to the admin port
/// and send nothing, or half a request. The kubelet's probes (one second to answer) must
/// still be answered, or it restarts every controller.
#[tokio::test]
async fn idle_connections_to_the_admin_port_do_not_starve_the_probes() -> Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let mut w = Hostile::new("hostile_admin_idle").await?;
    w.start(&[Controller::LockManager]).await?;
    let addr = w.controllers[0].admin_addr()?;
    let mut held = Vec::new();
    for i in 0..100 {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        if i % 2 == 1 {
            stream.write_all(b"GET /read").await?;
        }
        held.push(stream);
    }
    for path in ["/healthz", "/readyz", "/healthz"] {
        let (code, body) = tokio::time::timeout(Duration::from_secs(1), http_get(addr, path))
            .await
            .with_context(|| format!("{path} not answered within a second"))??;
        ensure!(code == 200, "{path} answered {code}: {body}");
    }
    drop(held);
    w.assert_alive().await
}
