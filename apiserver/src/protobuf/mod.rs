//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) ⇄ API JSON transcoding.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` envelope whose TypeMeta names the
//! object and whose `raw` holds the typed message from the upstream `generated.proto` files
//! (vendored under `proto/`, compiled by `build.rs`). Messages are handled generically with
//! prost-reflect; `proto/gofields.txt` supplies the Go JSON details (`omitempty`, pointers,
//! inline structs) so decoded objects look exactly like the same object sent as JSON.

mod from_json;
mod schema;
mod time;
mod to_json;

#[cfg(test)]
mod tests;

use prost::bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DynamicMessage, Value};
use serde_json::Value as Json;

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes that start every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// Deepest message nesting (and nested envelopes) accepted, to bound recursion.
const MAX_DEPTH: usize = 64;

/// Why a body could not be transcoded.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error("protobuf body does not start with the Kubernetes magic prefix \"k8s\\0\"")]
    MissingMagic,
    /// The bytes are not a valid message of the expected type.
    #[error("malformed protobuf body: {0}")]
    Malformed(String),
    /// The envelope does not name the object's apiVersion and kind.
    #[error("protobuf envelope does not name the object's apiVersion and kind")]
    MissingTypeMeta,
    /// The envelope's raw bytes are compressed or otherwise encoded.
    #[error("unsupported protobuf content encoding {0:?}")]
    UnsupportedEncoding(String),
    /// No protobuf schema is known for this apiVersion/kind.
    #[error("no protobuf serialization is available for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// The JSON object cannot be expressed as its protobuf message.
    #[error("cannot encode object as protobuf: {path}: {message}")]
    InvalidJson {
        /// Where in the object (dotted JSON path, empty for the top level).
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// The built-in schema failed to load (a build problem, not a client error).
    #[error("protobuf schema unavailable: {0}")]
    Schema(String),
}

impl ProtobufError {
    /// The HTTP status a request carrying this body should get: 415 when the type cannot be
    /// handled as protobuf at all, 500 for a broken schema, otherwise 400.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::UnknownKind { .. } | Self::UnsupportedEncoding(_) => 415,
            Self::Schema(_) => 500,
            _ => 400,
        }
    }
}

/// Decodes a `k8s\0` + `runtime.Unknown` body into the object's Kubernetes JSON, with
/// `apiVersion` and `kind` taken from the envelope.
pub fn decode(body: &[u8]) -> Result<Json, ProtobufError> {
    decode_at(body, 0)
}

fn decode_at(body: &[u8], depth: usize) -> Result<Json, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::Malformed("objects nested too deeply".into()));
    }
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or(ProtobufError::MissingMagic)?;
    let schema = schema::schema()?;
    let envelope = DynamicMessage::decode(schema.message(schema::UNKNOWN)?, rest)
        .map_err(|e| ProtobufError::Malformed(e.to_string()))?;
    let text = |msg: &DynamicMessage, n: u32| {
        msg.get_field_by_number(n)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let encoding = text(&envelope, 3);
    if !encoding.is_empty() {
        return Err(ProtobufError::UnsupportedEncoding(encoding));
    }
    let type_meta = envelope.get_field_by_number(1);
    let type_meta = type_meta.as_deref().and_then(Value::as_message);
    let (api_version, kind) = match type_meta {
        Some(tm) => (text(tm, 1), text(tm, 2)),
        None => (String::new(), String::new()),
    };
    if api_version.is_empty() || kind.is_empty() {
        return Err(ProtobufError::MissingTypeMeta);
    }
    let desc = schema
        .kind(&api_version, &kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let raw = envelope.get_field_by_number(2);
    let raw = raw
        .as_deref()
        .and_then(Value::as_bytes)
        .cloned()
        .unwrap_or_default();
    let msg =
        DynamicMessage::decode(desc, raw).map_err(|e| ProtobufError::Malformed(e.to_string()))?;
    let mut json = to_json::message(schema, &msg, depth)?;
    let Json::Object(fields) = &mut json else {
        return Err(ProtobufError::Malformed(format!(
            "{kind} is not an object type"
        )));
    };
    let mut object = serde_json::Map::with_capacity(fields.len() + 2);
    object.insert("kind".into(), Json::String(kind));
    object.insert("apiVersion".into(), Json::String(api_version));
    object.append(fields);
    Ok(Json::Object(object))
}

/// Encodes an API JSON object (which must carry `apiVersion` and `kind`) as a `k8s\0` +
/// `runtime.Unknown` body. JSON members without a protobuf field are ignored.
pub fn encode(obj: &Json) -> Result<Vec<u8>, ProtobufError> {
    encode_at(obj, 0)
}

fn encode_at(obj: &Json, depth: usize) -> Result<Vec<u8>, ProtobufError> {
    let field = |name: &str| {
        obj.get(name)
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty())
    };
    let (Some(api_version), Some(kind)) = (field("apiVersion"), field("kind")) else {
        return Err(ProtobufError::MissingTypeMeta);
    };
    let schema = schema::schema()?;
    let desc = schema
        .kind(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })?;
    let raw = from_json::message(schema, &desc, obj, depth)?.encode_to_vec();
    let unknown = schema.message(schema::UNKNOWN)?;
    let type_meta_desc = unknown
        .get_field(1)
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or_else(|| ProtobufError::Schema("runtime.Unknown has no TypeMeta".into()))?;
    let mut type_meta = DynamicMessage::new(type_meta_desc);
    type_meta.set_field_by_number(1, Value::String(api_version.to_string()));
    type_meta.set_field_by_number(2, Value::String(kind.to_string()));
    let mut envelope = DynamicMessage::new(unknown);
    envelope.set_field_by_number(1, Value::Message(type_meta));
    envelope.set_field_by_number(2, Value::Bytes(Bytes::from(raw)));
    envelope.set_field_by_number(3, Value::String(String::new()));
    envelope.set_field_by_number(4, Value::String(String::new()));
    let mut out = Vec::with_capacity(MAGIC.len() + envelope.encoded_len());
    out.extend_from_slice(MAGIC);
    envelope
        .encode(&mut out)
        .map_err(|e| ProtobufError::Schema(e.to_string()))?;
    Ok(out)
}

/// Whether `apiVersion`/`kind` has a protobuf schema here (built-in objects and their lists,
/// plus the meta/v1 kinds such as `Status` and `DeleteOptions`).
pub fn knows(api_version: &str, kind: &str) -> bool {
    schema::schema().is_ok_and(|s| s.kind(api_version, kind).is_some())
}
