//! PATCH: the patch types by Content-Type — JSON patch (RFC 6902), merge patch (RFC 7386)
//! and strategic merge patch (our own engine, `strategic`) — applied to the latest object
//! inside the store's compare-and-swap loop. A patch that names a resourceVersion pins the
//! write to it; otherwise a lost race is retried against the new latest state.

pub mod apply;
pub mod json;
pub mod strategic;

use serde_json::Value;

use crate::error::{ApiError, Cause, Reason, Result};
use crate::patch::strategic::Ty;
use crate::registry::{object, Registry, Target, Write, Written};

/// The patch types, by their content types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(content_type: Option<&str>) -> Result<Self> {
        let essence = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {:?})",
                    content_type.unwrap_or("")
                ),
            )),
        }
    }
}

/// A parsed patch document.
#[derive(Clone, Debug)]
pub enum Document {
    Json(json_patch::Patch),
    Object(Value),
}

/// Parses a patch body.
pub fn parse(kind: PatchKind, bytes: &[u8]) -> Result<Document> {
    match kind {
        PatchKind::Json => {
            let patch = serde_json::from_slice::<json_patch::Patch>(bytes)
                .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))?;
            json::check_operations(&patch).map_err(json_patch_failed)?;
            Ok(Document::Json(patch))
        }
        PatchKind::Merge | PatchKind::Strategic => {
            let value: Value = serde_json::from_slice(bytes)
                .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))?;
            if !value.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: the patch must be a JSON object",
                ));
            }
            Ok(Document::Object(value))
        }
        PatchKind::Apply => {
            let value = crate::codec::yaml::decode_bounded(bytes)
                .map_err(|error| ApiError::bad_request(format!("error decoding YAML: {error}")))?;
            if !value.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding apply patch: the body must be an object",
                ));
            }
            Ok(Document::Object(value))
        }
    }
}

/// Runs a patch engine off the async reactor where the runtime allows it: on a
/// multi-threaded runtime the worker hands its other tasks over first (`block_in_place`), so a
/// merge of long lists does not stall every connection that worker serves.
fn off_the_reactor<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

fn json_patch_failed(error: json::JsonPatchError) -> ApiError {
    match error {
        json::JsonPatchError::TooManyOperations(_) => ApiError::too_large(error.to_string()),
        other => patch_failed(format!("the patch could not be applied: {other}")),
    }
}

fn patch_failed(message: String) -> ApiError {
    ApiError::invalid(
        "",
        "",
        "",
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: "patch".into(),
        }],
    )
}

/// Applies a parsed patch to an object whose strategic-merge schema is `schema`.
pub fn apply(kind: PatchKind, schema: Ty, current: &Value, document: &Document) -> Result<Value> {
    let mut target = current.clone();
    match (kind, document) {
        (PatchKind::Json, Document::Json(patch)) => {
            json::apply(&mut target, patch).map_err(json_patch_failed)?;
            Ok(target)
        }
        (PatchKind::Merge, Document::Object(patch)) => {
            json_patch::merge(&mut target, patch);
            Ok(target)
        }
        (PatchKind::Strategic, Document::Object(patch)) => strategic::apply(schema, current, patch)
            .map_err(|error| {
                let message = error.to_string();
                if error.http_status() == 422 {
                    patch_failed(message)
                } else {
                    ApiError::bad_request(message)
                }
            }),
        _ => Err(ApiError::bad_request(
            "the patch does not match its content type",
        )),
    }
}

fn apply_failed(error: apply::ApplyError) -> ApiError {
    match error {
        apply::ApplyError::Conflicts(conflicts) => {
            let mut error = ApiError::conflict_plain(apply::conflict_message(&conflicts));
            let causes = conflicts
                .into_iter()
                .map(|conflict| Cause {
                    reason: "FieldManagerConflict".into(),
                    message: conflict.message,
                    field: conflict.field,
                })
                .collect();
            error.details = Some(Box::new(crate::error::Details {
                causes,
                ..Default::default()
            }));
            error
        }
        apply::ApplyError::Invalid(message) => patch_failed(message),
        apply::ApplyError::BadRequest(message) => ApiError::bad_request(message),
    }
}

