//! Kubernetes JSON → protobuf: fills a dynamic message from an API object's JSON, following the
//! same Go JSON conventions the decoder prints (inline structs, renamed fields, special types).

use base64::Engine as _;
use prost::bytes::Bytes;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value};
use serde_json::Value as Json;

use super::schema::{Schema, FIELDS_V1, INT_OR_STRING, MICRO_TIME, QUANTITY, RAW_EXTENSION, TIME};
use super::{time, ProtobufError, MAX_DEPTH};

fn invalid(message: impl Into<String>) -> ProtobufError {
    ProtobufError::InvalidJson {
        path: String::new(),
        message: message.into(),
    }
}

/// Prefixes the JSON path of an error raised below `segment`.
fn at(segment: &str) -> impl FnOnce(ProtobufError) -> ProtobufError + '_ {
    move |e| match e {
        ProtobufError::InvalidJson { path, message } => {
            let path = match (path.is_empty(), path.starts_with('[')) {
                (true, _) => segment.to_string(),
                (false, true) => format!("{segment}{path}"),
                (false, false) => format!("{segment}.{path}"),
            };
            ProtobufError::InvalidJson { path, message }
        }
        other => other,
    }
}

/// Builds the message `desc` from `json`.
pub(super) fn message(
    schema: &Schema,
    desc: &MessageDescriptor,
    json: &Json,
    depth: usize,
) -> Result<DynamicMessage, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(invalid("object nested too deeply"));
    }
    let mut msg = DynamicMessage::new(desc.clone());
    match desc.full_name() {
        TIME | MICRO_TIME => {
            let text = json
                .as_str()
                .ok_or_else(|| invalid("expected an RFC 3339 time string"))?;
            let (seconds, nanos) =
                time::parse(text).ok_or_else(|| invalid(format!("invalid time {text:?}")))?;
            msg.set_field_by_number(1, Value::I64(seconds));
            msg.set_field_by_number(2, Value::I32(nanos));
            return Ok(msg);
        }
        QUANTITY => {
            let text = match json {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                _ => return Err(invalid("expected a quantity string")),
            };
            msg.set_field_by_number(1, Value::String(text));
            return Ok(msg);
        }
        INT_OR_STRING => {
            let (kind, int, text) = match json {
                Json::String(s) => (1, 0, s.clone()),
                Json::Number(n) => {
                    let int = n
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| invalid("int-or-string number out of range"))?;
                    (0, int, String::new())
                }
                _ => return Err(invalid("expected an integer or a string")),
            };
            msg.set_field_by_number(1, Value::I64(kind));
            msg.set_field_by_number(2, Value::I32(int));
            msg.set_field_by_number(3, Value::String(text));
            return Ok(msg);
        }
        RAW_EXTENSION | FIELDS_V1 => {
            // A whole API object (a List item, a WatchEvent's object) travels as a nested
            // protobuf body, as Go sends it; anything else as its JSON text.
            let kind = |name: &str| json.get(name).and_then(Json::as_str).unwrap_or_default();
            let nested = desc.full_name() == RAW_EXTENSION
                && schema.kind(kind("apiVersion"), kind("kind")).is_some();
            let raw = if nested {
                super::encode_at(json, depth + 1)?
            } else {
                serde_json::to_vec(json).map_err(|e| invalid(e.to_string()))?
            };
            msg.set_field_by_number(1, Value::Bytes(Bytes::from(raw)));
            return Ok(msg);
        }
        _ => {}
    }
    let facts = schema.facts(desc);
    if facts.list {
        if let Some(items) = desc.fields().find(|f| f.is_list()) {
            let value = list(schema, &items, json, depth)?;
            msg.set_field(&items, value);
        }
        return Ok(msg);
    }
    let Json::Object(object) = json else {
        return Err(invalid(format!("expected an object for {}", desc.name())));
    };
    for field in desc.fields() {
        let number = field.number();
        if facts.inline.contains(&number) {
            if let Kind::Message(inner) = field.kind() {
                let inner = message(schema, &inner, json, depth + 1)?;
                if inner.fields().next().is_some() {
                    msg.set_field(&field, Value::Message(inner));
                }
            }
            continue;
        }
        let name = facts
            .names
            .get(&number)
            .map_or(field.name(), String::as_str);
        let Some(value) = object.get(name) else {
            continue;
        };
        if value.is_null() {
            // A non-pointer Go Time prints its zero value as null and sends it as an empty
            // message; keep that, so decoding gives the same null back.
            if let Kind::Message(inner) = field.kind() {
                let is_time = matches!(inner.full_name(), TIME | MICRO_TIME);
                if is_time && !field.is_list() && !facts.pointer.contains(&number) {
                    msg.set_field(&field, Value::Message(DynamicMessage::new(inner)));
                }
            }
            continue;
        }
        let value = if field.is_map() {
            map(schema, &field, value, depth).map_err(at(name))?
        } else if field.is_list() {
            list(schema, &field, value, depth).map_err(at(name))?
        } else {
            single(schema, &field, value, depth).map_err(at(name))?
        };
        msg.set_field(&field, value);
    }
    Ok(msg)
}

