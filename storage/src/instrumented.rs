//! A [`Storage`] decorator that times every call: a tracing span per call (the operation, the
//! key it starts at, what it found or wrote) and, per operation, a latency histogram and an
//! error counter in Prometheus form. Wrap a store once, where it is opened for a server; the
//! spans are what the OpenTelemetry export will carry, the metrics are served on `/metrics`.
//!
//! The metrics carry kube-apiserver's names — `etcd_request_duration_seconds`,
//! `etcd_requests_total`, `etcd_request_errors_total` — labelled by `operation` (this
//! interface's calls: `range`, `txn`, `watch`, …) and `type`, the resource a key belongs to
//! (`pods` for `/registry/pods/…`, `widgets.example.com` for a custom resource's
//! `/registry/example.com/widgets/…`). Never a key: keys come from clients, and a label per key
//! would let one client grow the metrics without bound; for the same reason at most
//! [`MAX_TYPES`] types are told apart (keys the etcd gateway's clients choose could name any),
//! the rest are `other`.
//!
//! Every successful `status` call also records the store's size as kube-apiserver reports
//! its etcd's, `apiserver_storage_size_bytes{storage_cluster_id="etcd-0"}` (the server's one
//! store is upstream's first storage cluster); a failed one drops the series until the next
//! success, as upstream leaves out a cluster it could not ask.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// Resource types told apart in the labels; beyond them, `other`.
pub const MAX_TYPES: usize = 256;

/// The `storage_cluster_id` of the store's size: upstream's name for its first (here the
/// only) storage cluster, whatever the driver.
pub const STORAGE_CLUSTER_ID: &str = "etcd-0";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
    r#type: String,
}

/// The resource a key belongs to, as kube-apiserver lays keys out: `/registry/<resource>/…`
/// for built-in kinds, `/registry/<group>/<resource>/…` for custom ones (a group has a dot).
pub fn resource_type(key: &[u8]) -> Option<String> {
    let rest = key.strip_prefix(b"/registry/")?;
    let mut parts = rest.split(|b| *b == b'/');
    let first = std::str::from_utf8(parts.next()?).ok()?;
    if first.is_empty() {
        return None;
    }
    if first.contains('.') {
        let plural = std::str::from_utf8(parts.next()?).ok()?;
        return (!plural.is_empty()).then(|| format!("{plural}.{first}"));
    }
    Some(first.to_string())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StorageCluster {
    storage_cluster_id: &'static str,
}

const THE_CLUSTER: StorageCluster = StorageCluster {
    storage_cluster_id: STORAGE_CLUSTER_ID,
};

fn new_histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

/// The storage metrics of one server.
pub struct StorageMetrics {
    duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    requests: Family<OperationLabels, Counter>,
    errors: Family<OperationLabels, Counter>,
    /// The store's size in bytes, from its last successful `status`.
    size: Family<StorageCluster, Gauge>,
    /// The types seen so far (at most [`MAX_TYPES`]).
    types: RwLock<HashSet<String>>,
}

impl Default for StorageMetrics {
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(new_histogram),
            requests: Family::default(),
            errors: Family::default(),
            size: Family::default(),
            types: RwLock::default(),
        }
    }
}

