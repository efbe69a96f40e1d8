//! A [`Storage`] decorator that times every call: a tracing span per call (the operation, the
//! key it starts at, what it found or wrote) and, per operation, a latency histogram and an
//! error counter in Prometheus form. Wrap a store once, where it is opened for a server; the
//! spans are what the OpenTelemetry export will carry, the metrics are served on `/metrics`.
//!
//! Labels are the operation only (a fixed set), never a key: keys come from clients, and a
//! label per key would let one client grow the metrics without bound.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tracing::Instrument;

use crate::interface::{Storage, WatchStream};
use crate::types::*;
use crate::Result;

/// Seconds; etcd's request latencies are milliseconds, a slow SQL backend's can be seconds.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Longest key prefix a span records.
const SPAN_KEY_BYTES: usize = 128;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

/// The storage metrics of one server.
pub struct StorageMetrics {
    duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    errors: Family<OperationLabels, Counter>,
}

impl Default for StorageMetrics {
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(new_histogram),
            errors: Family::default(),
        }
    }
}

impl StorageMetrics {
    /// Adds the metrics to `registry` (`rudder_storage_request_duration_seconds`,
    /// `rudder_storage_request_errors_total`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rudder_storage_request_duration_seconds",
            "Latency of calls to the storage driver in seconds, by operation.",
            self.duration.clone(),
        );
        registry.register(
            "rudder_storage_request_errors",
            "Calls to the storage driver that failed, by operation.",
            self.errors.clone(),
        );
    }

    fn observe<T>(&self, operation: &'static str, started: Instant, result: &Result<T>) {
        let labels = OperationLabels { operation };
        self.duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = result {
            self.errors.get_or_create(&labels).inc();
            tracing::debug!(operation, %error, "storage call failed");
        }
    }
}

/// A store whose every call is timed into [`StorageMetrics`] and traced.
pub struct Instrumented {
    inner: Arc<dyn Storage>,
    metrics: Arc<StorageMetrics>,
}

impl Instrumented {
    /// `inner`, timed into `metrics`.
    pub fn wrap(inner: Arc<dyn Storage>, metrics: Arc<StorageMetrics>) -> Arc<dyn Storage> {
        Arc::new(Self { inner, metrics })
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        span: tracing::Span,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call.instrument(span).await;
        self.metrics.observe(operation, started, &result);
        result
    }
}

/// A key as a span shows it: text, cut to [`SPAN_KEY_BYTES`].
fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(SPAN_KEY_BYTES)]).into_owned()
}

/// The key a transaction is about: its first compare's, else its first operation's.
fn txn_key(request: &TxnRequest) -> Option<&[u8]> {
    if let Some(compare) = request.compare.first() {
        return Some(&compare.range.start);
    }
    request.success.iter().find_map(|op| match op {
        TxnOp::Range(range) => Some(range.range.start.as_slice()),
        TxnOp::Put(put) => Some(put.key.as_slice()),
        TxnOp::DeleteRange(delete) => Some(delete.range.start.as_slice()),
        TxnOp::Txn(nested) => txn_key(nested),
    })
}

#[async_trait]
impl Storage for Instrumented {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let span = tracing::debug_span!(
            "storage.range",
            key = %shown(&request.range.start),
            prefix = !request.range.end.is_empty(),
            revision = request.revision,
            limit = request.limit,
            kvs = tracing::field::Empty,
        );
        let recorder = span.clone();
        let response = self.timed("range", span, self.inner.range(request)).await?;
        recorder.record("kvs", response.kvs.len());
        Ok(response)
    }

    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        let span = tracing::debug_span!(
            "storage.txn",
            key = %txn_key(&request).map(shown).unwrap_or_default(),
            compares = request.compare.len(),
            success_ops = request.success.len(),
            failure_ops = request.failure.len(),
            succeeded = tracing::field::Empty,
            revision = tracing::field::Empty,
        );
        let recorder = span.clone();
        let response = self.timed("txn", span, self.inner.txn(request)).await?;
        recorder.record("succeeded", response.succeeded);
        recorder.record("revision", response.revision);
        Ok(response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let span = tracing::debug_span!(
            "storage.watch",
            key = %shown(&request.range.start),
            start_revision = request.start_revision,
        );
        self.timed("watch", span, self.inner.watch(request)).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let span = tracing::debug_span!("storage.compact", revision);
        self.timed("compact", span, self.inner.compact(revision))
            .await
    }

    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        let span = tracing::debug_span!("storage.lease_grant", ttl, id);
        self.timed("lease_grant", span, self.inner.lease_grant(ttl, id))
            .await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        let span = tracing::debug_span!("storage.lease_keep_alive", id);
        self.timed("lease_keep_alive", span, self.inner.lease_keep_alive(id))
            .await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        let span = tracing::debug_span!("storage.lease_revoke", id);
        self.timed("lease_revoke", span, self.inner.lease_revoke(id))
            .await
    }

    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        let span = tracing::debug_span!("storage.lease_time_to_live", id, keys);
        let call = self.inner.lease_time_to_live(id, keys);
        self.timed("lease_time_to_live", span, call).await
    }

    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        let span = tracing::debug_span!("storage.lease_list");
        self.timed("lease_list", span, self.inner.lease_list())
            .await
    }

    async fn status(&self) -> Result<Status> {
        let span = tracing::debug_span!("storage.status");
        self.timed("status", span, self.inner.status()).await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_call_is_timed_and_failures_are_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let inner = crate::open(&url).await.expect("open sqlite");
        let metrics = Arc::new(StorageMetrics::default());
        let store = Instrumented::wrap(inner, metrics.clone());

        store.put(b"/a", b"1", 0).await.expect("put");
        store.get(b"/a", 0).await.expect("get");
        store.get(b"/a", 0).await.expect("get");
        // A read far in the future fails, and is counted as an error of its operation.
        assert!(store.get(b"/a", 1_000_000).await.is_err());

        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("rudder_storage_request_errors_total{operation=\"range\"} 1"),
            "{text}"
        );
        for (operation, calls) in [("range", 3), ("txn", 1)] {
            let count =
                format!("rudder_storage_request_duration_seconds_count{{operation=\"{operation}\"}} {calls}");
            assert!(text.contains(&count), "{count} in {text}");
        }
        assert!(!text.contains("errors_total{operation=\"txn\"}"), "{text}");
        store.close().await;
    }
}
