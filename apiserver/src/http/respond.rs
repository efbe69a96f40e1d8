//! Turning results into responses in the form the client asked for: the object (JSON, YAML,
//! protobuf), a `meta.k8s.io` Table with upstream's columns, or metadata only; lists get their
//! List kind and ListMeta; warnings become `Warning` headers.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde_json::{json, Value};

use crate::catalog::ResourceInfo;
use crate::codec::{self, Format, Output};
use crate::error::{ApiError, Result};
use crate::protobuf;
use crate::registry::{ListResult, Listed};

/// `includeObject` on Table requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(value: Option<&str>) -> Result<Self> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

pub(super) fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// One Table row.
fn row(info: &ResourceInfo, object: &Value, include: IncludeObject, now: jiff::Timestamp) -> Value {
    let mut row = json!({"cells": info.printer.cells(object, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial_metadata(object),
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

fn column_definitions(info: &ResourceInfo) -> Value {
    serde_json::to_value(info.printer.columns()).unwrap_or_else(|_| json!([]))
}

/// A Table of objects.
pub fn table<T: std::borrow::Borrow<Value>>(
    info: &ResourceInfo,
    version: &str,
    objects: &[T],
    list_meta: Value,
    include: IncludeObject,
    with_columns: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| row(info, object.borrow(), include, now))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_meta,
        "columnDefinitions": if with_columns { column_definitions(info) } else { json!([]) },
        "rows": rows,
    })
}

fn list_meta(result: &ListResult) -> Value {
    let mut meta = json!({"resourceVersion": result.resource_version.to_string()});
    if let Some(token) = &result.continue_token {
        meta["continue"] = json!(token);
    }
    if let Some(remaining) = result.remaining_item_count {
        meta["remainingItemCount"] = json!(remaining);
    }
    meta
}

/// Encodes a body in a format and wraps it with its content type and status.
pub fn encoded(status: StatusCode, format: Format, body: &Value, warnings: &[String]) -> Response {
    match codec::encode(format, body) {
        Ok(bytes) => {
            let mut response = (
                status,
                [(http::header::CONTENT_TYPE, format.content_type())],
                bytes,
            )
                .into_response();
            add_warnings(&mut response, warnings);
            response
        }
        Err(error) => error.into_response(),
    }
}

/// Adds `Warning: 299 - "…"` headers (deduplicated and capped, see `warnings`).
pub fn add_warnings(response: &mut Response, warnings: &[String]) {
    for warning in &super::warnings::capped(warnings) {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(http::header::WARNING, value);
        }
    }
}

/// One object, in the negotiated form.
pub fn object(
    info: &ResourceInfo,
    output: Output,
    include: IncludeObject,
    status: StatusCode,
    object: &Value,
    warnings: &[String],
) -> Response {
    match output {
        Output::Object(format) => encoded(status, format, object, warnings),
        Output::Metadata(format) => encoded(status, format, &partial_metadata(object), warnings),
        Output::Table(version) => {
            let body = table(
                info,
                version,
                std::slice::from_ref(object),
                json!({"resourceVersion": object["metadata"]["resourceVersion"]}),
                include,
                true,
            );
            encoded(status, Format::Json, &body, warnings)
        }
    }
}

/// A JSON list's body is sent in chunks of about this many bytes.
const LIST_CHUNK_BYTES: usize = 256 * 1024;

