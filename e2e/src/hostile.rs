//! Hostile input for the hostile end-to-end tests: kubeconfigs from the checked-in
//! fixtures (`e2e/fixtures/hostile/`) with the planted token filled in, large ones
//! generated deterministically (`generated_*`), and the hostile tests' [`Hostile`]: one
//! test's [`crate::world::World`] on the shared plane with what only those tests do with
//! it (Secrets of any content, waits on a cluster's verdict, checks that every
//! controller lives and that the planted token leaked nowhere).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hearth_api::names::{CLUSTER_SLOT_RESOURCE, KUBECONFIG_SECRET_LABEL, condition_types};
use hearth_api::{FournosCluster, KubeconfigStatus};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};

use crate::hearth::Controller;
use crate::invariants::{entry, is_active, kueue_problems};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};
use crate::layout::PIDS_FILE;
use crate::process::{eventually, http_get, is_alive};
use crate::protocol::Pids;
use crate::{ControlPlane, HostileTarget};

/// How long any one expected change may take.
pub const DEADLINE: Duration = Duration::from_secs(90);
/// The token planted in every hostile kubeconfig: it must never be seen again.
pub const PLANTED: &str = "hearthPlantedToken7f3a9c2e51d84b06";
pub const ADMIN: &str = "e2e-admin";
const FAST: &[(&str, &str)] = &[
    ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "5"),
    ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "3"),
];

fn fixture(name: &str) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hostile")
        .join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// A fixture with the target's URL and CA and the planted token filled in.
pub fn hostile(name: &str, server: &str, ca_pem: &str) -> Result<Vec<u8>> {
    Ok(fixture(name)?
        .replace("__SERVER__", server)
        .replace("__CA_DATA__", &B64.encode(ca_pem))
        .replace("__TOKEN__", PLANTED)
        .into_bytes())
}

