//! hearth-discovery's pure logic: what a kubeconfig may contain, when its credentials
//! expire, how many GPUs a target's nodes hold and under which short names, when to
//! probe next, and what status follows from a probe. No I/O here: the binary observes
//! (reads the Secret, probes the target) and applies what these modules plan.

pub mod credentials;
pub mod gpus;
pub mod kubeconfig;
pub mod schedule;
pub mod short_name;
pub mod status;

#[cfg(test)]
mod test_support;
