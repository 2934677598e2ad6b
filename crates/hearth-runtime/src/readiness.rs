//! Readiness gates: the process is ready once every gate has opened, e.g. once each
//! watch cache has synced. Leadership plays no part (a standby replica is ready).

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

/// The set of gates `/readyz` reports on. Cheap to clone; clones share the gates.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    gates: Arc<Mutex<Vec<Gate>>>,
}

#[derive(Debug)]
struct Gate {
    name: String,
    ready: Arc<AtomicBool>,
}

/// One condition for readiness. Opening it is one-way: caches that synced once keep
/// serving (the watcher re-lists on its own), so readiness never flaps back.
#[derive(Clone, Debug)]
pub struct ReadinessGate {
    name: Arc<str>,
    ready: Arc<AtomicBool>,
}

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a closed gate. Register every gate before the work that opens it starts,
    /// otherwise `/readyz` can report ready before a gate exists.
    pub fn gate(&self, name: impl Into<String>) -> ReadinessGate {
        let name = name.into();
        let ready = Arc::new(AtomicBool::new(false));
        crate::mutex::lock(&self.gates).push(Gate {
            name: name.clone(),
            ready: ready.clone(),
        });
        ReadinessGate {
            name: name.into(),
            ready,
        }
    }

    /// `Ok` when every gate is open, else the names of the closed ones (in registration order).
    pub fn check(&self) -> Result<(), Vec<String>> {
        let not_ready: Vec<String> = crate::mutex::lock(&self.gates)
            .iter()
            .filter(|gate| !gate.ready.load(Ordering::Acquire))
            .map(|gate| gate.name.clone())
            .collect();
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(not_ready)
        }
    }

    pub fn is_ready(&self) -> bool {
        self.check().is_ok()
    }
}

impl ReadinessGate {
    /// Opens the gate.
    pub fn ready(&self) {
        if !self.ready.swap(true, Ordering::AcqRel) {
            tracing::info!(gate = %self.name, "ready");
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gates_means_ready() {
        assert_eq!(Readiness::new().check(), Ok(()));
    }

    #[test]
    fn ready_only_when_every_gate_is_open() {
        let readiness = Readiness::new();
        let clusters = readiness.gate("fournosclusters");
        let secrets = readiness.gate("secrets");
        assert_eq!(
            readiness.check(),
            Err(vec!["fournosclusters".to_owned(), "secrets".to_owned()])
        );

        secrets.ready();
        assert_eq!(readiness.check(), Err(vec!["fournosclusters".to_owned()]));
        assert!(!readiness.is_ready());

        clusters.ready();
        clusters.ready();
        assert_eq!(readiness.check(), Ok(()));
        assert!(clusters.is_ready());
    }

    #[test]
    fn clones_share_gates() {
        let readiness = Readiness::new();
        let gate = readiness.clone().gate("a");
        assert!(!readiness.is_ready());
        gate.clone().ready();
        assert!(readiness.is_ready());
    }

    #[test]
    fn same_name_twice_needs_both() {
        let readiness = Readiness::new();
        let first = readiness.gate("watch");
        let _second = readiness.gate("watch");
        first.ready();
        assert_eq!(readiness.check(), Err(vec!["watch".to_owned()]));
    }
}
