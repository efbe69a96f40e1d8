//! The connect subresources: `pods/exec`, `pods/attach` and `pods/portforward` (an upgrade to
//! the pod's kubelet is required: 400 `Upgrade request required` otherwise, as upstream), and
//! `nodes/proxy` (any request, upgraded or not, to `/<path>` on the node's kubelet, the query
//! kept).

use axum::body::Body;
use axum::response::Response;
use http::request::Parts;

use super::super::AppState;
use super::client::KubeletClient;
use super::endpoint;
use super::options;
use super::upgrade::{self, Forward};
use crate::catalog::Subresource;
use crate::error::{ApiError, Result};
use crate::request::Query;

/// An exec, attach or port-forward of the pod `name` in `namespace`.
pub async fn stream(
    state: &AppState,
    client: &KubeletClient,
    sub: Subresource,
    (namespace, name): (&str, &str),
    query: &Query,
    mut parts: Parts,
) -> Result<Response> {
    let pod = endpoint::pod(state, namespace, name).await?;
    let container = match sub {
        Subresource::PortForward => String::new(),
        _ => endpoint::container(&pod, query.get("container"))?,
    };
    let Some(node_name) = endpoint::node_name(&pod) else {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    };
    let kubelet = endpoint::of_node_named(state, node_name).await?;
    let target = options::stream_target(sub, namespace, name, &container, query)?;
    if !upgrade::is_upgrade_request(&parts.headers) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let forward = Forward {
        method: parts.method.clone(),
        target,
        headers: upgrade::upgrade_headers(&parts.headers),
        body: Body::empty(),
        on_upgrade: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
    };
    upgrade::proxy(client, &kubelet, forward).await
}

/// A nodes/proxy request to the node `name`'s kubelet.
pub async fn node_proxy(
    state: &AppState,
    client: &KubeletClient,
    name: &str,
    mut parts: Parts,
    body: Body,
) -> Result<Response> {
    let kubelet = endpoint::of_node_named(state, name).await?;
    let path = proxied_path(parts.uri.path());
    let target = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    };
    let forward = Forward {
        method: parts.method.clone(),
        target,
        headers: upgrade::proxied_headers(&parts.headers),
        body,
        on_upgrade: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
    };
    upgrade::proxy(client, &kubelet, forward).await
}

/// The kubelet path of a `…/nodes/<name>/proxy[/<path>]` request path, still percent-encoded:
/// what follows `/proxy`, or `/`.
pub fn proxied_path(path: &str) -> &str {
    let after_nodes = path
        .find("/nodes/")
        .map(|at| &path[at + "/nodes/".len()..])
        .unwrap_or("");
    let after_name = after_nodes
        .find('/')
        .map(|at| &after_nodes[at..])
        .unwrap_or("");
    match after_name.strip_prefix("/proxy") {
        Some(rest) if rest.starts_with('/') => rest,
        _ => "/",
    }
}
