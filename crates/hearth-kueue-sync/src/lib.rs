//! hearth-kueue-sync publishes every FournosCluster's capacity as Kueue quota: one
//! `ResourceFlavor` per cluster and one entry per cluster in the shared `ClusterQueue`.
//!
//! The reconcile is observe → [`plan`](plan::plan) (pure, this crate's library) →
//! apply → report. Everything that decides *what* to write lives in [`plan`] and is
//! tested with plain unit tests; the binary only reads the watch caches and writes.

pub mod plan;

#[cfg(test)]
pub(crate) mod testing;
