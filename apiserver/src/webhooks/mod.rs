//! Admission configured through the API: the webhook plugins (MutatingAdmissionWebhook and
//! ValidatingAdmissionWebhook, [`plugin`]) that call the webhooks of the stored webhook
//! configurations over HTTPS ([`call`]), and ValidatingAdmissionPolicy ([`policy`]), which
//! judges requests by CEL ([`cel`]), type-checked against the kinds they match
//! ([`typecheck`], written to their status by [`status`]). Both decide which requests they
//! see the same way ([`matching`]) and read their configuration live through a registry
//! without admission.
//! See docs/admission.md.

pub mod call;
pub mod cel;
pub mod cel_authorizer;
pub mod matching;
pub mod plugin;
pub mod policy;
pub mod status;
pub mod typecheck;

pub use plugin::Webhooks;
pub use policy::Policies;

use rudder_admission::Attributes;
use serde_json::Value;

use crate::authz::Authorizer;
use crate::registry::Registry;

/// The `authorizer` CEL variable for a request: its user asking `authorizer`, about the
/// request's own resource as `requestResource`.
pub(crate) fn authorizer_of(
    authorizer: &std::sync::Arc<dyn Authorizer>,
    attributes: &Attributes,
) -> (cel::Caller, cel::Target) {
    (
        cel::Caller {
            authorizer: authorizer.clone(),
            user: attributes.user.clone(),
            groups: attributes.groups.clone(),
        },
        cel::Target {
            group: attributes.group.clone(),
            resource: attributes.resource.clone(),
            subresource: attributes.subresource.clone().unwrap_or_default(),
            namespace: attributes.namespace.clone().unwrap_or_default(),
            name: attributes.name.clone(),
        },
    )
}

/// The Namespace a request is judged with: the one it is in, as the watch cache holds it (as
/// upstream's plugins read their informers: no store round trip per request), or the
/// Namespace the request writes.
pub(crate) async fn namespace_of(
    reader: &Registry,
    attributes: &Attributes,
    object: Option<&Value>,
) -> Option<Value> {
    let Some(name) = attributes.namespace.as_deref() else {
        let writes_namespace = attributes.group.is_empty() && attributes.resource == "namespaces";
        return object.filter(|_| writes_namespace).cloned();
    };
    let namespaces = crate::catalog::find("", "v1", "namespaces")?;
    let field_selector = format!("metadata.name={name}");
    let listed = reader
        .list_cached(namespaces, None, "", &field_selector)
        .await
        .ok()?;
    listed.into_iter().next()
}