/// A list, in the negotiated form. JSON lists, metadata-only lists and Tables are streamed:
/// the head, then each item (or row) encoded as the client takes the chunks, so that a list of
/// 10,000 objects is never one buffer or one tree in memory — an item parsed for its metadata
/// or its cells is dropped once encoded. Protobuf lists are sent as their items' encoded
/// messages (no list body is assembled), YAML lists item by item.
pub fn list(
    info: &'static ResourceInfo,
    output: Output,
    include: IncludeObject,
    result: ListResult,
) -> Response {
    let meta = list_meta(&result);
    let items = result.items;
    match output {
        // Each item's JSON is encoded once per object and shared: a cached object keeps its
        // encoding for later lists and watch events.
        Output::Object(Format::Json) => {
            let head = format!(
                "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
                json!(info.list_kind()),
                json!(info.api_version()),
                meta
            );
            let items = items.into_iter().map(|item| item.json().clone());
            streamed_json(head, items)
        }
        Output::Metadata(Format::Json) => {
            let head = format!(
                "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{meta},\"items\":["
            );
            let items = items
                .into_iter()
                .map(|item| encode_json(&partial_metadata(&item.into_value())));
            streamed_json(head, items)
        }
        Output::Table(version) => {
            let head = format!(
                "{{\"kind\":\"Table\",\"apiVersion\":{},\"metadata\":{meta},\"columnDefinitions\":{},\"rows\":[",
                json!(format!("meta.k8s.io/{version}")),
                column_definitions(info),
            );
            let now = jiff::Timestamp::now();
            let rows = items
                .into_iter()
                .map(move |item| encode_json(&row(info, &item.into_value(), include, now)));
            streamed_json(head, rows)
        }
        // Protobuf lists are assembled from each item's message (the cache keeps an object's
        // encoding once a protobuf client has been sent it), not from a tree of the list.
        Output::Object(Format::Protobuf) => {
            let encoded = items
                .iter()
                .map(Listed::protobuf_message)
                .collect::<std::result::Result<Vec<_>, _>>()
                .and_then(|messages| {
                    protobuf::list_parts(&info.api_version(), &info.list_kind(), &meta, messages)
                });
            protobuf_response(encoded)
        }
        Output::Object(Format::Yaml) => {
            let shell = json!({
                "kind": info.list_kind(),
                "apiVersion": info.api_version(),
                "metadata": meta,
                "items": [],
            });
            streamed_yaml(&shell, items.into_iter().map(Listed::into_value))
        }
        Output::Metadata(Format::Protobuf) => {
            let encoded = items
                .into_iter()
                .map(|item| {
                    protobuf::encode_object(&partial_metadata(&item.into_value()))
                        .map(|encoded| encoded.message())
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .and_then(|messages| {
                    protobuf::list_parts(
                        "meta.k8s.io/v1",
                        "PartialObjectMetadataList",
                        &meta,
                        messages,
                    )
                });
            protobuf_response(encoded)
        }
        Output::Metadata(Format::Yaml) => {
            let shell = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
                "items": [],
            });
            let items = items
                .into_iter()
                .map(|item| partial_metadata(&item.into_value()));
            streamed_yaml(&shell, items)
        }
    }
}

/// A YAML list streamed: `shell` (the list with no items) as YAML, with each item's YAML
/// spliced in under `items:` as the client takes the chunks.
fn streamed_yaml(shell: &Value, items: impl Iterator<Item = Value> + Send + 'static) -> Response {
    match yaml_list_chunks(shell, items) {
        Ok(chunks) => streamed(Format::Yaml, chunks),
        Err(error) => error.into_response(),
    }
}

fn yaml_list_chunks(
    shell: &Value,
    items: impl Iterator<Item = Value> + Send + 'static,
) -> Result<impl Iterator<Item = bytes::Bytes> + Send + 'static> {
    const EMPTY_ITEMS: &str = "\nitems: []\n";
    let encode = |value: &Value| {
        yaml_serde::to_string(value)
            .map_err(|error| ApiError::internal(format!("encoding YAML: {error}")))
    };
    let text = encode(shell)?;
    let (head, tail) = text
        .split_once(EMPTY_ITEMS)
        .ok_or_else(|| ApiError::internal("encoding YAML: the list has no items key"))?;
    let (head, tail) = (format!("{head}\nitems:"), format!("\n{tail}"));
    let mut items = items.peekable();
    if items.peek().is_none() {
        return Ok(Box::new(std::iter::once(bytes::Bytes::from(text)))
            as Box<dyn Iterator<Item = bytes::Bytes> + Send>);
    }
    // Each item a sequence entry: its first line after "- ", the others indented under it.
    let entries = items.map(move |item| {
        let yaml = encode(&item).unwrap_or_else(|_| "{}\n".to_string());
        let mut entry = String::with_capacity(yaml.len() + 64);
        for (index, line) in yaml.lines().enumerate() {
            entry.push_str(if index == 0 { "\n- " } else { "\n  " });
            entry.push_str(line);
        }
        bytes::Bytes::from(entry)
    });
    Ok(Box::new(chunks(
        std::iter::once(bytes::Bytes::from(head))
            .chain(entries)
            .chain(std::iter::once(bytes::Bytes::from(tail))),
    )))
}

