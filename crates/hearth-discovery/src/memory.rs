//! What discovery remembers of each cluster between reconciles, and the rule that
//! decides when the watch cache has caught up with discovery's own status write.
//!
//! Losing all of it (a restart, a new leader) costs nothing but a look at the Secret
//! (see [`crate::schedule::probe_due`]). What it prevents is planning from a cache
//! that does not show the status this replica just wrote: that would probe again, or
//! count a failure twice.
//!
//! `resourceVersion` is opaque (Kubernetes promises only that it changes, not that it
//! grows), so the cache is never ordered against a write by comparing versions. The
//! cache shows a write when it holds that exact version or the watch delivered it on
//! the way ([`hearth_runtime::kit::Cache::shows`]), or when discovery's own
//! fields there equal what was written: discovery is their only writer, so a cache
//! that holds them holds the write or something after it. Until then the written
//! status is what discovery plans from, which is also right for those fields.
//!
//! A written status is kept only until the cache shows it. [`Memory::recall`] forgets it
//! when it finds it shown, but the next reconcile may be minutes away, so
//! [`Memory::forget_delivered`] forgets it as soon as the watch delivers the version the
//! write produced (milliseconds; seconds while a burst keeps the watch behind), looking
//! when the write returns and on every cache change. That look compares versions only,
//! as it runs that often; a write shown by its content alone (its version never came
//! by, say skipped by a re-list) waits for `recall`, as before. At rest a cluster costs
//! its fingerprint, not a second copy of the status its cache holds.

use std::collections::HashMap;

use hearth_api::{DiscoveryStatus, FournosClusterStatus};

use crate::status::{StatusDiff, diff_status};

/// A status this replica wrote, as the apiserver answered it.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The `resourceVersion` the write produced (compared for equality only).
    pub resource_version: Option<String>,
    pub status: FournosClusterStatus,
}

#[derive(Debug, Default)]
struct Entry {
    /// Fingerprint of the kubeconfig last probed (or found to agree with status).
    fingerprint: Option<u64>,
    /// The status last written, until the cache shows it. Boxed: a status is hundreds of
    /// bytes, and every cluster has an entry while few have a write in flight.
    written: Option<Box<Written>>,
}

/// Per cluster (by uid): the kubeconfig fingerprint last probed and the status last
/// written. Soft state.
#[derive(Debug, Default)]
pub struct Memory {
    entries: HashMap<String, Entry>,
}

/// A cluster as the watch cache shows it.
#[derive(Clone, Copy)]
pub struct Cached<'a> {
    pub uid: &'a str,
    pub resource_version: Option<&'a str>,
    pub status: Option<&'a FournosClusterStatus>,
    /// Whether the watch delivered a version of this cluster (the kit's
    /// [`Cache::shows`](hearth_runtime::kit::Cache::shows)): a write whose version came
    /// by is shown even once another writer's version replaced it.
    pub delivered: Option<&'a dyn Fn(&str) -> bool>,
}

impl Written {
    /// Whether `cached` shows this write (or something after it).
    pub fn shown_by(&self, cached: &Cached<'_>) -> bool {
        self.delivered_to(cached)
            || diff_status(cached.status, &DiscoveryStatus::of(&self.status)) == StatusDiff::Same
    }

    /// Whether `cached` holds the version this write produced, or the watch delivered it
    /// on the way: the half of [`Self::shown_by`] that compares no status.
    pub fn delivered_to(&self, cached: &Cached<'_>) -> bool {
        self.resource_version.as_deref().is_some_and(|written| {
            cached.resource_version == Some(written)
                || cached.delivered.is_some_and(|delivered| delivered(written))
        })
    }
}

impl Memory {
    /// The remembered fingerprint, and the status to plan from: the cached one, unless
    /// this replica wrote one that the cache does not show yet.
    pub fn recall(&mut self, cached: &Cached<'_>) -> (Option<u64>, Option<FournosClusterStatus>) {
        let Some(entry) = self.entries.get_mut(cached.uid) else {
            return (None, cached.status.cloned());
        };
        let status = match &entry.written {
            Some(written) if !written.shown_by(cached) => Some(written.status.clone()),
            _ => {
                entry.written = None;
                cached.status.cloned()
            }
        };
        (entry.fingerprint, status)
    }

    /// After a reconcile: the fingerprint it planned with, and its write, if any.
    pub fn remember(&mut self, uid: &str, fingerprint: u64, written: Option<Written>) {
        let entry = self.entries.entry(uid.to_owned()).or_default();
        entry.fingerprint = Some(fingerprint);
        if let Some(written) = written {
            entry.written = Some(Box::new(written));
        }
    }

