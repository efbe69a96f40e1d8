//! Where a pod's kubelet listens: the pod's `spec.nodeName` names a Node, whose status gives
//! the address (the first of the preferred address types) and the kubelet's port
//! (`status.daemonEndpoints.kubeletEndpoint.Port`, 10250 when unset), as upstream's
//! `NodeConnectionInfoGetter` reads them. Also the container a request means, checked as
//! upstream's pod registry checks it.

use serde_json::Value;

use super::super::AppState;
use crate::catalog;
use crate::error::{ApiError, Result};

/// The kubelet's port when the Node does not report one (upstream's `--kubelet-port`).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// The Node address types tried in order. InternalIP comes first (upstream's default puts
/// Hostname first, which a cluster without DNS for its nodes cannot dial).
const PREFERRED_ADDRESS_TYPES: [&str; 5] = [
    "InternalIP",
    "Hostname",
    "ExternalIP",
    "InternalDNS",
    "ExternalDNS",
];

/// A kubelet's address and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// An IP address or a host name: what is dialled, and the name its serving certificate
    /// must carry.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `host:port`, with an IPv6 address in brackets (for `Host` headers and messages).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The kubelet endpoint a Node object reports.
    pub fn of_node(node: &Value) -> Result<Self> {
        let addresses = node["status"]["addresses"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let host = PREFERRED_ADDRESS_TYPES.iter().find_map(|wanted| {
            addresses
                .iter()
                .filter(|address| address["type"] == *wanted)
                .find_map(|address| address["address"].as_str().filter(|a| !a.is_empty()))
        });
        let Some(host) = host else {
            let known: Vec<String> = addresses
                .iter()
                .map(|address| {
                    format!(
                        "{{{} {}}}",
                        address["type"].as_str().unwrap_or(""),
                        address["address"].as_str().unwrap_or("")
                    )
                })
                .collect();
            return Err(ApiError::internal(format!(
                "no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            )));
        };
        let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_u64()
            .and_then(|port| u16::try_from(port).ok())
            .filter(|port| *port > 0)
            .unwrap_or(DEFAULT_KUBELET_PORT);
        Ok(Self {
            host: host.trim_matches(|c| c == '[' || c == ']').to_string(),
            port,
        })
    }
}

/// The kubelet of the Node named `node_name`: 404 `nodes "x" not found` when it is gone.
pub async fn of_node_named(state: &AppState, node_name: &str) -> Result<Endpoint> {
    let nodes = catalog::find("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("nodes are not in the catalog"))?;
    let node = state.registry.get(nodes, None, node_name).await?;
    Endpoint::of_node(&node)
}

/// The pod named `name` in `namespace` (404 `pods "x" not found` when it is missing).
pub async fn pod(state: &AppState, namespace: &str, name: &str) -> Result<Value> {
    let pods = catalog::find("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not in the catalog"))?;
    state.registry.get(pods, Some(namespace), name).await
}

/// The node a pod is bound to, if it is bound.
pub fn node_name(pod: &Value) -> Option<&str> {
    pod["spec"]["nodeName"]
        .as_str()
        .filter(|name| !name.is_empty())
}

/// The names of a pod's containers in upstream's visiting order: init containers, then
/// containers, then ephemeral containers.
fn container_names(pod: &Value) -> Vec<&str> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| {
            pod["spec"][*list]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
        })
        .filter_map(|container| container["name"].as_str())
        .collect()
}

/// The container a request means: the one it names, which must be one of the pod's, or the
/// pod's only (regular) container. As upstream, the server does not read the
/// `kubectl.kubernetes.io/default-container` annotation: kubectl does, and names the
/// container it picks.
pub fn container(pod: &Value, requested: Option<&str>) -> Result<String> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
    if let Some(requested) = requested.filter(|name| !name.is_empty()) {
        if container_names(pod).contains(&requested) {
            return Ok(requested.to_string());
        }
        return Err(ApiError::bad_request(format!(
            "container {requested} is not valid for pod {pod_name}"
        )));
    }
    let regular = pod["spec"]["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    match regular {
        [only] => Ok(only["name"].as_str().unwrap_or("").to_string()),
        [] => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}"
        ))),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {pod_name}, choose one of: [{}]",
            container_names(pod).join(" ")
        ))),
    }
}
