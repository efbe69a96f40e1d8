//! The rules one served version of a custom resource follows in the generic store — the same
//! [`Strategy`] every built-in kind implements, built at run time from the CRD: pruning,
//! defaulting (on write and on read from storage), structural and CEL validation, the
//! storage version's apiVersion on the way in and the served one on the way out, `/status`
//! and `/scale` from the CRD's subresources — and its Table printer from
//! `additionalPrinterColumns`.

use std::borrow::Cow;

use serde_json::Value;

use super::jsonpath::JsonPath;
use super::rules::Rules;
use super::schema::Schema;
use crate::kinds::{ScalePaths, Strategy};
use crate::patch::strategic::Ty;
use crate::selectors::FieldSet;
use crate::tables::{format, Column, Printer};
use crate::validation::{Errs, FieldError, NameRule};

/// The rules of one served version of a custom resource.
pub struct CustomStrategy {
    pub(super) kind: &'static str,
    /// `group/version` of the version served.
    pub(super) api_version: &'static str,
    /// `group/version` of the CRD's storage version.
    pub(super) storage_api_version: &'static str,
    pub(super) schema: Option<Schema>,
    pub(super) rules: Option<Rules>,
    pub(super) scale: Option<ScalePaths>,
    /// The version's `openAPIV3Schema` as the CRD declares it (for OpenAPI).
    pub(super) openapi: Value,
    /// Field selectors: the metadata fields and the version's `selectableFields`.
    pub(super) fields: &'static FieldSet,
    /// The CRD's conversion webhook, when it has one and this is not the storage version.
    pub(super) converter: Option<super::conversion::WebhookConverter>,
}

impl Strategy for CustomStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        if let Some(schema) = &self.schema {
            schema.apply_defaults(object);
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind != self.kind {
            errors.push(FieldError::invalid(
                "kind",
                kind,
                format!("must be {}", self.kind),
            ));
        }
        if let Some(schema) = &self.schema {
            schema.validate_root(object, errors);
        }
        if errors.is_empty() {
            if let Some(rules) = &self.rules {
                rules.validate(object, old, errors);
            }
        }
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        self.fields
    }

    fn stored_to_api(&self, mut object: Value) -> Value {
        if self.converter.is_some() {
            // Converted (and then defaulted) by the webhook's caller.
            return object;
        }
        object["apiVersion"] = Value::from(self.api_version);
        self.default(&mut object);
        object
    }

    fn api_to_stored<'a>(&self, object: &'a Value) -> Cow<'a, Value> {
        if self.api_version == self.storage_api_version || self.converter.is_some() {
            return Cow::Borrowed(object);
        }
        let mut stored = object.clone();
        stored["apiVersion"] = Value::from(self.storage_api_version);
        Cow::Owned(stored)
    }

    fn canonical(&self, object: &Value) -> Option<Result<Value, String>> {
        Some(self.prune(object))
    }

    fn accepts_strategic_merge(&self) -> bool {
        false
    }

    fn scale_paths(&self) -> Option<&ScalePaths> {
        self.scale.as_ref()
    }

    fn openapi_schema(&self) -> Option<&Value> {
        Some(&self.openapi)
    }

    fn converter(&self) -> Option<crate::kinds::Converter<'_>> {
        self.converter
            .as_ref()
            .map(|converter| (converter, self.api_version, self.storage_api_version))
    }

    fn apply_schema(&self) -> Option<&Schema> {
        self.schema.as_ref()
    }
}

impl CustomStrategy {
    /// The body as the schema keeps it: unknown fields dropped (metadata through ObjectMeta,
    /// as every kind's), or serde's message when the metadata is malformed.
    fn prune(&self, object: &Value) -> Result<Value, String> {
        let mut pruned = object.clone();
        if !pruned.is_object() {
            return Err("the object is not a JSON object".to_string());
        }
        if let Some(metadata) = pruned.get("metadata").filter(|m| !m.is_null()) {
            let canonical = crate::catalog::typed::<
                k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            >(metadata.clone())?;
            pruned["metadata"] = canonical;
        }
        if let Some(schema) = &self.schema {
            schema.prune_root(&mut pruned);
        }
        Ok(pruned)
    }
}

/// One `additionalPrinterColumns` entry.
pub struct PrinterColumn {
    pub(super) column: Column,
    pub(super) path: JsonPath,
}

/// The Table of a custom resource: Name, then the CRD's columns (Age when it declares none).
pub struct CustomPrinter {
    pub(super) columns: Vec<PrinterColumn>,
}

impl Printer for CustomPrinter {
    fn columns(&self) -> Vec<Column> {
        std::iter::once(format::name_col())
            .chain(self.columns.iter().map(|c| c.column.clone()))
            .collect()
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        std::iter::once(Value::from(crate::json::name(obj)))
            .chain(self.columns.iter().map(|c| cell(c, obj, now)))
            .collect()
    }
}

/// A column's cell as upstream's CRD table convertor fills it: the first value the path
/// finds, typed as the column says (integers and numbers stay numbers, a date becomes the
/// time since, `5m`), or null when nothing is found.
fn cell(column: &PrinterColumn, obj: &Value, now: jiff::Timestamp) -> Value {
    let found = column.path.find(obj);
    let Some(first) = found.first() else {
        return Value::Null;
    };
    match (column.column.type_, first) {
        ("integer" | "number", Value::Number(_)) | ("boolean", Value::Bool(_)) => (*first).clone(),
        ("date", Value::String(s)) => match s.parse::<jiff::Timestamp>() {
            Ok(time) => Value::from(format::since(Some(time), now)),
            Err(_) => Value::from(s.as_str()),
        },
        (_, Value::String(s)) if found.len() == 1 => Value::from(s.as_str()),
        _ => {
            let parts: Vec<String> = found
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            Value::from(parts.join(","))
        }
    }
}
