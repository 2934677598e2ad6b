//! The per-object run: what every controller built on kube's [`Controller`] over
//! FournosClusters does around its own reconcile, written once.
//!
//! Each reconcile runs in a `reconcile` span naming the cluster, timed and counted by
//! [`ControllerMetrics::reconcile`]. A success forgets the cluster's failures; a failure
//! is logged once with its reason and retried after the cluster's [`Backoff`] delay (1 s
//! doubling to a minute, per cluster: one broken cluster never slows the others). No
//! other wait is added: kube's scheduler runs a reconcile as soon as its object changes
//! (no debounce), and never two of the same object at once.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt as _;
use hearth_api::FournosCluster;
use kube::ResourceExt as _;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller, Error as ControllerError};

use super::{Backoff, ControllerMetrics, Reason};

/// A FournosCluster as a cache holds it when it keeps the whole object (see
/// [`super::view`] for a cache that keeps less).
pub type ClusterObject = DeserializeGuard<FournosCluster>;

/// Counts, times and retries the reconciles of one controller.
#[derive(Debug)]
pub struct Runner {
    metrics: ControllerMetrics,
    backoff: Backoff,
}

impl Runner {
    pub fn new(metrics: ControllerMetrics) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            backoff: Backoff::default(),
        })
    }

    /// Runs `controller` until it stops (shutdown), with `reconcile` for each object.
    pub async fn run<K, Ctx, E, F, Fut>(
        self: Arc<Self>,
        controller: Controller<DeserializeGuard<K>>,
        ctx: Arc<Ctx>,
        mut reconcile: F,
    ) where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
        Ctx: Send + Sync + 'static,
        E: Reason + std::error::Error + Send + 'static,
        F: FnMut(Arc<DeserializeGuard<K>>, Arc<Ctx>) -> Fut,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let runner = self.clone();
        let retry = self.clone();
        controller
            .run(
                move |object, ctx| runner.clone().one(object.clone(), reconcile(object, ctx)),
                move |object, error: &E, _| retry.failed(&object.name_any(), error),
                ctx,
            )
            .for_each(|result| async move {
                // Failures were reported by `failed`; the rest is kube's own bookkeeping
                // (an object gone before its turn, a stream ending at shutdown).
                if let Err(error) = result
                    && !matches!(error, ControllerError::ReconcilerFailed(..))
                {
                    tracing::debug!(%error, "controller");
                }
            })
            .await;
    }

    async fn one<K: kube::Resource, E: Reason>(
        self: Arc<Self>,
        object: Arc<DeserializeGuard<K>>,
        reconcile: impl Future<Output = Result<Action, E>>,
    ) -> Result<Action, E> {
        let name = object.name_any();
        let span = tracing::info_span!("reconcile", cluster = %name);
        let action = self.metrics.reconcile(span, reconcile).await?;
        self.backoff.succeeded(&name);
        Ok(action)
    }

    /// Logs a failed reconcile of `name` and says when to retry it.
    fn failed<E: Reason + Display>(&self, name: &str, error: &E) -> Action {
        let delay = self.backoff.failed(name.to_owned());
        tracing::warn!(
            cluster = %name,
            reason = error.reason(),
            error = %error,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "reconcile failed"
        );
        Action::requeue(delay)
    }
}
