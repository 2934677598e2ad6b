//! Kubernetes Events, best effort: an Event that cannot be written is logged and
//! never fails a reconcile. Only the lease holder publishes, like every write.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{EventType, Recorder, Reporter};
use tokio::sync::{Notify, watch};

/// Events written at once in the background ([`Events::publish_in_background`]). Few: an
/// Event reports a write that has landed already, and the apiserver's capacity belongs
/// to the writes that clusters wait for (in a burst of 1000 onboardings, about three
/// Events per cluster would otherwise take a third of it).
pub const BACKGROUND_EVENT_WRITERS: usize = 4;

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
    /// The Events waiting to be written in the background.
    background: Arc<Background>,
}

/// A queue of Events and the [`BACKGROUND_EVENT_WRITERS`] tasks that drain it, started
/// with the first Event. A queued Event costs its reference and note, not a task.
#[derive(Default)]
struct Background {
    queue: Mutex<VecDeque<(ObjectReference, Event)>>,
    ready: Notify,
    writers: OnceLock<()>,
}

impl Background {
    fn pop(&self) -> Option<(ObjectReference, Event)> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front()
    }
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
            background: Arc::default(),
        }
    }

    /// [`Self::publish`] without waiting for it: queued, and written in order by
    /// [`BACKGROUND_EVENT_WRITERS`] tasks. For the paths where the object write the Event
    /// reports has landed already and the next write must not wait behind a best-effort
    /// one. Events of one object may land in another order than published.
    pub fn publish_in_background(&self, regarding: ObjectReference, event: Event) {
        if !*self.leader.borrow() {
            return;
        }
        self.background
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push_back((regarding, event));
        self.background.ready.notify_one();
        self.background.writers.get_or_init(|| {
            for _ in 0..BACKGROUND_EVENT_WRITERS {
                let events = self.clone();
                tokio::spawn(async move {
                    loop {
                        match events.background.pop() {
                            Some((regarding, event)) => events.publish(&regarding, &event).await,
                            None => events.background.ready.notified().await,
                        }
                    }
                });
            }
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
    use super::*;
    use http::{Request, Response};
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn background_events_are_all_written_few_at_a_time() {
        let (in_flight, most, notes) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(Vec::new())),
        );
        let (i, m, n) = (in_flight.clone(), most.clone(), notes.clone());
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let (in_flight, most, notes) = (i.clone(), m.clone(), n.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let body = request.into_body().collect().await?.to_bytes();
                let event: serde_json::Value = serde_json::from_slice(&body)?;
                // Let the other writers run before this one answers.
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                notes
                    .lock()
                    .unwrap()
                    .push(event["note"].as_str().unwrap().to_owned());
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_vec()))?,
                )
            }
        });
        let (_leader_tx, leader) = watch::channel(true);
        let events = Events::new(kube::Client::new(service, "ns"), "test", "t".into(), leader);
        let regarding = ObjectReference {
            kind: Some("ConfigMap".into()),
            name: Some("c".into()),
            namespace: Some("ns".into()),
            ..ObjectReference::default()
        };
        for n in 0..20 {
            events.publish_in_background(regarding.clone(), Event::normal("R", "A", n.to_string()));
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while notes.lock().unwrap().len() < 20 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all Events written"
            );
            tokio::task::yield_now().await;
        }
        let mut written: Vec<usize> = notes
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        written.sort_unstable();
        assert_eq!(written, (0..20).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), BACKGROUND_EVENT_WRITERS);
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("short".into(), 1024), "short");
        let long = "é".repeat(1000);
        let cut = truncate(long, 1024);
        assert!(cut.len() <= 1024);
        assert!(cut.ends_with("..."));
    }
}