fn list(
    schema: &Schema,
    field: &FieldDescriptor,
    json: &Json,
    depth: usize,
) -> Result<Value, ProtobufError> {
    let Json::Array(items) = json else {
        return Err(invalid("expected an array"));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(single(schema, field, item, depth).map_err(at(&format!("[{i}]")))?);
    }
    Ok(Value::List(out))
}

fn map(
    schema: &Schema,
    field: &FieldDescriptor,
    json: &Json,
    depth: usize,
) -> Result<Value, ProtobufError> {
    let Json::Object(entries) = json else {
        return Err(invalid("expected an object"));
    };
    let kind = field.kind();
    let entry = kind
        .as_message()
        .ok_or_else(|| invalid("map without entry type"))?;
    let key_kind = entry.map_entry_key_field().kind();
    let value_field = entry.map_entry_value_field();
    let mut out = std::collections::HashMap::with_capacity(entries.len());
    for (key, value) in entries {
        let bad_key = || invalid(format!("invalid map key {key:?}"));
        let map_key = match key_kind {
            Kind::String => MapKey::String(key.clone()),
            Kind::Bool => MapKey::Bool(key.parse().map_err(|_| bad_key())?),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
                MapKey::I32(key.parse().map_err(|_| bad_key())?)
            }
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
                MapKey::I64(key.parse().map_err(|_| bad_key())?)
            }
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(key.parse().map_err(|_| bad_key())?),
            Kind::Uint64 | Kind::Fixed64 => MapKey::U64(key.parse().map_err(|_| bad_key())?),
            _ => return Err(bad_key()),
        };
        if value.is_null() {
            continue;
        }
        let value = single(schema, &value_field, value, depth).map_err(at(key))?;
        out.insert(map_key, value);
    }
    Ok(Value::Map(out))
}

fn int(json: &Json) -> Result<i64, ProtobufError> {
    json.as_i64().ok_or_else(|| invalid("expected an integer"))
}

fn uint(json: &Json) -> Result<u64, ProtobufError> {
    json.as_u64()
        .ok_or_else(|| invalid("expected a non-negative integer"))
}

/// One scalar or message value (a list element, map value or singular field).
fn single(
    schema: &Schema,
    field: &FieldDescriptor,
    json: &Json,
    depth: usize,
) -> Result<Value, ProtobufError> {
    let out_of_range = |_| invalid("integer out of range");
    Ok(match field.kind() {
        Kind::Message(desc) => Value::Message(message(schema, &desc, json, depth + 1)?),
        Kind::String => match json {
            Json::String(s) => Value::String(s.clone()),
            _ => return Err(invalid("expected a string")),
        },
        Kind::Bool => Value::Bool(
            json.as_bool()
                .ok_or_else(|| invalid("expected a boolean"))?,
        ),
        Kind::Bytes => {
            let text = json
                .as_str()
                .ok_or_else(|| invalid("expected a base64 string"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| invalid(format!("invalid base64: {e}")))?;
            Value::Bytes(Bytes::from(bytes))
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(i32::try_from(int(json)?).map_err(out_of_range)?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(int(json)?),
        Kind::Uint32 | Kind::Fixed32 => {
            Value::U32(u32::try_from(uint(json)?).map_err(out_of_range)?)
        }
        Kind::Uint64 | Kind::Fixed64 => Value::U64(uint(json)?),
        Kind::Double => Value::F64(json.as_f64().ok_or_else(|| invalid("expected a number"))?),
        Kind::Float => {
            let n = json.as_f64().ok_or_else(|| invalid("expected a number"))?;
            #[allow(clippy::cast_possible_truncation)]
            Value::F32(n as f32)
        }
        Kind::Enum(_) => Value::EnumNumber(i32::try_from(int(json)?).map_err(out_of_range)?),
    })
}
