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
    let desc = descriptor(schema, &api_version, &kind)?;
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

/// An object's protobuf encoding: the `k8s\0` body and, within it, the typed message (what a
/// list carries as one of its items).
#[derive(Clone, Debug)]
pub struct Encoded {
    pub enveloped: Bytes,
    message: std::ops::Range<usize>,
}

impl Encoded {
    /// The typed message alone, shared with the body.
    pub fn message(&self) -> Bytes {
        self.enveloped.slice(self.message.clone())
    }
}

/// Encodes an API JSON object (which must carry `apiVersion` and `kind`).
pub fn encode_object(obj: &Json) -> Result<Encoded, ProtobufError> {
    encode_object_at(obj, 0)
}

/// A nested object's `k8s\0` body (a RawExtension holding an API object), `depth` levels in.
fn encode_at(obj: &Json, depth: usize) -> Result<Vec<u8>, ProtobufError> {
    Ok(Vec::from(encode_object_at(obj, depth)?.enveloped))
}

fn encode_object_at(obj: &Json, depth: usize) -> Result<Encoded, ProtobufError> {
    let (api_version, kind) = type_meta(obj)?;
    let schema = schema::schema()?;
    let desc = descriptor(schema, api_version, kind)?;
    let raw = from_json::message(schema, &desc, obj, depth)?.encode_to_vec();
    Ok(envelope(api_version, kind, &raw))
}

fn type_meta(obj: &Json) -> Result<(&str, &str), ProtobufError> {
    let field = |name: &str| {
        obj.get(name)
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("apiVersion"), field("kind")) {
        (Some(api_version), Some(kind)) => Ok((api_version, kind)),
        _ => Err(ProtobufError::MissingTypeMeta),
    }
}

/// The message of `apiVersion`/`kind`, or the error naming them.
fn descriptor(
    schema: &schema::Schema,
    api_version: &str,
    kind: &str,
) -> Result<prost_reflect::MessageDescriptor, ProtobufError> {
    schema
        .kind(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })
}

/// Appends field `number` as length-delimited bytes.
fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key_and_length(out, number, bytes.len());
    out.extend_from_slice(bytes);
}

/// Appends a length-delimited field's key and length, its bytes to follow.
fn put_key_and_length(out: &mut Vec<u8>, number: u32, length: usize) {
    prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(length as u64, out);
}

/// The start of `k8s\0` + `runtime.Unknown{typeMeta{apiVersion, kind}, raw, contentEncoding:
/// "", contentType: ""}` (field by field as Go's generated marshaller writes it) up to the
/// `raw_length` bytes of `raw`; [`ENVELOPE_TAIL`] follows them.
fn envelope_head(api_version: &str, kind: &str, raw_length: usize) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut head = Vec::with_capacity(MAGIC.len() + type_meta.len() + 16);
    head.extend_from_slice(MAGIC);
    put_bytes(&mut head, 1, &type_meta);
    put_key_and_length(&mut head, 2, raw_length);
    head
}

/// The envelope's empty `contentEncoding` (3) and `contentType` (4).
const ENVELOPE_TAIL: [u8; 4] = [0x1a, 0, 0x22, 0];

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Encoded {
    let mut out = envelope_head(api_version, kind, raw.len());
    out.reserve(raw.len() + ENVELOPE_TAIL.len());
    let start = out.len();
    out.extend_from_slice(raw);
    let message = start..out.len();
    out.extend_from_slice(&ENVELOPE_TAIL);
    Encoded {
        enveloped: Bytes::from(out),
        message,
    }
}

/// A list (`kind` is the list kind, e.g. `PodList`) from its ListMeta as JSON and its items'
/// typed messages ([`Encoded::message`]), without decoding or re-encoding the items.
pub fn encode_list(
    api_version: &str,
    kind: &str,
    list_meta: &Json,
    items: Vec<Bytes>,
) -> Result<Vec<u8>, ProtobufError> {
    Ok(list_parts(api_version, kind, list_meta, items)?.concat())
}

