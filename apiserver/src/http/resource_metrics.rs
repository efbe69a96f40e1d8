//! metrics.k8s.io/v1beta1, what `kubectl top` reads, served by the apiserver itself rather
//! than by an aggregated metrics-server: each get or list of NodeMetrics or PodMetrics asks
//! the kubelets concerned for their Summary API (`/stats/summary?only_cpu_and_memory=true`,
//! at most [`CONCURRENT_SCRAPES`] at once, 5 s each) and answers with what they report, as
//! metrics-server would: items sorted by name, labels copied from the Node or Pod, usage in
//! nano-cores and bytes, and nodes or pods without figures yet (a kubelet that does not
//! answer, a container whose CPU rate needs a second sample) left out.
//!
//! ```text
//! GET /apis/metrics.k8s.io/v1beta1/nodes[/n]            GET …/namespaces/ns/pods[/p]
//!   → verb served (405) → authorize get|list on nodes|pods.metrics.k8s.io (403)
//!   → Nodes (or Pods, then their Nodes) from the watch cache, with the request's selectors
//!   → each kubelet's summary → NodeMetrics / PodMetrics (a get of one without figures: 404)
//! ```
//!
//! Protobuf is not offered for this group; a client asking for it (kubectl top does by
//! default) gets JSON, which client-go decodes by the response's content type.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::kubelet_proxy::{stats, KubeletClient};
use super::resources;
use super::respond::{self, IncludeObject};
use super::AppState;
use crate::authn::UserInfo;
use crate::catalog;
use crate::codec::{self, Format, Output};
use crate::error::{ApiError, Result};
use crate::registry::{ListResult, Listed};
use crate::request::{ListOptions, Query, RequestInfo};

/// Kubelets asked at once.
const CONCURRENT_SCRAPES: usize = 16;
/// The window reported with each figure: the kubelet's CPU rate is over its last samples,
/// taken every 10 s by its eviction manager.
const WINDOW: &str = "10s";

/// Serves a get or list of `nodes` or `pods` in metrics.k8s.io.
pub async fn serve(
    state: &AppState,
    caller: &UserInfo,
    info: &RequestInfo,
    query: &Query,
    headers: &HeaderMap,
) -> Result<axum::response::Response> {
    if !resources::verb_served(info) {
        return Err(resources::not_allowed());
    }
    resources::authorize(state, caller, info, query)?;
    if info.resource.namespaced && info.namespace.is_none() && info.name.is_some() {
        return Err(ApiError::path_not_found());
    }
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let output = match codec::negotiate(accept)? {
        Output::Object(Format::Protobuf) | Output::Metadata(_) => Output::Object(Format::Json),
        other => other,
    };
    let include = IncludeObject::parse(query.get("includeObject"))?;
    let options = ListOptions::from_query(query)?;
    let field_selector = match &info.name {
        Some(name) => format!("metadata.name={name}"),
        None => options.field_selector.clone(),
    };
    let Some(client) = state.kubelet_client.as_deref() else {
        return Err(ApiError::unavailable(
            "this apiserver has no client for kubelets",
        ));
    };
    let mut items = if info.resource.namespaced {
        let namespace = info.namespace.as_deref();
        pod_metrics(
            state,
            client,
            namespace,
            &options.label_selector,
            &field_selector,
        )
        .await?
    } else {
        node_metrics(state, client, &options.label_selector, &field_selector).await?
    };
    items.sort_by(|a, b| {
        let key = |v: &Value| {
            (
                v["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                v["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            )
        };
        key(a).cmp(&key(b))
    });
    if let Some(name) = &info.name {
        let item = items
            .into_iter()
            .next()
            .ok_or_else(|| ApiError::not_found(info.resource, name))?;
        return Ok(respond::object(
            info.resource,
            output,
            include,
            StatusCode::OK,
            &item,
            &[],
        ));
    }
    let result = ListResult {
        items: items.into_iter().map(Listed::new).collect(),
        resource_version: 0,
        continue_token: None,
        remaining_item_count: None,
    };
    Ok(respond::list(info.resource, output, include, result))
}

fn core(plural: &str) -> Result<&'static catalog::ResourceInfo> {
    catalog::find("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not in the catalog")))
}

