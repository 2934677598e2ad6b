//! What `status` shows of a FournosCluster, as a row for the table and for json/yaml.
//! Pure: the row is computed from the object and the current time.

use std::collections::BTreeMap;

use hearth_api::conditions::find;
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use hearth_api::names::condition_types::{KUEUE_SYNCED, LOCKED, SCHEDULABLE};
use hearth_api::text::bounded;
use hearth_api::{FournosCluster, Hardware};
use jiff::Timestamp;
use serde::Serialize;

/// The fleet view of one cluster. Also the json/yaml output of `status`, `lock`, `unlock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    /// `Valid`, `Missing`, `Invalid`, `Unauthorized`, `Unreachable`, or `Unknown` (not probed yet).
    pub kubeconfig: String,
    pub total_gpus: i64,
    /// Physical GPUs per short model name, e.g. `{"a100": 8}`.
    pub gpus: BTreeMap<String, i64>,
    /// The cluster's pool labels (the `--pool-label-keys` it carries), e.g.
    /// `{"fournos.dev/pool": "b"}`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, String>,
    pub quota: Quota,
    pub lock: Lock,
    /// `spec.cordon` and how far the drain is, while cordoned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cordon: Option<CordonView>,
    /// Driver versions per short model name, as discovery read them from node labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub drivers: BTreeMap<String, Vec<String>>,
    /// The target's Kubernetes version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    /// The `KueueSynced` reason (`Synced`, `Drained`, `LimitReached`…), `Unknown` when
    /// kueue-sync has not reported.
    pub reason: String,
    /// Published `fournos/cluster-slot` quota (0 while drained).
    pub slots: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lock {
    pub owner: Option<String>,
    pub state: LockState,
    pub ttl: Option<String>,
    pub expires_at: Option<String>,
    /// The `Locked` condition's reason while a wanted lock is not held.
    pub waiting_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CordonView {
    pub reason: String,
    pub by: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// The `Schedulable` reason (`Cordoned`, `Drained`, `CordonOverdue`), `NotSeenYet`
    /// before kueue-sync has reported on the cordon.
    pub state: String,
    /// Workloads still admitted on the cluster's flavor (`status.admittedWorkloads`).
    pub admitted_workloads: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LockState {
    /// Nobody owns the cluster.
    Free,
    /// An owner is set and the sentinel is admitted.
    Held,
    /// An owner is set and the sentinel is not admitted (yet).
    Waiting,
    /// No owner, but the sentinel still holds the slots.
    Releasing,
}

impl LockState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Free => "-",
            Self::Held => "held",
            Self::Waiting => "waiting",
            Self::Releasing => "releasing",
        }
    }
}

