//! hearth-kueue-sync publishes every FournosCluster's capacity as Kueue quota: one
//! `ResourceFlavor` per cluster and one entry per cluster in the shared `ClusterQueue`.
//!
//! The reconcile is observe ([`observe`]: the watch caches) → [`plan`] (pure) → apply
//! ([`apply`]: the API writes) → report ([`report`]: status and Events), orchestrated by
//! [`reconcile`] and triggered by the watches in [`controller`]. Everything that decides
//! *what* to write lives in [`plan`] and is tested with plain unit tests; the rest only
//! reads the caches and writes.

mod apply;
pub mod config;
pub mod controller;
mod error;
mod metrics;
mod observe;
pub mod plan;
mod reconcile;
mod report;

pub use error::Error;
pub use metrics::Metrics;

#[cfg(test)]
pub(crate) mod testing;