/// The summaries of `nodes`' kubelets, by node name; nodes whose kubelet failed are left out.
async fn summaries(client: &KubeletClient, nodes: Vec<Value>) -> HashMap<String, Value> {
    futures::stream::iter(nodes)
        .map(|node| async move {
            let name = node["metadata"]["name"].as_str().unwrap_or("").to_owned();
            match stats::cpu_and_memory(client, &node).await {
                Ok(summary) => Some((name, summary)),
                Err(error) => {
                    tracing::debug!(node = %name, %error, "no resource metrics from a kubelet");
                    None
                }
            }
        })
        .buffer_unordered(CONCURRENT_SCRAPES)
        .filter_map(|found| async move { found })
        .collect()
        .await
}

async fn node_metrics(
    state: &AppState,
    client: &KubeletClient,
    label_selector: &str,
    field_selector: &str,
) -> Result<Vec<Value>> {
    let nodes = state
        .registry
        .list_cached(core("nodes")?, None, label_selector, field_selector)
        .await?;
    let labels: HashMap<String, Value> = nodes
        .iter()
        .map(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or("").to_owned();
            (name, n["metadata"]["labels"].clone())
        })
        .collect();
    let summaries = summaries(client, nodes).await;
    Ok(summaries
        .iter()
        .filter_map(|(name, summary)| node_entry(name, &labels[name], summary))
        .collect())
}

async fn pod_metrics(
    state: &AppState,
    client: &KubeletClient,
    namespace: Option<&str>,
    label_selector: &str,
    field_selector: &str,
) -> Result<Vec<Value>> {
    let pods = state
        .registry
        .list_cached(core("pods")?, namespace, label_selector, field_selector)
        .await?;
    let mut on_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for pod in pods {
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            on_node.entry(node.to_owned()).or_default().push(pod);
        }
    }
    let nodes_info = core("nodes")?;
    let mut nodes = Vec::new();
    for name in on_node.keys() {
        match state.registry.get(nodes_info, None, name).await {
            Ok(node) => nodes.push(node),
            Err(error) => tracing::debug!(node = %name, %error, "a pod's node is gone"),
        }
    }
    let summaries = summaries(client, nodes).await;
    let mut items = Vec::new();
    for (node, pods) in &on_node {
        let Some(summary) = summaries.get(node) else {
            continue;
        };
        items.extend(pods.iter().filter_map(|pod| pod_entry(pod, summary)));
    }
    Ok(items)
}

/// A timestamp the way metav1.Time writes it (whole seconds).
fn whole_seconds(time: &Value) -> Option<String> {
    let text = time.as_str()?;
    let seconds = match text.split_once('.') {
        Some((whole, _)) => format!("{whole}Z"),
        None => text.to_owned(),
    };
    Some(seconds)
}

/// CPU and memory as quantities, when the summary has both.
fn usage(cpu: &Value, memory: &Value) -> Option<(Value, Option<String>)> {
    let cores = cpu["usageNanoCores"].as_u64()?;
    let bytes = memory["workingSetBytes"].as_u64()?;
    let usage = json!({"cpu": format!("{cores}n"), "memory": bytes.to_string()});
    Some((usage, whole_seconds(&cpu["time"])))
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// NodeMetrics for `name` from its kubelet's summary.
fn node_entry(name: &str, labels: &Value, summary: &Value) -> Option<Value> {
    let node = &summary["node"];
    let (usage, time) = usage(&node["cpu"], &node["memory"])?;
    let mut metadata = json!({"name": name, "creationTimestamp": now()});
    if labels.is_object() {
        metadata["labels"] = labels.clone();
    }
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata,
        "timestamp": time.unwrap_or_else(now),
        "window": WINDOW,
        "usage": usage,
    }))
}

