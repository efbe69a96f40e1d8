//! A CRD version's CEL validation rules (`x-kubernetes-validations`), compiled once with
//! kube-cel's Kubernetes CEL libraries and evaluated on every write: `self`, transition rules
//! with `oldSelf` (run on updates only, unless `optionalOldSelf`), `message` and
//! `messageExpression`, `reason` and `fieldPath`. Failures become upstream's field errors:
//! `spec: Invalid value: "object": <message>` (or Forbidden / Required / Duplicate when the
//! rule names that reason). A write that would run out of the runtime cost budgets is refused
//! before they run ([`super::cost::runtime`]).

use std::sync::Arc;

use kube_cel::{CompiledSchema, RootContext, Validator};
use serde_json::Value;

use crate::validation::{Errs, FieldError};

thread_local! {
    /// kube-cel's evaluation context (its function tables) is built once per thread.
    static VALIDATOR: Validator = Validator::new();
}

/// The compiled rules of one schema.
pub struct Rules {
    compiled: Arc<CompiledSchema>,
    root: RootContext,
    schema: Value,
    /// Whether a write could run out of the runtime cost budgets, so is costed first.
    costed: bool,
}

impl Rules {
    /// Compiles the rules of `schema`, or `None` when it has none. Errors are the rules that
    /// do not compile, with where they are (the CRD is refused with them).
    pub fn compile(schema: &Value, root: RootContext) -> Result<Option<Self>, Vec<String>> {
        if !has_rules(schema) {
            return Ok(None);
        }
        let compiled = kube_cel::compile_schema(schema);
        let mut problems = Vec::new();
        collect_errors(&compiled, "openAPIV3Schema", &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Some(Rules {
            compiled: Arc::new(compiled),
            root,
            schema: schema.clone(),
            costed: super::cost::may_exceed_runtime_budget(schema),
        }))
    }

    /// Evaluates every rule against `object` (and `old`, on an update).
    pub fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        if self.costed {
            if let Some(out_of_budget) = super::cost::runtime::check(&self.schema, object, old) {
                errors.push(out_of_budget);
                return;
            }
        }
        let outcome = VALIDATOR.with(|validator| {
            validator.validate_compiled_with_context(&self.compiled, object, old, Some(&self.root))
        });
        let Err(failures) = outcome else {
            return;
        };
        for failure in failures.into_vec() {
            let path = failure.field_path.trim_start_matches('.').to_string();
            let type_name = type_at(&self.schema, &path);
            errors.push(match failure.reason.as_deref() {
                Some("FieldValueForbidden") => FieldError::forbidden(path, failure.message),
                Some("FieldValueRequired") => FieldError::required(path, failure.message),
                Some("FieldValueDuplicate") => {
                    let mut error = FieldError::duplicate(path, type_name);
                    error.detail = failure.message;
                    error
                }
                _ => FieldError::invalid(path, type_name, failure.message),
            });
        }
    }
}

fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|rules| !rules.is_empty())
                || map
                    .iter()
                    .any(|(key, value)| key != "default" && key != "enum" && has_rules(value))
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

fn collect_errors(node: &CompiledSchema, path: &str, problems: &mut Vec<String>) {
    for error in node.compilation_errors() {
        problems.push(format!(
            "{path}.x-kubernetes-validations: Invalid value: {error}"
        ));
    }
    for (name, child) in &node.properties {
        collect_errors(child, &format!("{path}.properties[{name}]"), problems);
    }
    if let Some(items) = &node.items {
        collect_errors(items, &format!("{path}.items"), problems);
    }
    if let Some(additional) = &node.additional_properties {
        collect_errors(
            additional,
            &format!("{path}.additionalProperties"),
            problems,
        );
    }
}

/// The schema type at a dotted path (`spec.replicas`), as upstream shows it as the bad value.
fn type_at(schema: &Value, path: &str) -> String {
    let mut node = schema;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let name = part.split('[').next().unwrap_or(part);
        let next = node
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
        match next {
            Some(child) => node = child,
            None => break,
        }
        if part.contains('[') {
            if let Some(items) = node.get("items") {
                node = items;
            }
        }
    }
    node.get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string()
}
