//! Kubernetes Events, best effort: an Event that cannot be written is logged and
//! never fails a reconcile. Only the lease holder publishes, like every write.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{EventType, Recorder, Reporter};
use tokio::sync::{Notify, watch};

use crate::write_activity::WriteActivity;

/// Events written at once in the background ([`Events::publish_in_background`]). Few: an
/// Event reports a write that has landed already, and the apiserver's capacity belongs
/// to the writes that clusters wait for (in a burst of 1000 onboardings, about three
/// Events per cluster would otherwise take a third of it).
pub const BACKGROUND_EVENT_WRITERS: usize = 4;

/// Longest note the Events API accepts, in bytes (1 KiB); longer notes are cut, not
/// refused.
const MAX_NOTE: usize = 1024;

/// An Event as every controller plans it: the one Event type of Hearth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    /// Stable, CamelCase.
    pub reason: &'static str,
    /// What the controller was doing (`Probe`, `Lock`, `Sync`, …).
    pub action: &'static str,
    /// For people: what happened and what to do; shown as
    /// [`hearth_api::text::bounded_bytes`] shows it, in 1 KiB, when published.
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
    /// What background Events let go first.
    yield_to: Option<WriteActivity>,
}

/// A queue of Events and the [`BACKGROUND_EVENT_WRITERS`] tasks that drain it, started
/// with the first Event. A queued Event costs its packed reference and note (a few
/// hundred bytes), not a task: a burst of 1000 onboardings queues thousands of them.
#[derive(Default)]
struct Background {
    queue: Mutex<VecDeque<Queued>>,
    ready: Notify,
    writers: OnceLock<()>,
    /// Events dropped because the queue was full, not yet logged.
    dropped: std::sync::atomic::AtomicUsize,
}

impl Background {
    fn pop(&self) -> Option<(ObjectReference, Event)> {
        crate::mutex::lock(&self.queue)
            .pop_front()
            .map(Queued::unpack)
    }
}

/// Events kept waiting at most; past that the oldest are dropped (and the drop logged):
/// Events are best effort, memory is bounded.
pub const MAX_QUEUED_EVENTS: usize = 10_000;

/// An Event waiting to be written, packed: the reference's fields in one allocation
/// (`ObjectReference` is seven optional strings), the note in another.
struct Queued {
    /// `api_version`, `kind`, `name`, `namespace`, `uid`, each followed by a NUL (Kubernetes
    /// names, kinds and uids hold none); an absent field is empty.
    regarding: Box<str>,
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: Box<str>,
}

impl Queued {
    fn pack(regarding: &ObjectReference, event: Event) -> Self {
        let mut fields = String::new();
        for field in [
            &regarding.api_version,
            &regarding.kind,
            &regarding.name,
            &regarding.namespace,
            &regarding.uid,
        ] {
            fields.push_str(field.as_deref().unwrap_or_default());
            fields.push('\0');
        }
        Self {
            regarding: fields.into_boxed_str(),
            warning: event.warning,
            reason: event.reason,
            action: event.action,
            note: event.note.into_boxed_str(),
        }
    }