impl StorageMetrics {
    /// Adds the metrics to `registry` (`etcd_request_duration_seconds`,
    /// `etcd_requests_total`, `etcd_request_errors_total`, `apiserver_storage_size_bytes`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "etcd_request_duration_seconds",
            "Etcd request latency in seconds for each operation and object type",
            self.duration.clone(),
        );
        registry.register(
            "etcd_requests",
            "Etcd request counts for each operation and object type",
            self.requests.clone(),
        );
        registry.register(
            "etcd_request_errors",
            "Etcd failed request counts for each operation and object type",
            self.errors.clone(),
        );
        registry.register(
            "apiserver_storage_size_bytes",
            "Size of the storage database file physically allocated in bytes",
            self.size.clone(),
        );
    }

    /// Records the store's size from a `status` answer (none: the store could not be asked).
    pub fn storage_size(&self, status: Option<&Status>) {
        match status {
            Some(status) => {
                self.size
                    .get_or_create(&THE_CLUSTER)
                    .set(status.db_size_bytes);
            }
            None => {
                self.size.remove(&THE_CLUSTER);
            }
        }
    }

    /// The `type` label of `key`: its resource, once [`MAX_TYPES`] are known only those.
    fn type_of(&self, key: Option<&[u8]>) -> String {
        let Some(found) = key.and_then(resource_type) else {
            return "other".into();
        };
        if let Ok(types) = self.types.read() {
            if types.contains(&found) {
                return found;
            }
            if types.len() >= MAX_TYPES {
                return "other".into();
            }
        }
        match self.types.write() {
            Ok(mut types) if types.len() < MAX_TYPES || types.contains(&found) => {
                types.insert(found.clone());
                found
            }
            _ => "other".into(),
        }
    }

    fn observe<T>(
        &self,
        operation: &'static str,
        key: Option<&[u8]>,
        started: Instant,
        result: &Result<T>,
    ) {
        let labels = OperationLabels {
            operation,
            r#type: self.type_of(key),
        };
        self.duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.requests.get_or_create(&labels).inc();
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
        key: Option<&[u8]>,
        span: tracing::Span,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call.instrument(span).await;
        self.metrics.observe(operation, key, started, &result);
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
        let key = request.range.start.clone();
        let response = self
            .timed("range", Some(&key), span, self.inner.range(request))
            .await?;
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
        let key = txn_key(&request).map(<[u8]>::to_vec);
        let response = self
            .timed("txn", key.as_deref(), span, self.inner.txn(request))
            .await?;
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
        let key = request.range.start.clone();
        self.timed("watch", Some(&key), span, self.inner.watch(request))
            .await
    }

    async fn restore(&self, step: RestoreStep) -> Result<()> {
        let span = tracing::debug_span!("storage.restore");
        self.timed("restore", None, span, self.inner.restore(step))
            .await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let span = tracing::debug_span!("storage.compact", revision);
        self.timed("compact", None, span, self.inner.compact(revision))
            .await
    }

    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        let span = tracing::debug_span!("storage.lease_grant", ttl, id);
        self.timed("lease_grant", None, span, self.inner.lease_grant(ttl, id))
            .await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        let span = tracing::debug_span!("storage.lease_keep_alive", id);
        self.timed(
            "lease_keep_alive",
            None,
            span,
            self.inner.lease_keep_alive(id),
        )
        .await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        let span = tracing::debug_span!("storage.lease_revoke", id);
        self.timed("lease_revoke", None, span, self.inner.lease_revoke(id))
            .await
    }

    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        let span = tracing::debug_span!("storage.lease_time_to_live", id, keys);
        let call = self.inner.lease_time_to_live(id, keys);
        self.timed("lease_time_to_live", None, span, call).await
    }

    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        let span = tracing::debug_span!("storage.lease_list");
        self.timed("lease_list", None, span, self.inner.lease_list())
            .await
    }

    async fn status(&self) -> Result<Status> {
        let span = tracing::debug_span!("storage.status");
        let status = self.timed("status", None, span, self.inner.status()).await;
        self.metrics.storage_size(status.as_ref().ok());
        status
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
        store
            .get(b"/registry/pods/default/web", 0)
            .await
            .expect("get");

        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("etcd_request_errors_total{operation=\"range\",type=\"other\"} 1"),
            "{text}"
        );
        for (operation, kind, calls) in [
            ("range", "other", 3),
            ("txn", "other", 1),
            ("range", "pods", 1),
        ] {
            let labels = format!("{{operation=\"{operation}\",type=\"{kind}\"}} {calls}");
            for metric in ["etcd_request_duration_seconds_count", "etcd_requests_total"] {
                let line = format!("{metric}{labels}");
                assert!(text.contains(&line), "{line} in {text}");
            }
        }
        assert!(!text.contains("errors_total{operation=\"txn\""), "{text}");
        assert!(!text.contains("apiserver_storage_size_bytes{"), "{text}");

        // A status records the store's size; a failed one drops it.
        let status = store.status().await.expect("status");
        assert!(status.db_size_bytes > 0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let size = format!(
            "apiserver_storage_size_bytes{{storage_cluster_id=\"etcd-0\"}} {}\n",
            status.db_size_bytes
        );
        assert!(text.contains(&size), "{size} in {text}");
        metrics.storage_size(None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(!text.contains("apiserver_storage_size_bytes{"), "{text}");
        store.close().await;
    }

    #[test]
    fn keys_name_their_resource() {
        assert_eq!(
            resource_type(b"/registry/pods/ns/web").as_deref(),
            Some("pods")
        );
        assert_eq!(
            resource_type(b"/registry/namespaces/ns").as_deref(),
            Some("namespaces")
        );
        assert_eq!(
            resource_type(b"/registry/example.com/widgets/ns/w").as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(resource_type(b"/registry/"), None);
        assert_eq!(resource_type(b"/elsewhere/pods"), None);
    }

    #[test]
    fn types_past_the_limit_are_other() {
        let metrics = StorageMetrics::default();
        for n in 0..MAX_TYPES {
            let key = format!("/registry/kind{n}/x");
            assert_eq!(metrics.type_of(Some(key.as_bytes())), format!("kind{n}"));
        }
        assert_eq!(metrics.type_of(Some(b"/registry/one-more/x")), "other");
        assert_eq!(metrics.type_of(Some(b"/registry/kind7/y")), "kind7");
    }
}
