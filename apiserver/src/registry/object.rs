//! Reading and writing the common parts of an object held as JSON: metadata fields, the
//! resourceVersion that comes from storage, timestamps and generated names.

use rand::Rng;
use serde_json::{Map, Value};

/// The object's metadata map, created if missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = match object {
        Value::Object(map) => map,
        _ => unreachable_object(),
    };
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    match metadata {
        Value::Object(metadata) => metadata,
        _ => unreachable_object(),
    }
}

// Both matches above follow an assignment of an object; this is never reached.
#[allow(clippy::panic)]
fn unreachable_object() -> ! {
    panic!("a value just set to an object is an object")
}

/// A string field of metadata ("" when absent).
pub fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|metadata| metadata.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub use crate::json::{is_deleting, name, namespace};

pub fn set_meta(object: &mut Value, field: &str, value: impl Into<Value>) {
    metadata_mut(object).insert(field.to_string(), value.into());
}

pub fn remove_meta(object: &mut Value, field: &str) {
    metadata_mut(object).remove(field);
}

/// The finalizers on an object.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .get("metadata")
        .and_then(|metadata| metadata.get("finalizers"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `metadata.resourceVersion` (storage's mod_revision) on an object read from storage.
pub fn with_resource_version(mut object: Value, revision: i64) -> Value {
    set_meta(&mut object, "resourceVersion", revision.to_string());
    object
}

/// What is stored of an object: all of it but its resourceVersion (which is the store's
/// revision) and selfLink.
pub fn for_storage(object: &Value) -> std::borrow::Cow<'_, Value> {
    let transient = |metadata: &serde_json::Map<String, Value>| {
        metadata.contains_key("resourceVersion") || metadata.contains_key("selfLink")
    };
    if !object
        .get("metadata")
        .and_then(Value::as_object)
        .is_some_and(transient)
    {
        return std::borrow::Cow::Borrowed(object);
    }
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
        metadata.remove("selfLink");
    }
    std::borrow::Cow::Owned(object)
}

/// Now as the RFC 3339 seconds-precision string Kubernetes uses for `Time`.
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|now| now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// Upstream's generated-name suffix: five characters from an alphabet without vowels or
/// look-alikes.
pub fn generated_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    const MAX_BASE: usize = 63 - 5;
    let base: String = base.chars().take(MAX_BASE).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect();
    format!("{base}{suffix}")
}

/// Everything but metadata and status: what a generation counts changes of.
pub fn spec_part(object: &Value) -> Value {
    let mut spec = object.clone();
    if let Some(map) = spec.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stored_values_carry_no_resource_version_and_reads_restore_it() {
        let object = json!({"metadata": {"name": "a", "resourceVersion": "7", "selfLink": "/x"}});
        let stored = for_storage(&object);
        assert!(stored["metadata"].get("resourceVersion").is_none());
        assert!(stored["metadata"].get("selfLink").is_none());
        assert_eq!(
            with_resource_version(stored.into_owned(), 9)["metadata"]["resourceVersion"],
            "9"
        );
    }

    #[test]
    fn generated_names_keep_the_base_and_add_five_characters() {
        let name = generated_name("web-");
        assert!(name.starts_with("web-"));
        assert_eq!(name.len(), 9);
        assert_eq!(generated_name(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn metadata_is_created_on_objects_without_it() {
        let mut object = json!({"kind": "ConfigMap"});
        set_meta(&mut object, "name", "x");
        assert_eq!(name(&object), "x");
        let mut odd = json!({"metadata": 3});
        set_meta(&mut odd, "name", "y");
        assert_eq!(name(&odd), "y");
    }

    #[test]
    fn now_is_rfc3339_in_seconds() {
        let now = now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z'));
    }
}
