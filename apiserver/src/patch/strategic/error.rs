//! The errors of strategic merge patch, worded as upstream's strategicpatch / mergepatch
//! packages word them, with JSON values printed the way Go's `%v` prints decoded JSON.

use serde_json::Value;

/// Why a strategic merge patch could not be applied. Every variant is the client's fault:
/// [`PatchError::http_status`] says whether upstream answers 400 or 422.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The patch (or the object) is not a JSON object.
    #[error("invalid JSON document")]
    BadJsonDoc,
    /// A list whose items are lists.
    #[error("lists of lists are not supported")]
    NoListOfLists,
    /// A malformed `$deleteFromPrimitiveList/<field>` directive.
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList,
    /// A malformed `$retainKeys` directive, or a patched key missing from it.
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys,
    /// A malformed `$setElementOrder/<field>` directive.
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList,
    /// An item of a merge-keyed list (patch or object) without its merge key.
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    /// A `$patch` value other than `replace` or `delete` (`merge` included, as upstream).
    #[error("unknown patch type: {patch_type} in map: {map}")]
    BadPatchType { patch_type: String, map: String },
    /// `{"$patch": "merge"}` as a list item.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeListDirective,
    /// A list of objects marked `merge` without a merge key (not in our tables; kept for parity).
    #[error("cannot merge lists without merge key for {0}")]
    NoMergeKeyForList(String),
    /// The items of a merged list (object and patch together) are not all of one JSON type.
    #[error("list element types are not identical: {0}")]
    MixedListElements(String),
    /// A value of the wrong JSON type where a directive or merge needs a list or a map.
    #[error("expected a {expected}, but received a {actual}")]
    BadArgType {
        expected: &'static str,
        actual: &'static str,
    },
    /// The patch list's items are not in the order `$setElementOrder` gives.
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    OrderMismatch { patch: String, order: String },
    /// A `$`-prefixed key that is no directive.
    #[error("unknown directive {0:?} in strategic merge patch")]
    UnknownDirective(String),
}

impl PatchError {
    /// The HTTP status upstream's apiserver answers: 422 for lists of lists, 400 otherwise.
    /// (Upstream lets the errors without a sentinel through as 500; a malformed patch is the
    /// client's fault, so we answer 400.)
    pub fn http_status(&self) -> u16 {
        match self {
            PatchError::NoListOfLists => 422,
            _ => 400,
        }
    }

    pub(super) fn no_merge_key(map: &serde_json::Map<String, Value>, key: &str) -> Self {
        PatchError::NoMergeKey {
            map: go_map(map),
            key: key.to_string(),
        }
    }

    pub(super) fn bad_patch_type(patch_type: &Value, map: &serde_json::Map<String, Value>) -> Self {
        PatchError::BadPatchType {
            patch_type: go_fmt(patch_type),
            map: go_map(map),
        }
    }

    pub(super) fn bad_arg(expected: &'static str, actual: &Value) -> Self {
        PatchError::BadArgType {
            expected,
            actual: go_type(actual),
        }
    }
}

/// The name Go's reflect gives the decoded form of a JSON value.
pub(super) fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

pub(super) const GO_SLICE: &str = "[]interface {}";
pub(super) const GO_MAP: &str = "map[string]interface {}";

/// A JSON value as Go's `%v` prints its decoded form.
pub(super) fn go_fmt(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_fmt).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => go_map(map),
    }
}

fn go_map(map: &serde_json::Map<String, Value>) -> String {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let entries: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
        .collect();
    format!("map[{}]", entries.join(" "))
}

/// A list as `%v` prints it.
pub(super) fn go_list(items: &[Value]) -> String {
    let items: Vec<String> = items.iter().map(go_fmt).collect();
    format!("[{}]", items.join(" "))
}
