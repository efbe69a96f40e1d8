//! The subresources a kubelet serves, proxied by the apiserver as upstream's kube-apiserver
//! proxies them: `pods/log`, `pods/exec`, `pods/attach`, `pods/portforward` and
//! `nodes/proxy`.
//!
//! ```text
//! GET/POST …/pods/p/{log,exec,attach,portforward}     GET/POST/PUT/PATCH/DELETE …/nodes/n/proxy/…
//!   → verb served (405) → authorize the method's verb (403)
//!     exec/attach/portforward by GET (a WebSocket) also need `create` (403), as upstream 1.35+
//!   → the pod (404) → its container (400) → bound? (400, or an empty log)
//!   → spec.nodeName → the Node (404) → InternalIP|Hostname|ExternalIP : kubeletEndpoint.Port
//!   → HTTPS to the kubelet as `kube-apiserver-kubelet-client` (cluster CA both ways)
//!       /containerLogs/ns/p/c?…   streamed back as text/plain         (`log`)
//!       /exec|attach/ns/p/c?…, /portForward/ns/p?port=…   upgrade + splice   (`upgrade`)
//!       /<path>?<query>           relayed, or upgraded + spliced                (`connect`)
//! ```
//!
//! `endpoint` finds the kubelet and the container, `options` reads the query as upstream's
//! parameter codec does, `client` holds the TLS identity, `upgrade` forwards and splices.
//! These requests are long-running (like watches, outside the in-flight budget and the request
//! timeout) and are counted with the verb `CONNECT`.

mod client;
mod connect;
mod endpoint;
mod log;
mod options;
pub mod stats;
#[cfg(test)]
mod tests;
pub(crate) mod upgrade;

use axum::body::Body;
use axum::response::Response;
use http::request::Parts;

use super::resources;
use super::AppState;
use crate::authn::UserInfo;
use crate::catalog::Subresource;
use crate::error::{ApiError, Result};
use crate::request::{Query, RequestInfo, Verb, WriteOptions};

pub use client::{KubeletClient, KUBELET_CLIENT_USER};
pub use endpoint::DEFAULT_KUBELET_PORT;

/// Serves a request for a subresource the kubelet serves (`Subresource::proxies_to_kubelet`).
pub async fn serve(
    state: &AppState,
    caller: &UserInfo,
    info: &RequestInfo,
    query: &Query,
    parts: Parts,
    body: Body,
) -> Result<Response> {
    if !resources::verb_served(info) {
        return Err(resources::not_allowed());
    }
    resources::authorize(state, caller, info, query)?;
    let sub = info.subresource.ok_or_else(resources::not_allowed)?;
    // A WebSocket's GET must be allowed to `create` too: SPDY's POST always needed it, and
    // `get` alone must not open a shell (upstream's AuthorizePodWebsocketUpgradeCreatePermission).
    let connects = matches!(
        sub,
        Subresource::Exec | Subresource::Attach | Subresource::PortForward
    );
    if connects && info.verb != Verb::Create {
        let as_create = RequestInfo {
            verb: Verb::Create,
            ..info.clone()
        };
        resources::authorize(state, caller, &as_create, query)?;
    }
    let name = info.name.as_deref().ok_or_else(ApiError::path_not_found)?;
    if sub != Subresource::Log {
        // As upstream's connect handler: admission sees a CONNECT with the options before
        // anything is looked up or reached.
        let proxied = connect::proxied_path(parts.uri.path());
        let options = options::connect_options(sub, query, proxied)?;
        let write = resources::write_of(
            caller,
            &WriteOptions::from_query(&Query::default())?,
            &parts.headers,
        );
        state
            .registry
            .admit_connect(
                info.resource,
                sub,
                info.namespace.as_deref(),
                name,
                options,
                &write,
            )
            .await?;
    }
    let Some(client) = state.kubelet_client.as_deref() else {
        return Err(ApiError::unavailable(
            "this apiserver has no client for kubelets",
        ));
    };
    if sub == Subresource::Proxy {
        return connect::node_proxy(state, client, name, parts, body).await;
    }
    let namespace = info
        .namespace
        .as_deref()
        .ok_or_else(ApiError::path_not_found)?;
    match sub {
        Subresource::Log => log::serve(state, client, namespace, name, query).await,
        _ => connect::stream(state, client, sub, (namespace, name), query, parts).await,
    }
}

/// Whether a request for `info` is long-running: it streams from a kubelet for as long as the
/// client (or the kubelet) keeps it open.
pub fn is_long_running(info: &RequestInfo) -> bool {
    info.subresource
        .is_some_and(Subresource::proxies_to_kubelet)
}
