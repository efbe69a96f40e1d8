//! Logs and traces of the process: the log lines on stderr (filtered by `RUDDER_LOG`/`RUST_LOG`
//! style directives) and, when a tracing configuration is given, OpenTelemetry spans exported
//! over OTLP/gRPC to a collector.
//!
//! The configuration is upstream's `TracingConfiguration` (`apiserver.config.k8s.io`, versions
//! v1alpha1, v1beta1 and v1): `endpoint` (a collector's gRPC address, default
//! `localhost:4317`, plain text as upstream's exporter) and `samplingRatePerMillion` (default
//! 0). Sampling is upstream's: a request whose client sent a sampled W3C `traceparent` is
//! traced, others at the configured rate. The spans are the `tracing` spans Rudder's crates
//! open (the request, authentication, authorization, admission, the registry, the watch cache,
//! each storage call and the driver's statements or RPCs); debug-level ones are exported only
//! inside a request's span, so background loops do not flood the collector. See
//! docs/tracing.md.

use std::path::Path;

use anyhow::{bail, Context, Result};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde::Deserialize;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context as LayerContext, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The API group and kind a tracing configuration file declares.
const GROUP: &str = "apiserver.config.k8s.io";
const KIND: &str = "TracingConfiguration";
const VERSIONS: [&str; 3] = ["v1alpha1", "v1beta1", "v1"];
const DEFAULT_ENDPOINT: &str = "localhost:4317";
const ONE_MILLION: i64 = 1_000_000;

/// A checked tracing configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct TracingConfig {
    /// The collector's address as the exporter dials it (`http://host:port`).
    pub endpoint: String,
    /// Root spans sampled per million.
    pub sampling_rate_per_million: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTracingConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
    endpoint: Option<String>,
    sampling_rate_per_million: Option<i64>,
}

impl TracingConfig {
    /// Reads and checks a configuration file; the error names the file and the field.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the tracing configuration {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("tracing configuration {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self> {
        let raw: RawTracingConfiguration = yaml_serde::from_str(text)?;
        let api_version = raw.api_version.unwrap_or_default();
        let known = VERSIONS
            .iter()
            .any(|version| api_version == format!("{GROUP}/{version}"));
        if !known {
            bail!(
                "apiVersion: Unsupported value: {api_version:?}: supported values: {}",
                VERSIONS
                    .iter()
                    .map(|version| format!("\"{GROUP}/{version}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if raw.kind.as_deref() != Some(KIND) {
            bail!(
                "kind: Unsupported value: {:?}: supported values: \"{KIND}\"",
                raw.kind.unwrap_or_default()
            );
        }
        let rate = raw.sampling_rate_per_million.unwrap_or(0);
        if rate < 0 {
            bail!("samplingRatePerMillion: Invalid value: {rate}: sampling rate must be positive");
        }
        if rate > ONE_MILLION {
            bail!("samplingRatePerMillion: Invalid value: {rate}: sampling rate per million must be less than or equal to one million");
        }
        let endpoint = raw.endpoint.unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        Ok(Self {
            endpoint: dialable(&endpoint)?,
            sampling_rate_per_million: rate,
        })
    }

    /// The sampler upstream builds from the rate: a client's sampled parent decides, else the
    /// trace id against the rate.
    fn sampler(&self) -> Sampler {
        Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            self.sampling_rate_per_million as f64 / ONE_MILLION as f64,
        )))
    }
}

/// `host:port` (upstream's form) or a URL, as the gRPC exporter dials it.
fn dialable(endpoint: &str) -> Result<String> {
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    match url::Url::parse(&url) {
        Ok(parsed) if parsed.host_str().is_some_and(|host| !host.is_empty()) => Ok(url),
        Ok(_) => bail!("endpoint: Invalid value: {endpoint:?}: no host to send spans to"),
        Err(error) => bail!("endpoint: Invalid value: {endpoint:?}: {error}"),
    }
}

/// What [`init`] leaves running: the span exporter, flushed by [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                eprintln!("warning: flushing the last spans: {error}");
            }
        }
    }
}

/// Installs the process's subscriber: log lines on stderr and, with `tracing`, the span
/// exporter (which needs the Tokio runtime entered, for its gRPC channel).
pub fn init(tracing: Option<&TracingConfig>, service_name: &'static str) -> Result<Telemetry> {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn")),
        );
    let provider = match tracing {
        Some(config) => Some(provider(config, service_name)?),
        None => None,
    };
    let spans = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("rudder"))
            .with_filter(ExportedSpans)
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init()
        .context("installing the log subscriber")?;
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
    }
    Ok(Telemetry { provider })
}

fn provider(config: &TracingConfig, service_name: &'static str) -> Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(config.endpoint.clone())
        .build()
        .with_context(|| format!("the OTLP exporter to {}", config.endpoint))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(config.sampler())
        .with_resource(resource)
        .build())
}

/// Which spans and events go to the collector: Rudder's own (not the HTTP, gRPC and SQL
/// libraries' internals); info-level spans (a request's) anywhere, debug-level ones only
/// inside another exported span; events at info and above, as the span's events.
struct ExportedSpans;

fn ours(metadata: &Metadata<'_>) -> bool {
    metadata.target().starts_with("rudder")
}

impl<S> Filter<S> for ExportedSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(&self, metadata: &Metadata<'_>, cx: &LayerContext<'_, S>) -> bool {
        if !ours(metadata) {
            return false;
        }
        let level = *metadata.level();
        if metadata.is_span() {
            level <= Level::INFO || (level == Level::DEBUG && cx.lookup_current().is_some())
        } else {
            level <= Level::INFO
        }
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if !ours(metadata) {
            return Interest::never();
        }
        let level = *metadata.level();
        match (metadata.is_span(), level) {
            (_, level) if level <= Level::INFO => Interest::always(),
            (true, Level::DEBUG) => Interest::sometimes(),
            _ => Interest::never(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_example_parses_with_its_defaults() {
        let config = TracingConfig::parse(
            "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\n",
        )
        .expect("parses");
        assert_eq!(config.endpoint, "http://localhost:4317");
        assert_eq!(config.sampling_rate_per_million, 0);
        let config = TracingConfig::parse(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: collector:4317\nsamplingRatePerMillion: 1000000\n",
        )
        .expect("parses");
        assert_eq!(config.endpoint, "http://collector:4317");
        assert_eq!(config.sampling_rate_per_million, ONE_MILLION);
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("apiVersion: v1\nkind: TracingConfiguration\n", "apiVersion: Unsupported value: \"v1\""),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: Tracing\n", "kind: Unsupported value: \"Tracing\""),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nsamplingRatePerMillion: -1\n", "samplingRatePerMillion: Invalid value: -1: sampling rate must be positive"),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nsamplingRatePerMillion: 1000001\n", "less than or equal to one million"),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: \"http://\"\n", "endpoint: Invalid value: \"http://\""),
        ];
        for (text, expected) in cases {
            let error = format!("{:#}", TracingConfig::parse(text).expect_err(text));
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_sampler_follows_the_rate() {
        let config = |rate| TracingConfig {
            endpoint: String::new(),
            sampling_rate_per_million: rate,
        };
        assert_eq!(
            format!("{:?}", config(0).sampler()),
            format!(
                "{:?}",
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.0)))
            )
        );
        assert_eq!(
            format!("{:?}", config(500_000).sampler()),
            format!(
                "{:?}",
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(0.5)))
            )
        );
    }
}
