//! Reservations of a cluster decided and recorded: the I/O around [`crate::bookings`].
//! Runs in the cluster's reconcile (a Reservation's change wakes its `spec.cluster`), by
//! the leader only.
//!
//! A verdict is recorded in the reservation's status before anything acts on it, and it
//! is made from what the apiserver holds, not from a cache that may lag behind: the
//! cache only says whether any status must change (nothing is read or written when none
//! must, the steady state); when one must, the cluster's reservations are listed from
//! the apiserver and decided again from that list. A cache that had not yet delivered an
//! acceptance (this process's own, or the last leader's) therefore never lets a later
//! booking take the same window. Each status is applied guarded by the version listed,
//! time given back before time taken, and the batch ends at the first refused write: a
//! reservation that changed since is left to the reconcile its change brings.
//!
//! Reservations need their CRD and the RBAC to read them. Until both are in place (Helm
//! never installs a new CRD on upgrade; RBAC reaches the apiserver's authorizer a moment
//! after it is applied) the watch fails, says why in a warning, and retries with backoff;
//! lock-manager locks meanwhile, and decides the reservations once the watch syncs.

use std::sync::Arc;

use hearth_api::conditions::find;
use hearth_api::names::condition_types::ACCEPTED;
use hearth_api::names::controllers::LOCK_MANAGER;
use hearth_api::reasons::AcceptedReason;
use hearth_api::{Reservation, ReservationStatus};
use hearth_runtime::Readiness;
use hearth_runtime::Runtime;
use hearth_runtime::events::{Event, Events};
use hearth_runtime::kit::{Cache, Objects, WatchContext};
use hearth_runtime::status::apply_status_resting_on;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::bookings::{Decision, Planned, decide};
use crate::error::Error;

/// Reservations of Hearth's namespace: their cache, and where verdicts are written.
pub struct Booked {
    pub cache: Cache<Reservation>,
    api: Api<Reservation>,
    events: Events,
}

impl Booked {
    /// Watches Reservations. Their cache gates nothing: lock-manager is ready and locks
    /// without them, and decides them once their watch has synced.
    pub fn watch(rt: &Runtime, watch: &WatchContext) -> (Self, Objects<Reservation>) {
        let (cache, objects) = Cache::<Reservation>::watch(
            "Reservation",
            Api::namespaced(rt.client(), rt.namespace()),
            watcher::Config::default(),
            Readiness::new().gate("reservations"),
            watch,
        );
        let api = Api::namespaced(rt.write_client(), rt.namespace());
        let events = rt.events();
        (Self { cache, api, events }, objects)
    }

    /// Decides `cluster`'s reservations and records each verdict that changes a status.
    pub async fn reconcile(&self, cluster: &str) -> Result<(), Error> {
        if !self.cache.is_synced() {
            // Decided when the watch syncs: its objects wake their clusters.
            return Ok(());
        }
        let cached: Vec<Arc<DeserializeGuard<Reservation>>> = self
            .cache
            .store()
            .state_filter(|r| r.0.as_ref().is_ok_and(|r| r.spec.cluster == cluster));
        let cached: Vec<&Reservation> = cached.iter().filter_map(|r| r.0.as_ref().ok()).collect();
        if planned_writes(&cached).is_empty() {
            return Ok(());
        }
        let listed = self
            .api
            .list(&ListParams::default())
            .await
            .map_err(Error::ReservationList)?;
        let of_cluster: Vec<&Reservation> = listed
            .items
            .iter()
            .filter(|r| r.spec.cluster == cluster)
            .collect();
        let planned = plan_from(&of_cluster);
        let mut decisions = decide(&planned, Timestamp::now());
        // Time given back lands before the time it frees is taken, and a status that takes
        // time is written only while every write before it landed: a refused write (the
        // reservation changed or went since the list) ends the batch, and the change's own
        // reconcile decides again. Two recorded windows never overlap.
        decisions.sort_by_key(|d| d.gains(&planned));
        for Decision {
            index,
            status,
            reason,
        } in decisions
        {
            let reservation = of_cluster[index];
            let version = reservation.meta().resource_version.clone();
            let body = serde_json::to_value(&status).expect("a ReservationStatus serializes");
            // Applied at the version listed, never again after a conflict.
            let unchanged = |live: &Reservation| live.meta().resource_version == version;
            let written =
                apply_status_resting_on(&self.api, reservation, LOCK_MANAGER, body, unchanged)
                    .await
                    .map_err(|source| Error::ReservationStatus {
                        name: reservation.name_any(),
                        source,
                    })?;
            if written.is_none() {
                tracing::debug!(
                    reservation = %reservation.name_any(),
                    cluster,
                    "reservation changed since it was listed; deciding again on its change"
                );
                return Ok(());
            }
            tracing::info!(
                reservation = %reservation.name_any(),
                cluster,
                phase = ?status.phase,
                conflicts_with = status.conflicts_with.as_deref().unwrap_or(""),
                "reservation decided"
            );
            self.publish(reservation, reason, &status);
        }
        Ok(())
    }
}

impl Booked {
    /// The decision as an Event on the reservation (`kubectl describe reservation`): a
    /// warning unless it holds the window it asks for.
    fn publish(
        &self,
        reservation: &Reservation,
        reason: AcceptedReason,
        status: &ReservationStatus,
    ) {
        let note = find(&status.conditions, ACCEPTED).map_or(String::new(), |c| c.message.clone());
        let event = match reason {
            AcceptedReason::Accepted => Event::normal(reason.as_str(), "Decide", note),
            _ => Event::warning(reason.as_str(), "Decide", note),
        };
        self.events
            .publish_in_background(reservation.object_ref(&()), event);
    }
}

fn plan_from<'a>(reservations: &[&'a Reservation]) -> Vec<Planned<'a>> {
    reservations
        .iter()
        .map(|r| Planned {
            reservation: r,
            status: r.status.clone().unwrap_or_default(),
        })
        .collect()
}

fn planned_writes(reservations: &[&Reservation]) -> Vec<Decision> {
    decide(&plan_from(reservations), Timestamp::now())
}
