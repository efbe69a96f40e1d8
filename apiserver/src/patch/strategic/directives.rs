//! The directives a strategic merge patch may carry in its maps (`$patch`, `$retainKeys`,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`), the recognition of patch keys,
//! and the cleaning of patch values that are taken over whole (no directive survives into the
//! patched object).

use serde_json::{Map, Value};

use super::error::PatchError;

/// `$patch`: `replace` / `delete` in a map; `replace` / `delete` as a list item.
pub(super) const PATCH: &str = "$patch";
pub(super) const REPLACE: &str = "replace";
pub(super) const DELETE: &str = "delete";
pub(super) const MERGE: &str = "merge";
/// `$retainKeys: [..]`: the keys of the map that survive the patch.
pub(super) const RETAIN_KEYS: &str = "$retainKeys";
/// `$setElementOrder/<list>: [..]`: the order of the merged list.
pub(super) const SET_ELEMENT_ORDER: &str = "$setElementOrder";
/// `$deleteFromPrimitiveList/<list>: [..]`: values removed from a list of primitives.
pub(super) const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// What one key of a patch map is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Key<'a> {
    /// An ordinary field.
    Field(&'a str),
    /// `$patch`.
    Patch,
    /// `$retainKeys`.
    RetainKeys,
    /// `$setElementOrder/<field>`.
    SetElementOrder(&'a str),
    /// `$deleteFromPrimitiveList/<field>`.
    DeleteFromPrimitiveList(&'a str),
}

/// Recognises a patch key; a `$`-prefixed key that is no directive is an error.
pub(super) fn classify(key: &str) -> Result<Key<'_>, PatchError> {
    if !key.starts_with('$') {
        return Ok(Key::Field(key));
    }
    if key == PATCH {
        return Ok(Key::Patch);
    }
    if key == RETAIN_KEYS {
        return Ok(Key::RetainKeys);
    }
    if key.starts_with(SET_ELEMENT_ORDER) {
        return match key.split_once('/') {
            Some((SET_ELEMENT_ORDER, field)) if !field.is_empty() => {
                Ok(Key::SetElementOrder(field))
            }
            _ => Err(PatchError::BadPatchFormatForSetElementOrderList),
        };
    }
    if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
        return match key.split_once('/') {
            Some((DELETE_FROM_PRIMITIVE_LIST, field)) if !field.is_empty() => {
                Ok(Key::DeleteFromPrimitiveList(field))
            }
            _ => Err(PatchError::BadPatchFormatForPrimitiveList),
        };
    }
    Err(PatchError::UnknownDirective(key.to_string()))
}

/// Whether a patch key is one of the parallel-list directives, which `$retainKeys` ignores.
pub(super) fn is_parallel_list(key: &str) -> bool {
    key.starts_with(SET_ELEMENT_ORDER) || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// Whether a list item carries `$patch` (of any value).
pub(super) fn has_patch_directive(item: &Value) -> bool {
    item.as_object().is_some_and(|map| map.contains_key(PATCH))
}

/// A patch value taken over where the object has nothing to merge it with (or must be
/// replaced by it), as upstream takes it: `null` fields dropped, maps carrying `$patch` dropped
/// (with their key or list slot). The other directives have nothing to act on and are dropped
/// too. `None`: the value itself carries `$patch`, so its field is not set.
pub(super) fn clean(value: Value) -> Result<Option<Value>, PatchError> {
    match value {
        Value::Object(map) => {
            if map.contains_key(PATCH) {
                return Ok(None);
            }
            Ok(Some(Value::Object(clean_fields(map)?)))
        }
        Value::Array(items) => Ok(Some(Value::Array(clean_items(items)?))),
        scalar => Ok(Some(scalar)),
    }
}

/// The fields of a map taken over whole (its own `$patch`, if any, already handled).
pub(super) fn clean_fields(map: Map<String, Value>) -> Result<Map<String, Value>, PatchError> {
    let mut out = Map::new();
    for (key, value) in map {
        match classify(&key)? {
            Key::Field(_) => {}
            Key::Patch | Key::RetainKeys | Key::SetElementOrder(_) => continue,
            Key::DeleteFromPrimitiveList(_) => continue,
        }
        if value.is_null() {
            continue;
        }
        if let Some(value) = clean(value)? {
            out.insert(key, value);
        }
    }
    Ok(out)
}

/// The items of a list taken over whole: items carrying `$patch` are dropped.
pub(super) fn clean_items(items: Vec<Value>) -> Result<Vec<Value>, PatchError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if let Some(item) = clean(item)? {
            out.push(item);
        }
    }
    Ok(out)
}
