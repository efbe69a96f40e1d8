//! Namespaces: the ones a cluster starts with (and the `kubernetes` Service) and the lookup
//! NamespaceLifecycle admission reads. Emptying a terminating namespace is the namespace
//! controller's (`rudder-controllers`), as in upstream; the apiserver only marks it.

use async_trait::async_trait;
use rudder_admission::{Denied, NamespaceLookup, NamespaceState};
use serde_json::{json, Value};

use super::object;
use super::store::Input;
use super::{Caller, Registry, Write};
use crate::catalog;
use crate::error::Result;
use crate::request::FieldValidation;

use rudder_facts::namespaces::SYSTEM_NAMESPACES;

/// The cluster DNS Service, `kube-system/kube-dns` as in every distribution.
pub const CLUSTER_DNS_SERVICE: &str = "kube-dns";

/// Writes the status of the cluster-scoped `info` object `name` as the apiserver's own
/// controllers do: `status_of` turns the current object's status into the one to store (or
/// `None` to leave it), retried on conflicts; a gone object is no error, another is logged.
pub async fn write_own_status(
    registry: &super::Registry,
    info: &'static crate::catalog::ResourceInfo,
    name: &str,
    status_of: impl Fn(&serde_json::Value) -> Option<serde_json::Value> + Send + Sync,
) {
    let result = registry
        .update_with(
            info,
            None,
            name,
            Some(crate::catalog::Subresource::Status),
            &system_write(),
            |current| {
                let mut next = current.clone();
                if let Some(status) = status_of(current) {
                    next["status"] = status;
                }
                super::object::remove_meta(&mut next, "resourceVersion");
                Ok(next)
            },
        )
        .await;
    if let Err(error) = result {
        if !error.is_not_found() && !error.is_conflict() {
            tracing::warn!(kind = info.kind, %name, error = %error.message, "writing a status");
        }
    }
}

/// The apiserver's own writes (bootstrap objects, CRD status): a system:masters caller.
pub fn system_write() -> Write {
    Write {
        caller: Caller {
            user: "system:apiserver".into(),
            groups: vec!["system:masters".into()],
            ..Caller::default()
        },
        dry_run: false,
        field_validation: FieldValidation::Ignore,
        field_manager: Some("rudder-apiserver".into()),
        managed_fields_set: false,
        admitted: false,
    }
}

