//! `/openapi/v3` (index and per group-version documents, cached, with hashes and ETags so
//! kubectl's cache works) and `/openapi/v2` (JSON; for the protobuf kubectl 1.27/1.28 ask for
//! first, an empty protobuf document, which sends them on to v3).

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::AppState;
use crate::error::ApiError;
use crate::openapi;
use crate::request::Query;

const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2";

fn cached(body: bytes::Bytes, hash: &str, headers: &HeaderMap, pinned: bool) -> Response {
    let etag = format!("\"{hash}\"");
    let matches = headers
        .get(http::header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|tag| tag.trim() == etag));
    let cache = if pinned {
        "public, immutable, max-age=31536000"
    } else {
        "no-cache, private"
    };
    if matches {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (http::header::ETAG, etag),
                (http::header::CACHE_CONTROL, cache.to_string()),
            ],
        )
            .into_response();
    }
    (
        [
            (http::header::CONTENT_TYPE, "application/json".to_string()),
            (http::header::ETAG, etag),
            (http::header::CACHE_CONTROL, cache.to_string()),
        ],
        body,
    )
        .into_response()
}

/// The OpenAPI v3 documents aggregated extension apiservers serve.
fn remote_documents(state: &AppState) -> Vec<(String, openapi::Document)> {
    state
        .aggregator
        .as_ref()
        .map(|aggregator| aggregator.openapi_v3())
        .unwrap_or_default()
}

pub async fn v3_index(State(state): State<AppState>) -> Response {
    let remote = remote_documents(&state);
    axum::Json(openapi::v3_index(
        &state.registry.custom().served(),
        &remote,
    ))
    .into_response()
}

pub async fn v3_document(
    State(state): State<AppState>,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let remote = || {
        let wanted = path.trim_start_matches('/');
        remote_documents(&state)
            .into_iter()
            .find(|(at, _)| at == wanted)
            .map(|(_, document)| document)
    };
    let Some(document) =
        openapi::v3_document(&path, &state.registry.custom().served()).or_else(remote)
    else {
        return ApiError::path_not_found().into_response();
    };
    let query = Query::parse(query.as_deref());
    let pinned = query.get("hash") == Some(document.hash.as_str());
    cached(document.bytes, &document.hash, &headers, pinned)
}

pub async fn v2(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let wants_json = accept.is_empty()
        || accept.split(',').any(|media| {
            let essence = media.split(';').next().unwrap_or("").trim();
            essence == "application/json" || essence == "*/*"
        });
    if accept.contains(V2_PROTOBUF) && !wants_json {
        // Go's mime parser rejects the protobuf type's own name as a response Content-Type.
        return (
            [(http::header::CONTENT_TYPE, "application/octet-stream")],
            Vec::<u8>::new(),
        )
            .into_response();
    }
    let document = openapi::v2_json(&state.registry.custom().served());
    cached(document.bytes, &document.hash, &headers, false)
}
