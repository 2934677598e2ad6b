//! Who holds a cluster's slots besides this Hearth's lock: the Workloads Kueue admitted
//! on the cluster's flavor. A Fournos `lockOnly` job made by another tool, an exclusive
//! job or a forged sentinel all take every slot; status (`slotHolders`) and
//! `kubectl fournos why` name them, so nobody is told a cluster is free while it is held.
//! Pure.

use hearth_api::SlotHolder;
use hearth_api::conditions::is_true;
use hearth_api::kueue::{Workload, assignments_on, slots_of, workload_conditions};
use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, OWNER_ANNOTATION};
use hearth_api::text::bounded;

use crate::fournos::JOB_NAME_LABEL;

/// Most holders named in status: the largest ones say who holds the cluster.
pub const MAX_HOLDERS: usize = 5;
/// Longest owner or job name taken from a Workload (anyone may write those).
const MAX_NAME: usize = 253;

/// The Workloads admitted (not evicted, not finished) on `flavor` with some of its
/// `fournos/cluster-slot`, except those `ours` says are this Hearth's lock; largest first,
/// then by name, at most [`MAX_HOLDERS`].
pub fn slot_holders<'a>(
    workloads: impl IntoIterator<Item = &'a Workload>,
    flavor: &str,
    ours: impl Fn(&Workload) -> bool,
) -> Vec<SlotHolder> {
    let mut found: Vec<SlotHolder> = workloads
        .into_iter()
        .filter(|w| holds_quota(w) && !ours(w))
        .filter_map(|w| {
            let slots = slots_on(w, flavor)?;
            let meta = &w.metadata;
            let job = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(JOB_NAME_LABEL))
                .cloned()
                .or_else(|| {
                    meta.owner_references
                        .iter()
                        .flatten()
                        .find(|o| o.kind == "FournosJob")
                        .map(|o| o.name.clone())
                });
            let owner = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(OWNER_ANNOTATION));
            Some(SlotHolder {
                workload: format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                ),
                job: job.map(|j| bounded(&j, MAX_NAME)),
                owner: owner.map(|o| bounded(o, MAX_NAME)),
                slots,
            })
        })
        .collect();
    found.sort_by(|a, b| {
        b.slots
            .cmp(&a.slots)
            .then_with(|| a.workload.cmp(&b.workload))
    });
    found.truncate(MAX_HOLDERS);
    found
}

fn holds_quota(w: &Workload) -> bool {
    let conditions = w
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    is_true(conditions, workload_conditions::ADMITTED)
        && !is_true(conditions, workload_conditions::EVICTED)
        && !is_true(conditions, workload_conditions::FINISHED)
}

/// `fournos/cluster-slot` the Workload was admitted with on `flavor`, as Kueue counted
/// it; a Workload whose count cannot be read is named with the slots it asks for on the
/// flavor unknown, as 0 (it is still a holder: Kueue admitted it there).
fn slots_on(w: &Workload, flavor: &str) -> Option<i64> {
    let mut on_flavor = assignments_on(w, flavor).peekable();
    on_flavor.peek()?;
    Some(slots_of(on_flavor).unwrap_or(0))
}

/// The flavor a Workload holds `fournos/cluster-slot` on, if it is admitted: the cluster
/// whose holders change when it does (Hearth names a cluster's flavor after it).
pub fn admitted_flavor(w: &Workload) -> Option<&str> {
    w.status
        .as_ref()?
        .admission
        .as_ref()?
        .pod_set_assignments
        .iter()
        .find_map(|a| a.flavors.get(CLUSTER_SLOT_RESOURCE).map(String::as_str))
}

/// Longest condition message kept (Kueue's words, quoted bounded anyway).
const MAX_MESSAGE: usize = 1024;

