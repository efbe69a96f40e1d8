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
