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

/// The `p` quantile (0–1] of `total` samples of which only `finished` ended (the others
/// were still running at the deadline), with the nearest-rank rule of [`summarize`]:
/// `None` when that rank falls among the unfinished, i.e. the quantile is past the
/// deadline. Quantiles of the finished alone would call a run where 9 of 10 never got
/// there as fast as its one success.
pub fn censored_quantile(finished: &[f64], total: usize, p: f64) -> Option<f64> {
    let total = total.max(finished.len());
    if total == 0 {
        return None;
    }
    let mut sorted = finished.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p * total as f64).ceil() as usize).clamp(1, total);
    sorted.get(rank - 1).copied()
}

/// Resident memory and CPU time (user + system) of one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub rss_kib: u64,
    /// Of `rss_kib`: anonymous memory (heap, stacks) and file pages (the binary's code).
    #[serde(default)]
    pub rss_anon_kib: u64,
    #[serde(default)]
    pub rss_file_kib: u64,
    pub cpu_seconds: f64,
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    status_kib(status, "VmRSS:")
}

/// A `<field>   123 kB` line of `/proc/<pid>/status`, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
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
        rss_anon_kib: status_kib(&status, "RssAnon:").unwrap_or_default(),
        rss_file_kib: status_kib(&status, "RssFile:").unwrap_or_default(),
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

/// One line of a controller's JSON log (`HEARTH_LOG_FORMAT=json`) about one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEvent {
    pub at: k8s_openapi::jiff::Timestamp,
    pub message: String,
    pub cluster: String,
    /// The line's other fields.
    pub fields: serde_json::Value,
}

/// The lines of `log` whose message is one of `messages` and that name a `cluster`; lines
/// that are not JSON (or were cut at the log's line cap) are skipped.
pub fn log_events(log: &str, messages: &[&str]) -> Vec<LogEvent> {
    log.lines()
        .filter(|line| messages.iter().any(|m| line.contains(m)))
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|v| {
            let message = v["message"].as_str()?;
            if !messages.contains(&message) {
                return None;
            }
            Some(LogEvent {
                at: v["timestamp"].as_str()?.parse().ok()?,
                message: message.to_owned(),
                cluster: v["cluster"].as_str()?.to_owned(),
                fields: v.clone(),
            })
        })
        .collect()
}

/// One stage of onboarding over a batch: when it happened, counted from the Secret's
/// create request, and how long it took after the stage before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnboardingStage {
    pub stage: String,
    /// Where the timestamp comes from (a watch event's arrival, a controller's log line).
    pub source: String,
    pub since_secret: Option<Summary>,
    /// From the previous stage of the same cluster (both seen).
    pub step: Option<Summary>,
}

/// Stages from per-cluster seconds since each Secret's create request: `columns` are
/// `(stage, source, seconds per cluster)` in onboarding order, every column as long as
/// the batch (`None`: not seen for that cluster).
pub fn stages(columns: &[(&str, &str, Vec<Option<f64>>)]) -> Vec<OnboardingStage> {
    columns
        .iter()
        .enumerate()
        .map(|(i, (stage, source, times))| {
            let since: Vec<f64> = times.iter().flatten().copied().collect();
            let step: Vec<f64> = match i.checked_sub(1).map(|p| &columns[p].2) {
                None => since.clone(),
                Some(previous) => times
                    .iter()
                    .zip(previous)
                    .filter_map(|(t, p)| Some((*t)? - (*p)?))
                    .collect(),
            };
            OnboardingStage {
                stage: (*stage).to_owned(),
                source: (*source).to_owned(),
                since_secret: summarize(&since),
                step: summarize(&step),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_past_the_unfinished_is_past_the_deadline() {
        // One of ten finished, in 30 s: the median is past the deadline, not 30 s.
        assert_eq!(censored_quantile(&[30.0], 10, 0.5), None);
        assert_eq!(censored_quantile(&[30.0], 10, 0.1), Some(30.0));
        // All finished: the same ranks as summarize.
        let all = [0.3, 0.1, 0.2, 0.5, 0.4];
        let s = summarize(&all).unwrap();
        assert_eq!(censored_quantile(&all, 5, 0.5), Some(s.p50));
        assert_eq!(censored_quantile(&all, 5, 0.95), Some(s.p95));
        // Six of ten finished: the median is the fifth fastest, the p95 past the deadline.
        let six = [6.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(censored_quantile(&six, 10, 0.5), Some(5.0));
        assert_eq!(censored_quantile(&six, 10, 0.95), None);
        assert_eq!(censored_quantile(&[], 0, 0.5), None);
    }

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
    fn stages_count_from_the_secret_and_from_the_stage_before() {
        let s = stages(&[
            ("a", "watch", vec![Some(1.0), Some(2.0)]),
            ("b", "log", vec![Some(1.5), None]),
            ("c", "watch", vec![Some(3.0), Some(4.0)]),
        ]);
        assert_eq!(s[0].step.as_ref().unwrap().p50, 1.0);
        assert_eq!(s[1].since_secret.as_ref().unwrap().n, 1);
        assert_eq!(s[1].step.as_ref().unwrap().max, 0.5);
        // The second cluster has no b: its step to c is not counted.
        let c = s[2].step.as_ref().unwrap();
        assert_eq!((c.n, c.max), (1, 1.5));
        assert_eq!(s[2].since_secret.as_ref().unwrap().max, 4.0);
    }

    #[test]
    fn log_events_are_json_lines_naming_a_cluster() {
        let log = concat!(
            "{\"timestamp\":\"2026-11-25T03:00:00.250Z\",\"level\":\"DEBUG\",\"message\":\"probe started\",\"cluster\":\"c1\"}\n",
            "2026-11-25T03:00:00Z INFO probe started cluster=c2\n",
            "{\"timestamp\":\"2026-11-25T03:00:01Z\",\"message\":\"probe started\"}\n",
            "{\"timestamp\":\"2026-11-25T03:00:01Z\",\"message\":\"probed\",\"cluster\":\"c1\",\"result\":\"Discovered\"}\n",
        );
        let events = log_events(log, &["probe started", "probed"]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].cluster, "c1");
        assert_eq!(events[0].at.to_string(), "2026-11-25T03:00:00.25Z");
        assert_eq!(events[1].fields["result"], "Discovered");
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
