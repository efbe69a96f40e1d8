//! Body codecs: request bodies in JSON, YAML or protobuf become JSON values; responses are
//! encoded as the Accept header asks (JSON, YAML, protobuf, or the Table and
//! PartialObjectMetadata views kubectl and kube-rs ask for). Strict field validation (unknown
//! and duplicate fields) lives here too.

mod json;
mod paths;
pub(crate) mod yaml;

use serde_json::Value;

use paths::{FieldPath, Recorded};

use crate::error::{ApiError, Result};
use crate::protobuf;

pub use crate::limits::MAX_BODY_BYTES;

/// A wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    Protobuf,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
            Format::Protobuf => protobuf::CONTENT_TYPE,
        }
    }
}

/// What the response should be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The object itself.
    Object(Format),
    /// A `meta.k8s.io` Table (`v1` or `v1beta1`).
    Table(&'static str),
    /// `PartialObjectMetadata` / `PartialObjectMetadataList` (metadata only).
    Metadata(Format),
}

struct MediaType<'a> {
    essence: String,
    params: Vec<(&'a str, &'a str)>,
}

fn parse_media_type(text: &str) -> MediaType<'_> {
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let params = parts
        .filter_map(|param| {
            let (key, value) = param.split_once('=')?;
            Some((key.trim(), value.trim().trim_matches('"')))
        })
        .collect();
    MediaType { essence, params }
}

fn param<'a>(media: &MediaType<'a>, key: &str) -> Option<&'a str> {
    media
        .params
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| *value)
}

fn format_of(essence: &str) -> Option<Format> {
    match essence {
        "application/json" | "*/*" | "application/*" | "" => Some(Format::Json),
        "application/yaml" => Some(Format::Yaml),
        protobuf::CONTENT_TYPE => Some(Format::Protobuf),
        _ => None,
    }
}

/// Picks the response form from an Accept header: the first alternative we can produce.
pub fn negotiate(accept: Option<&str>) -> Result<Output> {
    negotiate_for(accept, true)
}

/// As [`negotiate`], for a kind that has a protobuf form only when `protobuf_kind` (custom
/// resources have none: a client that also accepts JSON gets JSON, as upstream answers it;
/// metadata-only views are protobuf for every kind).
pub fn negotiate_for(accept: Option<&str>, protobuf_kind: bool) -> Result<Output> {
    let Some(accept) = accept.filter(|accept| !accept.trim().is_empty()) else {
        return Ok(Output::Object(Format::Json));
    };
    for alternative in accept.split(',') {
        let media = parse_media_type(alternative);
        let Some(format) = format_of(&media.essence) else {
            continue;
        };
        match param(&media, "as") {
            None if format == Format::Protobuf && !protobuf_kind => continue,
            None => return Ok(Output::Object(format)),
            Some(view) => {
                if param(&media, "g") != Some("meta.k8s.io") {
                    continue;
                }
                let version = match param(&media, "v") {
                    Some("v1") => "v1",
                    Some("v1beta1") => "v1beta1",
                    _ => continue,
                };
                match view {
                    "Table" if format == Format::Json => return Ok(Output::Table(version)),
                    "PartialObjectMetadata" | "PartialObjectMetadataList" => {
                        return Ok(Output::Metadata(format))
                    }
                    _ => continue,
                }
            }
        }
    }
    Err(ApiError::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {accept:?})"
    )))
}

/// The wire format of a request body, from its Content-Type (no Content-Type means JSON).
pub fn body_format(content_type: Option<&str>) -> Result<Format> {
    let essence = parse_media_type(content_type.unwrap_or("")).essence;
    match essence.as_str() {
        "" | "application/json" => Ok(Format::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(Format::Yaml),
        protobuf::CONTENT_TYPE => Ok(Format::Protobuf),
        _ => Err(ApiError::unsupported_media_type(content_type.unwrap_or(""))),
    }
}

/// Rejects bodies over the limit with 413.
pub fn check_size(body: &[u8]) -> Result<()> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::too_large(format!(
            "Request entity too large: limit is {MAX_BODY_BYTES}"
        )));
    }
    Ok(())
}

/// A decoded body and the duplicate fields found while decoding it.
pub struct Decoded {
    pub value: Value,
    pub duplicate_fields: Vec<String>,
}

/// Decodes a request body.
pub fn decode(format: Format, body: &[u8]) -> Result<Decoded> {
    check_size(body)?;
    match format {
        Format::Json => {
            let (value, duplicate_fields) =
                json::decode_tracking_duplicates(body).map_err(|error| {
                    ApiError::bad_request(format!("error decoding request body as JSON: {error}"))
                })?;
            Ok(Decoded {
                value,
                duplicate_fields,
            })
        }
        Format::Yaml => {
            let value = yaml::decode_bounded(body).map_err(|error| {
                ApiError::bad_request(format!("error decoding request body as YAML: {error}"))
            })?;
            Ok(Decoded {
                value,
                duplicate_fields: Vec::new(),
            })
        }
        Format::Protobuf => {
            let value = protobuf::decode(body).map_err(|error| {
                ApiError::bad_request(format!("error decoding protobuf request body: {error}"))
            })?;
            Ok(Decoded {
                value,
                duplicate_fields: Vec::new(),
            })
        }
    }
}

