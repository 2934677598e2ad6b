//! Traces reach an OTLP collector: a tiny HTTP receiver stands in for the collector and
//! checks that spans arrive as http/protobuf on `/v1/traces`.
//!
//! Its own test binary, because telemetry installs the process-wide subscriber.

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use hearth_runtime::{LogFormat, OtlpConfig, Telemetry, TelemetryConfig};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::{
    body::{Bytes, Incoming},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value::Value,
};
use prost::Message;
use tokio::{net::TcpListener, sync::mpsc};

struct Received {
    method: http::Method,
    path: String,
    content_type: Option<String>,
    body: Bytes,
}

/// Accepts any request, reports it on the channel and answers 200 with an empty
/// (valid) ExportTraceServiceResponse.
async fn start_collector() -> (SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let _ = tx.send(Received {
                            method: parts.method,
                            path: parts.uri.path().to_owned(),
                            content_type: parts
                                .headers
                                .get(header::CONTENT_TYPE)
                                .map(|v| v.to_str().unwrap().to_owned()),
                            body,
                        });
                        let mut response = Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = StatusCode::OK;
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

fn string_attribute(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|value| match value {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

#[tokio::test]
async fn spans_are_exported_to_the_collector_on_shutdown() {
    let (addr, mut received) = start_collector().await;
    // Built from the same variables a Deployment would set.
    let otlp = OtlpConfig::from_vars(
        |name| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| format!("http://{addr}")),
        "hearth-test",
    )
    .expect("an endpoint turns OTLP on");
    let telemetry = Telemetry::install(TelemetryConfig {
        log_level: "info".parse().unwrap(),
        log_format: LogFormat::Text,
        otlp: Some(OtlpConfig {
            service_instance_id: Some("pod-a".to_owned()),
            ..otlp
        }),
    })
    .unwrap();

    tracing::info_span!("startup", controller = "hearth-test").in_scope(|| {
        tracing::info!("inside the startup span");
    });
    // Spans below the configured level are filtered out before they reach the exporter.
    tracing::debug_span!("too_verbose").in_scope(|| {});

    // The batch processor holds the span until shutdown flushes it.
    telemetry.shutdown().await;

    let export = tokio::time::timeout(Duration::from_secs(10), received.recv())
        .await
        .expect("the collector receives an export before the deadline")
        .expect("collector is running");
    assert_eq!(export.method, http::Method::POST);
    assert_eq!(export.path, "/v1/traces");
    assert_eq!(
        export.content_type.as_deref(),
        Some("application/x-protobuf")
    );
    assert!(!export.body.is_empty());

    let request = ExportTraceServiceRequest::decode(export.body).expect("body is OTLP protobuf");
    let resource_spans = &request.resource_spans;
    assert_eq!(resource_spans.len(), 1);
    let resource = resource_spans[0]
        .resource
        .as_ref()
        .expect("resource is sent");
    assert_eq!(
        string_attribute(&resource.attributes, "service.name").as_deref(),
        Some("hearth-test")
    );
    assert_eq!(
        string_attribute(&resource.attributes, "service.instance.id").as_deref(),
        Some("pod-a")
    );
    let names: Vec<&str> = resource_spans[0]
        .scope_spans
        .iter()
        .flat_map(|scope| &scope.spans)
        .map(|span| span.name.as_str())
        .collect();
    assert_eq!(names, ["startup"]);
}
