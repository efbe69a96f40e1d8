//! The serialization of stored values: built-in kinds as protobuf in the `k8s\0` +
//! `runtime.Unknown` envelope (kube-apiserver's `--storage-media-type` default, so the data is
//! readable by upstream's tools), everything else as JSON. Reading looks at the bytes, not at
//! the setting: values written under either setting (and JSON written before protobuf became
//! the default) stay readable, and each is rewritten in the configured form by its next update.

use std::str::FromStr;

use serde_json::Value;

use crate::protobuf;

/// The four bytes that start a protobuf value.
const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// How built-in objects are serialized in the store (`--storage-media-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MediaType {
    /// `application/vnd.kubernetes.protobuf`: kube-apiserver's default.
    #[default]
    Protobuf,
    /// `application/json`.
    Json,
}

impl MediaType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Protobuf => protobuf::CONTENT_TYPE,
            Self::Json => "application/json",
        }
    }
}

impl FromStr for MediaType {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            protobuf::CONTENT_TYPE => Ok(Self::Protobuf),
            "application/json" => Ok(Self::Json),
            other => Err(format!(
                "unsupported storage media type {other:?}: expected {} or application/json",
                protobuf::CONTENT_TYPE
            )),
        }
    }
}

impl std::fmt::Display for MediaType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a value could not be serialized or read back.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("stored value is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("stored value is not valid protobuf: {0}")]
    Protobuf(#[from] protobuf::ProtobufError),
}

/// Serializes an object (carrying `apiVersion` and `kind`) for the store: protobuf when asked
/// for and the kind has a protobuf schema, JSON otherwise.
pub fn serialize(media: MediaType, object: &Value) -> Result<Vec<u8>, FormatError> {
    if media == MediaType::Protobuf && has_protobuf_schema(object) {
        return Ok(protobuf::encode(object)?);
    }
    Ok(serde_json::to_vec(object)?)
}

/// Reads a stored value in whichever form it was written.
pub fn deserialize(bytes: &[u8]) -> Result<Value, FormatError> {
    if is_protobuf(bytes) {
        return Ok(protobuf::decode(bytes)?);
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// Whether a stored value is protobuf.
pub fn is_protobuf(bytes: &[u8]) -> bool {
    bytes.starts_with(PROTOBUF_MAGIC)
}

pub fn has_protobuf_schema(object: &Value) -> bool {
    let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or("");
    protobuf::knows(text("apiVersion"), text("kind"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u-1",
                         "creationTimestamp": "2026-01-02T03:04:05Z", "labels": {"x": "y"}},
            "data": {"k": "v"}
        })
    }

    #[test]
    fn built_in_kinds_are_stored_as_protobuf_and_read_back_unchanged() {
        let object = config_map();
        let bytes = serialize(MediaType::Protobuf, &object).expect("encodes");
        assert!(bytes.starts_with(b"k8s\0"), "{bytes:?}");
        assert_eq!(deserialize(&bytes).expect("decodes"), object);
    }

    #[test]
    fn json_values_stay_readable_whatever_the_setting() {
        let object = config_map();
        let bytes = serialize(MediaType::Json, &object).expect("encodes");
        assert_eq!(bytes.first(), Some(&b'{'));
        assert_eq!(deserialize(&bytes).expect("decodes"), object);
    }

    #[test]
    fn kinds_without_a_schema_fall_back_to_json() {
        let custom = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}, "spec": {"size": 3}});
        let bytes = serialize(MediaType::Protobuf, &custom).expect("encodes");
        assert_eq!(bytes.first(), Some(&b'{'));
        assert_eq!(deserialize(&bytes).expect("decodes"), custom);
    }

    #[test]
    fn media_types_parse_as_upstream_spells_them() {
        assert_eq!(
            "application/vnd.kubernetes.protobuf".parse::<MediaType>(),
            Ok(MediaType::Protobuf)
        );
        assert_eq!("application/json".parse::<MediaType>(), Ok(MediaType::Json));
        assert!("application/yaml".parse::<MediaType>().is_err());
    }

    #[test]
    fn damaged_values_are_errors_not_panics() {
        assert!(deserialize(b"k8s\0\xff\xff").is_err());
        assert!(deserialize(b"{not json").is_err());
    }
}
