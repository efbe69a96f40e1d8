//! The static cost limits of a CRD's CEL rules, as kube-apiserver applies them when a CRD is
//! written: every `x-kubernetes-validations` rule (and `messageExpression`) gets a worst-case
//! cost estimate from the schema's bounds — `maxLength`, `maxItems`, `maxProperties`, or
//! without them the most a 3 MiB request could hold — multiplied by how many times the rule
//! can run (the product of the bounds of the lists and maps above it). A rule over 10,000,000
//! is refused, and so is a schema whose rules total over 100,000,000, with upstream's message:
//!
//! ```text
//! spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule:
//! Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying
//! the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings
//! are declared)
//! ```
//!
//! The estimate follows cel-go's cost model and Kubernetes' library costs (a unit per call,
//! select and variable; a tenth of a unit per character a string function traverses; regexes
//! by string length times a quarter of the pattern's; comprehensions by the range's size times
//! their body), worked out on the parsed rule with the sizes the schema declares. Only the
//! upper bound is kept, as only it is compared. Without a type checker, expressions whose
//! size is not known from the schema or a literal count as unbounded, as cel-go counts them.

mod estimate;
pub mod runtime;
mod shape;

use serde_json::Value;

use crate::validation::{Errs, FieldError};
use estimate::estimate;
use shape::{add, mul, shape_of};

/// Upstream's limit on one expression's estimated cost (times its cardinality).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// Upstream's limit on the total of a schema's rules.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// The largest request the apiserver takes, which bounds what no schema bound does.
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;
/// A unit of cost per this many characters a string function walks.
const STRING_TRAVERSAL_FACTOR: f64 = 0.1;
/// A regex's cost per character of its pattern.
const REGEX_LENGTH_FACTOR: f64 = 0.25;
/// What one authorization check costs (two fit in a per-call budget).
const AUTHORIZER_CHECK_COST: u64 = 350_000;

/// Upstream's wording of how far a cost is over its limit.
fn over_budget(what: &str, cost: u64, limit: u64) -> String {
    let ratio = cost as f64 / limit as f64;
    let factor = if ratio > 100.0 {
        "more than 100x".to_string()
    } else if ratio < 1.5 {
        format!("{ratio:.6}x")
    } else {
        format!("{ratio:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The running total of a schema's rules and its four costliest contributors (of at least 1%
/// of the total limit).
#[derive(Default)]
struct Total {
    total: u64,
    costliest: Vec<(String, u64)>,
}

impl Total {
    fn observe(&mut self, path: String, cost: u64) {
        self.total = add(self.total, cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.costliest.push((path, cost));
        self.costliest
            .sort_by_key(|(_, cost)| std::cmp::Reverse(*cost));
        self.costliest.truncate(4);
    }
}

/// One expression's estimate: where it is, what it is, what one call costs, and that times
/// its cardinality.
struct Estimated {
    path: String,
    what: &'static str,
    per_call: u64,
    total: u64,
}

/// Checks the cost of every rule of the schema at `at` (`spec.versions[i].schema.
/// openAPIV3Schema`), adding upstream's Forbidden errors.
pub fn check(schema: &Value, at: &str, errors: &mut Errs) {
    let mut estimated = Vec::new();
    walk(schema, at, Some(1), true, &mut estimated);
    let mut total = Total::default();
    for one in estimated {
        if one.total > STATIC_ESTIMATED_COST_LIMIT {
            errors.push(FieldError::forbidden(
                one.path.clone(),
                over_budget(one.what, one.total, STATIC_ESTIMATED_COST_LIMIT),
            ));
        }
        total.observe(one.path, one.total);
    }
    if total.total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        for (path, _) in &total.costliest {
            errors.push(FieldError::forbidden(
                path.clone(),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errors.push(FieldError::forbidden(
            at,
            over_budget(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total.total,
                STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
}

/// Whether an object of this schema could ever run out of the runtime budgets: only then are
/// its writes costed before their rules run ([`runtime`]); for the rest the estimate proves
/// they cannot.
pub fn may_exceed_runtime_budget(schema: &Value) -> bool {
    let mut estimated = Vec::new();
    walk(schema, "", Some(1), true, &mut estimated);
    let total = estimated.iter().fold(0, |sum, one| add(sum, one.total));
    total > runtime::RUNTIME_COST_BUDGET
        || estimated
            .iter()
            .any(|one| one.per_call > runtime::PER_CALL_LIMIT)
}

/// How many of a node's children each of its instances can hold (`None`: unbounded).
fn children_per_instance(schema: &Value) -> Option<u64> {
    match schema["type"].as_str() {
        Some("array") => schema["maxItems"].as_u64(),
        Some("object")
            if schema
                .get("additionalProperties")
                .is_some_and(Value::is_object) =>
        {
            schema["maxProperties"].as_u64()
        }
        _ => Some(1),
    }
}

fn walk(
    schema: &Value,
    at: &str,
    cardinality: Option<u64>,
    is_root: bool,
    estimated: &mut Vec<Estimated>,
) {
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        let (shape, min_size) = shape_of(schema, is_root);
        let times = cardinality.unwrap_or(MAX_REQUEST_SIZE_BYTES / (min_size + 1));
        for (i, rule) in rules.iter().enumerate() {
            for (field, what) in [
                ("rule", "estimated rule cost"),
                ("messageExpression", "estimated messageExpression cost"),
            ] {
                let Some(source) = rule[field].as_str().filter(|s| !s.is_empty()) else {
                    continue;
                };
                let Some(per_call) = estimate(source, &shape) else {
                    continue;
                };
                estimated.push(Estimated {
                    path: format!("{at}.x-kubernetes-validations[{i}].{field}"),
                    what,
                    per_call,
                    total: if per_call == 0 {
                        0
                    } else {
                        mul(per_call, times)
                    },
                });
            }
        }
    }
    let child_cardinality = cardinality
        .zip(children_per_instance(schema))
        .map(|(c, n)| mul(c, n));
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let at = format!("{at}.properties[{name}]");
        walk(property, &at, child_cardinality, false, estimated);
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        walk(
            items,
            &format!("{at}.items"),
            child_cardinality,
            false,
            estimated,
        );
    }
    if let Some(values) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        let at = format!("{at}.additionalProperties");
        walk(values, &at, child_cardinality, false, estimated);
    }
}

#[cfg(test)]
mod tests;
