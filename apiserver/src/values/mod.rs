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
        // Most writes change something the encoding keeps: found on the way, no round trip.
        if surely_differs(candidate, stored) {
            return false;
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

/// Whether `candidate` differs from `stored` (an object read back from protobuf, so every field
/// it holds is one the schema has) in a way the protobuf round trip cannot erase: at a place
/// both hold, two numbers of different value, two different booleans, two different strings
/// neither of which may be a time (the encoding rewrites times in one form), or two lists of
/// different lengths (repeated fields keep every item). A field only one side holds is not
/// taken as a difference (the encoding drops zero values and unknown fields), nor are values
/// of different JSON types (a Quantity or IntOrString may be written as a number and read
/// back as a string): those are left to the round trip.
fn surely_differs(candidate: &Value, stored: &Value) -> bool {
    match (candidate, stored) {
        (Value::Object(left), Value::Object(right)) => left.iter().any(|(key, value)| {
            right
                .get(key)
                .is_some_and(|other| surely_differs(value, other))
        }),
        (Value::Array(left), Value::Array(right)) => {
            left.len() != right.len()
                || left
                    .iter()
                    .zip(right)
                    .any(|(value, other)| surely_differs(value, other))
        }
        (Value::String(left), Value::String(right)) => {
            left != right && !may_be_time(left) && !may_be_time(right)
        }
        (Value::Number(left), Value::Number(right)) => left.as_f64() != right.as_f64(),
        (Value::Bool(left), Value::Bool(right)) => left != right,
        _ => false,
    }
}

/// Whether `text` may be an RFC 3339 time (`2006-01-02T15:04:05…`).
fn may_be_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 19 && bytes[4] == b'-' && bytes[7] == b'-' && matches!(bytes[10], b'T' | b't')
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
    fn only_differences_the_encoding_keeps_are_sure() {
        let sure = |a: Value, b: Value| surely_differs(&a, &b);
        assert!(sure(json!({"a": 1}), json!({"a": 2})));
        assert!(sure(json!({"a": "x"}), json!({"a": "y"})));
        assert!(sure(json!({"a": true}), json!({"a": false})));
        assert!(sure(json!({"a": [1]}), json!({"a": [1, 2]})));
        assert!(sure(json!({"a": [{"b": "x"}]}), json!({"a": [{"b": "y"}]})));
        assert!(!sure(json!({"a": 1}), json!({"a": 1.0})), "one value");
        assert!(
            !sure(json!({"a": 0}), json!({})),
            "a zero the encoding drops"
        );
        assert!(
            !sure(json!({"a": "x"}), json!({})),
            "perhaps a field the schema lacks"
        );
        assert!(
            !sure(json!({"a": 2}), json!({"a": "2"})),
            "a quantity read back"
        );
        assert!(!sure(
            json!({"t": "2026-12-08T10:00:00.000Z"}),
            json!({"t": "2026-12-08T10:00:00Z"})
        ));
        assert!(!sure(json!({"a": 1}), json!({"a": 1})));
    }

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
        let read_back = |object: &Value| {
            let bytes = values.encode(deployments, key, object).expect("encodes");
            values.decode(deployments, key, &bytes).expect("decodes")
        };
        let stored = read_back(&written);
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
        // Times written in another form are the same once stored.
        let mut stamped = written.clone();
        stamped["metadata"]["creationTimestamp"] = json!("2026-12-08T10:00:00Z");
        let stamped_stored = read_back(&stamped);
        let mut restamped = stamped.clone();
        restamped["metadata"]["creationTimestamp"] = json!("2026-12-08T10:00:00.000+00:00");
        assert!(values.store_alike(&restamped, &stamped_stored));
        // A quantity written as a number reads back as a string: the same.
        let mut limited = written.clone();
        limited["spec"]["template"]["spec"]["containers"][0]["resources"] =
            json!({"limits": {"cpu": "2"}});
        let limited_stored = read_back(&limited);
        let mut numeric = limited.clone();
        numeric["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
            json!(2);
        assert!(values.store_alike(&numeric, &limited_stored));
        // Lists of another length, other booleans: changed.
        let mut more = written.clone();
        more["spec"]["template"]["spec"]["containers"] = json!([{"name": "c", "image": "busybox"},
            {"name": "d", "image": "busybox"}]);
        assert!(!values.store_alike(&more, &stored));
        let mut paused = stored.clone();
        paused["spec"]["paused"] = json!(true);
        let paused_stored = read_back(&paused);
        let mut resumed = paused_stored.clone();
        resumed["spec"]["paused"] = json!(false);
        assert!(!values.store_alike(&resumed, &paused_stored));
        // Stored as JSON, objects compare as they are.
        let json_values = Values::new(MediaType::Json, Arc::new(Current::none()));
        assert!(!json_values.store_alike(&written, &stored));
        assert!(json_values.store_alike(&stored, &stored));
    }
}
