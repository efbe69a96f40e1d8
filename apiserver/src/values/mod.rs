//! Stored values: how an object becomes the bytes a driver keeps, and back, as kube-apiserver
//! does it between its registry and etcd — the codec (protobuf `k8s\0` for built-in kinds,
//! JSON otherwise; [`format`]) and then the value transformers of the encryption
//! configuration ([`encryption`]). Every read and write of an API object in the store goes
//! through [`Values`]; the raw store only ever sees what these functions produce.

pub mod encryption;
pub mod format;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::Value;

pub use format::MediaType;

use crate::catalog::{self, ResourceInfo};
use encryption::{Chain, Current, EncryptionError};
use format::FormatError;

/// Why a stored value could not be produced or read.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Encryption(#[from] EncryptionError),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    transformation_type: String,
    transformer_prefix: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    transformation_type: String,
    transformer_prefix: String,
}

/// Upstream's storage transformation metrics.
pub struct TransformMetrics {
    operations: Family<OperationLabels, Counter<u64, AtomicU64>>,
    duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
}

impl Default for TransformMetrics {
    fn default() -> Self {
        fn histogram() -> Histogram {
            // Upstream's buckets: 5 µs doubling to ~10 s.
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                5e-6, 2.0, 22,
            ))
        }
        Self {
            operations: Family::default(),
            duration: Family::new_with_constructor(histogram),
        }
    }
}

