//! Upstream Kubernetes validation of the built-in kinds, done on their API JSON.
//!
//! `validate` runs the object-meta checks every kind shares and then the kind's own checks,
//! reporting `FieldError`s whose reasons and texts follow upstream's `field.Error`.

use serde_json::Value;

pub mod apps;
pub mod batch;
pub mod certificates;
pub mod core;
#[cfg(test)]
mod core_tests;
mod cron;
mod json;
mod meta;
pub mod misc;
pub mod names;
pub mod networking;
pub mod pod;
mod pod_update;
#[cfg(test)]
mod pod_update_tests;
mod quantity;
pub mod rbac;
pub mod service;

pub use self::json::Errs;
pub use self::names::NameRule;
pub use self::quantity::{parse_quantity, Quantity};

use crate::catalog::ResourceInfo;
use crate::kinds::Strategy;

/// What went wrong with a field, as upstream's `field.ErrorType`, with its bad value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldErrorKind {
    /// A required value is missing.
    Required,
    /// The value is malformed.
    Invalid(Value),
    /// The value is not one of the supported values listed.
    NotSupported(Value, Vec<String>),
    /// The value repeats one that must be unique.
    Duplicate(Value),
    /// The value refers to something that does not exist.
    NotFound(Value),
    /// The value is well formed but not allowed here.
    Forbidden,
    /// The value (omitted from the message) is longer than the limit.
    TooLong(Value, usize),
    /// The list has (actual, max) items: too many.
    TooMany(usize, usize),
}

/// One field-level validation error, as upstream's `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    /// The field's path, e.g. `spec.replicas` or `metadata.labels`.
    pub field: String,
    pub detail: String,
}

