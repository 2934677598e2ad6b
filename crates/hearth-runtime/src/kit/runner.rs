//! The per-object run: what every controller that reconciles one FournosCluster at a
//! time does around its own reconcile, written once.
//!
//! An object is reconciled when its watch delivers a change, when a related object
//! changes (a Secret, a sentinel: mapped to the clusters it concerns), when this
//! replica gains leadership (everything), and when its last reconcile asked to run
//! again ([`Next::After`]). Never two reconciles of one object at once; at most
//! `concurrency` at a time (see [`WorkQueue`](super::queue)). No other wait is added:
//! a change starts a reconcile as soon as a slot is free, with no debounce.
//!
//! Each reconcile runs in a `reconcile` span naming the cluster, timed and counted by
//! [`ControllerMetrics::reconcile`]. A success forgets the cluster's failures; a failure
//! is logged once with its reason (and, where the controller asks, published as a
//! Warning Event on the cluster) and retried after the cluster's [`Backoff`] delay (1 s
//! doubling to a minute, per cluster: one broken cluster never slows the others), or
//! only on the next change when retrying cannot help ([`FailureReason::retry`]).

use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt as _, StreamExt as _};
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt as _};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::queue::WorkQueue;
use super::trigger::sleep_until;
use super::{Backoff, Cache, ControllerMetrics, FailureReason, Objects};
use crate::events::{Event, Events};

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run again after this long (unless a change comes first).
    After(Duration),
    /// Run again only when something changes.
    OnChange,
}

/// What starts reconciles besides the objects' own watch.
pub struct RunTriggers {
    /// Streams of cluster names to reconcile now: related objects, mapped.
    pub related: Vec<BoxStream<'static, Vec<String>>>,
    /// Everything is reconciled each time this yields (leadership gained).
    pub everything: BoxStream<'static, ()>,
    /// Reconciles at once at most.
    pub concurrency: usize,
    /// Stops taking work; the reconciles running are awaited.
    pub shutdown: CancellationToken,
}

/// Counts, times and retries the reconciles of one controller.
pub struct Runner {
    metrics: ControllerMetrics,
    backoff: Backoff,
    /// Failures are also published as Warning Events on the object.
    events: Option<Events>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("failure_events", &self.events.is_some())
            .finish_non_exhaustive()
    }
}

impl Runner {
    pub fn new(metrics: ControllerMetrics) -> Self {
        Self {
            metrics,
            backoff: Backoff::default(),
            events: None,
        }
    }

    /// Publishes every failed reconcile as a Warning Event on its object (reason: the
    /// error's [`FailureReason`], action `Reconcile`, note: the error).
    pub fn with_failure_events(mut self, events: Events) -> Self {
        self.events = Some(events);
        self
    }

