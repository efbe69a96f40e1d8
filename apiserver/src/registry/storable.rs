//! What may be written: every value the store writes is checked here first, so that nothing
//! stored is unreadable (nested deeper than readers go) or refused by a driver with a 500
//! (a value past etcd's 1.5 MiB, a key PostgreSQL cannot index). Each limit gets a 4xx
//! `Status` naming it, the same on every driver.

use serde_json::Value;

use super::object;
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Cause, Result};
use crate::limits::{depth, MAX_KEY_BYTES, MAX_OBJECT_DEPTH, MAX_STORED_VALUE_BYTES};
use crate::validation::FieldError;
use crate::values::Values;

/// Refuses a key longer than [`MAX_KEY_BYTES`] (422 on `metadata.name`, the part a client
/// chose).
pub(super) fn check_key(info: &ResourceInfo, key: &[u8], name: &str) -> Result<()> {
    if key.len() <= MAX_KEY_BYTES {
        return Ok(());
    }
    let room = MAX_KEY_BYTES.saturating_sub(key.len() - name.len());
    let error = FieldError::too_long("metadata.name", room);
    Err(ApiError::invalid(
        info.kind,
        info.group,
        name,
        vec![Cause {
            reason: error.reason().to_string(),
            message: error.cause_message(),
            field: error.field.clone(),
        }],
    ))
}

/// The stored value of `object` under `key` (its stored form, see `object::for_storage`,
/// through the codec and encryption of `values`), refused when it nests deeper than
/// [`MAX_OBJECT_DEPTH`] (422) or, with its key, takes more than [`MAX_STORED_VALUE_BYTES`]
/// (413).
pub(super) fn encode(
    values: &Values,
    info: &ResourceInfo,
    key: &[u8],
    object: &Value,
) -> Result<Vec<u8>> {
    let name = object::name(object);
    let depth = depth(object);
    if depth > MAX_OBJECT_DEPTH {
        return Err(ApiError::invalid(
            info.kind,
            info.group,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "the object nests {depth} levels deep: must have at most {MAX_OBJECT_DEPTH} levels of nesting"
                ),
                field: String::new(),
            }],
        ));
    }
    let stored_form = info.strategy.api_to_stored(object);
    let value = values
        .encode(info, key, &object::for_storage(stored_form.as_ref()))
        .map_err(|error| ApiError::internal(format!("encoding object for storage: {error}")))?;
    let size = key.len() + value.len();
    if size > MAX_STORED_VALUE_BYTES {
        return Err(ApiError::too_large(format!(
            "{} \"{name}\" is too large to store: it takes {size} bytes with its key, the limit is {MAX_STORED_VALUE_BYTES}",
            crate::error::qualified(info),
        )));
    }
    Ok(value)
}

/// Whether writing `candidate` over `current` (as read from the store) changes nothing: the
/// two would be stored alike (before encryption).
pub(super) fn alike(
    values: &Values,
    info: &ResourceInfo,
    candidate: &Value,
    current: &Value,
) -> bool {
    let candidate = info.strategy.api_to_stored(candidate);
    let current = info.strategy.api_to_stored(current);
    values.store_alike(
        &object::for_storage(candidate.as_ref()),
        &object::for_storage(current.as_ref()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::error::Reason;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..levels {
            value = json!({ "a": value });
        }
        value
    }

    #[test]
    fn objects_nested_past_the_limit_are_invalid() {
        let revisions = catalog::find("apps", "v1", "controllerrevisions").expect("served");
        let mut ok = json!({"metadata": {"name": "r"}});
        ok["data"] = nested(MAX_OBJECT_DEPTH - 2);
        assert!(encode(&Values::default(), revisions, b"/k", &ok).is_ok());
        let mut deep = json!({"metadata": {"name": "r"}});
        deep["data"] = nested(MAX_OBJECT_DEPTH);
        let error = encode(&Values::default(), revisions, b"/k", &deep).expect_err("too deep");
        assert_eq!((error.code, error.reason), (422, Reason::Invalid));
    }

    #[test]
    fn values_past_etcds_request_limit_are_too_large() {
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        let data = "x".repeat(MAX_STORED_VALUE_BYTES - 100);
        let big = json!({"metadata": {"name": "c"}, "data": {"k": data}});
        let key = [b'k'; 200];
        let error =
            encode(&Values::default(), configmaps, &key, &big).expect_err("too large with its key");
        assert_eq!(
            (error.code, error.reason),
            (413, Reason::RequestEntityTooLarge)
        );
    }

    #[test]
    fn keys_past_the_limit_are_invalid_on_the_name() {
        let bindings = catalog::find("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
            .expect("served");
        let name = "n".repeat(MAX_KEY_BYTES);
        let key = super::super::keys::object_key(bindings, None, &name);
        let error = check_key(bindings, &key, &name).expect_err("too long");
        assert_eq!(error.code, 422);
        let details = error.details.expect("causes");
        assert_eq!(details.causes[0].field, "metadata.name");
        assert!(check_key(bindings, b"/registry/clusterrolebindings/short", "short").is_ok());
    }
}
