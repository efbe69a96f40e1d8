//! Admission configured through the API: the webhook plugins (MutatingAdmissionWebhook and
//! ValidatingAdmissionWebhook, [`plugin`]) that call the webhooks of the stored webhook
//! configurations over HTTPS ([`call`]), and ValidatingAdmissionPolicy ([`policy`]), which
//! judges requests by CEL ([`cel`]). Both decide which requests they see the same way
//! ([`matching`]) and read their configuration live through a registry without admission.
//! See docs/admission.md.

pub mod call;
pub mod cel;
pub mod matching;
pub mod plugin;
pub mod policy;

pub use plugin::Webhooks;
pub use policy::Policies;

use serde_json::Value;

use crate::registry::Registry;
use crate::request::ListOptions;

/// The Namespace `name` as the watch cache holds it (as upstream's plugins read their
/// informers: no store round trip per request).
pub(crate) async fn cached_namespace(reader: &Registry, name: &str) -> Option<Value> {
    let namespaces = crate::catalog::find("", "v1", "namespaces")?;
    let mut options = ListOptions::everything();
    options.resource_version = Some("0".into());
    options.field_selector = format!("metadata.name={name}");
    let listed = reader.list(namespaces, None, &options).await.ok()?;
    listed
        .items
        .into_iter()
        .next()
        .map(|item| item.into_value())
}
