//! rudder-admission: the admission chain and its built-in plugins.
//!
//! Admission runs in two phases around the kind's own checks, as upstream's: after
//! authentication, authorization, decoding and defaulting, every mutating plugin in order
//! ([`Chain::mutate`]); then the store prepares, defaults and validates the result, so what a
//! mutating plugin set is validated; then every validating plugin ([`Chain::validate`]), and
//! only then the write. The first refusal stops the request. The chain is two small traits and
//! two loops; the binary
//! registers plugins explicitly. This crate knows requests only as JSON objects and a few
//! attributes; it depends on no storage and no HTTP type. Plugins that need to read the cluster
//! (NamespaceLifecycle reads namespaces, Priority reads PriorityClasses) take a small lookup
//! trait the apiserver implements.

pub mod audit_annotations;
mod default_class;
mod in_use_protection;
mod limit_ranger;
mod namespace_lifecycle;
mod pod_plugins;
mod pod_security;
mod runtime_class;

pub use default_class::{default_of, DefaultClass};
pub use in_use_protection::StorageObjectInUseProtection;
pub use limit_ranger::LimitRanger;
pub use namespace_lifecycle::{NamespaceLifecycle, NamespaceLookup, NamespaceState};
pub use pod_plugins::{
    DefaultTolerationSeconds, ObjectReader, Priority, ServiceAccount, SYSTEM_PRIORITY_CLASSES,
};
pub use pod_security::{PodSecurity, PodSecurityConfig};
pub use runtime_class::RuntimeClass;

use async_trait::async_trait;
use serde_json::Value;
use tracing::Instrument;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What is being written, by whom.
#[derive(Clone, Debug)]
pub struct Attributes {
    pub operation: Operation,
    /// The resource's group and version.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// `kind`'s group and version: the resource's, except for a subresource with a kind of
    /// its own (`pods/eviction` is a `policy/v1 Eviction`, `serviceaccounts/token` an
    /// `authentication.k8s.io/v1 TokenRequest`).
    pub kind_group: String,
    pub kind_version: String,
    /// The plural resource name (`pods`).
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    pub dry_run: bool,
    /// The user's uid and extra attributes, as webhooks and policies are shown them.
    pub uid: String,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
    /// Warnings plugins return to the client (a webhook's, a policy's `Warn`).
    pub warnings: Warnings,
}

/// The warnings admission gathers for one request; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    pub fn push(&self, warning: impl Into<String>) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(warning.into());
    }

    /// The warnings so far, leaving none.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

/// Why admission refused a request. The apiserver maps it to a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// The HTTP code upstream uses for this refusal (403 Forbidden, 404 NotFound, …).
    pub code: u16,
    /// The `Status.reason` (`Forbidden`, `NotFound`, …).
    pub reason: &'static str,
    pub message: String,
}

impl Denied {
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            code: 403,
            reason: "Forbidden",
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denied {}

/// A plugin that may change the object before it is validated and stored.
#[async_trait]
pub trait Mutating: Send + Sync {
    fn name(&self) -> &'static str;
    /// Changes `object` (None for deletes) or refuses the request.
    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied>;
}

/// A plugin that may only accept or refuse.
#[async_trait]
pub trait Validating: Send + Sync {
    fn name(&self) -> &'static str;
    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied>;
}

/// The chain: mutating plugins in order, then (after the kind's validation) validating
/// plugins; the first refusal wins.
#[derive(Default)]
pub struct Chain {
    mutating: Vec<Box<dyn Mutating>>,
    validating: Vec<Box<dyn Validating>>,
}

impl Chain {
    pub const fn new() -> Self {
        Self {
            mutating: Vec::new(),
            validating: Vec::new(),
        }
    }

    pub fn with_mutating(mut self, plugin: impl Mutating + 'static) -> Self {
        self.mutating.push(Box::new(plugin));
        self
    }

    pub fn with_validating(mut self, plugin: impl Validating + 'static) -> Self {
        self.validating.push(Box::new(plugin));
        self
    }

    /// The plugin names in the order they run.
    pub fn plugin_names(&self) -> Vec<&'static str> {
        self.mutating
            .iter()
            .map(|plugin| plugin.name())
            .chain(self.validating.iter().map(|plugin| plugin.name()))
            .collect()
    }

