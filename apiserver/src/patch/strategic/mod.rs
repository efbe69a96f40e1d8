//! Strategic merge patch (`application/strategic-merge-patch+json`), applied on the server as
//! upstream's k8s.io/apimachinery/pkg/util/strategicpatch applies it, over `serde_json::Value`.
//!
//! Maps merge recursively and `null` deletes a key. Lists follow their field's `patchStrategy`
//! (from [`schema`], the built-in types' Go struct tags): `merge` with a `patchMergeKey` merges
//! items by key, `merge` on primitives is a set union, anything else replaces the list. The
//! directives `$patch` (replace / delete), `$retainKeys`, `$setElementOrder/<list>` and
//! `$deleteFromPrimitiveList/<list>` are honoured and never survive into the result.
//!
//! Where upstream's behaviour is surprising we keep it: items a merge adds to a list come
//! *before* the object's items unless `$setElementOrder` says otherwise (the kubectl patch
//! task page shows this), `{"$patch": "delete"}` on a map leaves `{}`, and `$patch: merge` is
//! an error. Unlike upstream, fields we have no metadata for are never an error: maps under
//! them merge and lists are replaced; the caller's decoding catches unknown fields.

mod apply;
mod directives;
mod error;
mod identity;
mod schema;
/// The schema of a served kind, or a plain object for any other (tests).
#[cfg(test)]
pub(crate) fn root_of(group: &str, kind: &str) -> Ty {
    crate::catalog::by_kind(group, kind).map_or(Ty::Object, |info| info.strategy.merge_schema())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_errors;

use serde_json::Value;

pub use self::error::PatchError;
pub use self::schema::Ty;

/// Per-field patch metadata, as upstream's k8s.io/api Go struct tags
/// `patchStrategy:"merge" patchMergeKey:"name"` declare it (the OpenAPI
/// `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldStrategy {
    pub merge_key: Option<&'static str>,
    /// `"merge"`, `"replace"`, `"retainKeys"` or `"merge,retainKeys"`.
    pub strategy: &'static str,
}

/// The patch metadata of the field at `path` (JSON field names from the object's root; list
/// items are transparent, e.g. `["spec", "template", "spec", "containers", "env"]`) of an
/// object whose schema is `root`, if the field declares a strategy.
pub fn field_strategy(root: Ty, path: &[&str]) -> Option<FieldStrategy> {
    let (last, parents) = path.split_last()?;
    let mut ty = root;
    for name in parents {
        ty = ty.field(name)?.ty?;
    }
    let field = ty.field(last)?;
    Some(FieldStrategy {
        merge_key: field.merge_key,
        strategy: field.strategy?,
    })
}

/// Applies the strategic merge patch `patch` to `original`, an object whose schema is `root`
/// (its kind's [`crate::kinds::Strategy::merge_schema`]), and returns the patched object. A
/// `null` patch changes nothing; a patch that is not a JSON object is an error.
pub fn apply(root: Ty, original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let patch = match patch {
        Value::Object(patch) => patch.clone(),
        Value::Null => return Ok(original.clone()),
        _ => return Err(PatchError::BadJsonDoc),
    };
    let original = match original {
        Value::Object(original) => original.clone(),
        Value::Null => serde_json::Map::new(),
        _ => return Err(PatchError::BadJsonDoc),
    };
    apply::merge_map(original, patch, Some(root)).map(Value::Object)
}
