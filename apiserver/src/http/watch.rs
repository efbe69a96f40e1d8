//! Watch responses: a chunked stream of `{"type": …, "object": …}` JSON lines, or of
//! length-prefixed protobuf `WatchEvent`s (`application/vnd.kubernetes.protobuf;stream=watch`,
//! as client-go's protobuf clients ask), each object encoded as the client asked (the object,
//! one-row Tables, or metadata only), ended by
//! `timeoutSeconds` (or a server default with jitter, as upstream) or by the client.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::StatusCode;
use rand::Rng;
use serde_json::json;

use super::respond::{self, IncludeObject};
use crate::catalog::ResourceInfo;
use crate::codec::{Format, Output};
use crate::error::{ApiError, Result};
use crate::protobuf;
use crate::registry::{Registry, WatchEvent, WatchEventKind};
use crate::request::ListOptions;

/// The longest a watch lasts without `timeoutSeconds` (upstream: 30–60 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

pub async fn serve(
    registry: &Registry,
    info: &'static ResourceInfo,
    namespace: Option<&str>,
    options: &ListOptions,
    output: Output,
    include: IncludeObject,
) -> Result<Response> {
    let protobuf = matches!(
        output,
        Output::Object(Format::Protobuf) | Output::Metadata(Format::Protobuf)
    );
    let timeout = match options.timeout_seconds {
        Some(seconds) if seconds > 0 => Duration::from_secs(seconds.unsigned_abs()),
        _ => {
            DEFAULT_TIMEOUT
                + Duration::from_secs(rand::rng().random_range(0..DEFAULT_TIMEOUT.as_secs()))
        }
    };
    // The watcher itself ends at the deadline, read or not; the stream ends with it.
    let deadline = tokio::time::Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| tokio::time::Instant::now() + DEFAULT_TIMEOUT * 2);
    let events = registry.watch(info, namespace, options, deadline).await?;
    // Counted as a registered watcher and a long-running request while the stream lives.
    let metrics = registry.watch_metrics().clone();
    let guard = metrics.watching(info, namespace.is_some());
    let mut first_table = true;
    let stream = events
        .take_until(tokio::time::sleep_until(deadline))
        .map(move |event| {
            let _watching = &guard;
            if !matches!(event.kind, WatchEventKind::Bookmark | WatchEventKind::Error) {
                metrics.event_sent(info);
            }
            if protobuf {
                return Ok(protobuf_frame(output, &event));
            }
            let object = match (output, event.kind) {
                (Output::Object(_), _) | (_, WatchEventKind::Error | WatchEventKind::Bookmark) => {
                    // The object's JSON, encoded once for every watcher it goes to.
                    return Ok(event_line(event.kind.as_str(), event.object.json()));
                }
                (Output::Table(version), _) => {
                    let with_columns = std::mem::replace(&mut first_table, false);
                    let value = event.object.value();
                    let resource_version = value["metadata"]["resourceVersion"].clone();
                    respond::table(
                        info,
                        version,
                        std::slice::from_ref(&value),
                        json!({"resourceVersion": resource_version}),
                        include,
                        with_columns,
                    )
                }
                (Output::Metadata(_), _) => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": event.object.value()["metadata"],
                }),
            };
            let encoded = serde_json::to_vec(&object).unwrap_or_default();
            Ok::<Bytes, std::convert::Infallible>(event_line(event.kind.as_str(), &encoded))
        });
    Response::builder()
        .status(StatusCode::OK)
        .header(
            http::header::CONTENT_TYPE,
            if protobuf {
                PROTOBUF_STREAM
            } else {
                "application/json"
            },
        )
        .header(http::header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|error| ApiError::internal(format!("building the watch response: {error}")))
}

/// The Content-Type of a protobuf watch stream.
const PROTOBUF_STREAM: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// One frame of a protobuf watch stream: the object's protobuf body (encoded once for every
/// watcher when it is the object itself), or its metadata; an object that has no protobuf
/// form ends the stream's useful life with an ERROR event saying so.
fn protobuf_frame(output: Output, event: &WatchEvent) -> Bytes {
    let metadata = matches!(output, Output::Metadata(_)) && event.kind != WatchEventKind::Error;
    let body = if metadata {
        protobuf::encode(&respond::partial_metadata(&event.object.value()))
            .ok()
            .map(Bytes::from)
    } else {
        event
            .object
            .protobuf()
            .map(|encoded| encoded.enveloped.clone())
    };
    if let Some(body) = body {
        return Bytes::from(protobuf::watch_frame(event.kind.as_str(), &body));
    }
    let error = ApiError::internal(format!(
        "a {} event's object cannot be encoded as protobuf",
        event.kind.as_str()
    ));
    match protobuf::encode(&error.status()) {
        Ok(status) => Bytes::from(protobuf::watch_frame(
            WatchEventKind::Error.as_str(),
            &status,
        )),
        Err(_) => Bytes::new(),
    }
}

/// One line of a JSON watch stream: `{"type":"ADDED","object":{…}}`.
fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_event_line_is_the_upstream_json_shape() {
        let line = super::event_line("ADDED", br#"{"kind":"Pod"}"#);
        let parsed: serde_json::Value =
            serde_json::from_slice(&line).expect("one JSON object per line");
        assert_eq!(
            parsed,
            serde_json::json!({"type": "ADDED", "object": {"kind": "Pod"}})
        );
        assert!(line.ends_with(b"\n"));
    }
}
