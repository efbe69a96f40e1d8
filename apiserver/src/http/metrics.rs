//! `/metrics`: Prometheus text with upstream's request metrics
//! (`apiserver_request_total`, `apiserver_request_duration_seconds`), same names and labels,
//! and what the server's components register; each scrape first asks the store's size
//! (`apiserver_storage_size_bytes`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rudder_storage::instrumented::StorageMetrics;

use super::{AppState, RequestLabels};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TotalLabels {
    code: String,
    component: String,
    dry_run: String,
    group: String,
    resource: String,
    scope: String,
    subresource: String,
    verb: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    component: String,
    dry_run: String,
    group: String,
    resource: String,
    scope: String,
    subresource: String,
    verb: String,
    version: String,
}

/// Upstream's buckets for apiserver_request_duration_seconds.
const BUCKETS: &[f64] = &[
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

/// The apiserver's metrics.
pub struct Metrics {
    /// The storage calls under the registry (filled by the store's decorator).
    pub storage: Arc<StorageMetrics>,
    registry: Mutex<Registry>,
    total: Family<TotalLabels, Counter>,
    duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let total = Family::<TotalLabels, Counter>::default();
        let duration = Family::<DurationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            new_histogram,
        );
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            total.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            duration.clone(),
        );
        let storage = Arc::new(StorageMetrics::default());
        storage.register(&mut registry);
        Self {
            storage,
            registry: Mutex::new(registry),
            total,
            duration,
        }
    }

    /// Adds metrics of an in-process component (the scheduler's, say) to what `/metrics`
    /// serves.
    pub fn register_more(&self, register: impl FnOnce(&mut Registry)) {
        register(&mut self.registry.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Records one finished request.
    pub fn observe(&self, labels: &RequestLabels, code: u16, elapsed: Duration) {
        let dry_run = if labels.dry_run { "All" } else { "" }.to_string();
        self.total
            .get_or_create(&TotalLabels {
                code: code.to_string(),
                component: "apiserver".into(),
                dry_run: dry_run.clone(),
                group: labels.group.clone(),
                resource: labels.resource.clone(),
                scope: labels.scope.clone(),
                subresource: labels.subresource.clone(),
                verb: labels.verb.clone(),
                version: labels.version.clone(),
            })
            .inc();
        // Upstream leaves long-running watches out of the latency histogram's meaning, but
        // still records them; so do we.
        self.duration
            .get_or_create(&DurationLabels {
                component: "apiserver".into(),
                dry_run,
                group: labels.group.clone(),
                resource: labels.resource.clone(),
                scope: labels.scope.clone(),
                subresource: labels.subresource.clone(),
                verb: labels.verb.clone(),
                version: labels.version.clone(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = match self.registry.lock() {
            Ok(registry) => registry,
            Err(poisoned) => poisoned.into_inner(),
        };
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            text.clear();
        }
        text
    }
}

pub async fn handler(State(state): State<AppState>) -> Response {
    // The store's size as of this scrape, as upstream's storage monitor asks it (within 1 s):
    // the store's decorator records it from the answer.
    if tokio::time::timeout(Duration::from_secs(1), state.registry.storage().status())
        .await
        .is_err()
    {
        state.metrics.storage.storage_size(None);
    }
    (
        [(
            http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_with_upstreams_labels() {
        let metrics = Metrics::new();
        let labels = RequestLabels {
            verb: "LIST".into(),
            resource: "pods".into(),
            version: "v1".into(),
            scope: "namespace".into(),
            ..RequestLabels::default()
        };
        metrics.observe(&labels, 200, Duration::from_millis(3));
        metrics.observe(&labels, 200, Duration::from_millis(3));
        let text = metrics.encode();
        assert!(
            text.contains("apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("apiserver_request_duration_seconds_bucket{"),
            "{text}"
        );
    }
}
