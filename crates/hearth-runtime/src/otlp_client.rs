//! The HTTP client the OTLP exporter posts spans with: hyper over the connection stack
//! kube already links in (hyper-util's pooled client, rustls for `https`).
//!
//! Written here rather than taken from opentelemetry-otlp's `hyper-client` feature because
//! the SDK's batch span processor exports from its own OS thread, outside the Tokio
//! runtime, and hyper needs a runtime. (That feature would also compile in HTTP/2.)

use std::time::Duration;

use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use opentelemetry_http::{Bytes, HttpClient, HttpError};
use tokio::runtime::Handle;

/// A collector's answer is a small protobuf; anything bigger is not a collector.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OtlpClientError {
    #[error("the OTLP client needs a Tokio runtime")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    #[error("cannot load the system's CA certificates for an https OTLP endpoint: {0}")]
    CaCertificates(#[source] std::io::Error),
}

#[derive(Debug, Clone)]
pub(crate) struct OtlpHttpClient {
    client: Transport,
    runtime: Handle,
    timeout: Duration,
}

#[derive(Debug, Clone)]
enum Transport {
    Plain(Client<HttpConnector, Full<Bytes>>),
    // Only built for https endpoints, so a plain-http setup never needs a CA bundle.
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl OtlpHttpClient {
    /// Must be called inside the Tokio runtime that will carry the requests.
    pub(crate) fn for_endpoint(endpoint: &Uri, timeout: Duration) -> Result<Self, OtlpClientError> {
        let runtime = Handle::try_current().map_err(OtlpClientError::NoRuntime)?;
        let builder = Client::builder(TokioExecutor::new());
        let client = if endpoint.scheme() == Some(&http::uri::Scheme::HTTPS) {
            let provider = rustls::crypto::ring::default_provider();
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider)
                .map_err(OtlpClientError::CaCertificates)?
                .https_only()
                .enable_http1()
                .build();
            Transport::Tls(builder.build(connector))
        } else {
            Transport::Plain(builder.build_http())
        };
        Ok(Self {
            client,
            runtime,
            timeout,
        })
    }

    async fn send(self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = request.map(Full::new);
        let exchange = async {
            let response = match &self.client {
                Transport::Plain(client) => client.request(request).await?,
                Transport::Tls(client) => client.request(request).await?,
            };
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        tokio::time::timeout(self.timeout, exchange).await?
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        self.runtime.spawn(self.clone().send(request)).await?
    }
}