    /// Reconciles the objects of `cache` (whose watch is `objects`) with `reconcile`
    /// until `triggers.shutdown`, then waits for the reconciles still running.
    pub async fn run<K, Ctx, E, F, Fut>(
        self,
        cache: Cache<K>,
        objects: Objects<K>,
        triggers: RunTriggers,
        ctx: Arc<Ctx>,
        mut reconcile: F,
    ) where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone,
        Ctx: Send + Sync + 'static,
        E: FailureReason + Display + Send + 'static,
        F: FnMut(Arc<DeserializeGuard<K>>, Arc<Ctx>) -> Fut,
        Fut: Future<Output = Result<Next, E>> + Send + 'static,
    {
        let RunTriggers {
            related,
            mut everything,
            concurrency,
            shutdown,
        } = triggers;
        let concurrency = concurrency.max(1);
        let this = Arc::new(self);
        let mut changed =
            objects.filter_map(|object| std::future::ready(object.ok().map(|o| o.name_any())));
        let mut related: SelectAll<_> = futures::stream::select_all(related);
        let mut queue = WorkQueue::default();
        let mut running = FuturesUnordered::new();
        // The first list fills the cache only once it is complete: what it delivers is
        // queued meanwhile, and taken once the cache can show it.
        let mut synced = cache.is_synced();
        loop {
            let now = Instant::now();
            while synced && running.len() < concurrency {
                let Some(name) = queue.take(now) else {
                    break;
                };
                match cache.named(&name) {
                    // Gone since it was queued: nothing to reconcile.
                    None => queue.finished(&name, None),
                    Some(object) => {
                        let run = this
                            .clone()
                            .one(object.clone(), reconcile(object, ctx.clone()));
                        // A task of its own: a reconcile's I/O (a probe's TLS handshake,
                        // each response frame) then wakes only its task, not this loop
                        // and every branch it polls. Measured at 1000 clusters: polling
                        // this loop on the reconciles' wake-ups took half of discovery's
                        // CPU.
                        let task = tokio::spawn(run);
                        running.push(task.map(move |joined| {
                            let next = joined.unwrap_or_else(|error| {
                                tracing::error!(cluster = %name, %error, "reconcile task failed");
                                Next::OnChange
                            });
                            (name, next)
                        }));
                    }
                }
            }
            let due = queue.next_due().filter(|_| synced);
            tokio::select! {
                () = shutdown.cancelled() => break,
                filled = cache.synced(), if !synced => {
                    if filled.is_err() {
                        // The watch is gone: the controller is stopping.
                        break;
                    }
                    synced = true;
                }
                Some((name, next)) = running.next(), if !running.is_empty() => {
                    let next = match next {
                        Next::After(delay) if cache.named(&name).is_some() => Some(Instant::now() + delay),
                        Next::After(_) | Next::OnChange => None,
                    };
                    queue.finished(&name, next);
                }
                Some(name) = changed.next() => queue.queue(&name, now),
                Some(names) = related.next(), if !related.is_empty() => {
                    for name in names {
                        queue.queue(&name, now);
                    }
                }
                Some(()) = everything.next() => {
                    for object in cache.state() {
                        queue.queue(&object.name_any(), now);
                    }
                }
                () = sleep_until(due), if due.is_some() => {}
            }
        }
        // What runs finishes (each write is bounded by the write client's deadline).
        while running.next().await.is_some() {}
    }

