//! Kubernetes Events, best effort: an Event that cannot be written is logged and
//! never fails a reconcile. Only the lease holder publishes, like every write.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;

/// Longest note the Events API accepts (1 kB); longer notes are cut, not refused.
const MAX_NOTE: usize = 1024;

#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    leader: watch::Receiver<bool>,
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
            recorder: Recorder::new(client, reporter),
            leader,
        }
    }

    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Normal, reason, action, note.into())
            .await;
    }

    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Warning, reason, action, note.into())
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !*self.leader.borrow() {
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note, MAX_NOTE)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
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
