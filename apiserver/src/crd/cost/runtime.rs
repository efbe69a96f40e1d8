//! The runtime cost budgets of a custom object's CEL rules, as kube-apiserver keeps them: one
//! evaluation of a rule may cost at most [`PER_CALL_LIMIT`] and all of an object's at most
//! [`RUNTIME_COST_BUDGET`]; past either, no further rules run and the write is refused —
//!
//! ```text
//! spec.hosts: Invalid value: "array": validation failed due to running out of cost budget,
//! no further validation rules will be run
//! ```
//!
//! The `cel` crate counts no cost as it evaluates, so the cost is worked out before the rules
//! run, with the estimator over the object's actual sizes (an upper bound of what evaluating
//! it costs). Only schemas whose static estimate could exceed a budget are costed at all
//! ([`super::may_exceed_runtime_budget`]); for the rest the estimate proves no object can.

use serde_json::Value;

use std::collections::HashMap;

use kube_cel::cel::Program;

use super::estimate::estimate_parsed;
use super::shape::shape_of_value;
use crate::validation::FieldError;

/// What one evaluation of a rule may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// What all the rules of one object may cost together.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// The first budget `object` (being written over `old`) runs out of, as the field error that
/// refuses it.
pub fn check(schema: &Value, object: &Value, old: Option<&Value>) -> Option<FieldError> {
    let mut costing = Costing::default();
    costing.walk(schema, object, old, "")
}

/// What one check has spent, and the rules it has parsed (a rule under a list runs per item).
#[derive(Default)]
struct Costing<'a> {
    spent: u64,
    parsed: HashMap<&'a str, Option<Program>>,
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

impl<'a> Costing<'a> {
    fn walk(
        &mut self,
        schema: &'a Value,
        value: &Value,
        old: Option<&Value>,
        path: &str,
    ) -> Option<FieldError> {
        if value.is_null() {
            return None;
        }
        if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
            let shape = shape_of_value(schema, value);
            let type_name = schema["type"].as_str().unwrap_or("object");
            for rule in rules {
                let source = rule["rule"].as_str().unwrap_or("");
                // A transition rule runs only over an old value.
                let transition = source.contains("oldSelf") && rule["optionalOldSelf"] != true;
                if source.is_empty() || (transition && old.is_none()) {
                    continue;
                }
                let parsed = self
                    .parsed
                    .entry(source)
                    .or_insert_with(|| Program::compile(source).ok());
                let Some(program) = parsed.as_ref() else {
                    continue;
                };
                let cost = estimate_parsed(program, &shape);
                if cost > PER_CALL_LIMIT {
                    let named = rule["message"]
                        .as_str()
                        .filter(|m| !m.trim().is_empty())
                        .unwrap_or(source)
                        .trim();
                    return Some(FieldError::invalid(
                    path,
                    type_name,
                    format!("'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {named}"),
                ));
                }
                self.spent = self.spent.saturating_add(cost);
                if self.spent > RUNTIME_COST_BUDGET {
                    return Some(FieldError::invalid(
                    path,
                    type_name,
                    "validation failed due to running out of cost budget, no further validation rules will be run",
                ));
                }
            }
        }
        match value {
            Value::Object(map) => {
                let values = schema.get("additionalProperties").filter(|a| a.is_object());
                for (name, child_value) in map {
                    let child_schema = match values {
                        Some(values) => values,
                        None => match schema["properties"].get(name) {
                            Some(property) => property,
                            None => continue,
                        },
                    };
                    let child_old = old.and_then(|old| old.get(name));
                    let at = child(path, name);
                    if let Some(error) = self.walk(child_schema, child_value, child_old, &at) {
                        return Some(error);
                    }
                }
                None
            }
            Value::Array(items) => {
                let item_schema = schema.get("items")?;
                for (i, item) in items.iter().enumerate() {
                    if let Some(error) = self.walk(item_schema, item, None, &format!("{path}[{i}]"))
                    {
                        return Some(error);
                    }
                }
                None
            }
            _ => None,
        }
    }
}
