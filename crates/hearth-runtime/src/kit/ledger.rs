//! The write-behind ledger: what a controller handed to the background to write, by key,
//! until the cache shows it. Pure: [`super::WriteBehind`] feeds it the time and what
//! became of each write.
//!
//! The rules every write-behind of Hearth keeps:
//! - a key has at most one write waiting: a newer one handed over replaces it, and one
//!   handed over while the key is being written is written right after (coalesced);
//! - waiting writes are taken lane by lane, in the order handed over within a lane: an
//!   earlier lane first, and a lane may cap its writes in flight (priority);
//! - a written key is remembered ([`Stage::Written`]) until the caller, looking at its
//!   cache, lets it go ([`Ledger::retain`]): a plan made from a cache that lags behind the
//!   write does not ask for it again;
//! - a failed key is remembered until its retry is due ([`Stage::Failed`]): the same
//!   write handed over before then is not written again;
//! - at most `bound` keys: a new key beyond it takes the place of the oldest waiting
//!   write of the last lane, or is refused when none waits (each counted as dropped).
//!
//! Losing a ledger (a restart, a new leader) is safe: what it holds is either not
//! written yet, which the next plan asks for again, or written and on its way to the
//! cache, which the next plan at worst asks for once more (a write that changes
//! nothing).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Where a key's write stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waits for a writer.
    Waiting,
    /// Being written; `again`: a newer write arrived meanwhile, written next.
    Writing { again: bool },
    /// Written at `at`, producing `version` (compared for equality only); the cache may
    /// not show it yet.
    Written {
        version: Option<String>,
        at: Instant,
    },
    /// Failed; the same write is not asked for again before `retry_at`.
    Failed { retry_at: Instant },
}

impl Stage {
    /// Written before `now - age`: long enough ago that a cache that still does not show
    /// it never will (the object went before the watch delivered it, or the watch is down).
    pub fn written_long_ago(&self, now: Instant, age: Duration) -> bool {
        matches!(self, Stage::Written { at, .. } if *at + age <= now)
    }
}

/// How a write ended, as the writer tells the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Landed as `version`.
    Written(Option<String>),
    /// Failed; may be asked for again from `retry_at`.
    Failed { retry_at: Instant },
    /// Nothing was written (the object is gone): forgotten, unless a newer write arrived.
    Gone,
    /// Nothing to write any more (not leading, or the plan moved on): forgotten.
    Dropped,
}

/// What became of a write handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued: a new key, or one whose remembered write differs or is due again.
    Queued,
    /// Took the place of the write that waited (or is written right after the one in
    /// flight).
    Replaced,
    /// The same write is remembered (waiting, in flight, written, or failed and not due).
    Known,
    /// Refused: the ledger is full of writes in flight or remembered.
    Refused,
}

impl Submitted {
    /// Whether a write will be made for it.
    pub fn taken(self) -> bool {
        matches!(self, Submitted::Queued | Submitted::Replaced)
    }
}

#[derive(Debug)]
struct Entry<W> {
    write: W,
    lane: usize,
    stage: Stage,
}

#[derive(Debug)]
struct Lane<K> {
    /// Keys whose write waits, in the order handed over; a key whose entry no longer
    /// waits in this lane is skipped when it comes up.
    waiting: VecDeque<K>,
    in_flight: usize,
    most_in_flight: usize,
}

/// Writes by key: see the module. `W` is compared to tell a new write from a known one.
#[derive(Debug)]
pub struct Ledger<K, W> {
    /// Boxed: a burst grows the table to twice its keys, each slot the size of its value.
    entries: HashMap<K, Box<Entry<W>>>,
    lanes: Vec<Lane<K>>,
    bound: usize,
    dropped: usize,
}

/// One lane without a cap, and no bound of its own: for keys bounded by what they stand
/// for (one an object of a cache, or a write of the last minutes).
impl<K: Clone + Eq + Hash, W: Clone + PartialEq> Default for Ledger<K, W> {
    fn default() -> Self {
        Self::new(usize::MAX, &[usize::MAX])
    }
}

impl<K: Clone + Eq + Hash, W: Clone + PartialEq> Ledger<K, W> {
    /// A ledger of at most `bound` keys, with a lane for each cap of writes in flight
    /// (`usize::MAX`: no cap but the writers'), the first lane first.
    pub fn new(bound: usize, lanes: &[usize]) -> Self {
        assert!(!lanes.is_empty(), "a ledger has a lane");
        Self {
            entries: HashMap::new(),
            lanes: lanes
                .iter()
                .map(|&most_in_flight| Lane {
                    waiting: VecDeque::new(),
                    in_flight: 0,
                    most_in_flight,
                })
                .collect(),
            bound,
            dropped: 0,
        }
    }

