//! Label and field selectors (`?labelSelector=` / `?fieldSelector=`), parsed, checked and applied
//! the way the upstream Kubernetes apiserver does it.
//!
//! - [`LabelSelector`] follows apimachinery's `labels.Parse`: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
//!   `a notin (x,y)`, `a`, `!a`, `a>1`, `a<3`, comma = AND, with upstream's key/value validation
//!   and error wording.
//! - [`FieldSelector`] follows `fields.ParseSelector`: `k=v`, `k==v`, `k!=v`, comma = AND,
//!   backslash escapes in values. A field an object does not have reads as `""`.
//! - [`FieldSet`] is one kind's field selector rules (each kind declares its own under
//!   `kinds/`): which fields it exposes (upstream's `GetAttrs`/`ToSelectableFields`) and which
//!   ones a request may name (upstream's field label conversion funcs, with their exact error
//!   text); [`selectable_fields`] and [`check_supported`] apply them.
//!
//! Every error's `Display` is the message upstream puts in the 400 `BadRequest` Status.

mod field;
pub mod field_set;
mod label;
mod label_lexer;

pub use field::FieldSelector;
pub use field_set::{check_supported, selectable_fields, FieldSet, Fields, Refusal, METADATA_ONLY};
pub use label::LabelSelector;

/// Why a selector was rejected. `Display` is upstream's message for the 400 `BadRequest` Status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The `labelSelector` parameter does not parse or fails key/value validation.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// The `fieldSelector` parameter does not parse (bad term or escape sequence).
    #[error("{0}")]
    InvalidFieldSelector(String),
    /// The field selector names a field the kind does not support.
    #[error("{message}")]
    UnsupportedField {
        /// The field as written in the selector.
        field: String,
        /// Upstream's message for this kind, e.g. `field label not supported: spec.foo`.
        message: String,
    },
}
