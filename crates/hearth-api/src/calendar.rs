//! The booking calendar: which reservations of one cluster are accepted, which are
//! refused, and where an accepted window stands at a given moment. Plain functions of the
//! bookings and the time; lock-manager reads the bookings from its cache, records each
//! verdict in status before it acts on it, and calls these again on every reconcile (a
//! clock that jumps is seen by the next call, not by a sleeping task).
//!
//! The rules:
//! - Windows are half-open, `[start, end)`: a booking that ends at 14:00 and one that starts
//!   at 14:00 do not overlap.
//! - A booking that holds a window keeps it. Nothing that arrives later, asked earlier or
//!   sorts earlier displaces it; only its own owner can shorten or cancel it.
//! - A booking that asks for more than it holds (a new one, or a longer window) is checked
//!   against every window held by the others. Candidates are taken in the order they asked
//!   (creation time), ties broken by name, so the verdicts depend on the set of bookings and
//!   never on the order a watch delivered them. Creation times have one-second resolution,
//!   so ties are common; the name is unique in the namespace, so the order is total.
//! - A refusal is final for the spec it answered: a refused booking is asked again only when
//!   its owner changes it (the caller passes it as [`Standing::New`] then). A window that
//!   frees up later does not silently turn an old refusal into a booking its owner may have
//!   given up on.

use jiff::{SignedDuration, Timestamp};

/// A half-open window of time, `[start, end)`, never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    start: Timestamp,
    end: Timestamp,
}

impl Window {
    /// `None` unless `start < end`.
    pub fn new(start: Timestamp, end: Timestamp) -> Option<Self> {
        (start < end).then_some(Self { start, end })
    }

    pub fn start(&self) -> Timestamp {
        self.start
    }

    pub fn end(&self) -> Timestamp {
        self.end
    }

    pub fn overlaps(&self, other: &Window) -> bool {
        self.start < other.end && other.start < self.end
    }

    pub fn contains(&self, other: &Window) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

/// What the calendar already decided for a booking (from its status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not decided for its current spec: new, or changed after a refusal.
    New,
    /// Accepted for this window.
    Holds(Window),
    /// Refused for its current spec.
    Refused,
}

/// One booking of a cluster as the calendar sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Booking<'a> {
    /// Unique among the cluster's bookings (the reservation's name).
    pub name: &'a str,
    /// When it was made (creation time; one-second resolution).
    pub asked: Timestamp,
    /// The window its spec asks for now.
    pub wants: Window,
    pub standing: Standing,
}

/// The calendar's answer for one booking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Holds this window: newly accepted, kept, or shortened as its owner asked.
    Holds(Window),
    /// Refused: the window it asks for overlaps the one `with` holds.
    Conflict { with: &'a str },
    /// Keeps the window it held; the longer one it asks for overlaps the one `with` holds.
    KeptShorter { holds: Window, with: &'a str },
    /// Refused earlier for this spec; not asked again until the spec changes.
    Refused,
}

impl Verdict<'_> {
    /// The window this booking holds after the verdict, if any.
    pub fn held(&self) -> Option<Window> {
        match self {
            Verdict::Holds(w) | Verdict::KeptShorter { holds: w, .. } => Some(*w),
            Verdict::Conflict { .. } | Verdict::Refused => None,
        }
    }
}

