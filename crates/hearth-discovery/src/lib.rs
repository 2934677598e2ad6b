//! hearth-discovery: creates a FournosCluster for each labeled kubeconfig Secret,
//! validates every target for real and counts its GPUs.
//!
//! Pure logic (no I/O, unit-tested): what a kubeconfig may contain ([`kubeconfig`]),
//! when its credentials expire ([`credentials`]), how many GPUs a target's nodes hold
//! ([`gpus`], [`short_name`]), when to probe ([`schedule`]), when the cache shows discovery's own write ([`memory`]), what status follows from a
//! probe ([`status`]), which Secret a cluster was created from ([`source`]), which
//! cluster a Secret's name is for ([`secret_pattern`]), and which clusters to create or
//! delete ([`onboarding`]).
//!
//! I/O around it: [`probe`] (one probe of one target), [`controller`] (watches and the
//! per-cluster probe loop), `sweep` (onboarding and offboarding, from what
//! `observe` reads of the caches), [`metrics`].

pub mod cluster_cache;
pub mod config;
pub mod context;
pub mod controller;
pub mod credentials;
pub mod error;
pub mod gpus;
pub mod kubeconfig;
pub mod memory;
pub mod metrics;
pub mod node_page;
mod observe;
pub mod onboarding;
pub mod probe;
mod reconcile;
pub mod schedule;
pub mod secret;
pub mod secret_pattern;
pub mod short_name;
pub mod source;
pub mod status;
mod sweep;

#[cfg(test)]
mod test_support;