/// PodMetrics for `pod` from its node's summary: every container with figures, or none
/// when one lacks them (as metrics-server leaves such a pod out).
fn pod_entry(pod: &Value, summary: &Value) -> Option<Value> {
    let namespace = pod["metadata"]["namespace"].as_str()?;
    let name = pod["metadata"]["name"].as_str()?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    let stats = summary["pods"].as_array()?.iter().find(|p| {
        let reference = &p["podRef"];
        reference["namespace"] == namespace
            && reference["name"] == name
            && (uid.is_empty() || reference["uid"] == uid)
    })?;
    let mut containers = Vec::new();
    let mut latest: Option<String> = None;
    for container in stats["containers"].as_array()? {
        let (usage, time) = usage(&container["cpu"], &container["memory"])?;
        latest = latest.max(time);
        containers.push(json!({"name": container["name"], "usage": usage}));
    }
    if containers.is_empty() {
        return None;
    }
    let mut metadata = json!({"name": name, "namespace": namespace, "creationTimestamp": now()});
    if pod["metadata"]["labels"].is_object() {
        metadata["labels"] = pod["metadata"]["labels"].clone();
    }
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata,
        "timestamp": latest.unwrap_or_else(now),
        "window": WINDOW,
        "containers": containers,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Value {
        json!({
            "node": {"nodeName": "n1",
                "cpu": {"time": "2026-12-05T18:30:01.123456Z", "usageNanoCores": 250_000_000u64},
                "memory": {"time": "2026-12-05T18:30:01.123456Z", "workingSetBytes": 1_048_576u64}},
            "pods": [
                {"podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                 "containers": [
                    {"name": "app", "cpu": {"time": "2026-12-05T18:30:00Z", "usageNanoCores": 5_000_000u64},
                     "memory": {"workingSetBytes": 2048u64}},
                    {"name": "sidecar", "cpu": {"time": "2026-12-05T18:30:02.5Z", "usageNanoCores": 1u64},
                     "memory": {"workingSetBytes": 1u64}}]},
                {"podRef": {"name": "new", "namespace": "default", "uid": "u2"},
                 "containers": [{"name": "app", "cpu": {"time": "2026-12-05T18:30:00Z"},
                     "memory": {"workingSetBytes": 10u64}}]}
            ]
        })
    }

    fn pod(name: &str, uid: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "uid": uid,
            "labels": {"app": name}}})
    }

    #[test]
    fn a_nodes_summary_becomes_its_node_metrics() {
        let labels = json!({"kubernetes.io/hostname": "n1"});
        let metrics = node_entry("n1", &labels, &summary()).unwrap();
        assert_eq!(metrics["kind"], "NodeMetrics");
        assert_eq!(metrics["apiVersion"], "metrics.k8s.io/v1beta1");
        assert_eq!(metrics["metadata"]["name"], "n1");
        assert_eq!(metrics["metadata"]["labels"], labels);
        assert_eq!(metrics["timestamp"], "2026-12-05T18:30:01Z");
        assert_eq!(metrics["window"], "10s");
        assert_eq!(
            metrics["usage"],
            json!({"cpu": "250000000n", "memory": "1048576"})
        );
        let mut without_rate = summary();
        without_rate["node"]["cpu"]["usageNanoCores"] = Value::Null;
        assert_eq!(node_entry("n1", &labels, &without_rate), None);
    }

    #[test]
    fn a_pods_containers_become_its_pod_metrics_once_each_has_figures() {
        let metrics = pod_entry(&pod("web", "u1"), &summary()).unwrap();
        assert_eq!(metrics["kind"], "PodMetrics");
        assert_eq!(metrics["metadata"]["namespace"], "default");
        assert_eq!(metrics["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(
            metrics["timestamp"], "2026-12-05T18:30:02Z",
            "the latest sample"
        );
        assert_eq!(
            metrics["containers"],
            json!([
                {"name": "app", "usage": {"cpu": "5000000n", "memory": "2048"}},
                {"name": "sidecar", "usage": {"cpu": "1n", "memory": "1"}}
            ])
        );
        assert_eq!(
            pod_entry(&pod("new", "u2"), &summary()),
            None,
            "no CPU rate yet"
        );
        assert_eq!(pod_entry(&pod("web", "other-uid"), &summary()), None);
        assert_eq!(pod_entry(&pod("absent", ""), &summary()), None);
    }
}
