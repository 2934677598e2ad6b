//! The per-object work queue of [`Runner`](super::Runner): which object is reconciled
//! next, and when. Pure: the runner feeds it the time and what happened.
//!
//! The rules are the ones kube's `Controller` keeps, written for what Hearth needs:
//! - an object is queued at most once; asked for again, it keeps the earlier time;
//! - an object is never reconciled twice at once: one asked for while it runs waits in
//!   the queue, and runs again once the running one has finished;
//! - when a reconcile finishes, the object is queued again at the time it asked for
//!   (or not at all), unless it is queued sooner already.
//!
//! A queued object costs its name, shared by the two indexes, and a time: about a
//! hundred bytes (kube's scheduler kept two copies of an object reference, with its
//! name, namespace, uid and version, and a reason: about a kilobyte per cluster at
//! 1000, for the requeue every reconcile asks for).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;

/// Objects waiting to be reconciled, by name.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    /// When each queued object is due.
    due: HashMap<Arc<str>, Instant>,
    /// The same, in the order they are due (names break ties, so no two entries are equal).
    order: BTreeSet<(Instant, Arc<str>)>,
    /// Being reconciled now.
    running: HashSet<Arc<str>>,
}

impl WorkQueue {
    /// Queues `name` for `at`, unless it is queued for sooner.
    pub fn queue(&mut self, name: &str, at: Instant) {
        match self.due.get_key_value(name) {
            Some((_, &due)) if due <= at => {}
            Some((key, &due)) => {
                let key = key.clone();
                self.order.remove(&(due, key.clone()));
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
            None => {
                let key = self.shared(name);
                self.order.insert((at, key.clone()));
                self.due.insert(key, at);
            }
        }
    }

    /// The next object due by `now` that is not running: it is taken off the queue and
    /// counts as running until [`finished`](Self::finished).
    pub fn take(&mut self, now: Instant) -> Option<Arc<str>> {
        let (at, name) = self
            .order
            .iter()
            .take_while(|(at, _)| *at <= now)
            .find(|(_, name)| !self.running.contains(name))
            .cloned()?;
        self.order.remove(&(at, name.clone()));
        self.due.remove(&name);
        self.running.insert(name.clone());
        Some(name)
    }

    /// `name`'s reconcile ended; `next`: when it asked to run again.
    pub fn finished(&mut self, name: &str, next: Option<Instant>) {
        self.running.remove(name);
        if let Some(at) = next {
            self.queue(name, at);
        }
    }

    /// When the earliest queued object that is not running is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.order
            .iter()
            .find(|(_, name)| !self.running.contains(name))
            .map(|(at, _)| *at)
    }

    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.running.len()
    }

    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.due.len()
    }

    /// `name` as the queue's own shared copy: one allocation for both indexes.
    fn shared(&self, name: &str) -> Arc<str> {
        self.running
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, base: Instant) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn an_object_is_queued_once_at_its_earliest_time() {
        let t = Instant::now();
        let mut q = WorkQueue::default();
        q.queue("a", at(10, t));
        q.queue("a", at(20, t));
        assert_eq!(q.queued(), 1);
        assert_eq!(q.next_due(), Some(at(10, t)));
        q.queue("a", at(5, t));
        assert_eq!(q.next_due(), Some(at(5, t)));
        assert_eq!(q.take(at(4, t)), None, "not due yet");
        assert_eq!(q.take(at(5, t)).as_deref(), Some("a"));
        assert_eq!(q.queued(), 0);
    }

    #[test]
    fn objects_come_in_the_order_they_are_due() {
        let t = Instant::now();
        let mut q = WorkQueue::default();
        q.queue("late", at(3, t));
        q.queue("b", at(1, t));
        q.queue("a", at(1, t));
        q.queue("later", at(9, t));
        let now = at(5, t);
        let taken: Vec<_> = std::iter::from_fn(|| q.take(now)).collect();
        let taken: Vec<&str> = taken.iter().map(|n| &**n).collect();
        assert_eq!(taken, ["a", "b", "late"]);
        assert_eq!(q.next_due(), Some(at(9, t)));
    }

    #[test]
    fn a_running_object_is_never_taken_twice_and_runs_again_after() {
        let t = Instant::now();
        let mut q = WorkQueue::default();
        q.queue("a", t);
        let a = q.take(t).unwrap();
        // A change while it runs: queued, but not taken while it runs.
        q.queue("a", t);
        q.queue("b", t);
        assert_eq!(q.take(t).as_deref(), Some("b"));
        assert_eq!(q.take(t), None);
        assert_eq!(q.next_due(), None, "only running objects are queued");
        // It ends asking for a requeue in a minute: the change queued meanwhile is sooner.
        q.finished(&a, Some(at(60, t)));
        assert_eq!(q.take(t).as_deref(), Some("a"));
        q.finished("a", Some(at(60, t)));
        q.finished("b", None);
        assert_eq!(q.next_due(), Some(at(60, t)));
        assert_eq!(q.running(), 0);
    }
}