    /// Forgets the status written to `cached`'s cluster once the watch delivered the
    /// version it produced: from then on [`Self::recall`] plans from the cache anyway.
    pub fn forget_delivered(&mut self, cached: &Cached<'_>) {
        if let Some(entry) = self.entries.get_mut(cached.uid)
            && entry
                .written
                .as_ref()
                .is_some_and(|w| w.delivered_to(cached))
        {
            entry.written = None;
        }
    }

    /// Whether a written status waits for the cache to show it.
    pub fn awaits_any(&self) -> bool {
        self.entries.values().any(|entry| entry.written.is_some())
    }

    /// Forgets clusters that are gone (by uid).
    pub fn forget_except(&mut self, live: impl Fn(&str) -> bool) {
        self.entries.retain(|uid, _| live(uid));
    }

    /// Forgets every write: another replica may have written since (leadership moved),
    /// and what it wrote is only in the cache.
    pub fn forget_writes(&mut self) {
        for entry in self.entries.values_mut() {
            entry.written = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::KubeconfigStatus;
    use pretty_assertions::assert_eq;

    fn status(kubeconfig: KubeconfigStatus, summary: &str) -> FournosClusterStatus {
        FournosClusterStatus {
            kubeconfig_status: Some(kubeconfig),
            gpu_summary: Some(summary.into()),
            ..Default::default()
        }
    }

    /// A status as cached before a write, and the status that write sends.
    fn before_and_written() -> (FournosClusterStatus, FournosClusterStatus) {
        (
            status(KubeconfigStatus::Unreachable, ""),
            status(KubeconfigStatus::Valid, "8x NVIDIA-A100"),
        )
    }

    fn cached<'a>(rv: &'a str, status: &'a FournosClusterStatus) -> Cached<'a> {
        Cached {
            uid: "u1",
            resource_version: Some(rv),
            status: Some(status),
            delivered: None,
        }
    }

    fn wrote(rv: &str, status: &FournosClusterStatus) -> Memory {
        let mut memory = Memory::default();
        memory.remember(
            "u1",
            7,
            Some(Written {
                resource_version: Some(rv.into()),
                status: status.clone(),
            }),
        );
        memory
    }

    #[test]
    fn without_memory_the_cache_is_planned_from() {
        let old = status(KubeconfigStatus::Unreachable, "");
        let mut memory = Memory::default();
        assert_eq!(memory.recall(&cached("5", &old)), (None, Some(old.clone())));
    }

    #[test]
    fn a_cache_behind_the_write_gives_the_written_status() {
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        assert_eq!(
            memory.recall(&cached("11", &old)),
            (Some(7), Some(new.clone()))
        );
        // Still behind at the next look: still the written one.
        assert_eq!(memory.recall(&cached("11", &old)).1, Some(new));
    }

    #[test]
    fn the_written_version_in_the_cache_ends_the_memory() {
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        // The cache holds the write's own version, as the apiserver stored it (which
        // need not be byte for byte what was sent): that is the truth from now on.
        let as_stored = status(KubeconfigStatus::Valid, "8x NVIDIA-A100-SXM4");
        assert_eq!(memory.recall(&cached("12", &as_stored)).1, Some(as_stored));
        assert_eq!(memory.recall(&cached("11", &old)).1, Some(old), "forgotten");
    }

    #[test]
    fn a_later_version_holding_the_write_ends_the_memory() {
        let new = status(KubeconfigStatus::Valid, "8x NVIDIA-A100");
        let mut memory = wrote("12", &new);
        // kueue-sync wrote on top: other version, discovery's fields as written.
        let mut later = new.clone();
        later.locked = Some(true);
        assert_eq!(memory.recall(&cached("13", &later)).1, Some(later.clone()));
        let older = status(KubeconfigStatus::Unreachable, "");
        assert_eq!(
            memory.recall(&cached("14", &older)).1,
            Some(older),
            "forgotten"
        );
    }

    #[test]
    fn another_writers_version_before_the_write_is_not_taken_for_it() {
        // Status writes are not ordered against each other: lock-manager's write may
        // land between the cached version and discovery's, with its own new version.
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        let mut between = old.clone();
        between.locked = Some(true);
        assert_eq!(memory.recall(&cached("100", &between)).1, Some(new));
    }

    #[test]
    fn versions_are_never_ordered() {
        // Opaque: a version that looks smaller, larger or is not a number at all says
        // nothing about order.
        let (old, new) = before_and_written();
        for rv in ["9", "99999999999999999999999", "zz-opaque", ""] {
            let mut memory = wrote("12", &new);
            assert_eq!(
                memory.recall(&cached(rv, &old)).1,
                Some(new.clone()),
                "{rv:?}"
            );
        }
        let mut memory = wrote("opaque-b", &new);
        assert_eq!(memory.recall(&cached("opaque-b", &old)).1, Some(old));
    }

    #[test]
    fn a_write_without_a_version_waits_for_its_content() {
        let (old, new) = before_and_written();
        let mut memory = Memory::default();
        let written = Written {
            resource_version: None,
            status: new.clone(),
        };
        memory.remember("u1", 7, Some(written));
        let no_version = Cached {
            uid: "u1",
            resource_version: None,
            status: Some(&old),
            delivered: None,
        };
        assert_eq!(memory.recall(&no_version).1, Some(new.clone()));
        assert_eq!(memory.recall(&cached("3", &new)).1, Some(new));
    }

    #[test]
    fn remembering_without_a_write_keeps_the_last_write() {
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        memory.remember("u1", 8, None);
        assert_eq!(memory.recall(&cached("11", &old)), (Some(8), Some(new)));
    }

    #[test]
    fn a_write_the_watch_delivered_is_shown_after_a_later_version() {
        // The apiserver stored the write normalised (its content differs from what was
        // sent) and lock-manager wrote on top: only the watch having delivered version
        // 12 on the way shows the write.
        let new = status(KubeconfigStatus::Valid, "8x NVIDIA-A100");
        let mut memory = wrote("12", &new);
        let mut later = status(KubeconfigStatus::Valid, "8x NVIDIA-A100-SXM4");
        later.locked = Some(true);
        let delivered = |rv: &str| rv == "12";
        let at_13 = Cached {
            delivered: Some(&delivered),
            ..cached("13", &later)
        };
        assert_eq!(memory.recall(&at_13).1, Some(later.clone()));
        let undelivered = |_: &str| false;
        let mut memory = wrote("12", &new);
        let not_seen = Cached {
            delivered: Some(&undelivered),
            ..cached("13", &later)
        };
        assert_eq!(memory.recall(&not_seen).1, Some(new));
    }

    #[test]
    fn a_delivered_write_is_forgotten_before_the_next_reconcile() {
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        // A cache change that does not show the write yet keeps it.
        memory.forget_delivered(&cached("11", &old));
        assert!(memory.awaits_any());
        memory.forget_delivered(&cached("12", &new));
        assert!(!memory.awaits_any(), "delivered: forgotten at once");
        // What the next reconcile finds is planned from as it is, the fingerprint kept.
        assert_eq!(
            memory.recall(&cached("11", &old)),
            (Some(7), Some(old.clone()))
        );

        // Delivered on the way, then another writer's version on top.
        let mut memory = wrote("12", &new);
        let delivered = |rv: &str| rv == "12";
        memory.forget_delivered(&Cached {
            delivered: Some(&delivered),
            ..cached("13", &old)
        });
        assert!(!memory.awaits_any());
    }

    #[test]
    fn a_write_shown_by_its_content_alone_waits_for_recall() {
        let new = status(KubeconfigStatus::Valid, "8x NVIDIA-A100");
        let mut memory = wrote("12", &new);
        let mut later = new.clone();
        later.locked = Some(true);
        // Version 12 never came by: only the content says the cache holds the write.
        memory.forget_delivered(&cached("13", &later));
        assert!(memory.awaits_any(), "versions only: no status compared");
        assert_eq!(memory.recall(&cached("13", &later)).1, Some(later));
        assert!(!memory.awaits_any(), "recall applies the whole rule");
    }

    #[test]
    fn a_cluster_without_a_write_in_flight_costs_little() {
        // Every cluster has an entry; only a write in flight carries a status.
        assert!(
            std::mem::size_of::<Entry>() <= 32,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn leadership_moving_forgets_writes_but_not_fingerprints() {
        let (old, new) = before_and_written();
        let mut memory = wrote("12", &new);
        memory.forget_writes();
        assert_eq!(memory.recall(&cached("11", &old)), (Some(7), Some(old)));
    }

    #[test]
    fn gone_clusters_are_forgotten() {
        let old = status(KubeconfigStatus::Unreachable, "");
        let mut memory = wrote("12", &old);
        memory.forget_except(|uid| uid == "u2");
        assert_eq!(memory.recall(&cached("11", &old)), (None, Some(old)));
    }
}