/// xorshift64*: deterministic garbage without a dependency.
pub fn garbage(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// 64 KiB of binary garbage (invalid UTF-8 from the first bytes on).
pub fn generated_binary_garbage() -> Vec<u8> {
    let mut data = vec![0xff, 0xfe, 0x00];
    data.extend(garbage(64 * 1024, 0x1234_5678));
    data
}

/// A working kubeconfig padded with a comment to just under 1 MiB, the most a Secret
/// holds: big, but it must still be accepted.
pub fn generated_one_mib_kubeconfig(valid: &str) -> Vec<u8> {
    const SIZE: usize = 1024 * 1024 - 4096;
    let mut text = String::from(valid);
    text.push('\n');
    while text.len() < SIZE {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    text.into_bytes()
}

/// A kubeconfig whose `clusters` is about 1 MiB of nested flow sequences.
pub fn generated_deep_nesting() -> Vec<u8> {
    let depth = 400 * 1024;
    let mut text = String::from("apiVersion: v1\nkind: Config\nclusters: ");
    text.push_str(&"[".repeat(depth));
    text.push_str(&"]".repeat(depth));
    text.push('\n');
    text.into_bytes()
}

/// base64 of base64 of garbage: passes the double-base64 door, then is not text.
pub fn generated_double_base64_garbage() -> Vec<u8> {
    B64.encode(B64.encode(garbage(4096, 0xdead_beef)))
        .into_bytes()
}

/// One test's [`crate::world::World`] on the shared plane, and what only the
/// hostile tests do with it.
pub struct Hostile(crate::world::World<'static>);

impl std::ops::Deref for Hostile {
    type Target = crate::world::World<'static>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Hostile {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Hostile {
    pub async fn new(test: &str) -> Result<Hostile> {
        let plane = ControlPlane::shared().await?;
        let scope = plane.isolated(test).await?;
        let mut world = crate::world::World::new(plane, scope).await?;
        world.deadline = DEADLINE;
        Ok(Hostile(world))
    }

    pub async fn start(&mut self, controllers: &[Controller]) -> Result<()> {
        self.start_with(controllers, &[]).await
    }

    /// Starts `controllers` with `extra` environment on top of [`FAST`].
    pub async fn start_with(
        &mut self,
        controllers: &[Controller],
        extra: &[(&str, &str)],
    ) -> Result<()> {
        let env: Vec<(&str, &str)> = FAST.iter().chain(extra).copied().collect();
        for &c in controllers {
            self.0.start(c, "0", &env).await?;
        }
        Ok(())
    }

    /// Stores `data` under `key` in Secret `name`, labeled as a kubeconfig Secret.
    pub async fn put_secret(&self, name: &str, key: &str, data: Vec<u8>) -> Result<()> {
        self.put_secret_data(name, BTreeMap::from([(key.to_owned(), ByteString(data))]))
            .await
    }

    /// Creates Secret `name` holding `data`, labeled as a kubeconfig Secret.
    pub async fn put_secret_data(
        &self,
        name: &str,
        data: BTreeMap<String, ByteString>,
    ) -> Result<()> {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.scope.secrets_namespace.clone()),
                labels: Some(BTreeMap::from([(
                    KUBECONFIG_SECRET_LABEL.to_owned(),
                    "true".to_owned(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        self.secrets
            .create(&PostParams::default(), &secret)
            .await
            .with_context(|| format!("creating Secret {name}"))?;
        Ok(())
    }

    /// Onboards `cluster` with a kubeconfig for the plane's first target.
    pub async fn onboard_healthy(&self, cluster: &str) -> Result<()> {
        let target = &self.plane.targets()[0];
        self.put_secret(
            &format!("kubeconfig-{cluster}"),
            "kubeconfig",
            target.node_reader_kubeconfig().as_bytes().to_vec(),
        )
        .await
    }

    pub fn describe(&self, name: &str) -> String {
        format!("while waiting on {name}\n{}", self.logs(15))
    }

    /// Waits for `kubeconfigStatus == status` with a `KubeconfigValid` condition that
    /// has a reason and a message; returns the condition's message.
    pub async fn wait_kubeconfig(&self, name: &str, status: KubeconfigStatus) -> Result<String> {
        let cluster = self
            .wait_cluster(name, &format!("kubeconfigStatus {status}"), |c| {
                let s = c.status.as_ref().ok_or("no status")?;
                if s.kubeconfig_status != Some(status) {
                    return Err(format!("{:?}", s.kubeconfig_status));
                }
                let cond =
                    condition(c, condition_types::KUBECONFIG_VALID).ok_or("no KubeconfigValid")?;
                if cond.reason.is_empty() || cond.message.is_empty() {
                    return Err("condition without reason or message".into());
                }
                Ok(())
            })
            .await?;
        Ok(condition(&cluster, condition_types::KUBECONFIG_VALID)
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default())
    }

    /// Healthy `cluster` is Valid with GPUs and has its quota in the test's queue, and the
    /// queue is one Kueue accepts.
    pub async fn assert_healthy(&self, cluster: &str) -> Result<()> {
        self.wait_kubeconfig(cluster, KubeconfigStatus::Valid)
            .await?;
        let queue = self.scope.cluster_queue.clone();
        eventually(
            &format!("{cluster}'s quota in {queue}"),
            DEADLINE,
            || async {
                let Some(cq) = self.queues.get_opt(&queue).await? else {
                    return Ok(None);
                };
                let quota = entry(&cq, cluster);
                let ok = quota
                    .as_ref()
                    .is_some_and(|q| q.get(CLUSTER_SLOT_RESOURCE) == Some(&100) && q.len() > 1)
                    && kueue_problems(&cq).is_empty()
                    && is_active(&cq);
                Ok(ok.then_some(()))
            },
        )
        .await
        .with_context(|| self.describe(cluster))
    }

    /// Onboards `cluster` with a kubeconfig for `target` holding the planted token.
    pub async fn onboard_hostile(&self, cluster: &str, target: &HostileTarget) -> Result<()> {
        let kubeconfig = kubeconfig_yaml(
            "hostile",
            &target.url(),
            target.ca_pem(),
            "u",
            &Credentials::Token(PLANTED.to_owned()),
        );
        self.put_secret(
            &format!("kubeconfig-{cluster}"),
            "kubeconfig",
            kubeconfig.into_bytes(),
        )
        .await
    }

    /// Waits for `GPUDiscovered=False` with `reason` and a message holding `words`;
    /// returns the message.
    pub async fn wait_discovery_failed(
        &self,
        name: &str,
        reason: &str,
        words: &str,
    ) -> Result<String> {
        let c = self
            .wait_cluster(
                name,
                &format!("GPUDiscovered {reason}: …{words}…"),
                |c| {
                    let g =
                        condition(c, condition_types::GPU_DISCOVERED).ok_or("no GPUDiscovered")?;
                    (g.status == "False" && g.reason == reason && g.message.contains(words))
                        .then_some(())
                        .ok_or_else(|| format!("{}: {}", g.reason, g.message))
                },
            )
            .await?;
        Ok(condition(&c, condition_types::GPU_DISCOVERED)
            .map(|g| g.message)
            .unwrap_or_default())
    }

    /// The pid of `controller` of this world, from the plane's pid file.
    pub fn pid_of(&self, controller: Controller) -> Result<u32> {
        let pids: Pids = serde_json::from_slice(
            &std::fs::read(self.plane.state_dir().join(PIDS_FILE)).context("reading pids")?,
        )?;
        let running = self
            .controllers
            .iter()
            .find(|c| c.controller == controller)
            .context("controller not started")?;
        pids.processes
            .iter()
            .find(|p| p.name == running.name())
            .map(|p| p.pid)
            .with_context(|| format!("{} missing from {PIDS_FILE}", running.name()))
    }

    /// Every controller of this world still runs (same pid as its start, alive) and
    /// answers `/healthz`; none logged a panic.
    pub async fn assert_alive(&self) -> Result<()> {
        let pids: Pids = serde_json::from_slice(
            &std::fs::read(self.plane.state_dir().join(PIDS_FILE)).context("reading pids")?,
        )?;
        for c in &self.controllers {
            let process = pids
                .processes
                .iter()
                .find(|p| p.name == c.name())
                .with_context(|| format!("{} missing from {PIDS_FILE}", c.name()))?;
            ensure!(
                is_alive(process.pid),
                "{} (pid {}) died",
                c.name(),
                process.pid
            );
            let addr = c.admin_addr()?;
            let (code, _) = http_get(addr, "/healthz").await?;
            ensure!(code == 200, "{} /healthz answered {code}", c.name());
            let log = c.log();
            ensure!(
                !log.contains("panicked"),
                "{} panicked:\n{}",
                c.name(),
                log.lines()
                    .filter(|l| l.contains("panicked"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        Ok(())
    }

    /// The planted token appears in no controller log, no Event and no FournosCluster.
    pub async fn assert_nothing_leaked(&self) -> Result<()> {
        let needles = [PLANTED.to_owned(), B64.encode(PLANTED)];
        let mut places: Vec<(String, String)> = self
            .controllers
            .iter()
            .map(|c| (format!("log of {}", c.name()), c.log()))
            .collect();
        for ns in [&self.scope.namespace, &self.scope.secrets_namespace] {
            let events: Api<Event> = Api::namespaced(self.client.clone(), ns);
            for e in events.list(&ListParams::default()).await?.items {
                places.push((
                    format!("Event {}", e.metadata.name.clone().unwrap_or_default()),
                    serde_json::to_string(&e)?,
                ));
            }
        }
        for c in self.clusters.list(&ListParams::default()).await?.items {
            places.push((
                format!(
                    "FournosCluster {}",
                    c.metadata.name.clone().unwrap_or_default()
                ),
                serde_json::to_string(&c.status)?,
            ));
        }
        if let Some(cq) = self.queues.get_opt(&self.scope.cluster_queue).await? {
            places.push(("the ClusterQueue".into(), serde_json::to_string(&cq)?));
        }
        for (place, text) in &places {
            for needle in &needles {
                ensure!(
                    !text.contains(needle),
                    "the planted token leaked into {place}"
                );
            }
        }
        ensure!(places.len() > 3, "nothing was searched");
        Ok(())
    }
}

pub fn condition(
    c: &FournosCluster,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .cloned()
}