/// Keeps of a Workload only what lock-manager reads: its names, UID, creation and
/// deletion times, the job label, the FournosJob ownerReference and the owner
/// annotation (bounded), each pod set's name, count and cluster node selector, and its
/// conditions (messages bounded) and admission. Everything else, pod templates first,
/// can be large, is written by whoever may create Workloads, and is never read.
pub fn trim(w: &mut Workload) {
    let meta = &mut w.metadata;
    meta.managed_fields = None;
    meta.finalizers = None;
    meta.generate_name = None;
    if let Some(labels) = &mut meta.labels {
        labels.retain(|key, _| key == JOB_NAME_LABEL);
    }
    if let Some(annotations) = &mut meta.annotations {
        annotations.retain(|key, _| key == OWNER_ANNOTATION);
        for value in annotations.values_mut() {
            *value = bounded(value, MAX_NAME);
        }
    }
    if let Some(owners) = &mut meta.owner_references {
        owners.retain(|o| o.kind == "FournosJob");
        owners.truncate(1);
    }
    for ps in &mut w.spec.pod_sets {
        ps.other.clear();
        let cluster = ps.template.spec.as_ref().and_then(|spec| {
            spec.node_selector
                .as_ref()?
                .get(CLUSTER_NODE_LABEL)
                .cloned()
        });
        ps.template = Default::default();
        if let Some(cluster) = cluster {
            ps.template.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                node_selector: Some([(CLUSTER_NODE_LABEL.to_owned(), cluster)].into()),
                ..Default::default()
            });
        }
    }
    w.spec.other.clear();
    if let Some(status) = &mut w.status {
        status.other.clear();
        for c in &mut status.conditions {
            if c.message.len() > MAX_MESSAGE {
                c.message = bounded(&c.message, MAX_MESSAGE);
            }
        }
        if let Some(admission) = &mut status.admission {
            admission.other.clear();
            for a in &mut admission.pod_set_assignments {
                a.other.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn workload(name: &str, flavor: &str, slots: i64, conditions: &[&str]) -> Workload {
        workload_using(name, flavor, &slots.to_string(), conditions)
    }

    /// A Workload Kueue admitted (per `conditions`) on `flavor`, using `usage` of the
    /// cluster's slots by its own count.
    fn workload_using(name: &str, flavor: &str, usage: &str, conditions: &[&str]) -> Workload {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|t| {
                json!({"type": t, "status": "True", "reason": "R", "message": "",
                       "lastTransitionTime": "2026-11-25T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "exec", "uid": format!("uid-{name}"),
                         "labels": {"fournos.dev/job-name": name}},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "resources": {"requests": {"fournos/cluster-slot": usage}}}]}}}]},
            "status": {"conditions": conditions, "admission": {"clusterQueue": "q",
                "podSetAssignments": [{"name": "main", "flavors": {"fournos/cluster-slot": flavor},
                    "resourceUsage": {"fournos/cluster-slot": usage}, "count": 1}]}},
        }))
        .unwrap()
    }

    #[test]
    fn admitted_workloads_on_the_flavor_are_named_largest_first() {
        let all = [
            workload("shared", "a", 1, &["Admitted"]),
            workload("locker", "a", 100, &["QuotaReserved", "Admitted"]),
            workload("elsewhere", "b", 100, &["Admitted"]),
            workload("pending", "a", 100, &[]),
            workload("evicted", "a", 100, &["Admitted", "Evicted"]),
            workload("done", "a", 100, &["Admitted", "Finished"]),
            workload("mine", "a", 100, &["Admitted"]),
        ];
        let holders = slot_holders(&all, "a", |w| w.metadata.name.as_deref() == Some("mine"));
        assert_eq!(
            holders,
            vec![
                SlotHolder {
                    workload: "exec/locker".into(),
                    job: Some("locker".into()),
                    owner: None,
                    slots: 100
                },
                SlotHolder {
                    workload: "exec/shared".into(),
                    job: Some("shared".into()),
                    owner: None,
                    slots: 1
                },
            ]
        );
        assert_eq!(admitted_flavor(&all[2]), Some("b"));
    }

    #[test]
    fn trimming_keeps_what_the_holders_read() {
        let mut all = [
            workload("locker", "a", 100, &["Admitted"]),
            workload("shared", "a", 1, &["Admitted"]),
        ];
        let before = slot_holders(&all, "a", |_| false);
        for w in &mut all {
            w.spec.pod_sets[0]
                .template
                .spec
                .as_mut()
                .unwrap()
                .containers[0]
                .image = Some("x".repeat(10_000));
            w.metadata.annotations = Some(
                [
                    ("big".to_owned(), "y".repeat(10_000)),
                    (OWNER_ANNOTATION.to_owned(), "bob".to_owned()),
                ]
                .into(),
            );
        }
        let with_owner = slot_holders(&all, "a", |_| false);
        for w in &mut all {
            trim(w);
            assert!(serde_json::to_string(w).unwrap().len() < 2000);
        }
        assert_eq!(slot_holders(&all, "a", |_| false), with_owner);
        assert_eq!(before.len(), with_owner.len());
        assert_eq!(admitted_flavor(&all[0]), Some("a"));
    }

    #[test]
    fn at_most_five_are_named_and_their_text_is_bounded() {
        let mut all: Vec<Workload> = (0..9)
            .map(|i| workload(&format!("job-{i}"), "a", i + 1, &["Admitted"]))
            .collect();
        all[0].metadata.annotations = Some(
            [(
                OWNER_ANNOTATION.to_owned(),
                format!("eve\u{1b}[31m{}", "x".repeat(400)),
            )]
            .into(),
        );
        all[0]
            .status
            .as_mut()
            .unwrap()
            .admission
            .as_mut()
            .unwrap()
            .pod_set_assignments[0]
            .resource_usage
            .insert(CLUSTER_SLOT_RESOURCE.into(), Quantity("50".into()));
        let holders = slot_holders(&all, "a", |_| false);
        assert_eq!(holders.len(), MAX_HOLDERS);
        assert_eq!(holders[0].workload, "exec/job-0");
        assert_eq!(holders[0].slots, 50);
        let owner = holders[0].owner.as_deref().unwrap();
        assert!(!owner.contains('\u{1b}'), "{owner}");
        assert!(owner.chars().count() <= MAX_NAME + 1, "{owner}");
    }

    #[test]
    fn slots_are_counted_as_kueue_counts_them_whatever_the_notation() {
        let all = [
            workload_using("milli", "a", "99500m", &["Admitted"]),
            workload_using("second-container", "a", "1", &["Admitted"]),
            workload_using("unreadable", "a", "lots", &["Admitted"]),
        ];
        let holders = slot_holders(&all, "a", |_| false);
        let slots: Vec<_> = holders
            .iter()
            .map(|h| (h.workload.as_str(), h.slots))
            .collect();
        assert_eq!(
            slots,
            vec![
                ("exec/milli", 100),
                ("exec/second-container", 1),
                ("exec/unreadable", 0)
            ],
            "a Workload Kueue admitted on the flavor is named even when its count cannot be read"
        );
    }

    #[test]
    fn trimming_keeps_what_a_lock_proof_reads_and_drops_what_anyone_may_bloat() {
        let mut w = workload("cluster-lock-a", "a", 100, &["Admitted"]);
        w.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u0"})).unwrap(),
            serde_json::from_value(json!({"apiVersion": "fournos.dev/v1", "kind": "FournosJob", "name": "cluster-lock-a", "uid": "u1"})).unwrap(),
        ]);
        w.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("junk".into(), "z".repeat(63));
        w.spec.pod_sets[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_selector = Some([(CLUSTER_NODE_LABEL.to_owned(), "a".to_owned())].into());
        w.status.as_mut().unwrap().conditions[0].message = "m".repeat(100_000);
        let before = crate::fournos_workloads::observe_workload(&w);
        trim(&mut w);
        assert!(serde_json::to_string(&w).unwrap().len() < 3000);
        let after = crate::fournos_workloads::observe_workload(&w);
        assert_eq!(after.owner_uid.as_deref(), Some("u1"));
        assert_eq!(
            (after.job, after.slots, after.created, after.uid),
            (before.job, before.slots, before.created, before.uid)
        );
        assert_eq!(
            crate::fournos_workloads::lock_workload_cluster(&w),
            Some("a")
        );
    }
}
