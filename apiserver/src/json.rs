//! Lenient reads of API JSON, the one set every module uses: a missing, null or mistyped field
//! reads as absent (or as the empty string, zero, an empty list), as a Go client sees a zero
//! value. Paths are object keys from the root (`&["spec", "template", "spec"]`).
//!
//! Validation, which must report a mistyped field rather than ignore it, has its own
//! reporting accessors in `validation`; writes go through `registry::object` and the
//! defaulting helpers.

use serde_json::Value;

/// The value at `path`, if every step exists and the value is not null.
pub fn value_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.get(*key))
        .filter(|found| !found.is_null())
}

/// The string at `path`, if present and a string.
pub fn opt_str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    value_at(v, path).and_then(Value::as_str)
}

/// The string at `path`, or "".
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    opt_str_at(v, path).unwrap_or("")
}

/// The integer at `path`, if present (floats with no fraction count too).
pub fn opt_int_at(v: &Value, path: &[&str]) -> Option<i64> {
    let x = value_at(v, path)?;
    x.as_i64()
        .or_else(|| x.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

/// The integer at `path`, or 0.
pub fn int_at(v: &Value, path: &[&str]) -> i64 {
    opt_int_at(v, path).unwrap_or(0)
}

/// The boolean at `path`, if present.
pub fn opt_bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    value_at(v, path).and_then(Value::as_bool)
}

/// The array at `path`, or an empty slice.
pub fn array_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    value_at(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The number of entries of the map (or array) at `path`.
pub fn len_at(v: &Value, path: &[&str]) -> i64 {
    let n = match value_at(v, path) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    };
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The object's `metadata.name` ("" when absent).
pub fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"])
}

/// The object's `metadata.namespace` ("" when absent).
pub fn namespace(obj: &Value) -> &str {
    str_at(obj, &["metadata", "namespace"])
}

/// Whether the object's deletion has begun (`metadata.deletionTimestamp` is set).
pub fn is_deleting(obj: &Value) -> bool {
    !str_at(obj, &["metadata", "deletionTimestamp"]).is_empty()
}

/// A JSON leaf as the Go field prints: strings as they are, numbers and booleans in decimal
/// and `true`/`false`, missing or null as "".
pub fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// [`text`] of the value at a JSON pointer (`/status/podIPs/0/ip`: array steps allowed).
pub fn text_at_pointer(v: &Value, pointer: &str) -> String {
    text(v.pointer(pointer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_null_and_mistyped_fields_read_as_zero_values() {
        let v = json!({"a": {"b": "x", "n": 3, "f": 2.0, "z": null, "l": [1, 2], "t": true}});
        assert_eq!(str_at(&v, &["a", "b"]), "x");
        assert_eq!(str_at(&v, &["a", "n"]), "");
        assert_eq!(int_at(&v, &["a", "n"]), 3);
        assert_eq!(int_at(&v, &["a", "f"]), 2);
        assert_eq!(int_at(&v, &["a", "b"]), 0);
        assert!(value_at(&v, &["a", "z"]).is_none());
        assert_eq!(array_at(&v, &["a", "l"]).len(), 2);
        assert_eq!(len_at(&v, &["a"]), 6);
        assert_eq!(opt_bool_at(&v, &["a", "t"]), Some(true));
        assert_eq!(text(value_at(&v, &["a", "n"])), "3");
        assert_eq!(text_at_pointer(&v, "/a/l/1"), "2");
        assert_eq!(text_at_pointer(&v, "/a/z"), "");
        assert!(array_at(&v, &["a", "n"]).is_empty());
        assert_eq!(str_at(&v, &["a", "f"]), "");
    }

    #[test]
    fn metadata_reads() {
        let v = json!({"metadata": {"name": "n", "namespace": "ns", "deletionTimestamp": null}});
        assert_eq!((name(&v), namespace(&v)), ("n", "ns"));
        assert!(!is_deleting(&v));
        assert!(!is_deleting(&json!(null)));
    }
}
