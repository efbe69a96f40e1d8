//! NamespaceLifecycle: no new objects in a namespace that does not exist or is being deleted,
//! and the namespaces the system needs (default, kube-system, kube-public, kube-node-lease)
//! cannot be deleted.

use async_trait::async_trait;
use serde_json::Value;

use crate::{Attributes, Denied, Operation, Validating};

/// A namespace as the plugin needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Missing,
    Active,
    Terminating,
}

/// Reads a namespace's state; the apiserver implements it over its store.
#[async_trait]
pub trait NamespaceLookup: Send + Sync {
    async fn namespace_state(&self, name: &str) -> Result<NamespaceState, Denied>;
}

/// The plugin.
pub struct NamespaceLifecycle<L> {
    lookup: L,
}

impl<L: NamespaceLookup> NamespaceLifecycle<L> {
    pub fn new(lookup: L) -> Self {
        Self { lookup }
    }
}

/// Kinds that are written while their namespace terminates (upstream lets these through so
/// that controllers can record what happens during deletion).
fn allowed_while_terminating(attributes: &Attributes) -> bool {
    attributes.group.is_empty() && attributes.resource == "events"
        || attributes.group == "events.k8s.io"
        || attributes.resource == "subjectaccessreviews"
        || attributes.resource == "tokenreviews"
}

#[async_trait]
impl<L: NamespaceLookup> Validating for NamespaceLifecycle<L> {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        _object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        if attributes.group.is_empty()
            && attributes.resource == "namespaces"
            && attributes.subresource.is_none()
        {
            if attributes.operation == Operation::Delete
                && rudder_facts::namespaces::is_system_namespace(&attributes.name)
            {
                return Err(Denied::forbidden(format!(
                    "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                    attributes.name
                )));
            }
            return Ok(());
        }
        let Some(namespace) = attributes.namespace.as_deref() else {
            return Ok(());
        };
        if attributes.operation != Operation::Create {
            return Ok(());
        }
        match self.lookup.namespace_state(namespace).await? {
            NamespaceState::Active => Ok(()),
            NamespaceState::Missing => Err(Denied {
                code: 404,
                reason: "NotFound",
                message: format!("namespaces \"{namespace}\" not found"),
            }),
            NamespaceState::Terminating if allowed_while_terminating(attributes) => Ok(()),
            NamespaceState::Terminating => Err(Denied::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                attributes.resource, attributes.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::attributes;

    struct Fixed(NamespaceState);
    #[async_trait]
    impl NamespaceLookup for Fixed {
        async fn namespace_state(&self, _: &str) -> Result<NamespaceState, Denied> {
            Ok(self.0)
        }
    }

    #[tokio::test]
    async fn creates_in_missing_namespaces_are_not_found() {
        let plugin = NamespaceLifecycle::new(Fixed(NamespaceState::Missing));
        let denied = plugin
            .validate(&attributes(Operation::Create), None, None)
            .await
            .expect_err("refused");
        assert_eq!((denied.code, denied.reason), (404, "NotFound"));
    }

    #[tokio::test]
    async fn creates_in_terminating_namespaces_are_forbidden_except_events() {
        let plugin = NamespaceLifecycle::new(Fixed(NamespaceState::Terminating));
        let denied = plugin
            .validate(&attributes(Operation::Create), None, None)
            .await
            .expect_err("refused");
        assert_eq!(denied.code, 403);
        assert!(denied.message.contains("because it is being terminated"));
        let mut event = attributes(Operation::Create);
        event.resource = "events".into();
        plugin
            .validate(&event, None, None)
            .await
            .expect("events pass");
        plugin
            .validate(&attributes(Operation::Update), None, None)
            .await
            .expect("updates pass");
    }

    #[tokio::test]
    async fn system_namespaces_cannot_be_deleted() {
        let plugin = NamespaceLifecycle::new(Fixed(NamespaceState::Active));
        for name in rudder_facts::namespaces::SYSTEM_NAMESPACES {
            let mut delete = attributes(Operation::Delete);
            delete.resource = "namespaces".into();
            delete.namespace = None;
            delete.name = (*name).to_string();
            assert_eq!(
                plugin
                    .validate(&delete, None, None)
                    .await
                    .err()
                    .map(|d| d.code),
                Some(403)
            );
        }
        let mut delete = attributes(Operation::Delete);
        delete.resource = "namespaces".into();
        delete.namespace = None;
        delete.name = "scratch".into();
        plugin
            .validate(&delete, None, None)
            .await
            .expect("ordinary namespaces go");
    }
}