/// A protobuf list's response (its parts sent in chunks), or 406 when it has no protobuf form.
fn protobuf_response(
    parts: std::result::Result<Vec<bytes::Bytes>, protobuf::ProtobufError>,
) -> Response {
    match parts {
        Ok(parts) => streamed(Format::Protobuf, chunks(parts.into_iter())),
        Err(error) => {
            ApiError::not_acceptable(format!("cannot encode this list as protobuf: {error}"))
                .into_response()
        }
    }
}

fn encode_json(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// A JSON document streamed: `head` (up to the opening `[` of its list), the items, `]}`.
fn streamed_json(
    head: String,
    items: impl Iterator<Item = bytes::Bytes> + Send + 'static,
) -> Response {
    streamed(Format::Json, json_list_chunks(head.into_bytes(), items))
}

/// A 200 response whose body is `chunks`, sent as the client takes them.
fn streamed(
    format: Format,
    chunks: impl Iterator<Item = bytes::Bytes> + Send + 'static,
) -> Response {
    let body = axum::body::Body::from_stream(futures::stream::iter(
        chunks.map(Ok::<_, std::convert::Infallible>),
    ));
    (
        StatusCode::OK,
        [(http::header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

/// The chunks of a JSON list: `head` (up to `"items":[`), the items' JSON separated by commas,
/// then `]}`.
fn json_list_chunks(
    head: Vec<u8>,
    items: impl Iterator<Item = bytes::Bytes>,
) -> impl Iterator<Item = bytes::Bytes> {
    let separated = items.enumerate().flat_map(|(index, item)| {
        let separator = if index > 0 {
            bytes::Bytes::from_static(b",")
        } else {
            bytes::Bytes::new()
        };
        [separator, item]
    });
    chunks(
        std::iter::once(bytes::Bytes::from(head))
            .chain(separated)
            .chain(std::iter::once(bytes::Bytes::from_static(b"]}"))),
    )
}

/// `parts` gathered into chunks of about [`LIST_CHUNK_BYTES`], made as they are taken.
fn chunks(mut parts: impl Iterator<Item = bytes::Bytes>) -> impl Iterator<Item = bytes::Bytes> {
    std::iter::from_fn(move || {
        let mut chunk = Vec::new();
        for part in parts.by_ref() {
            chunk.extend_from_slice(&part);
            if chunk.len() >= LIST_CHUNK_BYTES {
                return Some(bytes::Bytes::from(chunk));
            }
        }
        (!chunk.is_empty()).then(|| bytes::Bytes::from(chunk))
    })
}

/// Upstream's `Status` of success for deletes that return no object.
pub fn success_status(info: &ResourceInfo, object: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": object["metadata"]["name"],
            "group": info.group,
            "kind": info.plural,
            "uid": object["metadata"]["uid"],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(chunks: impl Iterator<Item = bytes::Bytes>) -> (usize, Value) {
        let chunks: Vec<bytes::Bytes> = chunks.collect();
        let whole: Vec<u8> = chunks.iter().flat_map(|chunk| chunk.to_vec()).collect();
        (
            chunks.len(),
            serde_json::from_slice(&whole).expect("the chunks are one JSON list"),
        )
    }

    #[test]
    fn a_json_list_streams_as_chunks_of_one_document() {
        let head =
            br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":["#;
        let (chunks, empty) = joined(json_list_chunks(head.to_vec(), std::iter::empty()));
        assert_eq!(chunks, 1);
        assert_eq!(empty["items"], json!([]));
        assert_eq!(empty["metadata"]["resourceVersion"], "7");
        // About 1 MiB of items: several chunks, each item whole and in order.
        let items: Vec<Listed> = (0..1000)
            .map(|i| {
                Listed::new(json!({"metadata": {"name": format!("p{i}")}, "pad": "x".repeat(1000)}))
            })
            .collect();
        let encoded = items
            .iter()
            .map(|item| item.json().clone())
            .collect::<Vec<_>>();
        let (chunks, list) = joined(json_list_chunks(head.to_vec(), encoded.into_iter()));
        assert!(chunks >= 4, "{chunks} chunks");
        let names: Vec<&str> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|item| item["metadata"]["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names.len(), 1000);
        assert_eq!(names[0], "p0");
        assert_eq!(names[999], "p999");
        assert_eq!(list["kind"], "PodList");
    }

    async fn body_of(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("one JSON document")
    }

    #[tokio::test]
    async fn metadata_lists_and_tables_stream_as_one_document() {
        let pods = crate::catalog::find("", "v1", "pods").expect("served");
        let result = || {
            ListResult {
            items: (0..600)
                .map(|i| {
                    Listed::new(json!({
                        "kind": "Pod", "apiVersion": "v1",
                        "metadata": {"name": format!("p{i}"), "namespace": "default",
                                     "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z"},
                        "spec": {"containers": [{"name": "c", "image": "pad".repeat(200)}]},
                        "status": {"phase": "Running"},
                    }))
                })
                .collect(),
            resource_version: 9,
            continue_token: Some("next".to_string()),
            remaining_item_count: None,
        }
        };
        let metadata = body_of(list(
            pods,
            Output::Metadata(Format::Json),
            IncludeObject::Metadata,
            result(),
        ))
        .await;
        assert_eq!(metadata["kind"], "PartialObjectMetadataList");
        assert_eq!(metadata["metadata"]["continue"], "next");
        assert_eq!(metadata["items"][599]["metadata"]["name"], "p599");
        assert_eq!(metadata["items"][0]["kind"], "PartialObjectMetadata");
        assert!(metadata["items"][0].get("spec").is_none());

        let table = body_of(list(
            pods,
            Output::Table("v1"),
            IncludeObject::Metadata,
            result(),
        ))
        .await;
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"]["resourceVersion"], "9");
        assert_eq!(table["columnDefinitions"][0]["name"], "Name");
        let rows = table["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 600);
        assert_eq!(rows[7]["cells"][0], "p7");
        assert_eq!(rows[7]["object"]["kind"], "PartialObjectMetadata");

        // Protobuf: the items' messages in chunks, one body.
        for (output, kind) in [
            (Output::Object(Format::Protobuf), "PodList"),
            (
                Output::Metadata(Format::Protobuf),
                "PartialObjectMetadataList",
            ),
        ] {
            let response = list(pods, output, IncludeObject::Metadata, result());
            assert_eq!(
                response.headers()[http::header::CONTENT_TYPE],
                "application/vnd.kubernetes.protobuf"
            );
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("body");
            let decoded = crate::protobuf::decode(&bytes).expect("one protobuf list");
            assert_eq!(decoded["kind"], kind);
            assert_eq!(decoded["metadata"]["continue"], "next");
            let items = decoded["items"].as_array().expect("items");
            assert_eq!(items.len(), 600);
            assert_eq!(items[599]["metadata"]["name"], "p599");
        }
    }

    #[test]
    fn a_yaml_list_streams_as_the_document_encoded_whole() {
        let shell = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                           "metadata": {"resourceVersion": "7"}, "items": []});
        let items = vec![
            json!({"metadata": {"name": "a"}, "data": {"script": "line one\n  indented\n\nlast\n"}}),
            json!({"metadata": {"name": "b"}, "data": {"list": "- not a list", "empty": ""}}),
            json!({}),
        ];
        let whole = |items: &[Value]| {
            let mut list = shell.clone();
            list["items"] = json!(items);
            list
        };
        for items in [items.clone(), Vec::new()] {
            let chunks: Vec<bytes::Bytes> = yaml_list_chunks(&shell, items.clone().into_iter())
                .expect("encodes")
                .collect();
            let text: Vec<u8> = chunks.iter().flat_map(|chunk| chunk.to_vec()).collect();
            let parsed: Value = yaml_serde::from_slice(&text).expect("one YAML document");
            assert_eq!(parsed, whole(&items), "{}", String::from_utf8_lossy(&text));
        }
    }
}
