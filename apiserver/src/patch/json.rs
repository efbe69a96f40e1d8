//! JSON patch (RFC 6902) with upstream's limits and one of our own: at most 10,000
//! operations, at most 3 MiB added by `copy` operations in all, and no operation that could
//! nest the document past [`MAX_OBJECT_DEPTH`]. Operations are applied one at a time to the
//! caller's copy of the object (nothing to undo on failure: the copy is dropped), and each is
//! checked before it runs, so a copy bomb or a nesting bomb never gets built.
//!
//! The depth check keeps an upper bound on the document's depth instead of walking it after
//! every operation: `add`/`replace` raise it to the path's depth plus the value's, `move` by
//! how much deeper the value lands (measured exactly when the moved value is small), `copy`
//! by the copied value's exact depth (its size is measured anyway).

use json_patch::PatchOperation;
use serde_json::Value;

use crate::limits::{
    depth, depth_within, encoded_len, MAX_JSON_PATCH_COPY_BYTES, MAX_JSON_PATCH_OPERATIONS,
    MAX_OBJECT_DEPTH,
};

/// Why a JSON patch was not applied.
#[derive(Debug, thiserror::Error)]
pub enum JsonPatchError {
    /// More operations than upstream allows in one patch (413, as upstream).
    #[error(
        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}"
    )]
    TooManyOperations(usize),
    /// The `copy` operations together would add more than the limit.
    #[error("Unable to copy, the accumulated size increase of copy is {0}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}")]
    CopyTooLarge(usize),
    /// The operation would nest the document deeper than any reader can read back.
    #[error("operation '/{0}' would nest the object more than {MAX_OBJECT_DEPTH} levels deep")]
    TooDeep(usize),
    /// The operation itself failed (a missing path, a failed `test`, …).
    #[error("operation '/{operation}' failed at path '{path}': {reason}")]
    Failed {
        operation: usize,
        path: String,
        reason: String,
    },
}

/// Checks the operation count before anything is applied.
pub fn check_operations(patch: &json_patch::Patch) -> Result<(), JsonPatchError> {
    if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations(patch.0.len()));
    }
    Ok(())
}

/// How many segments a JSON pointer has (`""` is 0, `/a/b` is 2).
fn segments(pointer: &str) -> usize {
    pointer.bytes().filter(|byte| *byte == b'/').count()
}

/// Moved values up to this many nodes have their depth measured exactly.
const EXACT_MOVE_NODES: usize = 1024;

/// Applies `patch` to `document` in place; on error `document` is partly patched and must be
/// dropped by the caller.
pub fn apply(document: &mut Value, patch: &json_patch::Patch) -> Result<(), JsonPatchError> {
    check_operations(patch)?;
    let mut depth_bound = depth(document);
    let mut copied = 0usize;
    for (index, operation) in patch.0.iter().enumerate() {
        let landing = match operation {
            PatchOperation::Add(op) => Some(segments(op.path.as_str()) + depth(&op.value)),
            PatchOperation::Replace(op) => Some(segments(op.path.as_str()) + depth(&op.value)),
            PatchOperation::Move(op) => {
                let from = segments(op.from.as_str());
                let moved = document
                    .pointer(op.from.as_str())
                    .and_then(|value| depth_within(value, EXACT_MOVE_NODES))
                    .unwrap_or_else(|| depth_bound.saturating_sub(from));
                Some(segments(op.path.as_str()) + moved)
            }
            PatchOperation::Copy(op) => match document.pointer(op.from.as_str()) {
                Some(value) => {
                    copied = copied.saturating_add(encoded_len(value));
                    if copied > MAX_JSON_PATCH_COPY_BYTES {
                        return Err(JsonPatchError::CopyTooLarge(copied));
                    }
                    Some(segments(op.path.as_str()) + depth(value))
                }
                // Missing: the operation fails below with the library's reason.
                None => None,
            },
            PatchOperation::Remove(_) | PatchOperation::Test(_) => None,
        };
        if let Some(landing) = landing {
            if landing > MAX_OBJECT_DEPTH {
                return Err(JsonPatchError::TooDeep(index));
            }
            depth_bound = depth_bound.max(landing);
        }
        json_patch::patch_unsafe(document, std::slice::from_ref(operation)).map_err(|error| {
            JsonPatchError::Failed {
                operation: index,
                path: error.path.to_string(),
                reason: error.kind.to_string(),
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(operations: Value) -> json_patch::Patch {
        serde_json::from_value(operations).expect("a JSON patch")
    }

    #[test]
    fn operations_apply_in_order() {
        let mut document = json!({"data": {"a": "b"}});
        let patch = parse(json!([
            {"op": "add", "path": "/data/c", "value": "d"},
            {"op": "move", "from": "/data/a", "path": "/data/e"},
            {"op": "test", "path": "/data/e", "value": "b"},
        ]));
        apply(&mut document, &patch).expect("applies");
        assert_eq!(document, json!({"data": {"c": "d", "e": "b"}}));
    }

    #[test]
    fn a_failed_test_after_a_move_to_the_root_is_an_error_not_a_panic() {
        // The library's undo of this sequence reached `unreachable!`.
        let mut document = json!({"data": {"a": "b"}});
        let patch = parse(json!([
            {"op": "move", "from": "/data", "path": ""},
            {"op": "test", "path": "/nope", "value": 1},
        ]));
        let error = apply(&mut document, &patch).expect_err("the test fails");
        assert!(
            matches!(error, JsonPatchError::Failed { operation: 1, .. }),
            "{error}"
        );
    }

    #[test]
    fn a_copy_bomb_stops_at_the_copy_limit() {
        let mut operations = vec![json!({"op": "add", "path": "/x", "value": ["0123456789"]})];
        for _ in 0..40 {
            operations.push(json!({"op": "copy", "from": "/x", "path": "/x/-"}));
        }
        let mut document = json!({});
        let error = apply(&mut document, &parse(Value::Array(operations))).expect_err("bounded");
        assert!(matches!(error, JsonPatchError::CopyTooLarge(_)), "{error}");
        assert!(encoded_len(&document) <= 2 * MAX_JSON_PATCH_COPY_BYTES);
    }

    #[test]
    fn alternating_add_and_move_cannot_nest_past_the_depth_limit() {
        let mut operations = Vec::new();
        for _ in 0..20_000 {
            operations.push(json!({"op": "add", "path": "/t", "value": {}}));
            operations.push(json!({"op": "move", "from": "/v", "path": "/t/v"}));
            operations.push(json!({"op": "move", "from": "/t", "path": "/v"}));
        }
        operations.truncate(MAX_JSON_PATCH_OPERATIONS);
        let mut document = json!({"v": {}});
        let error = apply(&mut document, &parse(Value::Array(operations))).expect_err("bounded");
        assert!(matches!(error, JsonPatchError::TooDeep(_)), "{error}");
        assert!(depth(&document) <= MAX_OBJECT_DEPTH);
    }

    #[test]
    fn more_than_ten_thousand_operations_are_refused_before_any_applies() {
        let operations =
            vec![json!({"op": "add", "path": "/a", "value": 1}); MAX_JSON_PATCH_OPERATIONS + 1];
        let mut document = json!({});
        let error = apply(&mut document, &parse(Value::Array(operations))).expect_err("too many");
        assert!(matches!(error, JsonPatchError::TooManyOperations(10_001)));
        assert_eq!(document, json!({}));
    }
}
