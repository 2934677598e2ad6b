//! hearth-kueue-sync publishes every FournosCluster's capacity as Kueue quota: one
//! `ResourceFlavor` per cluster and one entry per cluster in the shared `ClusterQueue`.
//!
//! The reconcile is snapshot ([`snapshot`]: the plan input, built from the watch caches)
//! → [`plan`] (pure) → apply ([`apply`]: the API writes, with what they say in
//! [`writeback`]: each cluster's status patch and Events), orchestrated by
//! [`reconcile`] and triggered by the watches in [`controller`]. Everything that decides
//! *what* to write lives in [`plan`] and is tested with plain unit tests; the rest only
//! reads the caches and writes.

mod apply;
mod cached;
pub mod config;
mod context;
pub mod controller;
mod error;
mod metrics;
mod new_flavors;
pub mod plan;
mod reconcile;
mod snapshot;
mod statuses;
pub mod workloads;
mod writeback;

pub use error::Error;
pub use metrics::Metrics;

#[cfg(test)]
pub(crate) mod testing;
