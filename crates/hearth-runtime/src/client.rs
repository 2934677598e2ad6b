//! The management cluster's kube clients: one for watches and reads, and one for
//! writes that a replica sends only while it holds the Lease and that end in bounded time.
//!
//! Why writes get their own client: a watch is a long poll, so the watch client cannot
//! have a short deadline; and a write that stalls (a slow apiserver, a half-dead
//! connection) must not land after another replica has taken the Lease over. The write
//! client checks leadership as each request leaves (after every `await` of the code that
//! built it, so no call site can forget it or check too early) and gives up after
//! [`crate::LeaseSettings::write_timeout`].
//!
//! The deadline is the client's: a request cut off before the apiserver has read it never
//! lands, but one the apiserver already holds may still complete, within the apiserver's
//! own request timeout. The Lease grace is what covers that.
//!
//! Both clients are service stacks over one HTTP/2 connection ([`crate::connection`]), not
//! a connection each. Both go to the same apiserver over the same path, so a second
//! connection would fail with the first, not instead of it; one costs one TLS handshake
//! and one set of buffers. A write does not wait behind the watches: each request is a
//! stream of its own with its own flow control, and a write abandoned at its deadline
//! resets only its stream, where over HTTP/1.1 it cost the connection. What the write
//! client's own connection used to give, a connection that stalls being cut by a read
//! timeout, the shared one gets from HTTP/2 pings. The Lease keeps a connection of its
//! own (`lease.rs`): its renewals are what a stalled connection must not hold up, and
//! they are sequential, so it is one connection either way.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use hyper::body::Incoming;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;
use tower::retry::RetryLayer;
use tower::util::BoxCloneService;
use tower::{BoxError, Layer as _, ServiceBuilder, ServiceExt as _};

use crate::connection::Connection;

#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error("cannot load kubeconfig {paths:?}: {source}")]
    Kubeconfig {
        paths: Vec<PathBuf>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig and not in a cluster: {0}")]
    Infer(#[from] kube::config::InferConfigError),
}

/// From the given kubeconfig files (merged in order, like kubectl), else inferred:
/// `~/.kube/config`, then the in-cluster service account.
pub async fn kube_config(kubeconfig_paths: &[PathBuf]) -> Result<kube::Config, ClientConfigError> {
    if kubeconfig_paths.is_empty() {
        return Ok(kube::Config::infer().await?);
    }
    let error = |source| ClientConfigError::Kubeconfig {
        paths: kubeconfig_paths.to_vec(),
        source,
    };
    let merged = kubeconfig_paths
        .iter()
        .try_fold(Kubeconfig::default(), |merged, path| {
            Kubeconfig::read_from(path).and_then(|next| merged.merge(next))
        })
        .map_err(error)?;
    kube::Config::from_custom_kubeconfig(merged, &KubeConfigOptions::default())
        .await
        .map_err(error)
}

/// Why the write client refused or abandoned a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteRefused {
    /// Sent nothing: this replica does not hold the Lease (any more).
    #[error("not sent: this replica is not the leader (it lost or never held the Lease)")]
    NotLeader,
    /// The answer did not come in time; the request may or may not have landed.
    #[error("no answer within {}s; abandoned so that no write lands after a failover", .0.as_secs_f32())]
    TimedOut(Duration),
}

/// Whether `error` is the write client's refusal to write as a non-leader: the caller
/// stepped down in the middle, which is no failure of the write itself.
pub fn is_not_leader(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Service(source)
        if source.downcast_ref::<WriteRefused>() == Some(&WriteRefused::NotLeader))
}

/// A controller's two clients of the management apiserver.
pub(crate) struct ManagementClients {
    /// Watches and reads: kube's retries of 429/503/504 answers when `config` asks for
    /// them (its default), no deadline (a watch is a long poll).
    pub read: kube::Client,
    /// Writes: without kube's retries (a retry would run below the leadership check and
    /// past the deadline; controllers retry on their next reconcile), every mutating
    /// request checked against `leader` as it leaves and every request bounded by the
    /// write timeout ([`LeaderGuard`]).
    pub write: kube::Client,
}

/// The read and write clients of `config`'s apiserver, over one HTTP/2 connection.
///
/// kube's layers are all here but its tracing one, which logs every failed request at
/// ERROR without saying what it was for; the controllers log their failures themselves.
pub(crate) fn management_clients(
    config: &kube::Config,
    leader: watch::Receiver<bool>,
    write_timeout: Duration,
    activity: &crate::write_activity::WriteActivity,
) -> Result<ManagementClients, kube::Error> {
    if config.proxy_url.is_some() {
        // Proxies stay kube's business: its builder tunnels through one (SOCKS5, HTTP
        // CONNECT, with the proxy's credentials) or, without the kube feature for it (as
        // this build is), refuses it with an error naming the feature, as before this
        // connection was HTTP/2. Through a proxy the clients keep kube's HTTP/1.1.
        return Ok(ManagementClients {
            read: kube::Client::try_from(config.clone())?,
            write: write_client(config.clone(), leader, write_timeout, activity)?,
        });
    }
    let connection = crate::connection::connection(config)?;
    let read = ServiceBuilder::new()
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .service(kube_stack(config, connection.clone())?);
    // Counted outside the guard: what background Events yield to (write_activity.rs).
    let write = activity.layer().layer(
        LeaderGuardLayer {
            leader,
            timeout: write_timeout,
        }
        .layer(kube_stack(config, connection)?),
    );
    Ok(ManagementClients {
        read: kube::Client::new(read, &config.default_namespace),
        write: kube::Client::new(write, &config.default_namespace),
    })
}