    fn unpack(self) -> (ObjectReference, Event) {
        let mut fields = self
            .regarding
            .split('\0')
            .map(|f| (!f.is_empty()).then(|| f.to_owned()));
        let mut next = || fields.next().flatten();
        let regarding = ObjectReference {
            api_version: next(),
            kind: next(),
            name: next(),
            namespace: next(),
            uid: next(),
            ..ObjectReference::default()
        };
        let event = Event {
            warning: self.warning,
            reason: self.reason,
            action: self.action,
            note: self.note.into_string(),
        };
        (regarding, event)
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
            yield_to: None,
        }
    }

    /// Background Events wait until none of `activity`'s writes are in flight (see
    /// [`crate::write_activity`]): in a burst they go after the writes clusters wait for.
    pub fn yielding_to(mut self, activity: WriteActivity) -> Self {
        self.yield_to = Some(activity);
        self
    }

    /// [`Self::publish`] without waiting for it: queued, and written in order by
    /// [`BACKGROUND_EVENT_WRITERS`] tasks. For the paths where the object write the Event
    /// reports has landed already and the next write must not wait behind a best-effort
    /// one. Events of one object may land in another order than published.
    pub fn publish_in_background(&self, regarding: ObjectReference, event: Event) {
        if !*self.leader.borrow() {
            return;
        }
        {
            let mut queue = crate::mutex::lock(&self.background.queue);
            if queue.len() == MAX_QUEUED_EVENTS {
                queue.pop_front();
                self.background
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            queue.push_back(Queued::pack(&regarding, event));
        }
        self.background.ready.notify_one();
        self.background.writers.get_or_init(|| {
            for _ in 0..BACKGROUND_EVENT_WRITERS {
                let events = self.clone();
                tokio::spawn(async move {
                    loop {
                        if let Some(activity) = &events.yield_to {
                            activity.idle().await;
                        }
                        events.log_dropped();
                        match events.background.pop() {
                            Some((regarding, event)) => events.publish(&regarding, &event).await,
                            None => events.background.ready.notified().await,
                        }
                    }
                });
            }
        });
    }

    fn log_dropped(&self) {
        let dropped = self
            .background
            .dropped
            .swap(0, std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                max_queued = MAX_QUEUED_EVENTS,
                "Events dropped: more were waiting to be written than the queue holds"
            );
        }
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
            note: Some(hearth_api::text::bounded_bytes(&event.note, MAX_NOTE)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn background_events_are_all_written_few_at_a_time() {
        let (events, seen) = recorded();
        let regarding = config_map();
        for n in 0..20 {
            events.publish_in_background(regarding.clone(), Event::normal("R", "A", n.to_string()));
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen.notes.lock().unwrap().len() < 20 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all Events written"
            );
            tokio::task::yield_now().await;
        }
        let mut written: Vec<usize> = seen
            .notes
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        written.sort_unstable();
        assert_eq!(written, (0..20).collect::<Vec<_>>());
        assert_eq!(seen.most.load(Ordering::SeqCst), BACKGROUND_EVENT_WRITERS);
    }

    #[test]
    fn a_queued_event_keeps_what_it_is_published_with() {
        let regarding = ObjectReference {
            api_version: Some("fournos.dev/v1".into()),
            kind: Some("FournosCluster".into()),
            name: Some("c1".into()),
            namespace: Some("hearth".into()),
            uid: Some("8d3c3c52-0d3e-4c5e-9f1e-2b8f5b1d9e11".into()),
            resource_version: Some("42".into()),
            field_path: None,
        };
        let event = Event::warning("LimitReached", "Publish", "no room: 64 of 64 taken");
        let (unpacked, again) = Queued::pack(&regarding, event.clone()).unpack();
        assert_eq!(again, event);
        // The version is left out: an Event is about the object, not one version of it.
        let expected = ObjectReference {
            resource_version: None,
            ..regarding
        };
        assert_eq!(unpacked, expected);
        let bare = ObjectReference {
            name: Some("n".into()),
            ..ObjectReference::default()
        };
        assert_eq!(Queued::pack(&bare, event).unpack().0, bare);
    }

    #[tokio::test]
    async fn background_events_wait_for_the_writes_clusters_wait_for() {
        use crate::write_activity::WriteActivity;
        use tower::{Service as _, ServiceExt as _};

        let (events, seen) = recorded();
        let activity = WriteActivity::default();
        let events = events.yielding_to(activity.clone());
        // A write that stays in flight until released, counted as the write client counts.
        let (release, mut write) = crate::write_activity::held_until_released(&activity);
        let status = Request::builder()
            .method(http::Method::PATCH)
            .uri("/apis/fournos.dev/v1/namespaces/ns/fournosclusters/c/status")
            .body(())
            .unwrap();
        let status = tokio::spawn(write.ready().await.unwrap().call(status));
        tokio::task::yield_now().await;
        assert_eq!(activity.in_flight(), 1);

        let regarding = config_map();
        for n in 0..3 {
            events.publish_in_background(regarding.clone(), Event::normal("R", "A", n.to_string()));
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            seen.notes.lock().unwrap().len(),
            0,
            "an Event went before the write"
        );
        release.send_replace(true);
        status.await.unwrap().unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen.notes.lock().unwrap().len() < 3 {
            assert!(tokio::time::Instant::now() < deadline, "Events not written");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_long_note_is_sent_in_the_events_apis_limit_in_bytes() {
        let (events, seen) = recorded();
        let note = format!("{}\n{}", "é".repeat(400), "東".repeat(400));
        events
            .publish(&config_map(), &Event::warning("R", "A", note))
            .await;
        let sent = seen.notes.lock().unwrap().pop().unwrap();
        assert!(sent.len() <= MAX_NOTE, "{} bytes", sent.len());
        assert!(sent.ends_with(hearth_api::text::CUT), "{sent}");
        assert!(!sent.contains('\n'), "{sent}");
    }

    fn config_map() -> ObjectReference {
        ObjectReference {
            kind: Some("ConfigMap".into()),
            name: Some("c".into()),
            namespace: Some("ns".into()),
            ..ObjectReference::default()
        }
    }

    /// What the fake apiserver of [`recorded`] saw.
    #[derive(Default)]
    struct Seen {
        notes: Mutex<Vec<String>>,
        in_flight: AtomicUsize,
        /// The most Events written at once.
        most: AtomicUsize,
    }

    /// Events, leading, written to a fake apiserver that keeps the note of each Event.
    fn recorded() -> (Events, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        let kept = seen.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let seen = kept.clone();
            async move {
                let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most.fetch_max(now, Ordering::SeqCst);
                let body = request.into_body().collect().await?.to_bytes();
                let event: serde_json::Value = serde_json::from_slice(&body)?;
                // Let the other writers run before this one answers.
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                let note = event["note"].as_str().unwrap_or_default().to_owned();
                seen.notes.lock().unwrap().push(note);
                seen.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_vec()))?,
                )
            }
        });
        // The sender may go: the receiver keeps saying this replica leads.
        let (_, leader) = watch::channel(true);
        let events = Events::new(kube::Client::new(service, "ns"), "test", "t".into(), leader);
        (events, seen)
    }
}
