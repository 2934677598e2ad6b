//! Randomized worlds: any fleet converges to a valid fixpoint in a few rounds, and a place
//! once given stays.

use hearth_api::KubeconfigStatus;
use hearth_api::conditions;
use hearth_api::names::condition_types::KUEUE_SYNCED;
use serde_json::json;

use super::*;
use crate::testing::{
    SLOT, World, cluster, foreign_flavor, gpu, hearth_flavor, json, kueue_problems, queue,
};

/// xorshift64*: deterministic, no dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const MODELS: [&str; 5] = ["a100", "h100", "l40s", "mi300x", "b200"];
const STATUSES: [Option<KubeconfigStatus>; 4] = [
    Some(KubeconfigStatus::Valid),
    Some(KubeconfigStatus::Valid),
    Some(KubeconfigStatus::Unreachable),
    None,
];

fn random_cluster(rng: &mut Rng, i: u64) -> crate::testing::ClusterBuilder {
    let mut c = cluster(&format!("c{i}"))
        .created(rng.below(50) as i64)
        .kubeconfig(STATUSES[rng.below(4) as usize]);
    for model in MODELS {
        if rng.chance(30) {
            c = c.gpu(model, rng.below(9) as i64);
        }
    }
    if rng.chance(15) {
        c = c.uncounted();
    }
    c
}

/// Live clusters with an entry in the queue.
fn holders(world: &World) -> BTreeSet<String> {
    let Some(spec) = &world.queue else {
        return BTreeSet::new();
    };
    spec.resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .map(|f| f.name.clone())
        .filter(|name| world.is_hearths(name))
        .collect()
}

/// Quota, once given, stays: every cluster of `before` that is still live and counted
/// still has its entry.
fn check_places_kept(world: &World, before: &BTreeSet<String>, seed: u64) {
    let now = holders(world);
    for c in &world.clusters {
        let name = c.metadata.name.as_deref().unwrap();
        let observed = ObservedCluster::from_cluster(c);
        if before.contains(name) && !observed.deleting && observed.counted {
            assert!(now.contains(name), "seed {seed}: {name} lost its place");
        }
    }
}

/// Everything a converged world must satisfy.
fn check_converged(world: &World, foreign_group: &serde_json::Value, seed: u64) {
    let plan = world.plan();
    assert!(plan.is_noop(), "seed {seed}: {plan:#?}");
    let Some(spec) = &world.queue else {
        return;
    };
    assert!(
        kueue_problems(spec).is_empty(),
        "seed {seed}: {:?}",
        kueue_problems(spec)
    );
    let spec_json = json(spec);
    assert_eq!(
        spec_json["resourceGroups"][0], *foreign_group,
        "seed {seed}"
    );
    // Every Hearth entry names a live cluster with a flavor, and says what it reports.
    for group in &spec.resource_groups {
        for flavor in &group.flavors {
            if !world.is_hearths(&flavor.name) {
                continue;
            }
            let status = world.status(&flavor.name);
            let kueue = status.kueue.as_ref().expect("an entry has status.kueue");
            for quota in &flavor.resources {
                let n = hearth_api::kueue::quantity_to_i64(&quota.nominal_quota).unwrap();
                assert_eq!(
                    kueue.quotas.get(&quota.name).copied().unwrap_or(0),
                    n,
                    "seed {seed}"
                );
            }
        }
    }
    // No Hearth flavor without a live cluster.
    for flavor in &world.flavors {
        let name = flavor.metadata.name.as_deref().unwrap();
        if world.is_hearths(name) {
            assert!(
                world
                    .clusters
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(name)
                        && c.metadata.deletion_timestamp.is_none()),
                "seed {seed}: orphan {name} left"
            );
        }
    }
    for c in &world.clusters {
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = c.metadata.name.as_deref().unwrap();
        let status = world.status(name);
        let reason = &conditions::find(&status.conditions, KUEUE_SYNCED)
            .unwrap()
            .reason;
        let has_entry = spec
            .resource_groups
            .iter()
            .flat_map(|g| &g.flavors)
            .any(|f| f.name == name);
        assert_eq!(
            status.kueue.is_some(),
            has_entry,
            "seed {seed}: {name} {reason}"
        );
        if matches!(reason.as_str(), "Synced" | "Drained") {
            assert!(has_entry, "seed {seed}: {name} {reason}");
        }
        if !ObservedCluster::from_cluster(c).counted {
            assert!(!has_entry, "seed {seed}: {name} never counted, {reason}");
            assert_eq!(reason, "WaitingForDiscovery", "seed {seed}: {name}");
        }
    }
}

#[test]
fn random_worlds_converge_to_a_valid_fixpoint_and_stay_there() {
    for seed in 1..=150u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let foreign_group = json!({
            "coveredResources": ["cpu"],
            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "10"}]}],
        });
        let mut groups = vec![foreign_group.clone()];
        if rng.chance(50) {
            groups.push(json!({
                "coveredResources": [SLOT, gpu("h100"), "memory"],
                "flavors": [{"name": "gitops", "resources": [
                    {"name": SLOT, "nominalQuota": "3"},
                    {"name": gpu("h100"), "nominalQuota": rng.below(3).to_string()},
                    {"name": "memory", "nominalQuota": "1Gi"},
                ]}],
            }));
        }
        let count = if rng.chance(10) { 70 } else { rng.below(12) };
        let mut world = World::new()
            .with_queue(Some(queue(
                json!({"cohortName": "x", "resourceGroups": groups}),
            )))
            .with_clusters((0..count).map(|i| random_cluster(&mut rng, i)))
            .with_flavors([foreign_flavor("default"), foreign_flavor("gitops")]);
        if rng.chance(30) {
            world.flavors.push(hearth_flavor("orphan"));
        }
        assert!(world.converge() <= 3, "seed {seed}");
        check_converged(&world, &foreign_group, seed);

        // The fleet changes: clusters go, come, change; then it converges again.
        for _ in 0..3 {
            let before = holders(&world);
            for i in 0..count {
                let name = format!("c{i}");
                if !world
                    .clusters
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(&name))
                {
                    // Arriving now, but possibly older than clusters with a place (a
                    // late watch event, a restart): it must not displace them.
                    if rng.chance(30) {
                        let created = rng.below(150) as i64;
                        world
                            .clusters
                            .push(random_cluster(&mut rng, i).created(created).build());
                    }
                    continue;
                }
                match rng.below(10) {
                    0 => world.remove_cluster(&name),
                    1 => {
                        world.cluster_mut(&name).metadata.deletion_timestamp =
                            Some(crate::testing::at(1))
                    }
                    2 | 3 => {
                        let fresh = random_cluster(&mut rng, i).build();
                        let c = world.cluster_mut(&name);
                        if c.metadata.deletion_timestamp.is_none() {
                            c.status.as_mut().unwrap().hardware =
                                fresh.status.as_ref().unwrap().hardware.clone();
                            c.status.as_mut().unwrap().kubeconfig_status =
                                fresh.status.unwrap().kubeconfig_status;
                        }
                    }
                    _ => {}
                }
            }
            assert!(world.converge() <= 3, "seed {seed}");
            check_converged(&world, &foreign_group, seed);
            check_places_kept(&world, &before, seed);
        }
    }
}
