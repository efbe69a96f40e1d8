//! node.k8s.io/v1 RuntimeClasses: the container runtime configuration (`handler`) a pod asks
//! for by `spec.runtimeClassName`, with the overhead its pods carry and where they may be
//! scheduled — both applied to pods by the RuntimeClass admission plugin
//! (`rudder_admission::RuntimeClass`). The checks are upstream's: the handler is a DNS label
//! and immutable.

use k8s_openapi::api::node::v1 as node;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables::format::{age, age_col, col, name_col};
use crate::tables::{Column, Printer};
use crate::validation::names::is_dns1123_label;
use crate::validation::{Errs, FieldError, NameRule};

/// node.k8s.io/v1 RuntimeClass.
pub const RUNTIME_CLASSES: ResourceInfo = resource!("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/runtimeclasses", node::RuntimeClass,
        strategy: &RuntimeClassStrategy, printer: &RuntimeClassTable);

/// The rules of RuntimeClass objects.
pub struct RuntimeClassStrategy;

impl Strategy for RuntimeClassStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        match object["handler"].as_str() {
            None | Some("") => errors.push(FieldError::required("handler", "")),
            Some(handler) => {
                for why in is_dns1123_label(handler) {
                    errors.push(FieldError::invalid("handler", handler, why));
                }
            }
        }
        if let Some(old) = old {
            if old["handler"] != object["handler"] {
                errors.push(FieldError::invalid(
                    "handler",
                    object["handler"].clone(),
                    "field is immutable",
                ));
            }
        }
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }

    fn openapi_schema(&self) -> Option<&Value> {
        static OUTLINE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            crate::openapi::custom::outline(
                "RuntimeClass defines a class of container runtime supported in the cluster.",
                &["handler", "overhead", "scheduling"],
            )
        });
        Some(&OUTLINE)
    }
}

/// upstream's RuntimeClass columns: Name, Handler, Age.
pub struct RuntimeClassTable;

impl Printer for RuntimeClassTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Handler",
                "string",
                "The container runtime configuration the class's pods run with.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        vec![
            Value::from(crate::json::name(obj)),
            Value::from(obj["handler"].as_str().unwrap_or("")),
            age(obj, now),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handler_is_a_required_immutable_dns_label() {
        let errors = |object: &Value, old: Option<&Value>| {
            let mut errors = Vec::new();
            RuntimeClassStrategy.validate(object, old, &mut errors);
            errors.iter().map(FieldError::message).collect::<Vec<_>>()
        };
        let gvisor = json!({"metadata": {"name": "gvisor"}, "handler": "runsc"});
        assert!(errors(&gvisor, None).is_empty());
        assert!(errors(&json!({"metadata": {"name": "x"}}), None)[0].contains("Required"));
        assert!(!errors(&json!({"handler": "Not_A_Label"}), None).is_empty());
        let changed = json!({"metadata": {"name": "gvisor"}, "handler": "kata"});
        assert!(errors(&changed, Some(&gvisor))[0].contains("field is immutable"));
        let cells = RuntimeClassTable.cells(&gvisor, jiff::Timestamp::now());
        assert_eq!(cells[1], json!("runsc"));
    }
}