type Stack = BoxCloneService<Request<kube::client::Body>, http::Response<Incoming>, BoxError>;

/// kube's request layers over `connection`: the apiserver's URL, credentials,
/// impersonation headers.
fn kube_stack(config: &kube::Config, connection: Connection) -> Result<Stack, kube::Error> {
    Ok(ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(connection)
        .boxed_clone())
}

/// The write client of [`ManagementClients`] on kube's own HTTP/1.1 stack (with a proxy):
/// `config` without kube's retries, [`LeaderGuard`] on top, and each connection's reads
/// and writes bounded by `timeout` too, so a stalled connection is dropped.
fn write_client(
    mut config: kube::Config,
    leader: watch::Receiver<bool>,
    timeout: Duration,
    activity: &crate::write_activity::WriteActivity,
) -> Result<kube::Client, kube::Error> {
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.reset_reader_on_write = true;
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&LeaderGuardLayer { leader, timeout })
        .with_layer(&activity.layer())
        .build())
}

/// Adds [`LeaderGuard`] to a client's service stack.
#[derive(Clone)]
pub struct LeaderGuardLayer {
    pub leader: watch::Receiver<bool>,
    pub timeout: Duration,
}

impl<S> tower::Layer<S> for LeaderGuardLayer {
    type Service = LeaderGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LeaderGuard {
            inner,
            leader: self.leader.clone(),
            timeout: self.timeout,
        }
    }
}

/// Refuses mutating requests unless `leader` reads true at the moment they are sent, and
/// bounds every request's answer by `timeout`.
#[derive(Clone)]
pub struct LeaderGuard<S> {
    inner: S,
    leader: watch::Receiver<bool>,
    timeout: Duration,
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, B> tower::Service<Request<B>> for LeaderGuard<S>
where
    S: tower::Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if mutates(request.method()) && !*self.leader.borrow() {
            return Box::pin(std::future::ready(Err(WriteRefused::NotLeader.into())));
        }
        let answer = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(WriteRefused::TimedOut(timeout).into()),
            }
        })
    }
}

fn mutates(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(context: &str, server: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
current-context: {context}
clusters:
- name: {context}
  cluster: {{server: \"{server}\"}}
contexts:
- name: {context}
  context: {{cluster: {context}, user: {context}, namespace: ns-{context}}}
users:
- name: {context}
  user: {{token: t}}
"
        )
    }

    #[tokio::test]
    async fn kubeconfig_files_are_merged_first_wins() {
        let dir =
            std::env::temp_dir().join(format!("hearth-runtime-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = dir.join("first");
        let second = dir.join("second");
        std::fs::write(&first, kubeconfig("one", "https://one.example:6443")).unwrap();
        std::fs::write(&second, kubeconfig("two", "https://two.example:6443")).unwrap();

        let config = kube_config(&[first.clone(), second.clone()]).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://one.example:6443/");
        assert_eq!(config.default_namespace, "ns-one");

        let config = kube_config(&[second, first]).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://two.example:6443/");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn missing_kubeconfig_names_the_file() {
        let path = PathBuf::from("/nonexistent/hearth/kubeconfig");
        let error = kube_config(std::slice::from_ref(&path)).await.unwrap_err();
        assert!(matches!(error, ClientConfigError::Kubeconfig { .. }));
        assert!(
            error.to_string().contains("/nonexistent/hearth/kubeconfig"),
            "{error}"
        );
    }
}

#[cfg(test)]
mod guard_tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    use super::*;

    /// A client whose "apiserver" counts the requests it gets and answers `status`.
    fn counting_client(
        leader: watch::Receiver<bool>,
        timeout: Duration,
        answer: bool,
    ) -> (kube::Client, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = if request.method() == Method::GET {
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}"#
            } else {
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u"}}"#
            };
            async move {
                if !answer {
                    std::future::pending::<()>().await;
                }
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .body(kube::client::Body::from(body.as_bytes().to_vec()))
                        .unwrap(),
                )
            }
        });
        let layered = tower::Layer::layer(&LeaderGuardLayer { leader, timeout }, service);
        (kube::Client::new(layered, "ns"), seen)
    }

    fn config_map() -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_write_after_losing_leadership_is_refused_without_a_request() {
        let (leader, follower) = watch::channel(true);
        let (client, seen) = counting_client(follower, Duration::from_secs(5), true);
        let api: Api<ConfigMap> = Api::namespaced(client, "ns");

        api.create(&PostParams::default(), &config_map())
            .await
            .unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1);

        leader.send(false).unwrap();
        let error = api
            .create(&PostParams::default(), &config_map())
            .await
            .unwrap_err();
        assert!(is_not_leader(&error), "{error:?}");
        let error = api.delete("a", &Default::default()).await.unwrap_err();
        assert!(is_not_leader(&error), "{error:?}");
        assert_eq!(seen.load(Ordering::SeqCst), 1, "nothing was sent");

        // Reads are no writes: a standby still reads through this client.
        api.get("a").await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 2);

        leader.send(true).unwrap();
        api.create(&PostParams::default(), &config_map())
            .await
            .unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_write_is_abandoned_at_the_deadline() {
        let (_leader, follower) = watch::channel(true);
        let (client, _) = counting_client(follower, Duration::from_secs(3), false);
        let api: Api<ConfigMap> = Api::namespaced(client, "ns");
        let started = tokio::time::Instant::now();
        let error = api
            .create(&PostParams::default(), &config_map())
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        let kube::Error::Service(source) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(
            source.downcast_ref::<WriteRefused>(),
            Some(&WriteRefused::TimedOut(Duration::from_secs(3)))
        );
        assert!(!is_not_leader(&error));
    }
}
