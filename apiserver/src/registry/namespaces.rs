//! Namespaces: the ones a cluster starts with (and the `kubernetes` Service), the lookup
//! NamespaceLifecycle admission reads, and finalization of a terminating namespace — its
//! content deleted, then the namespace itself. Finalization runs in the apiserver until the
//! controller-manager takes it over; every apiserver resumes it for namespaces left
//! terminating, so it is safe to run twice.

use std::time::Duration;

use async_trait::async_trait;
use rudder_admission::{Denied, NamespaceLookup, NamespaceState};
use serde_json::{json, Value};

use super::object;
use super::store::{DeleteOptions, Input};
use super::{Caller, Registry, Write};
use crate::catalog::{self, RESOURCES};
use crate::error::Result;
use crate::request::FieldValidation;

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

fn system_write() -> Write {
    Write {
        caller: Caller {
            user: "system:apiserver".into(),
            groups: vec!["system:masters".into()],
        },
        dry_run: false,
        field_validation: FieldValidation::Ignore,
        field_manager: Some("rudder-apiserver".into()),
        managed_fields_set: false,
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
                Err(error) if error.code == 409 => {}
                Err(error) => return Err(error),
            }
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
            Err(error) if error.code == 409 || error.code == 422 => {
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
            if error.code != 409 {
                return Err(error);
            }
        }
    }
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
                if error.code != 409 {
                    return Err(error);
                }
            }
        }
    }
    let listed = registry
        .list(namespaces, None, &crate::request::ListOptions::everything())
        .await?;
    for namespace in listed.items {
        if object::is_deleting(&namespace) {
            registry.spawn_namespace_finalizer(object::name(&namespace).to_string());
        }
    }
    Ok(())
}

fn missing() -> crate::error::ApiError {
    crate::error::ApiError::internal("the catalog lacks a core resource")
}

impl Registry {
    /// Deletes a terminating namespace's content, then the namespace, in the background.
    pub(super) fn spawn_namespace_finalizer(&self, name: String) {
        let registry = self.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                match registry.finalize_namespace(&name).await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(namespace = %name, %error, "namespace finalization failed; retrying")
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
    }

    /// One pass: deletes what is left; once nothing is, removes the `kubernetes` finalizer
    /// and the namespace. True when done (or the namespace is gone).
    async fn finalize_namespace(&self, name: &str) -> Result<bool> {
        let namespaces = catalog::find("", "v1", "namespaces").ok_or_else(missing)?;
        let Some((namespace, _)) = self.read(namespaces, None, name).await? else {
            return Ok(true);
        };
        if !object::is_deleting(&namespace) {
            return Ok(true);
        }
        let write = system_write();
        // Without a kubelet to confirm, pods go at once (grace 0) rather than wait forever.
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let mut remaining = 0;
        for info in RESOURCES
            .iter()
            .filter(|info| info.namespaced && info.is_stored())
        {
            if self.count_in(info, name).await? == 0 {
                continue;
            }
            self.delete_collection(info, Some(name), "", "", &options, &write)
                .await?;
            remaining += self.count_in(info, name).await?;
        }
        if remaining > 0 {
            return Ok(false);
        }
        let finalized = self
            .update_with(
                namespaces,
                None,
                name,
                Some("finalize"),
                &write,
                |current| {
                    let mut next = current.clone();
                    if let Some(finalizers) = next["spec"]["finalizers"].as_array_mut() {
                        finalizers.retain(|finalizer| finalizer != "kubernetes");
                    }
                    Ok(next)
                },
            )
            .await?;
        if object::finalizers(&finalized.object).is_empty() {
            match self
                .delete(namespaces, None, name, &DeleteOptions::default(), &write)
                .await
            {
                Ok(_) => {}
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(true)
    }
}

/// NamespaceLifecycle's view of the namespaces in the store (set once the registry exists).
#[derive(Clone, Default)]
pub struct StoredNamespaces {
    pub registry: std::sync::Arc<std::sync::OnceLock<Registry>>,
}

#[async_trait]
impl NamespaceLookup for StoredNamespaces {
    async fn namespace_state(&self, name: &str) -> Result<NamespaceState, Denied> {
        let Some(registry) = self.registry.get() else {
            return Ok(NamespaceState::Active);
        };
        let namespaces = catalog::find("", "v1", "namespaces")
            .ok_or_else(|| Denied::forbidden("namespaces are not served"))?;
        match registry.read(namespaces, None, name).await {
            Ok(None) => Ok(NamespaceState::Missing),
            Ok(Some((namespace, _))) if is_terminating(&namespace) => {
                Ok(NamespaceState::Terminating)
            }
            Ok(Some(_)) => Ok(NamespaceState::Active),
            Err(error) => Err(Denied {
                code: 500,
                reason: "InternalError",
                message: format!("reading namespace {name}: {}", error.message),
            }),
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
        let (Some(registry), Some(version)) = (self.registry.get(), catalog::version_of(group))
        else {
            return Ok(None);
        };
        let Some(info) = catalog::find(group, version, plural) else {
            return Ok(None);
        };
        registry
            .read(info, None, name)
            .await
            .map(|found| found.map(|(object, _)| object))
            .map_err(read_failed)
    }

    async fn list_cluster_objects(&self, group: &str, plural: &str) -> Result<Vec<Value>, Denied> {
        let (Some(registry), Some(version)) = (self.registry.get(), catalog::version_of(group))
        else {
            return Ok(Vec::new());
        };
        let Some(info) = catalog::find(group, version, plural) else {
            return Ok(Vec::new());
        };
        registry
            .list(info, None, &crate::request::ListOptions::everything())
            .await
            .map(|listed| listed.items)
            .map_err(read_failed)
    }
}

fn read_failed(error: crate::error::ApiError) -> Denied {
    Denied {
        code: 500,
        reason: "InternalError",
        message: format!("admission could not read the cluster: {}", error.message),
    }
}

fn is_terminating(namespace: &Value) -> bool {
    object::is_deleting(namespace) || namespace["status"]["phase"] == "Terminating"
}
