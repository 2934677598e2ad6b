//! Logs (text or JSON, each line at most [`crate::log_cap::MAX_LOG_LINE_BYTES`]) and,
//! when an OTLP endpoint is configured, traces over OTLP http/protobuf.
//!
//! OTLP follows the standard OpenTelemetry variables so that a collector set up for any
//! other service works here too: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) turn it on, `OTEL_SERVICE_NAME`
//! overrides the service name, `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_RESOURCE_ATTRIBUTES`
//! are honoured by the exporter, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
//! turn it off.

use std::{io::IsTerminal, time::Duration};

use http::Uri;
use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_subscriber::{Layer, layer::SubscriberExt, util::SubscriberInitExt};

use crate::{
    args::{LogFormat, LogLevel},
    log_cap::Capped,
    otlp_client::{OtlpClientError, OtlpHttpClient},
};

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to be exported.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
const SUPPORTED_PROTOCOL: &str = "http/protobuf";

/// What to set up: logging always, OTLP traces optionally.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub otlp: Option<OtlpConfig>,
}

/// Where and as whom traces are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Full URL spans are POSTed to, e.g. `http://collector:4318/v1/traces`.
    pub traces_endpoint: String,
    pub service_name: String,
    /// `service.instance.id`: which replica emitted a span.
    pub service_instance_id: Option<String>,
    /// A protocol asked for in the environment that this build does not speak
    /// (it always uses http/protobuf); reported once logging works.
    pub ignored_protocol: Option<String>,
}

impl OtlpConfig {
    /// Reads the standard `OTEL_*` variables; `None` when traces are not wanted.
    pub fn from_env(default_service_name: &str) -> Option<Self> {
        Self::from_vars(|name| std::env::var(name).ok(), default_service_name)
    }

    /// [`OtlpConfig::from_env`] over any variable source (tests pass a map).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        default_service_name: &str,
    ) -> Option<Self> {
        let var = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        if var("OTEL_TRACES_EXPORTER").is_some_and(|v| !v.eq_ignore_ascii_case("otlp")) {
            return None;
        }
        let traces_endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
            var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
        })?;
        let ignored_protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .filter(|protocol| protocol != SUPPORTED_PROTOCOL);
        Some(Self {
            traces_endpoint,
            service_name: var("OTEL_SERVICE_NAME")
                .unwrap_or_else(|| default_service_name.to_owned()),
            service_instance_id: None,
            ignored_protocol,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid OTLP endpoint {endpoint:?}: expected an http:// or https:// URL")]
    InvalidEndpoint { endpoint: String },
    #[error(transparent)]
    OtlpClient(#[from] OtlpClientError),
    #[error("cannot build the OTLP span exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
}

/// Installed telemetry. Call [`Telemetry::shutdown`] before exiting, or the last spans
/// are lost.
#[derive(Debug)]
#[must_use = "shut telemetry down before exiting, or the last spans are lost"]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the process-wide tracing subscriber. Call once, inside the Tokio runtime.
    pub fn install(config: TelemetryConfig) -> Result<Self, TelemetryError> {
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stdout().is_terminal())
            .with_writer(Capped::new(std::io::stdout, config.log_format));
        let fmt = match config.log_format {
            LogFormat::Text => fmt.boxed(),
            LogFormat::Json => fmt.json().flatten_event(true).boxed(),
        };
        let tracer_provider = config.otlp.as_ref().map(tracer_provider).transpose()?;
        let otel = tracer_provider.as_ref().map(|provider| {
            tracing_opentelemetry::layer().with_tracer(provider.tracer(env!("CARGO_PKG_NAME")))
        });
        tracing_subscriber::registry()
            .with(config.log_level.to_filter())
            .with(fmt)
            .with(otel)
            .try_init()?;

        match &config.otlp {
            Some(otlp) => {
                tracing::info!(
                    endpoint = %redacted(&otlp.traces_endpoint),
                    service_name = %otlp.service_name,
                    "exporting traces over OTLP http/protobuf"
                );
                if let Some(protocol) = &otlp.ignored_protocol {
                    tracing::warn!(%protocol, "OTLP protocol not supported, using http/protobuf");
                }
            }
            None => tracing::debug!("no OTLP endpoint set, traces are not exported"),
        }
        Ok(Self { tracer_provider })
    }

    /// Exports the spans still buffered and stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.tracer_provider else {
            return;
        };
        // Shutdown blocks until the exporter thread is done, and that thread needs this
        // runtime to send its last request: block elsewhere, not on a runtime worker.
        let flushed =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not export the last spans"),
            Err(error) => tracing::warn!(%error, "could not export the last spans"),
        }
    }
}

