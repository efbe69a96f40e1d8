//! A kubelet's Summary API (`/stats/summary?only_cpu_and_memory=true`), read for the
//! resource metrics the apiserver serves (`http/resource_metrics.rs`).

use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::Value;
use std::time::Duration;

use super::endpoint::Endpoint;
use super::log::kubelet_failure;
use super::KubeletClient;
use crate::error::{ApiError, Result};

/// How long one kubelet may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a summary read (a node of 110 pods answers in well under a megabyte).
const MAX_SUMMARY_BYTES: usize = 8 << 20;

/// The CPU and memory summary of the kubelet the Node object `node` reports.
pub async fn cpu_and_memory(client: &KubeletClient, node: &Value) -> Result<Value> {
    let kubelet = Endpoint::of_node(node)?;
    let name = node["metadata"]["name"].as_str().unwrap_or_default();
    let target = "/stats/summary?only_cpu_and_memory=true";
    let fetch = async {
        let request = http::Request::get(target)
            .body(Body::empty())
            .map_err(|error| ApiError::internal(format!("the kubelet request: {error}")))?;
        let response = client.send(&kubelet, request).await.map_err(|error| {
            ApiError::unavailable(format!(
                "Get \"https://{}{target}\": {error}",
                kubelet.authority()
            ))
        })?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                ApiError::unavailable(format!("reading node {name:?}'s summary: {error}"))
            })?;
            if let Some(data) = frame.data_ref() {
                bytes.extend_from_slice(data);
            }
            if bytes.len() > MAX_SUMMARY_BYTES {
                return Err(ApiError::internal(format!(
                    "node {name:?}'s summary is larger than {MAX_SUMMARY_BYTES} bytes"
                )));
            }
        }
        if status != 200 {
            let text = String::from_utf8_lossy(&bytes);
            return Err(kubelet_failure(status, "nodes/stats", name, &text));
        }
        serde_json::from_slice(&bytes).map_err(|error| {
            ApiError::internal(format!("node {name:?}'s summary is not JSON: {error}"))
        })
    };
    tokio::time::timeout(TIMEOUT, fetch).await.map_err(|_| {
        ApiError::unavailable(format!(
            "node {name:?}'s kubelet did not answer within {}s",
            TIMEOUT.as_secs()
        ))
    })?
}