/// [`encode_list`]'s body in the order it is sent: the envelope's head with the ListMeta, each
/// item's field key and length followed by the item's message (shared, not copied), then the
/// envelope's tail — so that a list goes out without ever being one buffer.
pub fn list_parts(
    api_version: &str,
    kind: &str,
    list_meta: &Json,
    items: Vec<Bytes>,
) -> Result<Vec<Bytes>, ProtobufError> {
    let schema = schema::schema()?;
    let desc = descriptor(schema, api_version, kind)?;
    let field = |name: &str| {
        desc.get_field_by_name(name)
            .ok_or_else(|| ProtobufError::Schema(format!("{kind} has no {name} field")))
    };
    let (metadata, items_field) = (field("metadata")?, field("items")?);
    let meta_desc = metadata
        .kind()
        .as_message()
        .cloned()
        .ok_or_else(|| ProtobufError::Schema(format!("{kind}.metadata is not a message")))?;
    let meta = from_json::message(schema, &meta_desc, list_meta, 1)?.encode_to_vec();
    let mut meta_field = Vec::with_capacity(meta.len() + 6);
    put_bytes(&mut meta_field, metadata.number(), &meta);
    let keys: Vec<Bytes> = items
        .iter()
        .map(|item| {
            let mut key = Vec::with_capacity(6);
            put_key_and_length(&mut key, items_field.number(), item.len());
            Bytes::from(key)
        })
        .collect();
    let raw_length = meta_field.len()
        + keys.iter().map(Bytes::len).sum::<usize>()
        + items.iter().map(Bytes::len).sum::<usize>();
    let mut head = envelope_head(api_version, kind, raw_length);
    head.extend_from_slice(&meta_field);
    let mut parts = Vec::with_capacity(2 * items.len() + 2);
    parts.push(Bytes::from(head));
    for (key, item) in keys.into_iter().zip(items) {
        parts.push(key);
        parts.push(item);
    }
    parts.push(Bytes::from_static(&ENVELOPE_TAIL));
    Ok(parts)
}

/// One frame of a protobuf watch stream (`application/vnd.kubernetes.protobuf;stream=watch`):
/// a 4-byte big-endian length, then a bare `meta.v1.WatchEvent{type, object: RawExtension{raw}}`
/// whose raw is the object's `k8s\0` body — as upstream's length-delimited framer and raw
/// protobuf serializer write it.
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut raw_extension = Vec::with_capacity(object.len() + 6);
    put_bytes(&mut raw_extension, 1, object);
    let mut event = Vec::with_capacity(raw_extension.len() + event_type.len() + 8);
    put_bytes(&mut event, 1, event_type.as_bytes());
    put_bytes(&mut event, 2, &raw_extension);
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&(event.len() as u32).to_be_bytes());
    frame.extend_from_slice(&event);
    frame
}

/// Reads the frame at the start of a protobuf watch stream: the event's type, its object as
/// API JSON and the bytes the frame took; `None` while the frame is not all there.
pub fn decode_watch_frame(stream: &[u8]) -> Result<Option<(String, Json, usize)>, ProtobufError> {
    let Some((length, rest)) = stream.split_first_chunk::<4>() else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(*length) as usize;
    let Some(event) = rest.get(..length) else {
        return Ok(None);
    };
    let schema = schema::schema()?;
    let event = DynamicMessage::decode(
        schema.message(&format!("{}.WatchEvent", schema::META))?,
        event,
    )
    .map_err(|e| ProtobufError::Malformed(e.to_string()))?;
    let kind = event
        .get_field_by_number(1)
        .and_then(|kind| kind.as_str().map(str::to_string))
        .unwrap_or_default();
    let raw = event
        .get_field_by_number(2)
        .and_then(|object| {
            object
                .as_message()
                .and_then(|object| object.get_field_by_number(1))
                .and_then(|raw| raw.as_bytes().cloned())
        })
        .unwrap_or_default();
    Ok(Some((kind, decode(&raw)?, 4 + length)))
}

/// Whether `apiVersion`/`kind` has a protobuf schema here (built-in objects and their lists,
/// plus the meta/v1 kinds such as `Status` and `DeleteOptions`).
pub fn knows(api_version: &str, kind: &str) -> bool {
    schema::schema().is_ok_and(|s| s.kind(api_version, kind).is_some())
}
