//! The `Reservation` custom resource (`fournos.dev/v1`): a FournosCluster booked for its
//! owner over a window of time (issue 38; `docs/reservations.md`).
//!
//! The CRD refuses what can never be a booking, with the apiserver's own error and no
//! webhook: an end not after the start, owner or reason text with control or format
//! characters, a cluster name no FournosCluster can have, and a cluster or owner changed
//! after creation (a booking moved to another cluster or person would skip the calendar's
//! check, and the owner is who may shorten or cancel it). The longest window is the
//! chart's to set, so it lives in the chart's ValidatingAdmissionPolicy, not here.
//!
//! Status is lock-manager's: it decides each booking with [`crate::calendar`] and records
//! the verdict before acting on it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A FournosCluster's name as Hearth can serve it: a DNS-1123 label, because it becomes
/// a node label value and part of a ResourceFlavor's selector.
pub const CLUSTER_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

// The printer columns repeat `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "fournos.dev",
    version = "v1",
    kind = "Reservation",
    plural = "reservations",
    singular = "reservation",
    namespaced,
    status = "ReservationStatus",
    shortname = "rsv",
    doc = "A FournosCluster booked for one owner over a window of time. Hearth accepts it or refuses it (an overlap with an accepted one), stops new admissions on the cluster drainBefore the start, holds the lock for the owner from the start and releases both at the end.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.cluster",
        description = "The FournosCluster booked"
    ),
    printcolumn(
        name = "Owner",
        type_ = "string",
        json_path = ".spec.owner",
        description = "Who the cluster is booked for"
    ),
    printcolumn(
        name = "Start",
        type_ = "string",
        json_path = ".spec.start",
        description = "When the lock is held from (UTC)"
    ),
    printcolumn(
        name = "End",
        type_ = "string",
        json_path = ".spec.end",
        description = "When the lock and the drain are released (UTC)"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Accepted, Conflict, Draining, Active, Late, Completed or Cancelled"
    ),
    printcolumn(
        name = "Drain Before",
        type_ = "string",
        json_path = ".spec.drainBefore",
        priority = 1,
        description = "How long before the start new admissions stop (unset: the chart's default)"
    ),
    printcolumn(
        name = "Conflicts With",
        type_ = "string",
        json_path = ".status.conflictsWith",
        priority = 1,
        description = "The accepted reservation this one overlaps"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 1,
        description = "What the cluster is booked for"
    )
)]
/// What the owner asks for: which cluster, for whom, when, and why.
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.end > self.start",
        "message": "spec.end must be after spec.start"
    },
    {
        "rule": "self.cluster == oldSelf.cluster",
        "message": "spec.cluster cannot change: delete this reservation and book the other cluster"
    },
    {
        "rule": "self.owner == oldSelf.owner",
        "message": "spec.owner cannot change: the owner is who may shorten or cancel a booking"
    }
]))]
pub struct ReservationSpec {
    /// The FournosCluster booked (in this namespace). Cannot change: book again instead.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    )]
    pub cluster: String,

    /// Who the cluster is booked for: the lock owner from `start`, as in
    /// FournosCluster `spec.owner`. Plain text. Cannot change.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[^\p{Cc}\p{Cf}]*$"))]
    pub owner: String,

    /// When the lock is held from (RFC 3339, e.g. `2026-12-03T14:00:00Z`).
    pub start: Time,

    /// When the lock and the drain are released; after `start`. The window is half-open:
    /// a booking that ends at 14:00 and one that starts at 14:00 do not overlap.
    pub end: Time,

    /// How long before `start` the cluster stops taking new admissions, so running jobs
    /// finish by then: a number followed by `m`, `h` or `d`, e.g. `2h`. Unset: the
    /// chart's default (`lockManager.reservations.drainBefore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 6), regex(pattern = "^[1-9][0-9]{0,4}(m|h|d)$"))]
    pub drain_before: Option<String>,

    /// What the cluster is booked for, e.g. `MLPerf run for release 3.2, PSAP-1234`.
    /// Plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = r"^[^\p{Cc}\p{Cf}]*$"))]
    pub reason: Option<String>,
}

/// Where a reservation stands. Written by hearth-lock-manager only.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ReservationPhase {
    /// Holds its window; the cluster runs as usual until the drain.
    Accepted,
    /// Refused: it overlaps the accepted reservation named in `conflictsWith`.
    Conflict,
    /// New admissions on the cluster stop; running jobs finish; the lock is not held yet.
    Draining,
    /// The owner's lock is held.
    Active,
    /// Past the start and its grace, and the lock is still not held (the condition says who
    /// still runs).
    Late,
    /// Its window is over; the lock and the drain are released.
    Completed,
    /// Cut before its start by its owner.
    Cancelled,
}

/// What lock-manager decided and did for a reservation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ReservationPhase>,

    /// Start of the window this reservation holds. It differs from `spec.start` only while
    /// a longer window its owner asked for is refused (the shorter one is kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_start: Option<Time>,

    /// End of the window this reservation holds (see `heldStart`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_end: Option<Time>,

    /// The accepted reservation whose window this one's overlaps (phase `Conflict`, or a
    /// refused lengthening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub conflicts_with: Option<String>,

    /// The `metadata.generation` of the spec this status answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_pattern_constant_is_the_one_in_the_schema() {
        let crd = serde_json::to_value(Reservation::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["properties"]["cluster"]["pattern"], CLUSTER_NAME_PATTERN,
            "{spec}"
        );
        assert_eq!(spec["properties"]["start"]["format"], "date-time");
        assert_eq!(
            spec["x-kubernetes-validations"][0]["rule"],
            "self.end > self.start"
        );
    }
}
