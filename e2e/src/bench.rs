//! The pure parts of `hearth-bench`: latency summaries, a process's memory and CPU from
//! `/proc`, and API requests per user from the management apiserver's audit log.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// p50/p95/p99/max of a set of latencies, in seconds (nearest-rank percentiles).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    /// Absent from results written before it was measured.
    #[serde(default)]
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// `None` for no samples.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let r = (p * sorted.len() as f64).ceil() as usize;
        sorted[r.clamp(1, sorted.len()) - 1]
    };
    Some(Summary {
        n: sorted.len(),
        p50: rank(0.50),
        p95: rank(0.95),
        p99: rank(0.99),
        max: sorted[sorted.len() - 1],
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
    })
}

/// Resident memory and CPU time (user + system) of one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub rss_kib: u64,
    pub cpu_seconds: f64,
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `utime + stime` of `/proc/<pid>/stat`, in clock ticks. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on).
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// Memory and CPU of `pid` now.
pub fn usage(pid: u32, ticks_per_second: u64) -> std::io::Result<Usage> {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let bad = |what: &str| std::io::Error::other(format!("cannot parse {what} of pid {pid}"));
    let status = std::fs::read_to_string(proc_dir.join("status"))?;
    let stat = std::fs::read_to_string(proc_dir.join("stat"))?;
    Ok(Usage {
        rss_kib: parse_vm_rss_kib(&status).ok_or_else(|| bad("status"))?,
        cpu_seconds: parse_stat_cpu_ticks(&stat).ok_or_else(|| bad("stat"))? as f64
            / ticks_per_second as f64,
    })
}

/// Requests of one user, split into reads, writes and Lease traffic (leader election,
/// any verb), and by `verb resource`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApiLoad {
    pub reads: u64,
    pub writes: u64,
    pub leases: u64,
    pub by_request: BTreeMap<String, u64>,
}

/// What one request costs, for the idle-load table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Read,
    Write,
    /// Any request on `leases`: the price of leader election, reported apart.
    Lease,
}

/// `get`, `list` and `watch` are reads, every other verb a write; anything on `leases`
/// is Lease traffic whatever its verb.
pub fn classify(verb: &str, resource: Option<&str>) -> RequestKind {
    if resource == Some("leases") {
        RequestKind::Lease
    } else if matches!(verb, "get" | "list" | "watch") {
        RequestKind::Read
    } else {
        RequestKind::Write
    }
}

#[derive(Deserialize)]
struct AuditEvent {
    stage: String,
    verb: String,
    user: AuditUser,
    #[serde(rename = "objectRef")]
    object_ref: Option<AuditObjectRef>,
}

#[derive(Deserialize)]
struct AuditUser {
    username: String,
}

#[derive(Deserialize)]
struct AuditObjectRef {
    resource: Option<String>,
    subresource: Option<String>,
}

/// Tallies audit log lines (JSON, one event per line) by username, for `users` only. A
/// request counts once: a watch when it starts (`ResponseStarted`; it may never
/// complete), anything else when it completes; kinds as [`classify`] says.
pub fn tally_audit<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    users: &[String],
) -> BTreeMap<String, ApiLoad> {
    let mut out: BTreeMap<String, ApiLoad> = users
        .iter()
        .map(|u| (u.clone(), ApiLoad::default()))
        .collect();
    for line in lines {
        let Ok(event) = serde_json::from_str::<AuditEvent>(line) else {
            continue;
        };
        let counted_stage = if event.verb == "watch" {
            "ResponseStarted"
        } else {
            "ResponseComplete"
        };
        if event.stage != counted_stage {
            continue;
        }
        let Some(load) = out.get_mut(&event.user.username) else {
            continue;
        };
        let resource = event
            .object_ref
            .as_ref()
            .and_then(|o| o.resource.as_deref());
        match classify(&event.verb, resource) {
            RequestKind::Read => load.reads += 1,
            RequestKind::Write => load.writes += 1,
            RequestKind::Lease => load.leases += 1,
        }
        let resource = event
            .object_ref
            .map(|o| match (o.resource, o.subresource) {
                (Some(r), Some(s)) => format!("{r}/{s}"),
                (Some(r), None) => r,
                _ => "-".to_owned(),
            })
            .unwrap_or_else(|| "-".to_owned());
        *load
            .by_request
            .entry(format!("{} {resource}", event.verb))
            .or_default() += 1;
    }
    out
}

/// Whether flavor `flavor` of a ClusterQueue (as JSON: a peer may write quotas as
/// numbers) has a nonzero `fournos/gpu-*` quota.
pub fn flavor_has_gpu_quota(cluster_queue: &serde_json::Value, flavor: &str) -> bool {
    groups(cluster_queue)
        .flat_map(|g| g["flavors"].as_array().into_iter().flatten())
        .filter(|f| f["name"] == flavor)
        .flat_map(|f| f["resources"].as_array().into_iter().flatten())
        .any(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("fournos/gpu-"))
                && quota(&r["nominalQuota"]).is_some_and(|q| q > 0)
        })
}