impl TransformMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "apiserver_storage_transformation_operations",
            "Total number of transformations. Successful transformation will have a status 'OK' and a varied status string when the transformation fails",
            self.operations.clone(),
        );
        registry.register(
            "apiserver_storage_transformation_duration_seconds",
            "Latencies in seconds of value transformation operations",
            self.duration.clone(),
        );
    }

    fn record(&self, kind: &str, prefix: &str, ok: bool, started: Instant) {
        self.operations
            .get_or_create(&OperationLabels {
                transformation_type: kind.into(),
                transformer_prefix: prefix.into(),
                status: if ok { "OK" } else { "Unknown" }.into(),
            })
            .inc();
        self.duration
            .get_or_create(&DurationLabels {
                transformation_type: kind.into(),
                transformer_prefix: prefix.into(),
            })
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The codec and transformers every stored API object goes through.
pub struct Values {
    media: MediaType,
    encryption: Arc<Current>,
    metrics: Arc<TransformMetrics>,
}

impl Default for Values {
    /// Protobuf for built-in kinds, no encryption: a new server's defaults.
    fn default() -> Self {
        Self::new(MediaType::default(), Arc::new(Current::none()))
    }
}

impl Values {
    pub fn new(media: MediaType, encryption: Arc<Current>) -> Self {
        Self {
            media,
            encryption,
            metrics: Arc::default(),
        }
    }

    pub fn media_type(&self) -> MediaType {
        self.media
    }

    pub fn metrics(&self) -> &Arc<TransformMetrics> {
        &self.metrics
    }

    /// The transformers for `info`'s values, fixed for a batch (one list, one watch event).
    pub fn reader(&self, info: &ResourceInfo) -> Reader {
        let (group, plural) = catalog::storage_owner(info);
        Reader {
            chain: self.encryption.get().chain_for(group, plural),
            metrics: self.metrics.clone(),
        }
    }

    /// The bytes to store under `key` for `object` (its stored form: with `apiVersion` and
    /// `kind`, without `resourceVersion`).
    pub fn encode(
        &self,
        info: &ResourceInfo,
        key: &[u8],
        object: &Value,
    ) -> Result<Vec<u8>, ValueError> {
        let serialized = format::serialize(self.media, object)?;
        let Some(chain) = self.reader(info).chain else {
            return Ok(serialized);
        };
        let started = Instant::now();
        let sealed = chain.seal(serialized, key);
        self.metrics
            .record("to_storage", chain.writer_label(), sealed.is_ok(), started);
        Ok(sealed?)
    }

    /// Whether storing `candidate` over `stored` — an object as it was read back from the
    /// store — would change nothing. Upstream compares the stored bytes; here the candidate
    /// goes through the store's serialization and back, so JSON that differs only in what the
    /// stored form does not keep (the zero counts protobuf reads back as absent) is the same.
    /// `stored` is read-back already and is not round-tripped again (half the cost on the hot
    /// path of every update); one stored as JSON before protobuf was the default may look
    /// changed once, and its write stores it as protobuf.
    pub fn store_alike(&self, candidate: &Value, stored: &Value) -> bool {
        // JSON reads back as written: only protobuf needs the round trip.
        if self.media == MediaType::Json || !format::has_protobuf_schema(candidate) {
            return candidate == stored;
        }
        format::serialize(self.media, candidate)
            .ok()
            .and_then(|bytes| format::deserialize(&bytes).ok())
            .is_some_and(|read_back| &read_back == stored)
    }

    /// The object stored under `key` (without its resourceVersion).
    pub fn decode(
        &self,
        info: &ResourceInfo,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<Value, ValueError> {
        self.reader(info).decode(key, bytes)
    }

    /// The object stored under `key`, whatever resource the key belongs to (for tools and
    /// the authorizers' followers, which see raw keys). `None` for keys no resource owns.
    pub fn decode_key(&self, key: &[u8], bytes: &[u8]) -> Option<Result<Value, ValueError>> {
        let info = catalog::by_storage_key(key)?;
        Some(self.decode(info, key, bytes))
    }
}

/// Reads one resource's values with the transformers in force when it was made.
pub struct Reader {
    chain: Option<Arc<Chain>>,
    metrics: Arc<TransformMetrics>,
}

impl Reader {
    /// Decrypts (where configured) and decodes a value stored under `key`.
    pub fn decode(&self, key: &[u8], bytes: &[u8]) -> Result<Value, ValueError> {
        let Some(chain) = &self.chain else {
            return Ok(format::deserialize(encryption::open_uncovered(bytes)?)?);
        };
        let started = Instant::now();
        let opened = chain.open(bytes, key);
        let label = opened.as_ref().map_or("unknown", |opened| opened.label);
        self.metrics
            .record("from_storage", label, opened.is_ok(), started);
        Ok(format::deserialize(&opened?.plain)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_sealed_and_other_kinds_are_not_under_a_secrets_rule() {
        let config = "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aesgcm:
          keys: [{name: k1, secret: c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQgc2VjdXJlPz8=}]
";
        let current = Current::new(encryption::Encryption::parse(config).expect("valid"));
        let values = Values::new(MediaType::Protobuf, Arc::new(current));
        let secrets = catalog::find("", "v1", "secrets").expect("served");
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": "s", "namespace": "ns"},
                            "data": {"password": "aHVudGVyMg=="}});
        let key = b"/registry/secrets/ns/s";
        let stored = values.encode(secrets, key, &secret).expect("encodes");
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        assert!(!stored
            .windows(7)
            .any(|w| w == b"hunter2" || w == b"aHVudGV"));
        assert_eq!(
            values.decode(secrets, key, &stored).expect("decodes"),
            secret
        );
        assert_eq!(
            values
                .decode_key(key, &stored)
                .expect("a secrets key")
                .expect("decodes"),
            secret
        );
        let config_maps = catalog::find("", "v1", "configmaps").expect("served");
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"}});
        let stored = values
            .encode(config_maps, b"/registry/configmaps/ns/c", &config_map)
            .expect("encodes");
        assert!(stored.starts_with(b"k8s\0"));
        assert!(values.decode_key(b"/registry/rudder/other", b"x").is_none());
    }

    #[test]
    fn a_write_is_a_no_op_only_when_the_stored_form_would_not_change() {
        let values = Values::default();
        let deployments = catalog::find("apps", "v1", "deployments").expect("served");
        let key = b"/registry/deployments/ns/web";
        let written = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "labels": {"a": "1", "b": "2"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "1"}},
                "template": {"metadata": {"labels": {"a": "1"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"observedGeneration": 0, "replicas": 0}});
        let bytes = values.encode(deployments, key, &written).expect("encodes");
        let stored = values.decode(deployments, key, &bytes).expect("decodes");
        // Read back, the zero counts are gone; writing them again changes nothing.
        assert!(stored["status"].get("observedGeneration").is_none());
        assert!(values.store_alike(&written, &stored));
        assert!(values.store_alike(&stored, &stored));
        let mut scaled = written.clone();
        scaled["spec"]["replicas"] = json!(4);
        assert!(!values.store_alike(&scaled, &stored));
        let mut relabelled = written.clone();
        relabelled["metadata"]["labels"]["b"] = json!("3");
        assert!(!values.store_alike(&relabelled, &stored));
        // Stored as JSON, objects compare as they are.
        let json_values = Values::new(MediaType::Json, Arc::new(Current::none()));
        assert!(!json_values.store_alike(&written, &stored));
        assert!(json_values.store_alike(&stored, &stored));
    }
}