/// Decides every booking of one cluster. The answer is in the order of `bookings`.
///
/// Names must be unique; a foreign booking that must count but never be decided (a Fournos
/// lock job with a start and an end) is passed as holding its window.
pub fn decide<'a>(bookings: &[Booking<'a>]) -> Vec<Verdict<'a>> {
    // A shorter window than the one held only frees time, so it is granted before any
    // candidate is checked: a candidate may take what another booking gave back.
    let mut verdicts: Vec<Option<Verdict<'a>>> = bookings
        .iter()
        .map(|b| match b.standing {
            Standing::Holds(held) if held.contains(&b.wants) => Some(Verdict::Holds(b.wants)),
            Standing::Refused => Some(Verdict::Refused),
            Standing::Holds(_) | Standing::New => None,
        })
        .collect();
    // Until a candidate is decided, it keeps what it held (a longer ask keeps its old window).
    let mut held: Vec<Option<Window>> = bookings
        .iter()
        .zip(&verdicts)
        .map(|(b, v)| match (v, b.standing) {
            (Some(v), _) => v.held(),
            (None, Standing::Holds(w)) => Some(w),
            (None, _) => None,
        })
        .collect();

    let mut candidates: Vec<usize> = (0..bookings.len())
        .filter(|&i| verdicts[i].is_none())
        .collect();
    candidates.sort_by(|&a, &b| {
        (bookings[a].asked, bookings[a].name).cmp(&(bookings[b].asked, bookings[b].name))
    });

    for i in candidates {
        let booking = &bookings[i];
        let verdict = match first_overlap(bookings, &held, i) {
            None => Verdict::Holds(booking.wants),
            Some(j) => match booking.standing {
                Standing::Holds(old) => Verdict::KeptShorter {
                    holds: old,
                    with: bookings[j].name,
                },
                Standing::New | Standing::Refused => Verdict::Conflict {
                    with: bookings[j].name,
                },
            },
        };
        held[i] = verdict.held();
        verdicts[i] = Some(verdict);
    }
    verdicts
        .into_iter()
        .map(|v| v.expect("every booking is decided: the loop visits each undecided one"))
        .collect()
}

/// The other booking whose held window overlaps what booking `i` wants: the earliest such
/// window, then the first name, so the one named in a refusal does not depend on order.
fn first_overlap(bookings: &[Booking<'_>], held: &[Option<Window>], i: usize) -> Option<usize> {
    let wants = bookings[i].wants;
    (0..bookings.len())
        .filter(|&j| j != i)
        .filter(|&j| held[j].is_some_and(|w| w.overlaps(&wants)))
        .min_by_key(|&j| (held[j].map(|w| w.start), bookings[j].name))
}

/// The moments of an accepted window: new admissions stop at `drain_at`, the lock is held
/// from `start`, a lock not held by `late_at` is reported late, and everything is released
/// at `end`. Always `drain_at <= start < end` and `start <= late_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub drain_at: Timestamp,
    pub start: Timestamp,
    pub late_at: Timestamp,
    pub end: Timestamp,
}

impl Timeline {
    /// Negative durations count as zero; a drain or grace that would leave the range of
    /// timestamps stops at its edge.
    pub fn new(window: Window, drain_before: SignedDuration, grace: SignedDuration) -> Self {
        let drain_at = window
            .start
            .checked_sub(drain_before.max(SignedDuration::ZERO))
            .unwrap_or(Timestamp::MIN);
        let late_at = window
            .start
            .checked_add(grace.max(SignedDuration::ZERO))
            .unwrap_or(Timestamp::MAX);
        Self {
            drain_at,
            start: window.start,
            late_at,
            end: window.end,
        }
    }

    /// Where the window stands at `now`, given whether the owner's lock is held.
    pub fn stage(&self, now: Timestamp, held: bool) -> Stage {
        if now >= self.end {
            Stage::Over
        } else if now < self.drain_at {
            Stage::Booked
        } else if now < self.start {
            Stage::Draining
        } else if held {
            Stage::Active
        } else if now < self.late_at {
            Stage::Draining
        } else {
            Stage::Late
        }
    }

    /// What Hearth must have in place at `now` for this window.
    pub fn duties(&self, now: Timestamp) -> Duties {
        Duties {
            drain: self.drain_at <= now && now < self.end,
            lock: self.start <= now && now < self.end,
        }
    }

    /// The next moment after `now` at which [`Timeline::stage`] or [`Timeline::duties`]
    /// can change without anything else happening: when to look again.
    pub fn next_change(&self, now: Timestamp) -> Option<Timestamp> {
        [self.drain_at, self.start, self.late_at, self.end]
            .into_iter()
            .filter(|t| *t > now)
            .min()
    }
}

/// Where an accepted window stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before the drain: the cluster runs as usual.
    Booked,
    /// New admissions stop; running jobs finish; the lock is not held yet.
    Draining,
    /// The owner's lock is held.
    Active,
    /// Past `start` + grace and the lock is still not held.
    Late,
    /// Past `end`.
    Over,
}

/// What an accepted window needs in place now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duties {
    /// No new admissions on the cluster.
    pub drain: bool,
    /// The cluster locked for the owner.
    pub lock: bool,
}

#[cfg(test)]
mod tests;