    /// Hands `write` for `key` over, in `lane`, at `now` (see [`Submitted`]).
    pub fn submit(&mut self, key: K, write: W, lane: usize, now: Instant) -> Submitted {
        let Some(entry) = self.entries.get_mut(&key) else {
            if self.entries.len() >= self.bound && !self.evict() {
                self.dropped += 1;
                return Submitted::Refused;
            }
            self.entries.insert(
                key.clone(),
                Box::new(Entry {
                    write,
                    lane,
                    stage: Stage::Waiting,
                }),
            );
            self.lanes[lane].waiting.push_back(key);
            return Submitted::Queued;
        };
        let due = matches!(entry.stage, Stage::Failed { retry_at } if retry_at <= now);
        if entry.write == write && entry.lane == lane && !due {
            return Submitted::Known;
        }
        entry.write = write;
        match &mut entry.stage {
            Stage::Waiting if entry.lane == lane => Submitted::Replaced,
            Stage::Waiting => {
                entry.lane = lane;
                self.lanes[lane].waiting.push_back(key);
                Submitted::Replaced
            }
            // Its lane counts it in flight until it is done.
            Stage::Writing { again } => {
                *again = true;
                Submitted::Replaced
            }
            stage @ (Stage::Written { .. } | Stage::Failed { .. }) => {
                *stage = Stage::Waiting;
                entry.lane = lane;
                self.lanes[lane].waiting.push_back(key);
                Submitted::Queued
            }
        }
    }

    /// Records `key` as written at `now` without a write through the ledger (one made in
    /// the foreground), so that it is remembered like the others.
    pub fn remember(&mut self, key: K, write: W, now: Instant) {
        if self.entries.len() >= self.bound && !self.entries.contains_key(&key) && !self.evict() {
            self.dropped += 1;
            return;
        }
        let entry = self.entries.entry(key).or_insert_with(|| {
            Box::new(Entry {
                write: write.clone(),
                lane: 0,
                stage: Stage::Waiting,
            })
        });
        if matches!(entry.stage, Stage::Writing { .. }) {
            return;
        }
        entry.write = write;
        entry.stage = Stage::Written {
            version: None,
            at: now,
        };
    }

    /// The next waiting write, from the first lane with one that may start: marked as
    /// being written (until [`Self::finish`]).
    pub fn take(&mut self) -> Option<(K, W)> {
        for (index, lane) in self.lanes.iter_mut().enumerate() {
            if lane.in_flight >= lane.most_in_flight {
                continue;
            }
            while let Some(key) = lane.waiting.pop_front() {
                let Some(entry) = self.entries.get_mut(&key) else {
                    continue;
                };
                if entry.stage != Stage::Waiting || entry.lane != index {
                    continue;
                }
                entry.stage = Stage::Writing { again: false };
                lane.in_flight += 1;
                return Some((key, entry.write.clone()));
            }
        }
        None
    }

    /// Records how the write of `key` ended at `now`; returns the newer write to make
    /// now, if one arrived meanwhile (it keeps the slot).
    pub fn finish(&mut self, key: &K, outcome: Outcome, now: Instant) -> Option<W> {
        let entry = self.entries.get_mut(key)?;
        let Stage::Writing { again } = entry.stage else {
            return None;
        };
        let lane = entry.lane;
        match outcome {
            Outcome::Written(version) => entry.stage = Stage::Written { version, at: now },
            Outcome::Failed { retry_at } => entry.stage = Stage::Failed { retry_at },
            Outcome::Gone if again => {}
            Outcome::Gone | Outcome::Dropped => {
                self.entries.remove(key);
                self.lanes[lane].in_flight -= 1;
                return None;
            }
        }
        if again {
            entry.stage = Stage::Writing { again: false };
            return Some(entry.write.clone());
        }
        self.lanes[lane].in_flight -= 1;
        None
    }

    /// Keeps the keys for which `keep` holds, and every key being written (its writer
    /// records how it ends).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &W, &Stage) -> bool) {
        self.entries.retain(|key, entry| {
            matches!(entry.stage, Stage::Writing { .. }) || keep(key, &entry.write, &entry.stage)
        });
        for lane in &mut self.lanes {
            if lane.waiting.len() > 2 * self.entries.len() + 16 {
                let entries = &self.entries;
                lane.waiting.retain(|key| entries.contains_key(key));
            }
        }
    }

    /// The write remembered for `key`, and where it stands.
    pub fn get(&self, key: &K) -> Option<(&W, &Stage)> {
        self.entries.get(key).map(|e| (&e.write, &e.stage))
    }

    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Every key remembered, with its write and stage.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &W, &Stage)> {
        self.entries.iter().map(|(k, e)| (k, &e.write, &e.stage))
    }

    /// Whether a write waits or is in flight.
    pub fn busy(&self) -> bool {
        self.entries
            .values()
            .any(|e| matches!(e.stage, Stage::Waiting | Stage::Writing { .. }))
    }

    /// Writes dropped or refused at the bound since the last call.
    pub fn take_dropped(&mut self) -> usize {
        std::mem::take(&mut self.dropped)
    }

    /// Moves every remembered moment back by `elapsed`: what the ledger would say once
    /// that much time has passed (for tests of the rules built on it).
    pub fn age(&mut self, elapsed: Duration) {
        for entry in self.entries.values_mut() {
            if let Stage::Written { at, .. } | Stage::Failed { retry_at: at } = &mut entry.stage {
                *at = at.checked_sub(elapsed).unwrap_or(*at);
            }
        }
    }

    /// Drops the oldest waiting write of the last lane that has one, to make room.
    fn evict(&mut self) -> bool {
        for index in (0..self.lanes.len()).rev() {
            while let Some(key) = self.lanes[index].waiting.pop_front() {
                let waits = self
                    .entries
                    .get(&key)
                    .is_some_and(|e| e.stage == Stage::Waiting && e.lane == index);
                if waits {
                    self.entries.remove(&key);
                    self.dropped += 1;
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests;
