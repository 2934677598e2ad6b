//! A cluster's Reservations through the calendar ([`hearth_api::calendar`]): what each
//! one's status must say. Pure: the caller passes each reservation with the status to
//! plan from (the cached one, or the one this process wrote while the cache lags behind:
//! see [`crate::booked`]), and writes what comes back.
//!
//! What a status records is what the calendar needs next time: `heldStart`/`heldEnd` is
//! the window held (the booking's [`Standing::Holds`]), and a `Conflict` for the current
//! generation is a refusal not asked again until the owner changes the spec.

use hearth_api::calendar::{self, Booking, Standing, Verdict, Window};
use hearth_api::conditions::{DesiredCondition, set_condition};
use hearth_api::names::condition_types::ACCEPTED;
use hearth_api::reasons::AcceptedReason;
use hearth_api::{Reservation, ReservationPhase, ReservationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// One reservation of the cluster and the status to plan it from.
pub struct Planned<'a> {
    pub reservation: &'a Reservation,
    pub status: ReservationStatus,
}

/// A status to write: `planned[index]`'s, and the reason its `Accepted` condition gives.
#[derive(Debug, PartialEq)]
pub struct Decision {
    pub index: usize,
    pub status: ReservationStatus,
    pub reason: AcceptedReason,
}

/// At most this many reservations of one cluster enter its calendar at once: every one
/// that holds a window that has not ended, then the undecided ones, first asked first.
/// Those beyond are refused (`TooMany`), so a flood of bookings costs bounded work per
/// reconcile (the calendar is quadratic) and each one still gets an answer. Far more than
/// a cluster's planned benchmarks: a booking's window ends, and then it no longer counts.
pub const MAX_LIVE_BOOKINGS: usize = 128;

