//! The catalog: every resource the apiserver serves, as one table of facts (group, version,
//! kind, names, scope, verbs, subresources, storage prefix and the k8s-openapi type that
//! canonicalizes its bodies). Discovery, routing and the registry all read this table.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use k8s_openapi::api as k8s;

/// Turns a decoded body into its canonical form by a round trip through the typed struct:
/// unknown fields are dropped, types are checked. Errors are serde's message.
pub type Canonicalize = fn(Value) -> Result<Value, String>;

fn typed<T: DeserializeOwned + Serialize>(value: Value) -> Result<Value, String> {
    let object: T = serde_json::from_value(value).map_err(|error| error.to_string())?;
    serde_json::to_value(object).map_err(|error| error.to_string())
}

/// A subresource served beside its parent.
#[derive(Clone, Copy, Debug)]
pub struct Subresource {
    pub name: &'static str,
    /// The kind the subresource reads and writes: (group, version, kind).
    pub kind: (&'static str, &'static str, &'static str),
    pub verbs: &'static [&'static str],
}

/// One served resource.
#[derive(Clone, Copy, Debug)]
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
    pub subresources: &'static [Subresource],
    /// The storage key prefix, without the trailing slash (`/registry/minions` for nodes).
    pub storage_prefix: &'static str,
    /// How a body becomes canonical; `None` for kinds that are never stored.
    pub canonicalize: Option<Canonicalize>,
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

    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
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

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
const CREATE_ONLY: &[&str] = &["create"];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];
const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

const fn status_of(group: &'static str, version: &'static str, kind: &'static str) -> Subresource {
    Subresource {
        name: "status",
        kind: (group, version, kind),
        verbs: STATUS_VERBS,
    }
}

const SCALE: Subresource = Subresource {
    name: "scale",
    kind: ("autoscaling", "v1", "Scale"),
    verbs: STATUS_VERBS,
};

macro_rules! resource {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $namespaced:expr,
     short: $short:expr, categories: $cat:expr, sub: $sub:expr, prefix: $prefix:expr, $ty:ty) => {
        ResourceInfo {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: $short,
            categories: $cat,
            verbs: ALL_VERBS,
            subresources: $sub,
            storage_prefix: $prefix,
            canonicalize: Some(typed::<$ty>),
        }
    };
}

