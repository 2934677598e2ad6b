//! Leadership as a trigger: when this replica becomes the lease holder it must
//! reconcile everything at once, since it skipped writes while standing by.

use futures::Stream;
use tokio::sync::watch;

/// Yields at start if `leader` is true, then whenever it is set and reads true.
/// A lost-and-regained lease can look unchanged to a slow reader, so any update
/// that leaves us leader counts: a spare full reconcile is cheap, a missed one is not.
pub fn on_acquired(mut leader: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send + 'static {
    async_stream_like(move |tx| async move {
        loop {
            if *leader.borrow_and_update() && tx.send(()).await.is_err() {
                return;
            }
            if leader.changed().await.is_err() {
                return;
            }
        }
    })
}

/// A stream fed by a task through a bounded channel (no extra crate needed).
fn async_stream_like<F, Fut>(f: F) -> impl Stream<Item = ()> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(f(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::time::Duration;

    #[tokio::test]
    async fn yields_on_each_acquisition() {
        let (tx, rx) = watch::channel(false);
        let mut s = Box::pin(on_acquired(rx));
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .unwrap();
        tx.send(false).unwrap();
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .unwrap();
        drop(tx);
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn yields_at_start_when_already_leader() {
        let (_tx, rx) = watch::channel(true);
        let mut s = Box::pin(on_acquired(rx));
        tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .unwrap();
    }
}