    /// The mutating phase: each mutating plugin may change `object` (None for deletes).
    pub async fn mutate(
        &self,
        attributes: &Attributes,
        mut object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        async {
            for plugin in &self.mutating {
                plugin.admit(attributes, object.as_deref_mut(), old).await?;
            }
            Ok(())
        }
        .instrument(tracing::debug_span!("admission.mutate"))
        .await
    }

    /// The validating phase, on the object as it will be written.
    pub async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        async {
            for plugin in &self.validating {
                plugin.validate(attributes, object, old).await?;
            }
            Ok(())
        }
        .instrument(tracing::debug_span!("admission.validate"))
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct AddLabel;
    #[async_trait]
    impl Mutating for AddLabel {
        fn name(&self) -> &'static str {
            "AddLabel"
        }
        async fn admit(
            &self,
            _: &Attributes,
            object: Option<&mut Value>,
            _: Option<&Value>,
        ) -> Result<(), Denied> {
            if let Some(object) = object {
                object["metadata"]["labels"]["added"] = Value::from("yes");
            }
            Ok(())
        }
    }

    struct RequireLabel(Arc<AtomicUsize>);
    #[async_trait]
    impl Validating for RequireLabel {
        fn name(&self) -> &'static str {
            "RequireLabel"
        }
        async fn validate(
            &self,
            _: &Attributes,
            object: Option<&Value>,
            _: Option<&Value>,
        ) -> Result<(), Denied> {
            self.0.fetch_add(1, Ordering::SeqCst);
            match object {
                Some(object) if object["metadata"]["labels"]["added"] == "yes" => Ok(()),
                _ => Err(Denied::forbidden("label missing")),
            }
        }
    }

    pub(crate) fn attributes(operation: Operation) -> Attributes {
        Attributes {
            operation,
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            kind_group: String::new(),
            kind_version: "v1".into(),
            resource: "configmaps".into(),
            subresource: None,
            namespace: Some("default".into()),
            name: "x".into(),
            user: "admin".into(),
            groups: Vec::new(),
            dry_run: false,
            uid: String::new(),
            extra: Default::default(),
            warnings: Warnings::default(),
        }
    }

    /// A pod create's attributes.
    pub(crate) fn pod_create() -> Attributes {
        Attributes {
            kind: "Pod".into(),
            resource: "pods".into(),
            ..attributes(Operation::Create)
        }
    }

    /// Cluster-scoped objects for plugins that read them (classes of one kind), found by name.
    pub(crate) struct Classes(pub Vec<Value>);

    #[async_trait]
    impl ObjectReader for Classes {
        async fn get_cluster_object(
            &self,
            _: &str,
            _: &str,
            name: &str,
        ) -> Result<Option<Value>, Denied> {
            Ok(self
                .0
                .iter()
                .find(|c| c["metadata"]["name"] == name)
                .cloned())
        }
        async fn list_cluster_objects(&self, _: &str, _: &str) -> Result<Vec<Value>, Denied> {
            Ok(self.0.clone())
        }
    }

    #[tokio::test]
    async fn validating_plugins_see_what_mutating_plugins_did() {
        let calls = Arc::new(AtomicUsize::new(0));
        let chain = Chain::new()
            .with_mutating(AddLabel)
            .with_validating(RequireLabel(calls.clone()));
        let mut object = serde_json::json!({"metadata": {"name": "x"}});
        let create = attributes(Operation::Create);
        chain
            .mutate(&create, Some(&mut object), None)
            .await
            .expect("mutated");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "validating plugins wait");
        chain
            .validate(&create, Some(&object), None)
            .await
            .expect("admitted");
        assert_eq!(object["metadata"]["labels"]["added"], "yes");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(chain.plugin_names(), vec!["AddLabel", "RequireLabel"]);
    }

    #[tokio::test]
    async fn the_first_refusal_stops_the_chain() {
        let calls = Arc::new(AtomicUsize::new(0));
        let chain = Chain::new().with_validating(RequireLabel(calls.clone()));
        let object = serde_json::json!({"metadata": {"name": "x"}});
        let denied = chain
            .validate(&attributes(Operation::Create), Some(&object), None)
            .await
            .expect_err("refused");
        assert_eq!(denied.code, 403);
    }
}