/// Creates what a new cluster needs, leaving what exists alone, and resumes the finalization
/// of namespaces left terminating.
pub async fn bootstrap(registry: &Registry, apiserver_port: u16, advertise: &str) -> Result<()> {
    let namespaces = catalog::find("", "v1", "namespaces").ok_or_else(missing)?;
    let write = system_write();
    for name in SYSTEM_NAMESPACES {
        if registry.read(namespaces, None, name).await?.is_none() {
            let input = Input {
                object: json!({"metadata": {"name": name}}),
                duplicate_fields: Vec::new(),
            };
            match registry.create(namespaces, None, input, &write).await {
                Ok(_) => tracing::info!(namespace = name, "created namespace"),
                Err(error) if error.is_already_exists() => {}
                Err(error) => return Err(error),
            }
        }
    }
    let roles =
        catalog::find("rbac.authorization.k8s.io", "v1", "clusterroles").ok_or_else(missing)?;
    let bindings = catalog::find("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
        .ok_or_else(missing)?;
    let namespaced_roles =
        catalog::find("rbac.authorization.k8s.io", "v1", "roles").ok_or_else(missing)?;
    let namespaced_bindings =
        catalog::find("rbac.authorization.k8s.io", "v1", "rolebindings").ok_or_else(missing)?;
    use crate::authz::rbac::defaults;
    let defaults = (defaults::cluster_roles().into_iter().map(|o| (roles, o)))
        .chain(
            defaults::cluster_role_bindings()
                .into_iter()
                .map(|o| (bindings, o)),
        )
        .chain(defaults::roles().into_iter().map(|o| (namespaced_roles, o)))
        .chain(
            defaults::role_bindings()
                .into_iter()
                .map(|o| (namespaced_bindings, o)),
        );
    for (info, object) in defaults {
        let name = object::name(&object).to_string();
        let namespace = info
            .namespaced
            .then(|| object::meta_str(&object, "namespace").to_string());
        let namespace = namespace.as_deref();
        let Some(stored) = registry.read(info, namespace, &name).await? else {
            let input = Input {
                object,
                duplicate_fields: Vec::new(),
            };
            match registry.create(info, namespace, input, &write).await {
                Ok(_) => tracing::debug!(kind = info.kind, name, "created a default RBAC object"),
                Err(error) if error.is_already_exists() => {}
                Err(error) => return Err(error),
            }
            continue;
        };
        // Reconciled as upstream does at start: what the default grants is added back unless
        // the object opts out (`rbac.authorization.kubernetes.io/autoupdate: "false"`); what
        // was added to it stays, but for what an earlier Rudder's default granted and this
        // one retires.
        let retired = defaults::retired(info.plural, &name);
        if reconciled(&stored.object, &object, &retired).is_some() {
            registry
                .update_with(info, namespace, &name, None, &write, |current| {
                    Ok(reconciled(current, &object, &retired).unwrap_or_else(|| current.clone()))
                })
                .await?;
            tracing::info!(kind = info.kind, name, "reconciled a default RBAC object");
        }
    }
    let services = catalog::find("", "v1", "services").ok_or_else(missing)?;
    if registry
        .read(services, Some("default"), "kubernetes")
        .await?
        .is_none()
    {
        let cluster_ip = registry.allocators.first_service_ip().to_string();
        let input = Input {
            object: json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": apiserver_port}]}
            }),
            duplicate_fields: Vec::new(),
        };
        match registry
            .create(services, Some("default"), input, &write)
            .await
        {
            Ok(_) => tracing::info!(%cluster_ip, "created the kubernetes service"),
            Err(error) if error.is_already_exists() || error.is_invalid() => {
                tracing::debug!(%error, "kubernetes service created elsewhere")
            }
            Err(error) => return Err(error),
        }
    }
    let endpoints = catalog::find("", "v1", "endpoints").ok_or_else(missing)?;
    if registry
        .read(endpoints, Some("default"), "kubernetes")
        .await?
        .is_none()
    {
        let input = Input {
            object: json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": advertise}],
                    "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}]}]
            }),
            duplicate_fields: Vec::new(),
        };
        if let Err(error) = registry
            .create(endpoints, Some("default"), input, &write)
            .await
        {
            if !error.is_already_exists() {
                return Err(error);
            }
        }
    }
    let slices = catalog::find("discovery.k8s.io", "v1", "endpointslices").ok_or_else(missing)?;
    if registry
        .read(slices, Some("default"), "kubernetes")
        .await?
        .is_none()
    {
        // What pods reach through the `kubernetes` Service's cluster IP (the node proxies
        // route from EndpointSlices), as upstream's endpoint reconciler keeps it.
        let input = Input {
            object: json!({
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "kubernetes",
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [advertise], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": apiserver_port, "protocol": "TCP"}]
            }),
            duplicate_fields: Vec::new(),
        };
        if let Err(error) = registry
            .create(slices, Some("default"), input, &write)
            .await
        {
            if !error.is_already_exists() {
                return Err(error);
            }
        }
    }
    if registry
        .read(services, Some("kube-system"), CLUSTER_DNS_SERVICE)
        .await?
        .is_none()
    {
        // The cluster DNS Service; its endpoints are the node agents' DNS servers (the
        // controller-manager's cluster-dns-endpoints controller keeps them).
        let cluster_ip = registry.allocators.cluster_dns_ip().to_string();
        let input = Input {
            object: json!({
                "metadata": {"name": CLUSTER_DNS_SERVICE, "namespace": "kube-system",
                    "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
                        "kubernetes.io/cluster-service": "true"}},
                "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}
            }),
            duplicate_fields: Vec::new(),
        };
        match registry
            .create(services, Some("kube-system"), input, &write)
            .await
        {
            Ok(_) => tracing::info!(%cluster_ip, "created the kube-dns service"),
            Err(error) if error.is_already_exists() || error.is_invalid() => {
                tracing::warn!(%error, "the kube-dns service could not be created")
            }
            Err(error) => return Err(error),
        }
    }
    default_storage_class(registry, &write).await?;
    let priority_classes =
        catalog::find("scheduling.k8s.io", "v1", "priorityclasses").ok_or_else(missing)?;
    for (name, value) in rudder_admission::SYSTEM_PRIORITY_CLASSES {
        if registry.read(priority_classes, None, name).await?.is_none() {
            let input = Input {
                object: json!({"metadata": {"name": name}, "value": value,
                    "description": "Used for system critical pods that must not be moved from their current node."}),
                duplicate_fields: Vec::new(),
            };
            if let Err(error) = registry.create(priority_classes, None, input, &write).await {
                if !error.is_already_exists() {
                    return Err(error);
                }
            }
        }
    }
    Ok(())
}