    /// One reconcile of `object`: in its span, counted, and what it asks for next
    /// (after a failure: the backoff delay, or the next change).
    fn one<K: Resource, E: FailureReason + Display>(
        self: Arc<Self>,
        object: Arc<DeserializeGuard<K>>,
        reconcile: impl Future<Output = Result<Next, E>>,
    ) -> impl Future<Output = Next>
    where
        K::DynamicType: Default,
    {
        let name = object.name_any();
        async move {
            let span = tracing::info_span!("reconcile", cluster = %name);
            match self.metrics.reconcile(span, reconcile).await {
                Ok(next) => {
                    self.backoff.succeeded(&name);
                    next
                }
                Err(error) => {
                    let retry = error.retry();
                    let delay = retry.then(|| self.backoff.failed(name.clone()));
                    tracing::warn!(
                        cluster = %name,
                        reason = error.reason(),
                        error = %error,
                        retry_in_ms = delay.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                        "reconcile failed"
                    );
                    if let Some(events) = &self.events {
                        let event = Event::warning(error.reason(), "Reconcile", error.to_string());
                        events.publish_in_background(object.object_ref(&Default::default()), event);
                    }
                    delay.map_or(Next::OnChange, Next::After)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;
    use tokio::sync::{Semaphore, mpsc};

    #[derive(Debug, thiserror::Error)]
    enum Failure {
        #[error("try again")]
        Again,
        #[error("hopeless")]
        Hopeless,
    }

    impl FailureReason for Failure {
        fn reason(&self) -> &'static str {
            "Failure"
        }

        fn retry(&self) -> bool {
            matches!(self, Self::Again)
        }
    }

    fn map(name: &str) -> ConfigMap {
        let mut m = ConfigMap::default();
        m.metadata.name = Some(name.to_owned());
        m.metadata.namespace = Some("ns".to_owned());
        m
    }

    /// What the reconciles did: the calls, one entry per start, and how many ran at once.
    #[derive(Default)]
    struct Record {
        calls: Vec<(String, Instant)>,
        running: HashMap<String, usize>,
        at_once: usize,
        most_at_once: usize,
        same_object_twice: bool,
    }

    struct Rig {
        changes: mpsc::UnboundedSender<String>,
        related: mpsc::UnboundedSender<Vec<String>>,
        everything: mpsc::UnboundedSender<()>,
        shutdown: CancellationToken,
        record: Arc<Mutex<Record>>,
        runner: tokio::task::JoinHandle<()>,
    }

    /// A gate that holds no reconcile back.
    fn open_gate() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(1000))
    }

    impl Rig {
        /// Shuts the runner down and waits until it has returned.
        async fn stop(self) {
            self.shutdown.cancel();
            self.runner.await.unwrap();
        }
    }

    /// A runner over ConfigMaps `names`, `concurrency` at a time; each reconcile takes a
    /// permit of `gate` (so a test decides when they end) and answers with `answer`.
    fn lab(
        names: &[&str],
        concurrency: usize,
        gate: Arc<Semaphore>,
        answer: fn(&str, usize) -> Result<Next, Failure>,
    ) -> Rig {
        let (lab, feed) = lab_unsynced(names, concurrency, gate, answer);
        feed.synced();
        lab
    }

    fn lab_unsynced(
        names: &[&str],
        concurrency: usize,
        gate: Arc<Semaphore>,
        answer: fn(&str, usize) -> Result<Next, Failure>,
    ) -> (Rig, super::super::HandFeed<ConfigMap>) {
        let (cache, mut feed) = Cache::<ConfigMap>::by_hand_unsynced("ConfigMap", Some("ns"));
        for name in names {
            feed.deliver(map(name));
        }
        let (changes, changed) = mpsc::unbounded_channel::<String>();
        let objects: Objects<ConfigMap> = tokio_stream_from(changed)
            .map(|name| Ok::<_, watcher::Error>(DeserializeGuard(Ok(map(&name)))))
            .boxed();
        let (related, related_rx) = mpsc::unbounded_channel();
        let (everything, everything_rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let record = Arc::new(Mutex::new(Record::default()));
        let triggers = RunTriggers {
            related: vec![tokio_stream_from(related_rx).boxed()],
            everything: tokio_stream_from(everything_rx).boxed(),
            concurrency,
            shutdown: shutdown.clone(),
        };
        let ctx = Arc::new((record.clone(), gate));
        let runner = tokio::spawn(Runner::new(ControllerMetrics::default()).run(
            cache,
            objects,
            triggers,
            ctx,
            move |object: Arc<DeserializeGuard<ConfigMap>>, ctx| async move {
                let (record, gate) = &*ctx;
                let name = object.name_any();
                let call = {
                    let mut r = record.lock().unwrap();
                    r.calls.push((name.clone(), Instant::now()));
                    let running = r.running.entry(name.clone()).or_default();
                    *running += 1;
                    let twice = *running > 1;
                    r.same_object_twice |= twice;
                    r.at_once += 1;
                    r.most_at_once = r.most_at_once.max(r.at_once);
                    r.calls.iter().filter(|(n, _)| *n == name).count()
                };
                gate.acquire().await.unwrap().forget();
                let mut r = record.lock().unwrap();
                *r.running.get_mut(&name).unwrap() -= 1;
                r.at_once -= 1;
                answer(&name, call)
            },
        ));
        (
            Rig {
                changes,
                related,
                everything,
                shutdown,
                record,
                runner,
            },
            feed,
        )
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: mpsc::UnboundedReceiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// Lets the runner take its turn until `done` holds (paused time: nothing else moves).
    async fn until(record: &Mutex<Record>, done: impl Fn(&Record) -> bool) {
        for _ in 0..1000 {
            if done(&record.lock().unwrap()) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the runner never got there");
    }

    fn calls_of(record: &Record, name: &str) -> usize {
        record.calls.iter().filter(|(n, _)| n == name).count()
    }

    /// How many times each of `names` was reconciled.
    fn calls_of_each<const N: usize>(record: &Record, names: [&str; N]) -> [usize; N] {
        names.map(|name| calls_of(record, name))
    }

    #[tokio::test(start_paused = true)]
    async fn reconciles_run_a_few_at_a_time_and_never_two_of_one_object() {
        let gate = Arc::new(Semaphore::new(0));
        let lab = lab(&["a", "b", "c"], 2, gate.clone(), |_, _| Ok(Next::OnChange));
        for name in ["a", "b", "c", "a"] {
            lab.changes.send(name.to_owned()).unwrap();
        }
        until(&lab.record, |r| r.calls.len() == 2).await;
        // a changed again while it ran: it runs again, after, and c gets its turn.
        gate.add_permits(10);
        until(&lab.record, |r| r.calls.len() == 4 && r.at_once == 0).await;
        {
            let r = lab.record.lock().unwrap();
            assert_eq!(r.most_at_once, 2);
            assert!(!r.same_object_twice);
            assert_eq!(calls_of_each(&r, ["a", "b", "c"]), [2, 1, 1]);
        }
        lab.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_runs_again_when_it_asked_and_a_failure_after_its_backoff() {
        let lab = lab(&["a", "b", "c"], 4, open_gate(), |name, call| {
            match (name, call) {
                ("a", _) => Ok(Next::After(Duration::from_secs(30))),
                ("b", 1) => Err(Failure::Again),
                ("b", _) => Ok(Next::OnChange),
                _ => Err(Failure::Hopeless),
            }
        });
        let start = Instant::now();
        for name in ["a", "b", "c"] {
            lab.changes.send(name.to_owned()).unwrap();
        }
        until(&lab.record, |r| r.calls.len() == 3).await;
        tokio::time::sleep(Duration::from_secs(31)).await;
        until(&lab.record, |r| calls_of(r, "a") == 2).await;
        {
            let r = lab.record.lock().unwrap();
            let times = |name: &str| -> Vec<Duration> {
                r.calls
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, at)| *at - start)
                    .collect()
            };
            assert_eq!(times("a"), [Duration::ZERO, Duration::from_secs(30)]);
            assert_eq!(times("b"), [Duration::ZERO, super::super::RETRY_MIN]);
            assert_eq!(
                times("c"),
                [Duration::ZERO],
                "a hopeless failure waits for a change"
            );
        }
        lab.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn related_changes_and_leadership_start_reconciles_of_what_exists() {
        let lab = lab(&["a", "b"], 4, open_gate(), |_, _| Ok(Next::OnChange));
        lab.related
            .send(vec!["b".to_owned(), "gone".to_owned()])
            .unwrap();
        until(&lab.record, |r| r.calls.len() == 1).await;
        lab.everything.send(()).unwrap();
        until(&lab.record, |r| r.calls.len() == 3).await;
        let calls = calls_of_each(&lab.record.lock().unwrap(), ["a", "b", "gone"]);
        assert_eq!(calls, [1, 2, 0]);
        lab.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_first_list_delivers_runs_once_the_cache_is_filled() {
        let (lab, feed) = lab_unsynced(&["a"], 4, open_gate(), |_, _| Ok(Next::OnChange));
        lab.changes.send("a".to_owned()).unwrap();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            lab.record.lock().unwrap().calls.is_empty(),
            "ran before the cache was filled"
        );
        feed.synced();
        until(&lab.record, |r| r.calls.len() == 1).await;
        lab.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_the_reconciles_that_run() {
        let gate = Arc::new(Semaphore::new(0));
        let lab = lab(&["a"], 4, gate.clone(), |_, _| {
            Ok(Next::After(Duration::from_secs(1)))
        });
        lab.changes.send("a".to_owned()).unwrap();
        until(&lab.record, |r| r.at_once == 1).await;
        lab.shutdown.cancel();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            !lab.runner.is_finished(),
            "returned with a reconcile running"
        );
        gate.add_permits(1);
        lab.runner.await.unwrap();
        assert_eq!(lab.record.lock().unwrap().at_once, 0);
    }
}
