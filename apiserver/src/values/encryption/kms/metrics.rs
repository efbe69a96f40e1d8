//! kube-apiserver's KMS v2 metrics (`apiserver_envelope_encryption_*`), one set per server,
//! shared by every KMS provider of every configuration it loads (a reload keeps counting
//! into the same series): how often each key ID sealed and opened values and when it last
//! did, when `Status` last reported each key ID, the invalid key IDs `Status` returned, the
//! size of each provider's cache of decrypted DEK sources, and the latency of every call to a
//! plugin by method and gRPC status code.
//!
//! A key ID is never a label: it shows as upstream's hash, `sha256:` and the hex SHA-256 of
//! the key ID, next to the hash of the server's identity. As upstream, only the 100 label
//! sets used most recently are kept for the key ID series, so a plugin that rotates keys
//! often cannot grow `/metrics` without bound.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::envelope::key_id_hash;

/// How many label sets each key ID metric keeps (upstream's LRU size).
const KEPT_LABEL_SETS: usize = 100;

/// Which way a value went through a KMS provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transformation {
    /// Sealed for the store.
    ToStorage,
    /// Opened from the store.
    FromStorage,
}

impl Transformation {
    fn label(self) -> &'static str {
        match self {
            Self::ToStorage => "to_storage",
            Self::FromStorage => "from_storage",
        }
    }
}

// Label fields are in name order: the order upstream's exposition prints them in.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyIdLabels {
    apiserver_id_hash: String,
    key_id_hash: String,
    provider_name: String,
    transformation_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    apiserver_id_hash: String,
    key_id_hash: String,
    provider_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InvalidKeyIdLabels {
    error: &'static str,
    provider_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    grpc_status_code: String,
    method_name: String,
    provider_name: String,
}

/// The KMS v2 metrics of one server.
pub struct KmsMetrics {
    apiserver_id_hash: String,
    key_id_total: Family<KeyIdLabels, Counter>,
    key_id_last: Family<KeyIdLabels, Gauge<f64, AtomicU64>>,
    status_last: Family<StatusLabels, Gauge<f64, AtomicU64>>,
    invalid_status_key_id: Family<InvalidKeyIdLabels, Counter>,
    dek_source_cache_size: Family<ProviderLabel, Gauge>,
    operations: Family<OperationLabels, Histogram, fn() -> Histogram>,
    /// The key ID label sets in use, most recent kept (also serializes their updates, so an
    /// eviction never races an increment).
    used: Mutex<Recent<KeyIdLabels>>,
    reported: Mutex<Recent<StatusLabels>>,
}

impl Default for KmsMetrics {
    /// Metrics of a server with no identity (tools, tests): `apiserver_id_hash` is empty.
    fn default() -> Self {
        Self::new("")
    }
}

impl KmsMetrics {
    /// Metrics labelled with the hash of the server identity `server_id`.
    pub fn new(server_id: &str) -> Self {
        fn histogram() -> Histogram {
            // Upstream's buckets: 0.1 ms doubling to ~52 s.
            Histogram::new(exponential_buckets(0.0001, 2.0, 20))
        }
        Self {
            apiserver_id_hash: key_id_hash(server_id),
            key_id_total: Family::default(),
            key_id_last: Family::default(),
            status_last: Family::default(),
            invalid_status_key_id: Family::default(),
            dek_source_cache_size: Family::default(),
            operations: Family::new_with_constructor(histogram),
            used: Mutex::new(Recent::default()),
            reported: Mutex::new(Recent::default()),
        }
    }

