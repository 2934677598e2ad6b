//! hearth-lock-manager: locks a FournosCluster for its `spec.owner` with a sentinel
//! that holds all of the cluster's Kueue slots, and releases it on unlock or expiry.

pub mod plan;