/// Server-side apply: onto the latest object, or creating it when missing.
async fn server_side_apply(
    registry: &Registry,
    target: Target<'_>,
    applied: &Value,
    write: &Write,
    force: bool,
) -> Result<Written> {
    let Target {
        resource: info,
        namespace,
        name,
        subresource,
    } = target;
    let manager = write.field_manager.clone().unwrap_or_default();
    let mut write = write.clone();
    write.managed_fields_set = true;
    let mut warnings = Vec::new();
    let updated = registry
        .update_with(info, namespace, name, subresource, &write, |current| {
            let mut base = current.clone();
            object::remove_meta(&mut base, "resourceVersion");
            let merged = off_the_reactor(|| {
                apply::apply(
                    info,
                    Some(&base),
                    applied,
                    &apply::Applier {
                        manager: &manager,
                        force,
                        subresource,
                        now: &object::now(),
                    },
                )
            })
            .map_err(apply_failed)?;
            let (canonical, found) =
                registry.canonicalize(info, &merged, write.field_validation)?;
            warnings = found;
            Ok(canonical)
        })
        .await;
    match updated {
        Ok(mut written) => {
            written.warnings.extend(warnings);
            Ok(written)
        }
        Err(error) if error.is_not_found() && subresource.is_none() => {
            let applier = apply::Applier {
                manager: &manager,
                force,
                subresource: None,
                now: &object::now(),
            };
            let created = apply::apply(info, None, applied, &applier).map_err(apply_failed)?;
            let mut input = created;
            if object::name(&input).is_empty() {
                object::set_meta(&mut input, "name", name);
            }
            registry
                .create(
                    info,
                    namespace,
                    crate::registry::Input {
                        object: input,
                        duplicate_fields: Vec::new(),
                    },
                    &write,
                )
                .await
        }
        Err(error) => Err(error),
    }
}

/// PATCH of an object or its `/status`.
pub async fn patch(
    registry: &Registry,
    target: Target<'_>,
    kind: PatchKind,
    document: &Document,
    write: &Write,
    force: bool,
) -> Result<Written> {
    if let (PatchKind::Apply, Document::Object(applied)) = (kind, document) {
        return server_side_apply(registry, target, applied, write, force).await;
    }
    let Target {
        resource: info,
        namespace,
        name,
        subresource,
    } = target;
    let mut warnings = Vec::new();
    let mut written = registry
        .update_with(info, namespace, name, subresource, write, |current| {
            // The current resourceVersion is a precondition only when the patch sets one. A
            // JSON patch sees it (a `test` on it is the usual optimistic lock, re-checked on
            // every retry); the object-shaped patches see an object without it.
            let mut base = current.clone();
            if kind != PatchKind::Json {
                object::remove_meta(&mut base, "resourceVersion");
            }
            let mut patched =
                off_the_reactor(|| apply(kind, info.strategy.merge_schema(), &base, document))?;
            if kind == PatchKind::Json
                && object::meta_str(&patched, "resourceVersion")
                    == object::meta_str(current, "resourceVersion")
            {
                object::remove_meta(&mut patched, "resourceVersion");
            }
            let (canonical, found) =
                registry.canonicalize(info, &patched, write.field_validation)?;
            warnings = found;
            Ok(canonical)
        })
        .await?;
    written.warnings.extend(warnings);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_pick_the_patch_kind() {
        assert_eq!(
            PatchKind::from_content_type(Some("application/merge-patch+json")).ok(),
            Some(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type(Some("application/json"))
                .err()
                .map(|e| e.code),
            Some(415)
        );
    }

    #[test]
    fn json_patch_test_failures_are_invalid() {
        let document = parse(
            PatchKind::Json,
            br#"[{"op":"test","path":"/data/a","value":"x"}]"#,
        )
        .expect("parses");
        let current = json!({"data": {"a": "y"}});
        let error =
            apply(PatchKind::Json, Ty::Object, &current, &document).expect_err("test fails");
        assert_eq!(error.code, 422);
    }

    #[test]
    fn merge_patch_null_deletes_and_lists_replace() {
        let document = parse(
            PatchKind::Merge,
            br#"{"metadata":{"labels":{"a":null,"b":"2"}},"list":[3]}"#,
        )
        .expect("parses");
        let current = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2]});
        let patched = apply(PatchKind::Merge, Ty::Object, &current, &document).expect("applies");
        assert_eq!(
            patched,
            json!({"metadata": {"labels": {"b": "2"}}, "list": [3]})
        );
    }

    #[test]
    fn malformed_patches_are_bad_requests() {
        assert_eq!(
            parse(PatchKind::Json, b"{").err().map(|e| e.code),
            Some(400)
        );
        assert_eq!(
            parse(PatchKind::Merge, b"[1]").err().map(|e| e.code),
            Some(400)
        );
        assert_eq!(
            parse(PatchKind::Apply, b"[1]").err().map(|e| e.code),
            Some(400)
        );
    }
}