    /// Adds the metrics to `registry` under upstream's names and help texts (without their
    /// final period: prometheus-client adds it; counters without `_total`: it adds that too).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apiserver_envelope_encryption_key_id_hash",
            "Number of times a keyID is used split by transformation type, provider, and apiserver identity",
            self.key_id_total.clone(),
        );
        registry.register(
            "apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds",
            "The last time in seconds when a keyID was used",
            self.key_id_last.clone(),
        );
        registry.register(
            "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds",
            "The last time in seconds when a keyID was returned by the Status RPC call",
            self.status_last.clone(),
        );
        registry.register(
            "apiserver_envelope_encryption_invalid_key_id_from_status",
            "Number of times an invalid keyID is returned by the Status RPC call split by error",
            self.invalid_status_key_id.clone(),
        );
        registry.register(
            "apiserver_envelope_encryption_dek_source_cache_size",
            "Number of records in data encryption key (DEK) source cache. On a restart, this value is an approximation of the number of decrypt RPC calls the server will make to the KMS plugin",
            self.dek_source_cache_size.clone(),
        );
        registry.register(
            "apiserver_envelope_encryption_kms_operations_latency_seconds",
            "KMS operation duration with gRPC error code status total",
            self.operations.clone(),
        );
    }

    /// `provider` sealed or opened a value under the key ID whose hash is `key_id_hash`.
    pub fn key_id_used(&self, transformation: Transformation, provider: &str, key_id_hash: &str) {
        let labels = KeyIdLabels {
            apiserver_id_hash: self.apiserver_id_hash.clone(),
            key_id_hash: key_id_hash.into(),
            provider_name: provider.into(),
            transformation_type: transformation.label(),
        };
        let mut used = lock(&self.used);
        if let Some(evicted) = used.touch(&labels) {
            self.key_id_total.remove(&evicted);
            self.key_id_last.remove(&evicted);
        }
        self.key_id_total.get_or_create(&labels).inc();
        self.key_id_last.get_or_create(&labels).set(now());
    }

    /// `provider`'s `Status` reported the (valid) key ID whose hash is `key_id_hash`.
    pub fn status_key_id(&self, provider: &str, key_id_hash: &str) {
        let labels = StatusLabels {
            apiserver_id_hash: self.apiserver_id_hash.clone(),
            key_id_hash: key_id_hash.into(),
            provider_name: provider.into(),
        };
        let mut reported = lock(&self.reported);
        if let Some(evicted) = reported.touch(&labels) {
            self.status_last.remove(&evicted);
        }
        self.status_last.get_or_create(&labels).set(now());
    }

    /// `provider`'s `Status` reported an invalid key ID; `error` is upstream's code for why
    /// (`empty`, `too_long`).
    pub fn invalid_status_key_id(&self, provider: &str, error: &'static str) {
        self.invalid_status_key_id
            .get_or_create(&InvalidKeyIdLabels {
                error,
                provider_name: provider.into(),
            })
            .inc();
    }

    /// `provider` holds `size` decrypted DEK sources.
    pub fn dek_source_cache_size(&self, provider: &str, size: usize) {
        self.dek_source_cache_size
            .get_or_create(&ProviderLabel {
                provider_name: provider.into(),
            })
            .set(i64::try_from(size).unwrap_or(i64::MAX));
    }

    /// A call of `method` (the gRPC path, `/v2.KeyManagementService/Status`) to `provider`'s
    /// plugin ended with `code` (`OK`, a gRPC code's name, or `unknown-non-grpc`).
    pub fn operation(&self, provider: &str, method: &str, code: &str, elapsed: Duration) {
        self.operations
            .get_or_create(&OperationLabels {
                grpc_status_code: code.into(),
                method_name: method.into(),
                provider_name: provider.into(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

/// The name gRPC gives a status code (Go's `codes.Code.String()`), as upstream labels it.
pub fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The label sets of one metric in use, each with when it was last used: at most
/// [`KEPT_LABEL_SETS`], the least recently used pushed out first.
struct Recent<T> {
    last_used: HashMap<T, u64>,
    clock: u64,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            last_used: HashMap::new(),
            clock: 0,
        }
    }
}

impl<T: Clone + Hash + Eq> Recent<T> {
    /// Marks `labels` used now; returns the label set this pushed out, if any.
    fn touch(&mut self, labels: &T) -> Option<T> {
        self.clock += 1;
        if let Some(last) = self.last_used.get_mut(labels) {
            *last = self.clock;
            return None;
        }
        self.last_used.insert(labels.clone(), self.clock);
        if self.last_used.len() <= KEPT_LABEL_SETS {
            return None;
        }
        let oldest = self
            .last_used
            .iter()
            .min_by_key(|(_, last)| **last)
            .map(|(labels, _)| labels.clone())?;
        self.last_used.remove(&oldest);
        Some(oldest)
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(metrics: &KmsMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    fn value<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn key_ids_are_counted_by_their_hash_with_upstreams_names_and_labels() {
        let metrics = KmsMetrics::new("127.0.0.1:6443");
        let hash = key_id_hash("key-1");
        metrics.key_id_used(Transformation::ToStorage, "vault", &hash);
        metrics.key_id_used(Transformation::ToStorage, "vault", &hash);
        metrics.key_id_used(Transformation::FromStorage, "vault", &hash);
        metrics.status_key_id("vault", &hash);
        metrics.invalid_status_key_id("vault", "empty");
        metrics.dek_source_cache_size("vault", 2);
        metrics.operation(
            "vault",
            "/v2.KeyManagementService/Status",
            "OK",
            Duration::ZERO,
        );
        let text = encode(&metrics);

        // sha256("key-1") and sha256("127.0.0.1:6443"), as `sha256sum` prints them.
        let key = "sha256:be2974546978e3739e6d6da85c4be9f334ce32df2b9fd4b6ff1b55c0d57e9d44";
        let server = "sha256:16f1ec486f46bb54d5538248381aa7fa26bd8865a3e63db5128e436bbd6d8181";
        assert_eq!(hash, key);
        let series = |name: &str, transformation: &str| {
            format!("apiserver_envelope_encryption_key_id_hash{name}{{apiserver_id_hash=\"{server}\",key_id_hash=\"{key}\",provider_name=\"vault\",transformation_type=\"{transformation}\"}}")
        };
        assert_eq!(
            value(&text, &series("_total", "to_storage")),
            Some("2"),
            "{text}"
        );
        assert_eq!(
            value(&text, &series("_total", "from_storage")),
            Some("1"),
            "{text}"
        );
        let last: f64 = value(&text, &series("_last_timestamp_seconds", "to_storage"))
            .expect("a timestamp")
            .parse()
            .expect("a number");
        assert!((now() - last).abs() < 60.0, "{last}");
        assert!(text.contains(&format!("apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds{{apiserver_id_hash=\"{server}\",key_id_hash=\"{key}\",provider_name=\"vault\"}} ")), "{text}");
        for line in [
            "apiserver_envelope_encryption_invalid_key_id_from_status_total{error=\"empty\",provider_name=\"vault\"} 1",
            "apiserver_envelope_encryption_dek_source_cache_size{provider_name=\"vault\"} 2",
            "apiserver_envelope_encryption_kms_operations_latency_seconds_count{grpc_status_code=\"OK\",method_name=\"/v2.KeyManagementService/Status\",provider_name=\"vault\"} 1",
            "# HELP apiserver_envelope_encryption_key_id_hash Number of times a keyID is used split by transformation type, provider, and apiserver identity.\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn only_the_most_recently_used_key_ids_are_kept() {
        let metrics = KmsMetrics::default();
        let first = key_id_hash("key-0");
        metrics.key_id_used(Transformation::ToStorage, "p", &first);
        metrics.status_key_id("p", &first);
        for n in 1..=KEPT_LABEL_SETS {
            let hash = key_id_hash(&format!("key-{n}"));
            metrics.key_id_used(Transformation::ToStorage, "p", &hash);
            metrics.status_key_id("p", &hash);
        }
        let text = encode(&metrics);
        assert!(!text.contains(&first), "the oldest key ID is gone");
        assert!(text.contains(&key_id_hash("key-1")));
        assert!(text.contains(&key_id_hash(&format!("key-{KEPT_LABEL_SETS}"))));
        let series = text
            .lines()
            .filter(|line| line.starts_with("apiserver_envelope_encryption_key_id_hash_total{"))
            .count();
        assert_eq!(series, KEPT_LABEL_SETS);
        // A key ID used again is the most recent: the next one pushes out key-2, not it.
        let one = key_id_hash("key-1");
        metrics.key_id_used(Transformation::ToStorage, "p", &one);
        metrics.key_id_used(Transformation::ToStorage, "p", &key_id_hash("key-new"));
        let text = encode(&metrics);
        let used: String = text
            .lines()
            .filter(|line| line.starts_with("apiserver_envelope_encryption_key_id_hash_total{"))
            .collect();
        assert!(used.contains(&one) && !used.contains(&key_id_hash("key-2")));
    }

    #[test]
    fn grpc_codes_are_named_as_go_names_them() {
        assert_eq!(grpc_code_name(tonic::Code::Ok), "OK");
        assert_eq!(grpc_code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(
            grpc_code_name(tonic::Code::DeadlineExceeded),
            "DeadlineExceeded"
        );
        assert_eq!(grpc_code_name(tonic::Code::Unavailable), "Unavailable");
    }
}
