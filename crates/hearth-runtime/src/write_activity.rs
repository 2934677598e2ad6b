//! The writes a cluster waits for, counted as they travel, so that best-effort writes
//! (Events in the background) can let them go first.
//!
//! In a burst of onboardings every write of a controller is a step some cluster waits on
//! (a FournosCluster created, a status, a flavor), and the apiserver's capacity is what
//! they all queue for: about one write in three would otherwise be an Event reporting a
//! write that has already landed. [`WriteActivity`] counts the mutating requests of the
//! write client that are not Events; [`WriteActivity::idle`] waits until there are none.
//! Nothing waits when nothing is being written, so in steady state an Event is written
//! as soon as it is published.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request};
use tokio::sync::Notify;

/// Mutating requests in flight that are not Events. Cheap to clone; clones share it.
#[derive(Clone, Debug, Default)]
pub struct WriteActivity {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    in_flight: AtomicUsize,
    idle: Notify,
}

impl WriteActivity {
    /// How many such writes are in flight now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Returns once no write is in flight (at once if none is).
    pub async fn idle(&self) {
        loop {
            let notified = self.shared.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The tower layer that counts the writes of a client's requests.
    pub fn layer(&self) -> WriteActivityLayer {
        WriteActivityLayer {
            activity: self.clone(),
        }
    }

    /// Counts one write until the returned guard is dropped.
    fn start(&self) -> InFlight {
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            activity: self.clone(),
        }
    }
}

/// One counted write; dropping it (answered, failed, timed out or abandoned) ends it.
struct InFlight {
    activity: WriteActivity,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self
            .activity
            .shared
            .in_flight
            .fetch_sub(1, Ordering::AcqRel)
            == 1
        {
            self.activity.shared.idle.notify_waiters();
        }
    }
}

/// Whether `request` is a write a cluster may wait on: mutating, and not an Event
/// (`events.k8s.io` or core `events`).
fn counts<B>(request: &Request<B>) -> bool {
    let mutating = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    mutating && !is_event(request.uri().path())
}

fn is_event(path: &str) -> bool {
    let mut segments = path.trim_end_matches('/').rsplit('/');
    // `.../events` (a create) or `.../events/<name>` (a patch of a series).
    let last = segments.next();
    let before = segments.next();
    last == Some("events") || before == Some("events")
}

/// Adds [`WriteActivityService`] to a client's service stack.
#[derive(Clone, Debug)]
pub struct WriteActivityLayer {
    activity: WriteActivity,
}

impl<S> tower::Layer<S> for WriteActivityLayer {
    type Service = WriteActivityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteActivityService {
            inner,
            activity: self.activity.clone(),
        }
    }
}

/// Counts the writes that pass through it in its [`WriteActivity`].
#[derive(Clone, Debug)]
pub struct WriteActivityService<S> {
    inner: S,
    activity: WriteActivity,
}

impl<S, B> tower::Service<Request<B>> for WriteActivityService<S>
where
    S: tower::Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let counted = counts(&request).then(|| self.activity.start());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(counted);
            answer
        })
    }
}

/// A stand-in for the apiserver behind `activity`'s layer, for tests: every request stays
/// in flight until `true` is sent on the returned sender.
#[cfg(test)]
pub(crate) fn held_until_released(
    activity: &WriteActivity,
) -> (
    tokio::sync::watch::Sender<bool>,
    WriteActivityService<
        impl tower::Service<
            Request<()>,
            Response = (),
            Error = std::convert::Infallible,
            Future = impl Future + Send + 'static,
        >,
    >,
) {
    let (release, released) = tokio::sync::watch::channel(false);
    let service = tower::Layer::layer(
        &activity.layer(),
        tower::service_fn(move |_: Request<()>| {
            let mut released = released.clone();
            async move {
                released.wait_for(|r| *r).await.unwrap();
                Ok::<_, std::convert::Infallible>(())
            }
        }),
    );
    (release, service)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::{Layer as _, Service as _, ServiceExt as _};

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn writes_count_and_events_and_reads_do_not() {
        let cases = [
            (
                Method::POST,
                "/apis/fournos.dev/v1/namespaces/h/fournosclusters",
                true,
            ),
            (
                Method::PATCH,
                "/apis/fournos.dev/v1/namespaces/h/fournosclusters/a/status",
                true,
            ),
            (
                Method::PUT,
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/q",
                true,
            ),
            (
                Method::DELETE,
                "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/a",
                true,
            ),
            (
                Method::GET,
                "/apis/fournos.dev/v1/namespaces/h/fournosclusters",
                false,
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/h/events",
                false,
            ),
            (
                Method::PATCH,
                "/apis/events.k8s.io/v1/namespaces/h/events/a.1",
                false,
            ),
            (Method::POST, "/api/v1/namespaces/h/events", false),
        ];
        for (method, path, expected) in cases {
            assert_eq!(
                counts(&request(method.clone(), path)),
                expected,
                "{method} {path}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_every_counted_write_to_end() {
        let activity = WriteActivity::default();
        let (release, mut service) = held_until_released(&activity);
        let write = service
            .ready()
            .await
            .unwrap()
            .call(request(Method::POST, "/api/v1/namespaces/h/configmaps"));
        let read = service
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET, "/api/v1/namespaces/h/configmaps"));
        let (write, read) = (tokio::spawn(write), tokio::spawn(read));
        tokio::task::yield_now().await;
        assert_eq!(activity.in_flight(), 1, "the read is not counted");
        let idle = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle().await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!idle.is_finished(), "idle while a write is in flight");
        release.send_replace(true);
        write.await.unwrap().unwrap();
        read.await.unwrap().unwrap();
        idle.await.unwrap();
        assert_eq!(activity.in_flight(), 0);
    }

    #[tokio::test]
    async fn an_abandoned_write_ends_its_count() {
        let activity = WriteActivity::default();
        let mut service = activity.layer().layer(tower::service_fn(|_: Request<()>| {
            std::future::pending::<Result<(), std::convert::Infallible>>()
        }));
        let write = service
            .ready()
            .await
            .unwrap()
            .call(request(Method::PATCH, "/api/v1/namespaces/h/configmaps/c"));
        assert_eq!(activity.in_flight(), 1);
        drop(write);
        assert_eq!(activity.in_flight(), 0);
        activity.idle().await;
    }
}
