//! W3C Trace Context across the apiserver's edges: a client's `traceparent` (and `tracestate`)
//! makes the request's span a child of the client's, and calls the apiserver makes (admission
//! webhooks) carry the current span's, so one trace runs from the client through the
//! apiserver and its webhooks down to the store. Whether a span is exported is the sampler's
//! decision (a sampled parent is followed); without `--tracing-config-file` the propagator is
//! a no-op and this costs a header lookup.

use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The request's headers as OpenTelemetry's propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Makes `span` a child of the trace the client's `traceparent` names, if it names one.
pub fn continue_remote_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&Headers(headers))
    });
    if let Err(error) = span.set_parent(parent) {
        tracing::debug!(%error, "the client's trace context was not taken up");
    }
}

/// Headers of an outgoing request, as the propagator writes them.
struct OutgoingHeaders<'a>(&'a mut http::HeaderMap);

impl Injector for OutgoingHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Adds the current span's trace context (`traceparent`) to an outgoing request's headers.
pub fn propagate_current_trace(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut OutgoingHeaders(headers));
    });
}
