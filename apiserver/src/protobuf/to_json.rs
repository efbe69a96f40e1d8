//! Protobuf → Kubernetes JSON: prints a decoded message the way the Go type's JSON encoding
//! would (omitempty, pointers, inline structs and the meta/runtime types with their own JSON).

use base64::Engine as _;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage as _, Value};
use serde_json::{Map, Value as Json};

use super::schema::{Schema, FIELDS_V1, INT_OR_STRING, MICRO_TIME, QUANTITY, RAW_EXTENSION, TIME};
use super::{time, ProtobufError, MAX_DEPTH};

/// Converts one message (not the envelope) to its JSON object or special JSON value.
pub(super) fn message(
    schema: &Schema,
    msg: &DynamicMessage,
    depth: usize,
) -> Result<Json, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError::Malformed("objects nested too deeply".into()));
    }
    let desc = msg.descriptor();
    match desc.full_name() {
        TIME | MICRO_TIME => return Ok(time_value(msg, desc.full_name() == MICRO_TIME)),
        QUANTITY => {
            let text = string_field(msg, 1);
            return Ok(Json::String(if text.is_empty() {
                "0".into()
            } else {
                text
            }));
        }
        INT_OR_STRING => {
            return Ok(if int_field(msg, 1) == 1 {
                Json::String(string_field(msg, 3))
            } else {
                Json::from(int_field(msg, 2))
            });
        }
        RAW_EXTENSION | FIELDS_V1 => return raw_json(msg, depth),
        _ => {}
    }
    let facts = schema.facts(&desc);
    if facts.list {
        let items = desc.fields().find(|f| f.is_list());
        return match items {
            Some(f) if msg.has_field(&f) => list(schema, &f, &msg.get_field(&f), depth),
            _ => Ok(Json::Array(Vec::new())),
        };
    }
    let mut out = Map::new();
    for (field, value) in msg.fields() {
        let number = field.number();
        if facts.inline.contains(&number) {
            if let Value::Message(inner) = value {
                if let Json::Object(inner) = message(schema, inner, depth + 1)? {
                    out.extend(inner);
                }
            }
            continue;
        }
        let name = facts
            .names
            .get(&number)
            .cloned()
            .unwrap_or_else(|| field.name().to_string());
        let keep_zero = facts.pointer.contains(&number) || facts.always.contains(&number);
        if let Some(json) = field_value(schema, &field, value, keep_zero, depth)? {
            out.insert(name, json);
        }
    }
    Ok(Json::Object(out))
}

/// The JSON of one present field, or `None` when Go's `omitempty` would leave it out.
fn field_value(
    schema: &Schema,
    field: &FieldDescriptor,
    value: &Value,
    keep_zero: bool,
    depth: usize,
) -> Result<Option<Json>, ProtobufError> {
    if field.is_map() {
        let Value::Map(entries) = value else {
            return Ok(None);
        };
        if entries.is_empty() {
            return Ok(None);
        }
        let kind = field.kind();
        let Some(entry) = kind.as_message() else {
            return Ok(None);
        };
        let value_field = entry.map_entry_value_field();
        let mut out = Map::new();
        for (key, v) in entries {
            let key = match key {
                MapKey::String(s) => s.clone(),
                MapKey::Bool(b) => b.to_string(),
                MapKey::I32(n) => n.to_string(),
                MapKey::I64(n) => n.to_string(),
                MapKey::U32(n) => n.to_string(),
                MapKey::U64(n) => n.to_string(),
            };
            out.insert(key, single(schema, &value_field, v, depth)?);
        }
        return Ok(Some(Json::Object(out)));
    }
    if field.is_list() {
        let json = list(schema, field, value, depth)?;
        let empty = json.as_array().is_some_and(Vec::is_empty);
        return Ok((!empty).then_some(json));
    }
    if !keep_zero && !matches!(field.kind(), Kind::Message(_)) && value.is_default(&field.kind()) {
        return Ok(None);
    }
    single(schema, field, value, depth).map(Some)
}

fn list(
    schema: &Schema,
    field: &FieldDescriptor,
    value: &Value,
    depth: usize,
) -> Result<Json, ProtobufError> {
    let Value::List(items) = value else {
        return Ok(Json::Array(Vec::new()));
    };
    let items = items.iter().map(|v| single(schema, field, v, depth));
    Ok(Json::Array(items.collect::<Result<_, _>>()?))
}

/// One scalar or message value (a list element, map value or singular field).
fn single(
    schema: &Schema,
    field: &FieldDescriptor,
    value: &Value,
    depth: usize,
) -> Result<Json, ProtobufError> {
    Ok(match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) | Value::EnumNumber(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => Json::from(f64::from(*n)),
        Value::F64(n) => Json::from(*n),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Message(m) => message(schema, m, depth + 1)?,
        Value::List(_) | Value::Map(_) => {
            return Err(ProtobufError::Malformed(format!(
                "unexpected nested collection in field {}",
                field.full_name()
            )))
        }
    })
}

fn string_field(msg: &DynamicMessage, number: u32) -> String {
    msg.get_field_by_number(number)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn int_field(msg: &DynamicMessage, number: u32) -> i64 {
    msg.get_field_by_number(number)
        .and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from)))
        .unwrap_or_default()
}

/// An empty Time message is Go's zero time, printed as `null`.
fn time_value(msg: &DynamicMessage, micro: bool) -> Json {
    if msg.fields().next().is_none() {
        return Json::Null;
    }
    let nanos = i32::try_from(int_field(msg, 2)).unwrap_or_default();
    Json::String(time::format(int_field(msg, 1), nanos, micro))
}

/// RawExtension / FieldsV1 carry JSON (or a nested `k8s\0` protobuf object) in field 1.
fn raw_json(msg: &DynamicMessage, depth: usize) -> Result<Json, ProtobufError> {
    let raw = msg.get_field_by_number(1);
    let Some(raw) = raw.as_deref().and_then(Value::as_bytes) else {
        return Ok(Json::Null);
    };
    if raw.is_empty() {
        return Ok(Json::Null);
    }
    if raw.starts_with(super::MAGIC) {
        return super::decode_at(raw, depth + 1);
    }
    serde_json::from_slice(raw)
        .map_err(|e| ProtobufError::Malformed(format!("embedded object is not JSON: {e}")))
}
