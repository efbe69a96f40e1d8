//! The catalog: every resource the apiserver serves, as one table of facts (group, version,
//! kind, names, scope, verbs, subresources, storage prefix and the k8s-openapi type that
//! canonicalizes its bodies). Discovery, routing and the registry all read this table.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::kinds::{
    apps, authorization, batch, certificates, config, coordination, discovery, events, namespace,
    networking, node, pod, policy, quota, rbac, replication_controller, scheduling, service,
    volumes, Strategy,
};
use crate::tables::Printer;

/// Turns a decoded body into its canonical form by a round trip through the typed struct:
/// unknown fields are dropped, types are checked. Errors are serde's message.
pub type Canonicalize = fn(Value) -> Result<Value, String>;

pub(crate) fn typed<T: DeserializeOwned + Serialize>(value: Value) -> Result<Value, String> {
    let object: T = serde_json::from_value(value).map_err(|error| error.to_string())?;
    serde_json::to_value(object).map_err(|error| error.to_string())
}

/// A subresource Rudder serves, as the last segment of its path names it; parsed once, at
/// the edge, and passed as this enum everywhere after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subresource {
    Status,
    Scale,
    Binding,
    /// `pods/eviction`: a delete that respects the pod's disruption budget.
    Eviction,
    Finalize,
    Token,
    /// A CertificateSigningRequest's Approved/Denied conditions.
    Approval,
    /// The subresources served by proxying to the pod's (or node's) kubelet:
    /// `pods/log`, `pods/exec`, `pods/attach`, `pods/portforward` and `nodes/proxy`.
    Log,
    Exec,
    Attach,
    PortForward,
    Proxy,
}

impl Subresource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Scale => "scale",
            Self::Binding => "binding",
            Self::Eviction => "eviction",
            Self::Finalize => "finalize",
            Self::Token => "token",
            Self::Approval => "approval",
            Self::Log => "log",
            Self::Exec => "exec",
            Self::Attach => "attach",
            Self::PortForward => "portforward",
            Self::Proxy => "proxy",
        }
    }

    /// Whether the subresource is served by the kubelet, through the apiserver's proxy
    /// (`http::kubelet_proxy`), rather than by the registry.
    pub fn proxies_to_kubelet(self) -> bool {
        matches!(
            self,
            Self::Log | Self::Exec | Self::Attach | Self::PortForward | Self::Proxy
        )
    }

    /// The subresource a path segment names, if Rudder serves one by that name.
    pub fn parse(segment: &str) -> Option<Self> {
        [
            Self::Status,
            Self::Scale,
            Self::Binding,
            Self::Eviction,
            Self::Finalize,
            Self::Token,
            Self::Approval,
            Self::Log,
            Self::Exec,
            Self::Attach,
            Self::PortForward,
            Self::Proxy,
        ]
        .into_iter()
        .find(|sub| sub.as_str() == segment)
    }
}

impl std::fmt::Display for Subresource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind with its group and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupVersionKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
}

/// A subresource served beside its parent.
#[derive(Clone, Copy, Debug)]
pub struct SubresourceInfo {
    pub name: Subresource,
    /// The kind the subresource reads and writes.
    pub kind: GroupVersionKind,
    pub verbs: &'static [&'static str],
}

/// One served resource.
#[derive(Clone, Copy)]
pub struct ResourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub subresources: &'static [SubresourceInfo],
    /// The storage key prefix, without the trailing slash (`/registry/minions` for nodes).
    pub storage_prefix: &'static str,
    /// How a body becomes canonical; `None` for kinds that are never stored.
    pub canonicalize: Option<Canonicalize>,
    /// The kind's rules in the generic store.
    pub strategy: &'static dyn Strategy,
    /// How the kind prints as a Table.
    pub printer: &'static dyn Printer,
}

impl std::fmt::Debug for ResourceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceInfo")
            .field("group", &self.group)
            .field("version", &self.version)
            .field("kind", &self.kind)
            .field("plural", &self.plural)
            .finish_non_exhaustive()
    }
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn subresource(&self, name: Subresource) -> Option<&'static SubresourceInfo> {
        self.subresources.iter().find(|sub| sub.name == name)
    }

    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Whether the kind is stored (a `selfsubjectaccessreviews` is answered, not kept).
    pub fn is_stored(&self) -> bool {
        self.canonicalize.is_some()
    }
}

pub(crate) const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
pub(crate) const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
pub(crate) const CREATE_ONLY: &[&str] = &["create"];
/// A connect subresource's verbs (`pods/exec`, `pods/attach`, `pods/portforward`): POST is
/// `create`, GET (a WebSocket upgrade) `get`.
pub(crate) const CONNECT_VERBS: &[&str] = &["create", "get"];
/// A proxy subresource's verbs (`nodes/proxy`): one per proxied method.
pub(crate) const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];
pub(crate) const STATUS_VERBS: &[&str] = &["get", "patch", "update"];
pub(crate) const ALL: &[&str] = &["all"];
pub(crate) const NONE: &[&str] = &[];