/// The `local-path` StorageClass k3s ships, the cluster's default, served by the
/// controller-manager's local-path provisioner: created when absent, never changed after
/// (a user's edit or a removed default annotation stays).
async fn default_storage_class(registry: &Registry, write: &Write) -> Result<()> {
    use rudder_facts::volumes::{LOCAL_PATH_CLASS, LOCAL_PATH_PROVISIONER};
    let classes = catalog::find("storage.k8s.io", "v1", "storageclasses").ok_or_else(missing)?;
    if registry
        .read(classes, None, LOCAL_PATH_CLASS)
        .await?
        .is_some()
    {
        return Ok(());
    }
    let input = Input {
        object: json!({
            "metadata": {"name": LOCAL_PATH_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": LOCAL_PATH_PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
        }),
        duplicate_fields: Vec::new(),
    };
    match registry.create(classes, None, input, write).await {
        Ok(_) => tracing::info!("created the local-path StorageClass"),
        Err(error) if error.is_already_exists() => {}
        Err(error) => return Err(error),
    }
    Ok(())
}

/// `current` with what `default` grants added (rules of a role, subjects of a binding) and
/// what is `retired` (either) removed, or `None` when nothing changes or the object opts out
/// of updates.
fn reconciled(current: &Value, default: &Value, retired: &[Value]) -> Option<Value> {
    let opted_out = current["metadata"]["annotations"]
        ["rbac.authorization.kubernetes.io/autoupdate"]
        == "false";
    if opted_out {
        return None;
    }
    let mut updated = current.clone();
    let mut changed = false;
    for list in ["rules", "subjects"] {
        if let Some(items) = updated[list].as_array_mut() {
            let before = items.len();
            items.retain(|item| !retired.contains(item));
            changed |= items.len() != before;
        }
        for wanted in default[list].as_array().into_iter().flatten() {
            let held = updated[list]
                .as_array()
                .is_some_and(|items| items.contains(wanted));
            if !held {
                if !updated[list].is_array() {
                    updated[list] = json!([]);
                }
                if let Some(items) = updated[list].as_array_mut() {
                    items.push(wanted.clone());
                    changed = true;
                }
            }
        }
    }
    if default["aggregationRule"].is_object() && !current["aggregationRule"].is_object() {
        updated["aggregationRule"] = default["aggregationRule"].clone();
        changed = true;
    }
    changed.then_some(updated)
}

fn missing() -> crate::error::ApiError {
    crate::error::ApiError::internal("the catalog lacks a core resource")
}

/// What admission plugins read of the store (namespaces, PriorityClasses): through a registry
/// of its own that has no admission chain, so the chain that holds this does not hold itself
/// (a cycle that would keep the store open for ever). Reads come from the watch cache where it
/// holds the object, the store otherwise, as upstream's plugins read their listers.
#[derive(Clone)]
pub struct StoredNamespaces {
    registry: Registry,
}

impl StoredNamespaces {
    /// Reads through `registry`, which must not be the one whose admission chain holds this.
    pub fn new(registry: Registry) -> Self {
        Self { registry }
    }
}

#[async_trait]
impl NamespaceLookup for StoredNamespaces {
    async fn namespace_state(&self, name: &str) -> Result<NamespaceState, Denied> {
        let registry = &self.registry;
        let namespaces = catalog::find("", "v1", "namespaces")
            .ok_or_else(|| Denied::forbidden("namespaces are not served"))?;
        match registry.read_recent(namespaces, None, name).await {
            Ok(None) => Ok(NamespaceState::Missing),
            Ok(Some(namespace)) if is_terminating(&namespace) => Ok(NamespaceState::Terminating),
            Ok(Some(_)) => Ok(NamespaceState::Active),
            Err(error) => Err(error.into_denied(&format!("reading namespace {name}"))),
        }
    }
}

#[async_trait]
impl rudder_admission::ObjectReader for StoredNamespaces {
    async fn get_cluster_object(
        &self,
        group: &str,
        plural: &str,
        name: &str,
    ) -> Result<Option<Value>, Denied> {
        let registry = &self.registry;
        let Some(version) = catalog::version_of(group) else {
            return Ok(None);
        };
        let Some(info) = catalog::find(group, version, plural) else {
            return Ok(None);
        };
        registry
            .read_recent(info, None, name)
            .await
            .map_err(read_failed)
    }

    async fn list_cluster_objects(&self, group: &str, plural: &str) -> Result<Vec<Value>, Denied> {
        self.list_served(group, plural, None).await
    }

    async fn list_namespaced_objects(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, Denied> {
        self.list_served(group, plural, Some(namespace)).await
    }
}

impl StoredNamespaces {
    /// Every object of group/plural (in `namespace`), as upstream's admission plugins read
    /// their listers: whatever the watch cache holds (`resourceVersion=0`), not a consistent
    /// read that waits for the store on every pod.
    async fn list_served(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, Denied> {
        let Some(version) = catalog::version_of(group) else {
            return Ok(Vec::new());
        };
        let Some(info) = catalog::find(group, version, plural) else {
            return Ok(Vec::new());
        };
        self.registry
            .list_cached(info, namespace, "", "")
            .await
            .map_err(read_failed)
    }
}

fn read_failed(error: crate::error::ApiError) -> Denied {
    error.into_denied("admission could not read the cluster")
}

fn is_terminating(namespace: &Value) -> bool {
    object::is_deleting(namespace) || namespace["status"]["phase"] == "Terminating"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_added_back_unless_the_object_opts_out() {
        let default =
            json!({"rules": [{"verbs": ["get"], "resources": ["pods"], "apiGroups": [""]}]});
        let trimmed = json!({"metadata": {"name": "view"}, "rules": []});
        let restored = reconciled(&trimmed, &default, &[]).expect("a rule to add");
        assert_eq!(restored["rules"], default["rules"]);
        // What a user added stays; nothing missing, nothing to write.
        let extended = json!({"metadata": {"name": "view"}, "rules": [
            {"verbs": ["get"], "resources": ["pods"], "apiGroups": [""]},
            {"verbs": ["list"], "resources": ["widgets"], "apiGroups": ["x.io"]}]});
        assert!(reconciled(&extended, &default, &[]).is_none());
        let opted_out = json!({"metadata": {"name": "view", "annotations": {
            "rbac.authorization.kubernetes.io/autoupdate": "false"}}, "rules": []});
        assert!(reconciled(&opted_out, &default, &[]).is_none());
        // What an earlier default granted and this one retires goes; the rest stays.
        let old = json!({"verbs": ["create"], "resources": ["pods"], "apiGroups": [""]});
        let mut upgraded = extended.clone();
        upgraded["rules"].as_array_mut().unwrap().push(old.clone());
        let narrowed =
            reconciled(&upgraded, &default, std::slice::from_ref(&old)).expect("a rule to retire");
        assert_eq!(narrowed["rules"], extended["rules"]);
        let mut kept = opted_out.clone();
        kept["rules"] = json!([old.clone()]);
        assert!(reconciled(&kept, &default, &[old]).is_none());
    }
}