impl FieldError {
    /// A missing value.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, detail)
    }

    /// A malformed value.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(FieldErrorKind::Invalid(value.into()), field, detail)
    }

    /// A value outside an enumeration; the detail lists the supported values.
    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<Value>,
        valid: &[&str],
    ) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        let valid = valid.iter().map(|v| v.to_string()).collect();
        Self::new(
            FieldErrorKind::NotSupported(value.into(), valid),
            field,
            detail,
        )
    }

    /// A repeated value.
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(FieldErrorKind::Duplicate(value.into()), field, "")
    }

    /// A reference to something that does not exist.
    pub fn not_found(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(FieldErrorKind::NotFound(value.into()), field, "")
    }

    /// A value not allowed under the current conditions.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, detail)
    }

    /// A value longer than `max` bytes.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        let detail = format!("may not be more than {max} bytes");
        Self::new(
            FieldErrorKind::TooLong(Value::from("<value omitted>"), max),
            field,
            detail,
        )
    }

    /// A list with more than `max` items.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        let detail = format!(
            "must have at most {max} {}",
            if max == 1 { "item" } else { "items" }
        );
        Self::new(FieldErrorKind::TooMany(actual, max), field, detail)
    }

    fn new(kind: FieldErrorKind, field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind,
            field: field.into(),
            detail: detail.into(),
        }
    }

    /// Upstream's `StatusCause` reason for this error.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid(_) => "FieldValueInvalid",
            FieldErrorKind::NotSupported(..) => "FieldValueNotSupported",
            FieldErrorKind::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorKind::NotFound(_) => "FieldValueNotFound",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong(..) => "FieldValueTooLong",
            FieldErrorKind::TooMany(..) => "FieldValueTooMany",
        }
    }

    /// Upstream's `field.Error.Error()` text: `<field>: <body>`.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.cause_message())
    }

    /// The message without the leading field (upstream's `ErrorBody`).
    pub fn cause_message(&self) -> String {
        let mut s = match &self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::TooLong(..) => "Too long".to_string(),
            FieldErrorKind::Invalid(v) => format!("Invalid value: {}", render_value(v)),
            FieldErrorKind::NotSupported(v, _) => format!("Unsupported value: {}", render_value(v)),
            FieldErrorKind::Duplicate(v) => format!("Duplicate value: {}", render_value(v)),
            FieldErrorKind::NotFound(v) => format!("Not found: {}", render_value(v)),
            FieldErrorKind::TooMany(actual, _) => format!("Too many: {actual}"),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for FieldError {}

/// Renders a bad value the way upstream prints it: numbers and booleans bare, strings Go-quoted,
/// string maps and lists in Go syntax, anything else as JSON.
fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_quote(s),
        Value::Object(m) if m.values().all(Value::is_string) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v.as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_string) => {
            let items: Vec<String> = a
                .iter()
                .map(|v| go_quote(v.as_str().unwrap_or("")))
                .collect();
            format!("[]string{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// Quotes a string as Go's `%q` / `strconv.Quote` does.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Validates a create (`old` = None) or an update (`old` = the stored object) of an object
/// of the kind `info` serves: the ObjectMeta checks every kind shares, with the kind's name
/// rule, then the kind's own.
pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    validate_as(info.strategy, info.namespaced, obj, old)
}

fn validate_as(
    strategy: &dyn Strategy,
    namespaced: bool,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !obj.is_object() {
        errs.push(FieldError::invalid(
            "",
            json::kind_of(obj),
            "must be a JSON object",
        ));
        return errs;
    }
    let old = old.filter(|o| o.is_object());
    let rule = strategy.name_rule();
    let name_fn = |name: &str, prefix: bool| names::validate_name_for(rule, name, prefix);
    match old {
        None => meta::validate_object_meta(obj, namespaced, &name_fn, &mut errs),
        Some(old) => meta::validate_object_meta_update(obj, old, namespaced, &name_fn, &mut errs),
    }
    strategy.validate(obj, old, &mut errs);
    errs
}

/// Validates an object of the served `group`/`kind` as if it were `namespaced` (tests).
#[cfg(test)]
pub(crate) fn validate_kind(
    group: &str,
    kind: &str,
    namespaced: bool,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let info = crate::catalog::by_kind(group, kind).expect("a served kind");
    validate_as(info.strategy, namespaced, obj, old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_render_like_upstream_field_errors() {
        let cases = vec![
            (
                FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0"),
                "FieldValueInvalid",
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                FieldError::required("metadata.name", "name or generateName is required"),
                "FieldValueRequired",
                "metadata.name: Required value: name or generateName is required",
            ),
            (
                FieldError::required("spec.containers", ""),
                "FieldValueRequired",
                "spec.containers: Required value",
            ),
            (
                FieldError::not_supported("spec.type", "Foo", &["ClusterIP", "NodePort"]),
                "FieldValueNotSupported",
                "spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"NodePort\"",
            ),
            (
                FieldError::duplicate("spec.containers[1].name", "a"),
                "FieldValueDuplicate",
                "spec.containers[1].name: Duplicate value: \"a\"",
            ),
            (
                FieldError::forbidden("metadata.namespace", "not allowed on this type"),
                "FieldValueForbidden",
                "metadata.namespace: Forbidden: not allowed on this type",
            ),
            (
                FieldError::too_long("metadata.annotations", 262144),
                "FieldValueTooLong",
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ),
            (
                FieldError::too_many("spec.x", 3, 2),
                "FieldValueTooMany",
                "spec.x: Too many: 3: must have at most 2 items",
            ),
            (
                FieldError::not_found("spec.containers[0].volumeMounts[0].name", "v"),
                "FieldValueNotFound",
                "spec.containers[0].volumeMounts[0].name: Not found: \"v\"",
            ),
            (
                FieldError::invalid("spec.template.metadata.labels", json!({"b": "2", "a": "1"}), "x"),
                "FieldValueInvalid",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"a\":\"1\", \"b\":\"2\"}: x",
            ),
        ];
        for (err, reason, message) in cases {
            assert_eq!(err.reason(), reason);
            assert_eq!(err.message(), message);
            assert_eq!(format!("{}: {}", err.field, err.cause_message()), message);
        }
    }

    #[test]
    fn go_quoting_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(go_quote("\u{1}é"), "\"\\x01é\"");
    }

    #[test]
    fn a_non_object_is_one_error_not_a_panic() {
        for v in [json!(null), json!(3), json!("x"), json!([1])] {
            let errs = validate_kind("", "Pod", true, &v, None);
            assert_eq!(errs.len(), 1, "{v}");
        }
    }

    #[test]
    fn each_kind_names_its_rule() {
        let rule = |group: &str, kind: &str| {
            crate::catalog::by_kind(group, kind)
                .expect("a served kind")
                .strategy
                .name_rule()
        };
        assert_eq!(rule("", "ConfigMap"), NameRule::Subdomain);
        assert_eq!(rule("", "Namespace"), NameRule::Label);
        assert_eq!(rule("apps", "StatefulSet"), NameRule::Label);
        assert_eq!(rule("", "Service"), NameRule::Dns1035);
        assert_eq!(
            rule("rbac.authorization.k8s.io", "Role"),
            NameRule::PathSegment
        );
        assert!(names::validate_name_for(NameRule::Subdomain, "a.b", false).is_empty());
        assert_eq!(
            names::validate_name_for(NameRule::Label, "a.b", false),
            vec!["must not contain dots"]
        );
        assert!(names::validate_name_for(NameRule::PathSegment, "system:x", false).is_empty());
        assert_eq!(
            names::validate_name_for(NameRule::PathSegment, "a/b", false),
            vec!["may not contain '/'"]
        );
    }
}