pub(crate) const fn status_of(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
) -> SubresourceInfo {
    SubresourceInfo {
        name: Subresource::Status,
        kind: GroupVersionKind {
            group,
            version,
            kind,
        },
        verbs: STATUS_VERBS,
    }
}

/// A core/v1 subresource whose requests and answers are `kind`.
pub(crate) const fn core_sub(
    name: Subresource,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> SubresourceInfo {
    SubresourceInfo {
        name,
        kind: GroupVersionKind {
            group: "",
            version: "v1",
            kind,
        },
        verbs,
    }
}

pub(crate) const SCALE: SubresourceInfo = SubresourceInfo {
    name: Subresource::Scale,
    kind: GroupVersionKind {
        group: "autoscaling",
        version: "v1",
        kind: "Scale",
    },
    verbs: STATUS_VERBS,
};

/// A stored resource served with every verb: its names, scope, subresources, storage prefix,
/// typed struct, strategy and printer.
macro_rules! resource {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $namespaced:expr,
     short: $short:expr, categories: $cat:expr, sub: $sub:expr, prefix: $prefix:expr, $ty:ty,
     strategy: $strategy:expr, printer: $printer:expr) => {
        $crate::catalog::ResourceInfo {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: $short,
            categories: $cat,
            verbs: $crate::catalog::ALL_VERBS,
            subresources: $sub,
            storage_prefix: $prefix,
            canonicalize: Some($crate::catalog::typed::<$ty>),
            strategy: $strategy,
            printer: $printer,
        }
    };
}
pub(crate) use resource;

/// Every resource we serve, in discovery order within each group. Each entry lives with its
/// kind's rules in `kinds/`; adding a built-in kind is that file and one line here.
pub static RESOURCES: &[ResourceInfo] = &[
    // core/v1
    namespace::NAMESPACES,
    pod::PODS,
    service::SERVICES,
    service::ENDPOINTS,
    config::CONFIG_MAPS,
    config::SECRETS,
    config::SERVICE_ACCOUNTS,
    node::NODES,
    events::CORE_EVENTS,
    quota::LIMIT_RANGES,
    quota::RESOURCE_QUOTAS,
    volumes::PERSISTENT_VOLUMES,
    volumes::PERSISTENT_VOLUME_CLAIMS,
    replication_controller::REPLICATION_CONTROLLERS,
    pod::POD_TEMPLATES,
    // apps/v1
    apps::DEPLOYMENTS,
    apps::REPLICA_SETS,
    apps::STATEFUL_SETS,
    apps::DAEMON_SETS,
    apps::CONTROLLER_REVISIONS,
    // batch/v1
    batch::JOBS,
    batch::CRON_JOBS,
    // coordination.k8s.io/v1
    coordination::LEASES,
    // discovery.k8s.io/v1
    discovery::ENDPOINT_SLICES,
    // events.k8s.io/v1
    events::EVENTS,
    // rbac.authorization.k8s.io/v1
    rbac::CLUSTER_ROLES,
    rbac::CLUSTER_ROLE_BINDINGS,
    rbac::ROLES,
    rbac::ROLE_BINDINGS,
    // networking.k8s.io/v1
    networking::INGRESS_CLASSES,
    networking::INGRESSES,
    networking::NETWORK_POLICIES,
    // policy/v1
    policy::POD_DISRUPTION_BUDGETS,
    // storage.k8s.io/v1
    volumes::STORAGE_CLASSES,
    // scheduling.k8s.io/v1
    scheduling::PRIORITY_CLASSES,
    // node.k8s.io/v1
    crate::kinds::runtime_class::RUNTIME_CLASSES,
    // certificates.k8s.io/v1
    certificates::CERTIFICATE_SIGNING_REQUESTS,
    // apiextensions.k8s.io/v1
    crate::crd::kind::CUSTOM_RESOURCE_DEFINITIONS,
    // apiregistration.k8s.io/v1
    crate::kinds::apiregistration::API_SERVICES,
    // admissionregistration.k8s.io/v1
    crate::kinds::admissionregistration::MUTATING_WEBHOOK_CONFIGURATIONS,
    crate::kinds::admissionregistration::VALIDATING_WEBHOOK_CONFIGURATIONS,
    crate::kinds::admissionregistration::VALIDATING_ADMISSION_POLICIES,
    crate::kinds::admissionregistration::VALIDATING_ADMISSION_POLICY_BINDINGS,
    // authorization.k8s.io/v1 and authentication.k8s.io/v1: answered, never stored
    authorization::SELF_SUBJECT_ACCESS_REVIEWS,
    authorization::SUBJECT_ACCESS_REVIEWS,
    authorization::LOCAL_SUBJECT_ACCESS_REVIEWS,
    authorization::SELF_SUBJECT_RULES_REVIEWS,
    authorization::SELF_SUBJECT_REVIEWS,
    authorization::TOKEN_REVIEWS,
    // Older versions served beside a group's preferred one (listed after it).
    authorization::SELF_SUBJECT_REVIEWS_V1BETA1,
    // metrics.k8s.io/v1beta1: answered from the kubelets, never stored
    crate::kinds::metrics::NODE_METRICS,
    crate::kinds::metrics::POD_METRICS,
];

