//! What field selectors may name and compare, per kind: a kind's [`FieldSet`] (declared in
//! its file under `kinds/`) lists the fields a request may name (upstream's field label
//! conversion funcs, each with its own refusal wording) and reads the fields an object exposes
//! (upstream's `GetAttrs` / `ToSelectableFields`).
//!
//! Always exposed: `metadata.name`, and `metadata.namespace` when the object has one
//! (cluster-scoped objects have none, and a missing field reads as `""`, as upstream's sets
//! do). Numbers and booleans are rendered as strings (`"3"`, `"true"`).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{FieldSelector, SelectorError};
use crate::json::{text, text_at_pointer};
use crate::validation::go_quote;

/// The fields an object exposes, by selector name.
pub type Fields = BTreeMap<String, String>;

/// How a kind's conversion func words a rejected field.
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// `field label not supported: <f>`
    Plain,
    /// `field label "<f>" not supported for <type>` (batch/v1 Jobs: `batchv1.Job`).
    QuotedFor(&'static str),
    /// No conversion func: `"<f>" is not a known field selector: only "metadata.name", …`
    Default,
}

/// One kind's field selector rules.
#[derive(Debug)]
pub struct FieldSet {
    /// The fields a request may name.
    pub accepted: &'static [&'static str],
    pub refusal: Refusal,
    /// Fields read at a dotted path (a custom resource's `selectableFields`, `.spec.color`
    /// named `spec.color`): a string, number or boolean there, as text; absent, `""`.
    pub paths: &'static [&'static str],
    /// Adds the kind's own fields to what every object exposes.
    pub extract: fn(&Value, &mut Fields),
}

fn nothing(_: &Value, _: &mut Fields) {}

/// The rules of a kind without a conversion func: only the metadata fields. A `static`, not a
/// `const`: one address, by which a cached object knows the rules its fields were worked out
/// under.
pub static METADATA_ONLY: FieldSet = FieldSet {
    accepted: &["metadata.name", "metadata.namespace"],
    refusal: Refusal::Default,
    paths: &[],
    extract: nothing,
};

/// `Err` with upstream's message for the first field (in the selector's sorted term order)
/// the kind does not support.
pub fn check_supported(set: &FieldSet, selector: &FieldSelector) -> Result<(), SelectorError> {
    let Some(bad) = selector
        .fields()
        .into_iter()
        .find(|f| !set.accepted.contains(f))
    else {
        return Ok(());
    };
    let message = match set.refusal {
        Refusal::Plain => format!("field label not supported: {bad}"),
        Refusal::QuotedFor(type_name) => format!(
            "field label {} not supported for {type_name}",
            go_quote(bad)
        ),
        Refusal::Default => format!(
            "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            go_quote(bad)
        ),
    };
    Err(SelectorError::UnsupportedField {
        field: bad.to_string(),
        message,
    })
}

/// The field at a JSON pointer, as text.
pub fn at(obj: &Value, pointer: &str) -> String {
    text_at_pointer(obj, pointer)
}

/// Like [`at`], with the Go zero value for a missing number or boolean.
pub fn at_or(obj: &Value, pointer: &str, zero: &str) -> String {
    match obj.pointer(pointer) {
        None | Some(Value::Null) => zero.to_string(),
        v => text(v),
    }
}

/// The first non-empty of several places (the same datum under either API's name).
pub fn first_of(obj: &Value, pointers: &[&str]) -> String {
    pointers
        .iter()
        .map(|p| at(obj, p))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// The fields of `obj` that field selectors compare against, under `set`'s rules.
pub fn selectable_fields(set: &FieldSet, obj: &Value) -> Fields {
    let mut out = BTreeMap::new();
    out.insert("metadata.name".to_string(), at(obj, "/metadata/name"));
    if let Some(ns) = obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        out.insert("metadata.namespace".to_string(), ns.to_string());
    }
    for path in set.paths {
        let found = path.split('.').try_fold(obj, |at, segment| at.get(segment));
        if let Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) = found {
            out.insert(path.to_string(), text(Some(value)));
        }
    }
    (set.extract)(obj, &mut out);
    out
}

#[cfg(test)]
#[path = "field_set_tests.rs"]
mod tests;