/// The label keys of `--pool-label-keys` (comma-separated, blanks dropped).
pub fn pool_keys(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

impl ClusterRow {
    /// The row with `fc`'s labels of `keys` as its pools.
    pub fn with_pools(mut self, fc: &FournosCluster, keys: &[String]) -> Self {
        let labels = fc.metadata.labels.clone().unwrap_or_default();
        self.pools = keys
            .iter()
            .filter_map(|k| labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        self
    }
}

/// `spec.owner`, treating an empty string as unset (as lock-manager does).
pub fn owner(fc: &FournosCluster) -> Option<&str> {
    fc.spec.owner.as_deref().filter(|o| !o.is_empty())
}

/// Whether `fc`'s lock is held by its current owner: the sentinel is admitted
/// (`locked`), `Locked=True/Held`, and lock-manager acted on this owner.
pub fn is_held(fc: &FournosCluster) -> bool {
    let Some(status) = fc.status.as_ref() else {
        return false;
    };
    status.locked == Some(true)
        && find(&status.conditions, LOCKED).is_some_and(|c| c.status == "True")
        && owner(fc).is_some()
        && status.lock_owner.as_deref() == owner(fc)
}

pub fn row(fc: &FournosCluster) -> ClusterRow {
    let status = fc.status.clone().unwrap_or_default();
    let hardware = status.hardware.clone().unwrap_or_default();
    let synced = find(&status.conditions, KUEUE_SYNCED);
    let locked = find(&status.conditions, LOCKED);
    let owner = owner(fc).map(str::to_owned);
    let state = match (&owner, status.locked == Some(true)) {
        (None, false) => LockState::Free,
        (None, true) => LockState::Releasing,
        (Some(_), _) if is_held(fc) => LockState::Held,
        (Some(_), _) => LockState::Waiting,
    };
    ClusterRow {
        name: fc.metadata.name.clone().unwrap_or_default(),
        kubeconfig: status
            .kubeconfig_status
            .map_or("Unknown", |s| s.as_str())
            .to_owned(),
        total_gpus: hardware.total_gpus,
        // Two models may share a short name (and so a quota resource): add them up.
        gpus: hardware
            .gpus
            .iter()
            .fold(BTreeMap::new(), |mut by_name, g| {
                *by_name.entry(g.short_name.clone()).or_default() += g.count;
                by_name
            }),
        pools: BTreeMap::new(),
        quota: Quota {
            reason: synced.map_or_else(|| "Unknown".to_owned(), |c| c.reason.clone()),
            slots: status
                .kueue
                .as_ref()
                .and_then(|k| k.quotas.get(CLUSTER_SLOT_RESOURCE).copied()),
        },
        cordon: fc.spec.cordon.as_ref().map(|c| CordonView {
            reason: c.reason.clone(),
            by: c.by.clone(),
            since: c.since.as_ref().map(|t| t.0.to_string()),
            until: c.until.as_ref().map(|t| t.0.to_string()),
            state: find(&status.conditions, SCHEDULABLE)
                .filter(|s| s.status == "False")
                .map_or_else(|| "NotSeenYet".to_owned(), |s| s.reason.clone()),
            admitted_workloads: status.admitted_workloads,
        }),
        drivers: drivers(&hardware),
        kubernetes_version: hardware.kubernetes_version.clone(),
        lock: Lock {
            waiting_reason: (state == LockState::Waiting).then(|| {
                locked
                    .filter(|_| status.lock_owner.as_deref() == owner.as_deref())
                    .map_or_else(|| "NotSeenYet".to_owned(), |c| c.reason.clone())
            }),
            owner,
            state,
            ttl: fc.spec.ttl.clone(),
            expires_at: status.lock_expires_at.as_ref().map(|t| t.0.to_string()),
        },
    }
}

/// Driver versions per short model name (models sharing a short name merged).
pub fn drivers(hardware: &Hardware) -> BTreeMap<String, Vec<String>> {
    hardware
        .gpus
        .iter()
        .filter(|g| !g.driver_versions.is_empty())
        .fold(BTreeMap::new(), |mut by_name, g| {
            let versions: &mut Vec<String> = by_name.entry(g.short_name.clone()).or_default();
            versions.extend(g.driver_versions.iter().cloned());
            versions.sort();
            versions.dedup();
            by_name
        })
}

/// `Kubernetes v1.31.4, drivers a100 550.54.15` (what discovery read), or empty.
pub fn platform_facts(hardware: &Hardware) -> String {
    let mut facts = Vec::new();
    if let Some(v) = &hardware.kubernetes_version {
        facts.push(format!("Kubernetes {v}"));
    }
    let drivers = drivers(hardware);
    if !drivers.is_empty() {
        let drivers = drivers
            .iter()
            .map(|(model, versions)| format!("{model} {}", versions.join("/")))
            .collect::<Vec<_>>()
            .join(", ");
        facts.push(format!("drivers {drivers}"));
    }
    bounded(&facts.join(", "), MAX_CELL * 2)
}

/// Longest table cell: the longest Kubernetes name, so only what no name can be is cut.
const MAX_CELL: usize = 253;

const HEADERS: [&str; 10] = [
    "NAME",
    "KUBECONFIG",
    "GPUS",
    "POOL",
    "QUOTA",
    "CORDON",
    "OWNER",
    "LOCK",
    "EXPIRES",
    "WAITING",
];

/// The rows as an aligned table, `kubectl get` style.
pub fn table(rows: &[ClusterRow], now: Timestamp) -> String {
    let mut lines = vec![HEADERS.map(str::to_owned)];
    lines.extend(rows.iter().map(|r| cells(r, now)));
    let mut widths = [0; HEADERS.len()];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    lines
        .iter()
        .map(|line| {
            // `{:<w$}` pads to `w` characters, as the widths count them.
            let cells: Vec<_> = line
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("{}\n", cells.join("   ").trim_end())
        })
        .collect()
}

fn cells(r: &ClusterRow, now: Timestamp) -> [String; 10] {
    let gpus = if r.gpus.is_empty() {
        r.total_gpus.to_string()
    } else {
        r.gpus
            .iter()
            .map(|(model, n)| format!("{n} {model}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // One key (the usual fournos.dev/pool): its value; several: key=value each.
    let pool = match r.pools.len() {
        0 => "-".to_owned(),
        1 => r.pools.values().next().cloned().unwrap_or_default(),
        _ => r
            .pools
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    };
    let quota = match (r.quota.reason.as_str(), r.quota.slots) {
        ("Synced", Some(slots)) => format!("{slots} slots"),
        ("Drained", _) => "0 (Drained)".to_owned(),
        (reason, _) => format!("none ({reason})"),
    };
    let cordon = match &r.cordon {
        None => "-".to_owned(),
        Some(c) => match (c.state.as_str(), c.admitted_workloads) {
            ("Drained", _) => "drained".to_owned(),
            ("CordonOverdue", _) => "overdue".to_owned(),
            (_, Some(n)) => format!("cordoned ({n} left)"),
            _ => "cordoned".to_owned(),
        },
    };
    let expires = r.lock.expires_at.as_deref().map_or_else(
        || "-".to_owned(),
        |at| {
            at.parse::<Timestamp>()
                .map_or(at.to_owned(), |t| relative(t, now))
        },
    );
    // Bounded before the widths are measured: a zero-width or escape character counted
    // as a column would misalign the table.
    [
        r.name.clone(),
        r.kubeconfig.clone(),
        gpus,
        pool,
        quota,
        cordon,
        r.lock.owner.clone().unwrap_or_else(|| "-".to_owned()),
        r.lock.state.as_str().to_owned(),
        expires,
        r.lock
            .waiting_reason
            .clone()
            .unwrap_or_else(|| "-".to_owned()),
    ]
    .map(|cell| bounded(&cell, MAX_CELL))
}

/// `prefix` and `value` when there is a value, else nothing: an optional part of a sentence.
pub fn prefixed(prefix: &str, value: Option<impl std::fmt::Display>) -> String {
    value.map(|v| format!("{prefix}{v}")).unwrap_or_default()
}

/// `in 3h59m`, `2m ago`: minutes are precise enough for a lock.
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    let secs = at.as_second() - now.as_second();
    let span = short_span(secs.unsigned_abs());
    if secs >= 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// `45s`, `12m`, `3h59m`, `2d4h`.
pub fn short_span(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3_600, secs % 3_600 / 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{secs}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hearth_api::names::POOL_LABEL;
    use hearth_api::{FournosClusterSpec, FournosClusterStatus, GpuInfo, Hardware, KueueStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use pretty_assertions::assert_eq;

    pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: Some(1),
        }
    }

    /// A Valid cluster with 8 A100s and its 100 slots published.
    pub fn cluster(name: &str) -> FournosCluster {
        let mut fc = FournosCluster::new(
            name,
            FournosClusterSpec {
                kubeconfig_secret: format!("kubeconfig-{name}"),
                ..Default::default()
            },
        );
        fc.status = Some(FournosClusterStatus {
            kubeconfig_status: Some(hearth_api::KubeconfigStatus::Valid),
            gpu_summary: Some("8x NVIDIA-A100-SXM4-80GB".into()),
            hardware: Some(Hardware {
                gpus: vec![GpuInfo {
                    vendor: "NVIDIA".into(),
                    model: "NVIDIA-A100-SXM4-80GB".into(),
                    short_name: "a100".into(),
                    count: 8,
                    node_count: 2,
                    driver_versions: Vec::new(),
                }],
                total_gpus: 8,
                ..Default::default()
            }),
            kueue: Some(KueueStatus {
                flavor: name.into(),
                cluster_queue: "fournos-queue".into(),
                quotas: [
                    (CLUSTER_SLOT_RESOURCE.to_owned(), 100),
                    ("fournos/gpu-a100".to_owned(), 8),
                ]
                .into(),
                cluster_slots: 100,
            }),
            conditions: vec![condition(KUEUE_SYNCED, "True", "Synced", "published")],
            ..Default::default()
        });
        fc
    }

    pub fn with_lock(mut fc: FournosCluster, owner: &str, held: bool) -> FournosCluster {
        fc.spec.owner = Some(owner.into());
        let status = fc.status.get_or_insert_with(Default::default);
        status.lock_owner = Some(owner.into());
        status.locked = Some(held);
        status.conditions.push(if held {
            condition(LOCKED, "True", "Held", "held")
        } else {
            condition(
                LOCKED,
                "False",
                "WaitingForAdmission",
                "Sentinel cluster-lock-a waits for Kueue to admit it: insufficient unused quota",
            )
        });
        fc
    }

    #[test]
    fn a_free_valid_cluster() {
        let r = row(&cluster("a"));
        assert_eq!(r.kubeconfig, "Valid");
        assert_eq!(r.gpus, BTreeMap::from([("a100".to_owned(), 8)]));
        assert_eq!(
            r.quota,
            Quota {
                reason: "Synced".into(),
                slots: Some(100)
            }
        );
        assert_eq!(r.lock.state, LockState::Free);
        assert_eq!(r.lock.waiting_reason, None);
    }

    #[test]
    fn lock_states() {
        assert_eq!(
            row(&with_lock(cluster("a"), "alice", true)).lock.state,
            LockState::Held
        );
        let waiting = row(&with_lock(cluster("a"), "alice", false));
        assert_eq!(waiting.lock.state, LockState::Waiting);
        assert_eq!(
            waiting.lock.waiting_reason.as_deref(),
            Some("WaitingForAdmission")
        );

        // lock-manager still reports on alice's lock: bob's is not seen yet.
        let mut changed = with_lock(cluster("a"), "alice", true);
        changed.spec.owner = Some("bob".into());
        let r = row(&changed);
        assert_eq!(r.lock.state, LockState::Waiting);
        assert_eq!(r.lock.waiting_reason.as_deref(), Some("NotSeenYet"));

        let mut releasing = with_lock(cluster("a"), "alice", true);
        releasing.spec.owner = None;
        assert_eq!(row(&releasing).lock.state, LockState::Releasing);
    }

    #[test]
    fn drivers_and_the_kubernetes_version_are_shown() {
        let mut fc = cluster("a");
        let hardware = fc.status.as_mut().unwrap().hardware.as_mut().unwrap();
        hardware.gpus[0].driver_versions = vec!["535.104.05".into(), "550.54.15".into()];
        hardware.kubernetes_version = Some("v1.34.1".into());
        let r = row(&fc);
        assert_eq!(
            r.drivers,
            BTreeMap::from([(
                "a100".to_owned(),
                vec!["535.104.05".to_owned(), "550.54.15".to_owned()]
            )])
        );
        assert_eq!(r.kubernetes_version.as_deref(), Some("v1.34.1"));
        let facts = platform_facts(fc.status.as_ref().unwrap().hardware.as_ref().unwrap());
        assert_eq!(
            facts,
            "Kubernetes v1.34.1, drivers a100 535.104.05/550.54.15"
        );
    }

    #[test]
    fn an_unprobed_cluster_is_unknown() {
        let fc = FournosCluster::new("new", FournosClusterSpec::default());
        let r = row(&fc);
        assert_eq!(r.kubeconfig, "Unknown");
        assert_eq!(r.quota.reason, "Unknown");
        assert_eq!(r.total_gpus, 0);
    }

    #[test]
    fn the_table_is_aligned() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let mut held = with_lock(cluster("gpu-a"), "alice", true);
        held.status.as_mut().unwrap().lock_expires_at =
            Some(Time("2026-11-23T13:59:00Z".parse().unwrap()));
        let mut drained = cluster("b");
        let status = drained.status.as_mut().unwrap();
        status.kubeconfig_status = Some(hearth_api::KubeconfigStatus::Unreachable);
        status.conditions = vec![
            condition(KUEUE_SYNCED, "False", "Drained", "drained"),
            condition(SCHEDULABLE, "False", "Cordoned", "cordoned"),
        ];
        status.admitted_workloads = Some(2);
        drained.spec.cordon = Some(hearth_api::Cordon {
            reason: "rack move".into(),
            by: Some("bob".into()),
            ..Default::default()
        });
        held.metadata.labels = Some([(POOL_LABEL.to_owned(), "perf".to_owned())].into());
        let keys = pool_keys(&format!("{POOL_LABEL}, "));
        let text = table(&[row(&held).with_pools(&held, &keys), row(&drained)], now);
        assert_eq!(
            text,
            "NAME    KUBECONFIG    GPUS     POOL   QUOTA         CORDON              OWNER   LOCK   EXPIRES    WAITING\n\
             gpu-a   Valid         8 a100   perf   100 slots     -                   alice   held   in 3h59m   -\n\
             b       Unreachable   8 a100   -      0 (Drained)   cordoned (2 left)   -       -      -          -\n"
        );
    }

    #[test]
    fn cluster_text_cannot_drive_the_terminal_or_misalign_the_table() {
        use crate::print::tests::{HOSTILE, assert_shows_nothing_hidden};
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let mut fc = with_lock(cluster("a"), HOSTILE, false);
        let status = fc.status.as_mut().unwrap();
        status.conditions.last_mut().unwrap().reason = HOSTILE.into();
        status.hardware.as_mut().unwrap().gpus[0].short_name = HOSTILE.into();
        fc.spec.ttl = Some(HOSTILE.into());
        status.lock_expires_at = None;
        let text = table(&[row(&fc)], now);
        assert_shows_nothing_hidden(&text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let column = |line: &str, needle: &str| line[..line.find(needle).unwrap()].chars().count();
        assert_eq!(
            column(lines[0], "LOCK"),
            column(lines[1], "waiting"),
            "{text}"
        );

        let long = "o".repeat(10 * MAX_CELL);
        let text = table(&[row(&with_lock(cluster("a"), &long, false))], now);
        assert!(text.len() < 3 * MAX_CELL, "{text}");
    }

    #[test]
    fn spans_are_short() {
        assert_eq!(short_span(45), "45s");
        assert_eq!(short_span(600), "10m");
        assert_eq!(short_span(7200), "2h");
        assert_eq!(short_span(3 * 86_400 + 5 * 3600 + 60), "3d5h");
        let now = Timestamp::UNIX_EPOCH;
        let earlier = Timestamp::from_second(-120).unwrap();
        assert_eq!(relative(earlier, now), "2m ago");
    }
}