fn tracer_provider(otlp: &OtlpConfig) -> Result<SdkTracerProvider, TelemetryError> {
    let invalid = || TelemetryError::InvalidEndpoint {
        endpoint: redacted(&otlp.traces_endpoint),
    };
    let endpoint: Uri = otlp.traces_endpoint.parse().map_err(|_| invalid())?;
    if !matches!(endpoint.scheme_str(), Some("http" | "https")) || endpoint.host().is_none() {
        return Err(invalid());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OtlpHttpClient::for_endpoint(&endpoint, EXPORT_TIMEOUT)?)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(otlp.traces_endpoint.clone())
        .build()?;

    let mut resource = Resource::builder()
        .with_service_name(otlp.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if let Some(instance) = &otlp.service_instance_id {
        resource = resource.with_attribute(KeyValue::new("service.instance.id", instance.clone()));
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The endpoint without credentials or query, fit for logs and error messages.
fn redacted(endpoint: &str) -> String {
    match endpoint.parse::<Uri>() {
        Ok(uri) => {
            let scheme = uri.scheme_str().unwrap_or("");
            let host = uri.host().unwrap_or("");
            let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{scheme}://{host}{port}{}", uri.path())
        }
        Err(_) => "<unparseable>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> Option<OtlpConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        OtlpConfig::from_vars(|name| vars.get(name).cloned(), "hearth-discovery")
    }

    #[test]
    fn off_without_an_endpoint() {
        assert_eq!(from(&[]), None);
        assert_eq!(from(&[("OTEL_SERVICE_NAME", "x")]), None);
        assert_eq!(from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), None);
    }

    #[test]
    fn generic_endpoint_gets_the_traces_path() {
        let config = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]).unwrap();
        assert_eq!(config.traces_endpoint, "http://collector:4318/v1/traces");
        assert_eq!(config.service_name, "hearth-discovery");
        assert_eq!(config.ignored_protocol, None);
    }

    #[test]
    fn traces_endpoint_is_used_as_is_and_wins() {
        let config = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://traces.example/otlp",
            ),
            ("OTEL_SERVICE_NAME", "discovery-staging"),
        ])
        .unwrap();
        assert_eq!(config.traces_endpoint, "https://traces.example/otlp");
        assert_eq!(config.service_name, "discovery-staging");
    }

    #[test]
    fn can_be_switched_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(from(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]), None);
        assert_eq!(from(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]), None);
        assert!(from(&[endpoint, ("OTEL_TRACES_EXPORTER", "otlp")]).is_some());
        assert!(from(&[endpoint, ("OTEL_SDK_DISABLED", "false")]).is_some());
    }

    #[test]
    fn unsupported_protocols_are_reported() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        let config = from(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap();
        assert_eq!(config.ignored_protocol.as_deref(), Some("grpc"));
        let config = from(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).unwrap();
        assert_eq!(config.ignored_protocol, None);
    }

    #[test]
    fn redaction_drops_credentials_and_query() {
        assert_eq!(
            redacted("https://user:secret@collector:4318/v1/traces?token=abc"),
            "https://collector:4318/v1/traces"
        );
        assert_eq!(
            redacted("http://collector/v1/traces"),
            "http://collector/v1/traces"
        );
        assert_eq!(redacted("not a url"), "<unparseable>");
    }

    #[tokio::test]
    async fn bad_endpoints_are_refused_before_install() {
        for endpoint in ["collector:4318", "ftp://collector/v1/traces", "not a url"] {
            let otlp = OtlpConfig {
                traces_endpoint: endpoint.to_owned(),
                service_name: "x".to_owned(),
                service_instance_id: None,
                ignored_protocol: None,
            };
            assert!(
                matches!(
                    tracer_provider(&otlp),
                    Err(TelemetryError::InvalidEndpoint { .. })
                ),
                "{endpoint}"
            );
        }
    }
}
