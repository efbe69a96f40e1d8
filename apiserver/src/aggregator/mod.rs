//! API aggregation, as upstream's kube-aggregator: APIServices (apiregistration.k8s.io/v1)
//! say which apiserver serves each group-version. Local ones are this server's (every built-in
//! and CRD group-version gets one, [`local`]); the others name a Service, and requests under
//! `/apis/<group>/<version>` are proxied there ([`proxy`]) — authenticated and authorized here
//! first, then carried with the caller's identity in `X-Remote-*` headers over TLS presenting
//! the front-proxy client certificate, which the extension apiserver checks against the
//! `requestheader-client-ca-file` of `kube-system/extension-apiserver-authentication`.
//!
//! ```text
//! APIServices (list + watch) ─▶ controller ─ every 10 s and on change ─▶ per remote APIService:
//!     Service → port → ready endpoint → GET /apis/<g>/<v> over the proxy's TLS client
//!     → Routes (available?, its resources)  → status.conditions[Available] (only on change)
//! request /apis/<g>/<v>/… ─▶ Routes has it? ─▶ authorize ─▶ 503 unless available ─▶ proxy
//! discovery (/apis, aggregated /apis, /apis/<g>) ─▶ merged with Routes ([`discovery`])
//! ```
//!
//! docs/aggregation.md has the flow.

pub mod authentication_config;
pub mod client;
pub mod controller;
pub mod discovery;
pub mod local;
pub mod proxy;
pub mod request_info;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// What the server knows of the APIServices served elsewhere, replaced whole by the
/// controller.
#[derive(Debug, Default)]
pub struct Routes {
    /// By (group, version).
    pub remote: BTreeMap<(String, String), Arc<Remote>>,
}

/// An APIService served by an extension apiserver.
#[derive(Clone, Debug, PartialEq)]
pub struct Remote {
    /// The APIService's name (`<version>.<group>`).
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    pub service: ServiceRef,
    /// The PEM bundle (base64, as the APIService holds it) the serving certificate must chain
    /// to.
    pub ca_bundle: Option<String>,
    pub insecure_skip_tls_verify: bool,
    /// Whether its last check passed (requests are proxied only then; else 503).
    pub available: bool,
    /// The `resources` of the APIResourceList it last answered for its group-version.
    pub resources: Option<Vec<Value>>,
    /// Its OpenAPI v3 document of the group-version, when it serves one, and when it was
    /// fetched (again at a check a minute later; served by this server under
    /// `/openapi/v3/apis/<group>/<version>`).
    pub openapi_v3: Option<(crate::openapi::Document, tokio::time::Instant)>,
}

/// `spec.service` of an APIService.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub port: i64,
}

impl ServiceRef {
    /// The name its serving certificate must carry: `<name>.<namespace>.svc`.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

impl Remote {
    /// The remote APIService `object` describes; `None` for a Local one.
    pub fn of(object: &Value) -> Option<Self> {
        let spec = &object["spec"];
        let service = &spec["service"];
        if !service.is_object() {
            return None;
        }
        let text = |value: &Value| value.as_str().unwrap_or("").to_string();
        Some(Self {
            name: crate::json::name(object).to_string(),
            group: text(&spec["group"]),
            version: text(&spec["version"]),
            group_priority: spec["groupPriorityMinimum"].as_i64().unwrap_or(0),
            version_priority: spec["versionPriority"].as_i64().unwrap_or(0),
            service: ServiceRef {
                namespace: text(&service["namespace"]),
                name: text(&service["name"]),
                port: service["port"].as_i64().unwrap_or(443),
            },
            ca_bundle: spec["caBundle"]
                .as_str()
                .filter(|bundle| !bundle.is_empty())
                .map(str::to_string),
            insecure_skip_tls_verify: spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false),
            available: false,
            resources: None,
            openapi_v3: None,
        })
    }
}

/// The aggregation layer of one server: the routes its controller keeps, and the client it
/// proxies with.
pub struct Aggregator {
    routes: RwLock<Arc<Routes>>,
    client: client::Client,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

impl Aggregator {
    pub fn new(client: client::Client) -> Self {
        Self {
            routes: RwLock::new(Arc::new(Routes::default())),
            client,
        }
    }

    /// The routes now.
    pub fn routes(&self) -> Arc<Routes> {
        self.routes
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn replace(&self, routes: Routes) {
        *self
            .routes
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(routes);
    }

    pub fn client(&self) -> &client::Client {
        &self.client
    }

    /// The OpenAPI v3 documents of the available remote group-versions, by
    /// `apis/<group>/<version>`.
    pub fn openapi_v3(&self) -> Vec<(String, crate::openapi::Document)> {
        self.routes()
            .remote
            .values()
            .filter(|remote| remote.available)
            .filter_map(|remote| {
                let (document, _) = remote.openapi_v3.clone()?;
                Some((
                    format!("apis/{}/{}", remote.group, remote.version),
                    document,
                ))
            })
            .collect()
    }

    /// The remote APIService serving `path` (`/apis/<group>/<version>[/…]`), if one does.
    pub fn route(&self, path: &str) -> Option<Arc<Remote>> {
        let (group, version) = group_version_of(path)?;
        let routes = self.routes();
        if routes.remote.is_empty() {
            return None;
        }
        routes
            .remote
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }
}

/// The group and version of a path under `/apis/<group>/<version>`.
pub fn group_version_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/apis/")?;
    let mut parts = rest.splitn(3, '/');
    let group = parts.next().filter(|g| !g.is_empty())?;
    let version = parts.next().filter(|v| !v.is_empty())?;
    Some((group, version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_under_a_group_version_are_routed_to_it() {
        assert_eq!(
            group_version_of("/apis/wardle.example.com/v1alpha1/namespaces/a/flunders"),
            Some(("wardle.example.com", "v1alpha1"))
        );
        assert_eq!(
            group_version_of("/apis/wardle.example.com/v1alpha1"),
            Some(("wardle.example.com", "v1alpha1"))
        );
        assert_eq!(group_version_of("/apis/wardle.example.com"), None);
        assert_eq!(group_version_of("/api/v1/pods"), None);
    }

    #[test]
    fn only_apiservices_with_a_service_are_remote() {
        let remote = json!({"metadata": {"name": "v1alpha1.wardle.example.com"},
            "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                "groupPriorityMinimum": 2000, "versionPriority": 200,
                "service": {"namespace": "wardle", "name": "api"}}});
        let parsed = Remote::of(&remote).expect("remote");
        assert_eq!(parsed.service.port, 443);
        assert_eq!(parsed.service.server_name(), "api.wardle.svc");
        assert_eq!(parsed.ca_bundle, None);
        let local =
            json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"}});
        assert_eq!(Remote::of(&local), None);
    }
}
