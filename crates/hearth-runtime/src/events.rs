//! Kubernetes Events, best effort: an Event that cannot be written is logged and
//! never fails a reconcile. Only the lease holder publishes, like every write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{EventType, Recorder, Reporter};
use tokio::sync::{Semaphore, watch};

use crate::kit::WRITES_IN_FLIGHT;

/// Longest note the Events API accepts (1 kB); longer notes are cut, not refused.
const MAX_NOTE: usize = 1024;

/// An Event as every controller plans it: the one Event type of Hearth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    /// Stable, CamelCase.
    pub reason: &'static str,
    /// What the controller was doing (`Probe`, `Lock`, `Sync`, …).
    pub action: &'static str,
    /// For people: what happened and what to do; cut to 1 kB when published.
    pub note: String,
}

impl Event {
    pub fn normal(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            action,
            note: note.into(),
        }
    }

    pub fn warning(reason: &'static str, action: &'static str, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            ..Self::normal(reason, action, note)
        }
    }
}

#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
    leader: watch::Receiver<bool>,
    /// Bounds the Events written in the background ([`Self::publish_in_background`]).
    in_flight: Arc<Semaphore>,
}

impl Events {
    pub fn new(
        client: kube::Client,
        controller: &str,
        instance: String,
        leader: watch::Receiver<bool>,
    ) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: Some(instance),
        };
        Self {
            client,
            reporter,
            leader,
            in_flight: Arc::new(Semaphore::new(WRITES_IN_FLIGHT)),
        }
    }

    /// [`Self::publish`] without waiting for it: a task of its own writes the Event, at
    /// most [`WRITES_IN_FLIGHT`] at a time (the apiserver). For the onboarding path,
    /// where the object write the Event reports has landed already and the next write
    /// must not wait behind a best-effort one. Events of one object may land in another
    /// order than published.
    pub fn publish_in_background(&self, regarding: ObjectReference, event: Event) {
        if !*self.leader.borrow() {
            return;
        }
        let events = self.clone();
        tokio::spawn(async move {
            let _permit = events.in_flight.acquire().await;
            events.publish(&regarding, &event).await;
        });
    }

    /// Publishes `event` about `regarding`, if this replica leads.
    pub async fn publish(&self, regarding: &ObjectReference, event: &Event) {
        if !*self.leader.borrow() {
            return;
        }
        let reason = event.reason;
        let event = kube::runtime::events::Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(truncate(event.note.clone(), MAX_NOTE)),
            action: event.action.to_owned(),
            secondary: None,
        };
        // A fresh Recorder per Event: kube's Recorder folds repeats of one reason on one
        // object into a series that keeps the first message, so "locked for bob" would
        // still read "locked for alice". Hearth emits Events on transitions only, so
        // there is no storm to fold.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(error) = recorder.publish(&event, regarding).await {
            tracing::warn!(
                %error,
                reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                "cannot record Event"
            );
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("short".into(), 1024), "short");
        let long = "é".repeat(1000);
        let cut = truncate(long, 1024);
        assert!(cut.len() <= 1024);
        assert!(cut.ends_with("..."));
    }
}