/// The status `planned[i]` must have, for each `i` whose status must change.
pub fn decide(planned: &[Planned<'_>], now: Timestamp) -> Vec<Decision> {
    let names: Vec<String> = planned.iter().map(|p| p.reservation.name_any()).collect();
    let mut said: Vec<Option<Said>> = vec![None; planned.len()];
    // What enters the calendar, with the standing it enters with.
    let mut calendar_of: Vec<(usize, Window, Standing)> = Vec::new();
    let mut candidates: Vec<(usize, Window)> = Vec::new();
    for (i, p) in planned.iter().enumerate() {
        // A window the CRD refuses today (stored before it did) never enters the calendar.
        let Some(wants) = Window::new(p.reservation.spec.start.0, p.reservation.spec.end.0) else {
            said[i] = Some(Said::invalid());
            continue;
        };
        match standing(p.reservation, &p.status) {
            // A refusal stands and holds nothing: it is in nobody's way.
            Standing::Refused => {}
            // A window that is over is in nobody's way either, and is left as recorded.
            Standing::Holds(held) if held.end() <= now && held == wants => {}
            Standing::Holds(held) if held.end() > now => {
                calendar_of.push((i, wants, Standing::Holds(held)))
            }
            // Undecided, or an ended booking its owner moved: asked for as new.
            Standing::Holds(_) | Standing::New if wants.end() <= now => {
                said[i] = Some(Said::ended())
            }
            Standing::Holds(_) | Standing::New => candidates.push((i, wants)),
        }
    }
    candidates.sort_by(|a, b| {
        let key = |i: usize| (asked(planned[i].reservation, now), &names[i]);
        key(a.0).cmp(&key(b.0))
    });
    let room = MAX_LIVE_BOOKINGS.saturating_sub(calendar_of.len());
    for &(i, _) in candidates.iter().skip(room) {
        said[i] = Some(Said::too_many(&planned[i].reservation.spec.cluster));
    }
    calendar_of.extend(
        candidates
            .into_iter()
            .take(room)
            .map(|(i, wants)| (i, wants, Standing::New)),
    );
    let bookings: Vec<Booking<'_>> = calendar_of
        .iter()
        .map(|&(i, wants, standing)| Booking {
            name: &names[i],
            asked: asked(planned[i].reservation, now),
            wants,
            standing,
        })
        .collect();
    let verdicts = calendar::decide(&bookings);
    for (&(i, _, _), verdict) in calendar_of.iter().zip(&verdicts) {
        said[i] = Said::of(verdict, &planned[i].reservation.spec.cluster);
    }
    let now = Time(now);
    planned
        .iter()
        .zip(said)
        .enumerate()
        .filter_map(|(index, (p, said))| {
            let said = said?;
            let reason = said.reason;
            let status = said.status(p.reservation.metadata.generation, &p.status, &now);
            (status != p.status).then_some(Decision {
                index,
                status,
                reason,
            })
        })
        .collect()
}

impl Decision {
    /// Whether the status takes time the reservation did not hold before (accepted, or a
    /// window not inside the one it held). Such a status rests on the others of the batch
    /// having given that time back, so it is written after them, and only if they landed.
    pub fn gains(&self, planned: &[Planned<'_>]) -> bool {
        let Some(new) = held(&self.status) else {
            return false;
        };
        let before = &planned[self.index];
        !matches!(standing(before.reservation, &before.status), Standing::Holds(old) if old.contains(&new))
    }
}

/// The window `status` records as held.
fn held(status: &ReservationStatus) -> Option<Window> {
    match (&status.held_start, &status.held_end) {
        (Some(start), Some(end)) => Window::new(start.0, end.0),
        _ => None,
    }
}

/// When the booking was asked for: its creation (one-second resolution; the calendar
/// breaks ties by name). A reservation the apiserver gave no creation time is taken as
/// asked now, after every other.
fn asked(reservation: &Reservation, now: Timestamp) -> Timestamp {
    reservation
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0)
}

/// What the calendar decided before, as `status` records it.
pub fn standing(reservation: &Reservation, status: &ReservationStatus) -> Standing {
    let generation = reservation.metadata.generation;
    match status.phase {
        Some(ReservationPhase::Conflict) if status.observed_generation == generation => {
            Standing::Refused
        }
        Some(ReservationPhase::Conflict) | None => Standing::New,
        Some(_) => held(status).map_or(Standing::New, Standing::Holds),
    }
}

/// What a verdict makes the status say.
#[derive(Clone)]
struct Said {
    phase: ReservationPhase,
    held: Option<Window>,
    conflicts_with: Option<String>,
    reason: AcceptedReason,
    message: String,
}

impl Said {
    /// `None`: a refusal already recorded for this spec, left as it is.
    fn of(verdict: &Verdict<'_>, cluster: &str) -> Option<Self> {
        let window = |w: &Window| format!("{} to {}", w.start(), w.end());
        Some(match verdict {
            Verdict::Holds(held) => Self {
                phase: ReservationPhase::Accepted,
                held: Some(*held),
                conflicts_with: None,
                reason: AcceptedReason::Accepted,
                message: format!("{cluster} is booked from {}", window(held)),
            },
            Verdict::Conflict { with } => Self {
                phase: ReservationPhase::Conflict,
                held: None,
                conflicts_with: Some((*with).to_owned()),
                reason: AcceptedReason::Conflict,
                message: format!(
                    "the window overlaps reservation {with}, accepted before this one; \
                     `kubectl get reservations` shows the cluster's bookings: change \
                     start and end to a free window, or book another cluster"
                ),
            },
            Verdict::KeptShorter { holds, with } => Self {
                phase: ReservationPhase::Accepted,
                held: Some(*holds),
                conflicts_with: Some((*with).to_owned()),
                reason: AcceptedReason::LengtheningRefused,
                message: format!(
                    "{cluster} stays booked from {}: the longer window overlaps \
                     reservation {with}; set start and end back, or book the extra time \
                     elsewhere",
                    window(holds)
                ),
            },
            Verdict::Refused => return None,
        })
    }

    fn ended() -> Self {
        Self {
            phase: ReservationPhase::Conflict,
            held: None,
            conflicts_with: None,
            reason: AcceptedReason::Ended,
            message: "the window ended before it could be booked: set a window in the future"
                .to_owned(),
        }
    }

    fn too_many(cluster: &str) -> Self {
        Self {
            phase: ReservationPhase::Conflict,
            held: None,
            conflicts_with: None,
            reason: AcceptedReason::TooMany,
            message: format!(
                "{cluster} already has {MAX_LIVE_BOOKINGS} reservations whose windows have not \
                 ended: delete the ones no longer needed, then edit this one to ask again"
            ),
        }
    }

    fn invalid() -> Self {
        Self {
            phase: ReservationPhase::Conflict,
            held: None,
            conflicts_with: None,
            reason: AcceptedReason::InvalidWindow,
            message: "spec.end is not after spec.start (stored before the CRD refused \
                      that): set a window that ends after it starts"
                .to_owned(),
        }
    }

    fn status(
        self,
        generation: Option<i64>,
        current: &ReservationStatus,
        now: &Time,
    ) -> ReservationStatus {
        let mut conditions = current.conditions.clone();
        let accepted = matches!(self.phase, ReservationPhase::Accepted);
        set_condition(
            &mut conditions,
            &DesiredCondition::new(ACCEPTED, accepted, self.reason, self.message),
            generation,
            now,
        );
        ReservationStatus {
            phase: Some(self.phase),
            held_start: self.held.map(|w| Time(w.start())),
            held_end: self.held.map(|w| Time(w.end())),
            conflicts_with: self.conflicts_with,
            observed_generation: generation,
            conditions,
        }
    }
}

#[cfg(test)]
mod tests;
