//! Typed, panic-free reads of JSON fields: a value of the wrong JSON type becomes a
//! `FieldError` (as upstream's decoder would refuse it) and reads as absent.

use serde_json::{Map, Value};

use super::FieldError;

/// Errors collected while validating one object.
pub type Errs = Vec<FieldError>;

/// `parent.child` (or `child` at the root).
pub fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// `parent[i]`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// `parent[key]`.
pub fn key(parent: &str, k: &str) -> String {
    format!("{parent}[{k}]")
}

/// A short name of a value's JSON type, used as the bad value of a type error.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, v: &Value, want: &str, errs: &mut Errs) {
    errs.push(FieldError::invalid(
        path,
        v.clone(),
        format!("must be {want}"),
    ));
}

fn field<'a>(obj: &'a Value, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// The string at `obj.name`, or None if absent/null or not a string (then an error).
pub fn str_at<'a>(obj: &'a Value, path: &str, name: &str, errs: &mut Errs) -> Option<&'a str> {
    let v = field(obj, name)?;
    match v.as_str() {
        Some(s) => Some(s),
        None => {
            type_error(&child(path, name), v, "a string", errs);
            None
        }
    }
}

/// Like `str_at` but absent reads as "".
pub fn str_or_empty<'a>(obj: &'a Value, path: &str, name: &str, errs: &mut Errs) -> &'a str {
    str_at(obj, path, name, errs).unwrap_or("")
}

/// The integer at `obj.name`.
pub fn int_at(obj: &Value, path: &str, name: &str, errs: &mut Errs) -> Option<i64> {
    let v = field(obj, name)?;
    as_int(v, &child(path, name), errs)
}

/// `v` as an integer, or an error at `path`.
pub fn as_int(v: &Value, path: &str, errs: &mut Errs) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if let Some(f) = v.as_f64() {
        if f.fract() == 0.0 && f.abs() < 9.0e15 {
            return Some(f as i64);
        }
    }
    type_error(path, v, "an integer", errs);
    None
}

/// The boolean at `obj.name`.
pub fn bool_at(obj: &Value, path: &str, name: &str, errs: &mut Errs) -> Option<bool> {
    let v = field(obj, name)?;
    match v.as_bool() {
        Some(b) => Some(b),
        None => {
            type_error(&child(path, name), v, "a boolean", errs);
            None
        }
    }
}

/// The object at `obj.name`.
pub fn obj_at<'a>(obj: &'a Value, path: &str, name: &str, errs: &mut Errs) -> Option<&'a Value> {
    let v = field(obj, name)?;
    if v.is_object() {
        Some(v)
    } else {
        type_error(&child(path, name), v, "an object", errs);
        None
    }
}

/// The array at `obj.name` (empty when absent).
pub fn arr_at<'a>(obj: &'a Value, path: &str, name: &str, errs: &mut Errs) -> &'a [Value] {
    match field(obj, name) {
        None => &[],
        Some(Value::Array(a)) => a,
        Some(v) => {
            type_error(&child(path, name), v, "an array", errs);
            &[]
        }
    }
}

/// The elements of the array at `obj.name` that are objects, with their paths; others
/// are reported.
pub fn objs_at<'a>(
    obj: &'a Value,
    path: &str,
    name: &str,
    errs: &mut Errs,
) -> Vec<(String, &'a Value)> {
    let base = child(path, name);
    let mut out = Vec::new();
    for (i, item) in arr_at(obj, path, name, errs).iter().enumerate() {
        let p = index(&base, i);
        if item.is_object() {
            out.push((p, item));
        } else {
            type_error(&p, item, "an object", errs);
        }
    }
    out
}

/// The string elements of the array at `obj.name`, with their indexes.
pub fn strs_at<'a>(
    obj: &'a Value,
    path: &str,
    name: &str,
    errs: &mut Errs,
) -> Vec<(usize, &'a str)> {
    let base = child(path, name);
    let mut out = Vec::new();
    for (i, item) in arr_at(obj, path, name, errs).iter().enumerate() {
        match item.as_str() {
            Some(s) => out.push((i, s)),
            None => type_error(&index(&base, i), item, "a string", errs),
        }
    }
    out
}

/// The map of strings at `obj.name` (entries in key order); non-string values are reported.
pub fn str_map_at<'a>(
    obj: &'a Value,
    path: &str,
    name: &str,
    errs: &mut Errs,
) -> Vec<(&'a str, &'a str)> {
    let Some(m) = map_at(obj, path, name, errs) else {
        return Vec::new();
    };
    let base = child(path, name);
    let mut out = Vec::new();
    for (k, v) in m {
        match v.as_str() {
            Some(s) => out.push((k.as_str(), s)),
            None => type_error(&key(&base, k), v, "a string", errs),
        }
    }
    out
}

/// The JSON object at `obj.name` as a map.
pub fn map_at<'a>(
    obj: &'a Value,
    path: &str,
    name: &str,
    errs: &mut Errs,
) -> Option<&'a Map<String, Value>> {
    obj_at(obj, path, name, errs).and_then(Value::as_object)
}

/// Whether `obj.name` is present and not null.
pub fn has(obj: &Value, name: &str) -> bool {
    field(obj, name).is_some()
}

/// Reports `value` at `path` if it is below zero.
pub fn non_negative(value: i64, path: &str, errs: &mut Errs) {
    if value < 0 {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be greater than or equal to 0",
        ));
    }
}

/// Reads `obj.name` as an integer and reports it if negative.
pub fn non_negative_at(obj: &Value, path: &str, name: &str, errs: &mut Errs) -> Option<i64> {
    let v = int_at(obj, path, name, errs)?;
    non_negative(v, &child(path, name), errs);
    Some(v)
}

/// Reports a change of `obj.name` from `old.name` as upstream's "field is immutable".
pub fn immutable(new: &Value, old: &Value, path: &str, name: &str, errs: &mut Errs) {
    let a = new.get(name).unwrap_or(&Value::Null);
    let b = old.get(name).unwrap_or(&Value::Null);
    if a != b {
        errs.push(FieldError::invalid(
            child(path, name),
            a.clone(),
            "field is immutable",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_become_errors_and_read_as_absent() {
        let o = json!({"s": 1, "i": "x", "b": "y", "o": [], "a": {}, "m": {"k": 1}, "f": 1.5});
        let mut errs = Vec::new();
        assert_eq!(str_at(&o, "p", "s", &mut errs), None);
        assert_eq!(int_at(&o, "p", "i", &mut errs), None);
        assert_eq!(int_at(&o, "p", "f", &mut errs), None);
        assert_eq!(bool_at(&o, "p", "b", &mut errs), None);
        assert!(obj_at(&o, "p", "o", &mut errs).is_none());
        assert!(arr_at(&o, "p", "a", &mut errs).is_empty());
        assert!(str_map_at(&o, "p", "m", &mut errs).is_empty());
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["p.s", "p.i", "p.f", "p.b", "p.o", "p.a", "p.m[k]"]
        );
        assert_eq!(errs[0].message(), "p.s: Invalid value: 1: must be a string");
    }

    #[test]
    fn nulls_read_as_absent_without_errors() {
        let o = json!({"s": null});
        let mut errs = Vec::new();
        assert_eq!(str_at(&o, "", "s", &mut errs), None);
        assert!(errs.is_empty());
        assert_eq!(child("", "a"), "a");
        assert_eq!(key("a", "b"), "a[b]");
    }
}