/// Fields present (and not null) in `input` that the canonical form dropped: the unknown fields
/// (at most [`Recorded::MAX_ITEMS`] of them), in one pass over the input.
pub fn unknown_fields(input: &Value, canonical: &Value) -> Vec<String> {
    let mut path = FieldPath::default();
    let mut found = Recorded::default();
    collect_unknown(input, canonical, &mut path, &mut found);
    let mut found = found.into_items();
    found.sort();
    found.dedup();
    found
}

fn collect_unknown(input: &Value, canonical: &Value, path: &mut FieldPath, found: &mut Recorded) {
    if found.is_full() {
        return;
    }
    match (input, canonical) {
        (Value::Object(input), Value::Object(canonical)) => {
            for (key, value) in input {
                path.push_key(key.clone());
                match canonical.get(key) {
                    Some(kept) => collect_unknown(value, kept, path, found),
                    None if value.is_null() => {}
                    None => found.record_with(|| path.render()),
                }
                path.pop();
            }
        }
        (Value::Array(input), Value::Array(canonical)) => {
            for (index, (value, kept)) in input.iter().zip(canonical).enumerate() {
                path.push_index(index);
                collect_unknown(value, kept, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Encodes a response value in a wire format.
pub fn encode(format: Format, value: &Value) -> Result<Vec<u8>> {
    match format {
        Format::Json => serde_json::to_vec(value)
            .map_err(|error| ApiError::internal(format!("encoding JSON: {error}"))),
        Format::Yaml => yaml_serde::to_string(value)
            .map(String::into_bytes)
            .map_err(|error| ApiError::internal(format!("encoding YAML: {error}"))),
        Format::Protobuf => protobuf::encode(value).map_err(|error| {
            ApiError::not_acceptable(format!("cannot encode this object as protobuf: {error}"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_table_accept_header_asks_for_a_v1_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(accept)).expect("ok"), Output::Table("v1"));
    }

    #[test]
    fn kinds_without_protobuf_get_the_next_alternative() {
        let accept = Some("application/vnd.kubernetes.protobuf, application/json");
        assert_eq!(
            negotiate_for(accept, false).expect("ok"),
            Output::Object(Format::Json)
        );
        assert_eq!(
            negotiate_for(accept, true).expect("ok"),
            Output::Object(Format::Protobuf)
        );
        let only = Some("application/vnd.kubernetes.protobuf");
        assert_eq!(negotiate_for(only, false).expect_err("406").code, 406);
        // Metadata is a meta.k8s.io kind: protobuf whatever the resource.
        let metadata = Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json");
        assert_eq!(
            negotiate_for(metadata, false).expect("ok"),
            Output::Metadata(Format::Protobuf)
        );
    }

    #[test]
    fn plain_and_wildcard_accepts_get_json_and_unknown_ones_get_406() {
        assert_eq!(negotiate(None).expect("ok"), Output::Object(Format::Json));
        assert_eq!(
            negotiate(Some("application/json, */*")).expect("ok"),
            Output::Object(Format::Json)
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf,application/json")).expect("ok"),
            Output::Object(Format::Protobuf)
        );
        assert_eq!(negotiate(Some("text/html")).expect_err("406").code, 406);
    }

    #[test]
    fn metadata_only_views_are_recognised() {
        let accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            negotiate(Some(accept)).expect("ok"),
            Output::Metadata(Format::Json)
        );
    }

    #[test]
    fn duplicate_json_keys_are_reported_with_their_path() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"data":{"x":"1"}}"#;
        let decoded = decode(Format::Json, body).expect("decodes");
        assert_eq!(decoded.duplicate_fields, vec!["metadata.name"]);
        assert_eq!(decoded.value["metadata"]["name"], "b");
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        for (format, body) in [
            (Format::Json, &b"{\"a\":"[..]),
            (Format::Json, &b"{} trailing"[..]),
            (Format::Yaml, &b"a: [b"[..]),
        ] {
            assert_eq!(decode(format, body).err().map(|e| e.code), Some(400));
        }
    }

    #[test]
    fn oversized_bodies_are_413() {
        let body = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(decode(Format::Json, &body).err().map(|e| e.code), Some(413));
    }

    #[test]
    fn unknown_fields_are_those_the_canonical_form_dropped() {
        let input = serde_json::json!({"spec": {"a": 1, "foo": 2, "list": [{"x": 1, "y": 2}]}, "gone": null});
        let canonical = serde_json::json!({"spec": {"a": 1, "list": [{"x": 1}]}});
        assert_eq!(
            unknown_fields(&input, &canonical),
            vec!["spec.foo", "spec.list[0].y"]
        );
    }

    #[test]
    fn unsupported_content_types_are_415() {
        assert_eq!(
            body_format(Some("text/plain")).err().map(|e| e.code),
            Some(415)
        );
        assert_eq!(
            body_format(Some("application/json; charset=utf-8")).ok(),
            Some(Format::Json)
        );
    }
}