/// The API groups in discovery order (core first).
pub fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for info in RESOURCES {
        if !groups.contains(&info.group) {
            groups.push(info.group);
        }
    }
    groups
}

/// The resource served at group/version/plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|info| info.group == group && info.version == version && info.plural == plural)
}

/// The resource for a group/kind (bodies name kinds, not plurals).
pub fn by_kind(group: &str, kind: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|info| info.group == group && info.kind == kind)
}

/// The resource that owns `info`'s storage prefix (the first one served with it): a kind
/// served by two APIs (Events) is stored, and encrypted, as one resource.
/// Returns its (group, plural).
pub fn storage_owner(info: &ResourceInfo) -> (&'static str, &'static str) {
    RESOURCES
        .iter()
        .find(|other| other.storage_prefix == info.storage_prefix && other.is_stored())
        .map_or((info.group, info.plural), |owner| {
            (owner.group, owner.plural)
        })
}

/// The stored resource whose objects live under `key`.
pub fn by_storage_key(key: &[u8]) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|info| {
        info.is_stored()
            && key
                .strip_prefix(info.storage_prefix.as_bytes())
                .is_some_and(|rest| rest.first() == Some(&b'/'))
    })
}

/// Whether any served resource lives in group/version.
pub fn serves_group_version(group: &str, version: &str) -> bool {
    RESOURCES
        .iter()
        .any(|info| info.group == group && info.version == version)
}

/// The preferred version of a group: the first it is served at.
pub fn version_of(group: &str) -> Option<&'static str> {
    RESOURCES
        .iter()
        .find(|info| info.group == group)
        .map(|info| info.version)
}

/// Every version a group is served at, the preferred first.
pub fn versions_of(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for info in RESOURCES.iter().filter(|info| info.group == group) {
        if !versions.contains(&info.version) {
            versions.push(info.version);
        }
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_unique_within_a_group_version() {
        for (index, info) in RESOURCES.iter().enumerate() {
            for other in &RESOURCES[index + 1..] {
                assert!(
                    !(info.group == other.group
                        && info.version == other.version
                        && info.plural == other.plural),
                    "{} served twice",
                    info.plural
                );
            }
        }
    }

    #[test]
    fn a_group_served_at_two_versions_prefers_the_first() {
        assert_eq!(versions_of("authentication.k8s.io"), vec!["v1", "v1beta1"]);
        assert_eq!(version_of("authentication.k8s.io"), Some("v1"));
        let beta = find("authentication.k8s.io", "v1beta1", "selfsubjectreviews")
            .expect("the beta is served");
        assert_eq!(beta.kind, "SelfSubjectReview");
        // Bodies that name only group and kind resolve to the preferred version.
        let by_kind = by_kind("authentication.k8s.io", "SelfSubjectReview").expect("served");
        assert_eq!(by_kind.version, "v1");
    }

    #[test]
    fn canonicalize_drops_unknown_fields_and_rejects_wrong_types() {
        let info = find("", "v1", "configmaps").expect("configmaps served");
        let canonicalize = info.canonicalize.expect("stored");
        let out = canonicalize(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"a": "b"}, "bogus": 1
        }))
        .expect("valid");
        assert!(out.get("bogus").is_none());
        assert_eq!(out["data"]["a"], "b");
        assert!(canonicalize(serde_json::json!({"data": {"a": 1}})).is_err());
    }

    #[test]
    fn storage_prefixes_are_distinct_unless_one_kind_is_served_by_two_apis() {
        let stored: Vec<_> = RESOURCES.iter().filter(|info| info.is_stored()).collect();
        for (index, info) in stored.iter().enumerate() {
            for other in &stored[index + 1..] {
                // core and events.k8s.io Events share theirs, converted by the strategy.
                let shared = info.kind == other.kind && info.group != other.group;
                assert!(
                    !other
                        .storage_prefix
                        .starts_with(&format!("{}/", info.storage_prefix))
                        && (shared || info.storage_prefix != other.storage_prefix),
                    "{} and {} overlap",
                    info.storage_prefix,
                    other.storage_prefix
                );
            }
        }
    }
}