/// Every resource we serve, in discovery order within each group.
pub static RESOURCES: &[ResourceInfo] = &[
    // core/v1
    // Namespaces have no deletecollection, as upstream.
    ResourceInfo {
        verbs: NAMESPACE_VERBS,
        ..resource!("", "v1", "Namespace", "namespaces", "namespace", false, short: &["ns"], categories: NONE,
        sub: &[status_of("", "v1", "Namespace"), Subresource { name: "finalize", kind: ("", "v1", "Namespace"), verbs: &["update"] }],
        prefix: "/registry/namespaces", k8s::core::v1::Namespace)
    },
    resource!("", "v1", "Pod", "pods", "pod", true, short: &["po"], categories: ALL,
        sub: &[status_of("", "v1", "Pod"), Subresource { name: "binding", kind: ("", "v1", "Binding"), verbs: CREATE_ONLY }],
        prefix: "/registry/pods", k8s::core::v1::Pod),
    resource!("", "v1", "Service", "services", "service", true, short: &["svc"], categories: ALL,
        sub: &[status_of("", "v1", "Service")], prefix: "/registry/services/specs", k8s::core::v1::Service),
    resource!("", "v1", "Endpoints", "endpoints", "endpoints", true, short: &["ep"], categories: NONE,
        sub: &[], prefix: "/registry/services/endpoints", k8s::core::v1::Endpoints),
    resource!("", "v1", "ConfigMap", "configmaps", "configmap", true, short: &["cm"], categories: NONE,
        sub: &[], prefix: "/registry/configmaps", k8s::core::v1::ConfigMap),
    resource!("", "v1", "Secret", "secrets", "secret", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/secrets", k8s::core::v1::Secret),
    resource!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true, short: &["sa"], categories: NONE,
        sub: &[], prefix: "/registry/serviceaccounts", k8s::core::v1::ServiceAccount),
    resource!("", "v1", "Node", "nodes", "node", false, short: &["no"], categories: NONE,
        sub: &[status_of("", "v1", "Node")], prefix: "/registry/minions", k8s::core::v1::Node),
    resource!("", "v1", "Event", "events", "event", true, short: &["ev"], categories: NONE,
        sub: &[], prefix: "/registry/events", k8s::core::v1::Event),
    resource!("", "v1", "LimitRange", "limitranges", "limitrange", true, short: &["limits"], categories: NONE,
        sub: &[], prefix: "/registry/limitranges", k8s::core::v1::LimitRange),
    resource!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", true, short: &["quota"], categories: NONE,
        sub: &[status_of("", "v1", "ResourceQuota")], prefix: "/registry/resourcequotas", k8s::core::v1::ResourceQuota),
    resource!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false, short: &["pv"], categories: NONE,
        sub: &[status_of("", "v1", "PersistentVolume")], prefix: "/registry/persistentvolumes", k8s::core::v1::PersistentVolume),
    resource!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true, short: &["pvc"], categories: NONE,
        sub: &[status_of("", "v1", "PersistentVolumeClaim")], prefix: "/registry/persistentvolumeclaims", k8s::core::v1::PersistentVolumeClaim),
    resource!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", true, short: &["rc"], categories: ALL,
        sub: &[SCALE, status_of("", "v1", "ReplicationController")], prefix: "/registry/controllers", k8s::core::v1::ReplicationController),
    resource!("", "v1", "PodTemplate", "podtemplates", "podtemplate", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/podtemplates", k8s::core::v1::PodTemplate),
    // apps/v1
    resource!("apps", "v1", "Deployment", "deployments", "deployment", true, short: &["deploy"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "Deployment")], prefix: "/registry/deployments", k8s::apps::v1::Deployment),
    resource!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, short: &["rs"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "ReplicaSet")], prefix: "/registry/replicasets", k8s::apps::v1::ReplicaSet),
    resource!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true, short: &["sts"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "StatefulSet")], prefix: "/registry/statefulsets", k8s::apps::v1::StatefulSet),
    resource!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true, short: &["ds"], categories: ALL,
        sub: &[status_of("apps", "v1", "DaemonSet")], prefix: "/registry/daemonsets", k8s::apps::v1::DaemonSet),
    resource!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/controllerrevisions", k8s::apps::v1::ControllerRevision),
    // batch/v1
    resource!("batch", "v1", "Job", "jobs", "job", true, short: NONE, categories: ALL,
        sub: &[status_of("batch", "v1", "Job")], prefix: "/registry/jobs", k8s::batch::v1::Job),
    resource!("batch", "v1", "CronJob", "cronjobs", "cronjob", true, short: &["cj"], categories: ALL,
        sub: &[status_of("batch", "v1", "CronJob")], prefix: "/registry/cronjobs", k8s::batch::v1::CronJob),
    // coordination.k8s.io/v1
    resource!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/leases", k8s::coordination::v1::Lease),
    // discovery.k8s.io/v1
    resource!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/endpointslices", k8s::discovery::v1::EndpointSlice),
    // events.k8s.io/v1
    resource!("events.k8s.io", "v1", "Event", "events", "event", true, short: &["ev"], categories: NONE,
        sub: &[], prefix: "/registry/events.k8s.io/events", k8s::events::v1::Event),
    // rbac.authorization.k8s.io/v1
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/clusterroles", k8s::rbac::v1::ClusterRole),
    resource!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/clusterrolebindings", k8s::rbac::v1::ClusterRoleBinding),
    resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/roles", k8s::rbac::v1::Role),
    resource!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/rolebindings", k8s::rbac::v1::RoleBinding),
    // networking.k8s.io/v1
    resource!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/ingressclasses", k8s::networking::v1::IngressClass),
    resource!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", true, short: &["ing"], categories: NONE,
        sub: &[status_of("networking.k8s.io", "v1", "Ingress")], prefix: "/registry/ingress", k8s::networking::v1::Ingress),
    resource!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", true, short: &["netpol"], categories: NONE,
        sub: &[], prefix: "/registry/networkpolicies", k8s::networking::v1::NetworkPolicy),
    // policy/v1
    resource!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", true, short: &["pdb"], categories: NONE,
        sub: &[status_of("policy", "v1", "PodDisruptionBudget")], prefix: "/registry/poddisruptionbudgets", k8s::policy::v1::PodDisruptionBudget),
    // storage.k8s.io/v1
    resource!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false, short: &["sc"], categories: NONE,
        sub: &[], prefix: "/registry/storageclasses", k8s::storage::v1::StorageClass),
    // scheduling.k8s.io/v1
    resource!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", false, short: &["pc"], categories: NONE,
        sub: &[], prefix: "/registry/priorityclasses", k8s::scheduling::v1::PriorityClass),
    // authorization.k8s.io/v1: answered by the authorizer, never stored
    ResourceInfo {
        group: "authorization.k8s.io",
        version: "v1",
        kind: "SelfSubjectAccessReview",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
        namespaced: false,
        short_names: NONE,
        categories: NONE,
        verbs: CREATE_ONLY,
        subresources: &[],
        storage_prefix: "",
        canonicalize: None,
    },
];

/// The API groups in discovery order (core first), each with its one served version.
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

/// Whether any served resource lives in group/version.
pub fn serves_group_version(group: &str, version: &str) -> bool {
    RESOURCES
        .iter()
        .any(|info| info.group == group && info.version == version)
}

/// The preferred (and only) version of a group.
pub fn version_of(group: &str) -> Option<&'static str> {
    RESOURCES
        .iter()
        .find(|info| info.group == group)
        .map(|info| info.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_unique_within_a_group_version() {
        for (index, info) in RESOURCES.iter().enumerate() {
            for other in &RESOURCES[index + 1..] {
                assert!(
                    !(info.group == other.group && info.plural == other.plural),
                    "{} served twice",
                    info.plural
                );
            }
        }
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
    fn storage_prefixes_are_distinct() {
        let stored: Vec<_> = RESOURCES.iter().filter(|info| info.is_stored()).collect();
        for (index, info) in stored.iter().enumerate() {
            for other in &stored[index + 1..] {
                assert!(
                    !other
                        .storage_prefix
                        .starts_with(&format!("{}/", info.storage_prefix))
                        && info.storage_prefix != other.storage_prefix,
                    "{} and {} overlap",
                    info.storage_prefix,
                    other.storage_prefix
                );
            }
        }
    }
}
