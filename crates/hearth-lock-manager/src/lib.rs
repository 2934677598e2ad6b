//! hearth-lock-manager: locks a FournosCluster for its `spec.owner` with a sentinel
//! that holds all of the cluster's Kueue slots, and releases it on unlock or expiry.
//!
//! Reconcile = observe → [`plan`] (pure) → [`apply`] → report ([`status`]); the
//! sentinel kinds live in [`sentinel`], the orphan sweep in [`sweep`]; for `fournosjob`
//! sentinels [`fournos_lock`] corrects the plan from the Workloads Fournos made.

pub mod apply;
pub mod config;
pub mod controller;
pub mod error;
pub mod fournos_lock;
pub mod metrics;
pub mod plan;
pub mod sentinel;
pub mod status;
pub mod sweep;