/// Flavors Kueue's validation refuses: their resources are not exactly the group's
/// `coveredResources`, in order (one such flavor makes the whole ClusterQueue invalid).
pub fn invalid_flavors(cluster_queue: &serde_json::Value) -> usize {
    groups(cluster_queue)
        .map(|g| {
            let covered = g["coveredResources"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            g["flavors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| {
                    let names: Vec<&serde_json::Value> = f["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| &r["name"])
                        .collect();
                    names != covered.iter().collect::<Vec<_>>()
                })
                .count()
        })
        .sum()
}

fn groups(cluster_queue: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    cluster_queue["spec"]["resourceGroups"]
        .as_array()
        .into_iter()
        .flatten()
}

/// An integer quota written as a number or as a plain integer string.
fn quota(value: &serde_json::Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.p50, s.p95, s.max, s.mean), (5, 3.0, 5.0, 5.0, 3.0));
        let s = summarize(&[0.5]).unwrap();
        assert_eq!((s.p50, s.p95, s.max), (0.5, 0.5, 0.5));
        assert!(summarize(&[]).is_none());
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&hundred).unwrap();
        assert_eq!((s.p50, s.p95, s.p99), (50.0, 95.0, 99.0));
    }

    #[test]
    fn proc_fields() {
        let status = "Name:\thearth\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss_kib(status), Some(12345));
        let stat =
            "4242 (hearth (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 4 0 1 2 3";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(300));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn cluster_queue_checks_read_numbers_and_strings() {
        let cq = serde_json::json!({"spec": {"resourceGroups": [{
            "coveredResources": ["fournos/cluster-slot", "fournos/gpu-h100"],
            "flavors": [
                {"name": "a", "resources": [
                    {"name": "fournos/cluster-slot", "nominalQuota": 100},
                    {"name": "fournos/gpu-h100", "nominalQuota": 8}]},
                {"name": "b", "resources": [
                    {"name": "fournos/cluster-slot", "nominalQuota": "100"},
                    {"name": "fournos/gpu-h100", "nominalQuota": "0"}]},
                {"name": "c", "resources": [
                    {"name": "fournos/cluster-slot", "nominalQuota": 100}]},
                {"name": "d", "resources": [
                    {"name": "fournos/gpu-h100", "nominalQuota": "4"},
                    {"name": "fournos/cluster-slot", "nominalQuota": 100}]},
            ],
        }]}});
        assert!(flavor_has_gpu_quota(&cq, "a"));
        assert!(!flavor_has_gpu_quota(&cq, "b"));
        assert!(!flavor_has_gpu_quota(&cq, "c"));
        assert!(flavor_has_gpu_quota(&cq, "d"));
        assert!(!flavor_has_gpu_quota(&cq, "missing"));
        // c misses a covered resource, d has them out of order.
        assert_eq!(invalid_flavors(&cq), 2);
        assert_eq!(invalid_flavors(&serde_json::json!({})), 0);
    }

    #[test]
    fn lease_traffic_is_its_own_kind() {
        assert_eq!(classify("get", Some("leases")), RequestKind::Lease);
        assert_eq!(classify("update", Some("leases")), RequestKind::Lease);
        assert_eq!(classify("watch", Some("secrets")), RequestKind::Read);
        assert_eq!(classify("list", None), RequestKind::Read);
        assert_eq!(classify("patch", Some("clusterqueues")), RequestKind::Write);
        assert_eq!(classify("create", Some("events")), RequestKind::Write);
    }

    #[test]
    fn audit_tally() {
        let user = "system:serviceaccount:hearth-x:hearth-discovery".to_owned();
        let line = |stage: &str, verb: &str, resource: &str, sub: Option<&str>| {
            serde_json::json!({
                "kind": "Event", "level": "Metadata", "stage": stage, "verb": verb,
                "user": { "username": user },
                "objectRef": { "resource": resource, "subresource": sub },
            })
            .to_string()
        };
        let lines = [
            line("ResponseStarted", "watch", "secrets", None),
            line("ResponseComplete", "watch", "secrets", None),
            line("ResponseComplete", "list", "fournosclusters", None),
            line(
                "ResponseComplete",
                "patch",
                "fournosclusters",
                Some("status"),
            ),
            line(
                "ResponseStarted",
                "patch",
                "fournosclusters",
                Some("status"),
            ),
            line("ResponseComplete", "get", "leases", None),
            line("ResponseComplete", "patch", "leases", None),
            "not json".to_owned(),
            serde_json::json!({"stage": "ResponseComplete", "verb": "get",
                "user": {"username": "someone-else"}})
            .to_string(),
        ];
        let tally = tally_audit(
            lines.iter().map(String::as_str),
            std::slice::from_ref(&user),
        );
        let load = &tally[&user];
        assert_eq!((load.reads, load.writes, load.leases), (2, 1, 2));
        assert_eq!(load.by_request["patch leases"], 1);
        assert_eq!(load.by_request["patch fournosclusters/status"], 1);
        assert_eq!(load.by_request["watch secrets"], 1);
        assert_eq!(tally.len(), 1);
    }
}
