//! Namespaces: Active on create with the `kubernetes` finalizer in their spec, which only
//! `/finalize` changes; a delete turns them Terminating until the namespace controller has
//! emptied and finalized them.

use k8s_openapi::api as k8s;
use serde_json::{json, Value};

use super::{Hold, Strategy};
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at;
use crate::selectors::{FieldSet, Fields, Refusal};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 Namespace.
pub const NAMESPACES: ResourceInfo = ResourceInfo {
    verbs: NAMESPACE_VERBS,
    ..resource!("", "v1", "Namespace", "namespaces", "namespace", false, short: &["ns"], categories: NONE,
        sub: &[status_of("", "v1", "Namespace"), SubresourceInfo { name: Subresource::Finalize, kind: GroupVersionKind { group: "", version: "v1", kind: "Namespace" }, verbs: &["update"] }],
        prefix: "/registry/namespaces", k8s::core::v1::Namespace,
        strategy: &NamespaceStrategy, printer: &tables::core::NamespaceTable)
};

/// The rules of Namespace objects.
pub struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_namespace(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_namespace_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::ObjectWithConditions
    }

    fn fields(&self) -> &'static FieldSet {
        &NAMESPACE_FIELDS
    }
    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Active"});
        let mut finalizers: Vec<Value> = object["spec"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == "kubernetes") {
            finalizers.push(json!("kubernetes"));
        }
        object["spec"] = json!({"finalizers": finalizers});
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value, subresource: Option<Subresource>) {
        // As upstream: `spec.finalizers` changes only through `namespaces/{name}/finalize`,
        // or a namespace could be deleted with its content left behind in storage.
        if subresource != Some(Subresource::Finalize) {
            keep_namespace_finalizers(new, old);
        }
    }

    fn deletion_hold(&self, current: &Value, _grace_period_seconds: Option<i64>) -> Option<Hold> {
        self.holds_deletion(current).then_some(Hold::Finalizers)
    }

    fn holds_deletion(&self, object: &Value) -> bool {
        object["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    }

    fn begin_deletion(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Terminating"});
    }

    fn delete_returns_object(&self) -> bool {
        true
    }
}

/// Namespaces select by phase and name (and expose upstream's legacy `name` key, which no
/// request may name).
static NAMESPACE_FIELDS: FieldSet = FieldSet {
    accepted: &["status.phase", "metadata.name"],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        fields.insert("status.phase".into(), at(obj, "/status/phase"));
        fields.insert("name".into(), at(obj, "/metadata/name"));
    },
};

/// Puts the stored namespace's `spec.finalizers` back on an update through the main resource.
fn keep_namespace_finalizers(new: &mut Value, old: &Value) {
    let kept = old
        .get("spec")
        .and_then(|spec| spec.get("finalizers"))
        .cloned();
    if !new.get("spec").is_some_and(Value::is_object) {
        if kept.is_none() {
            return;
        }
        new["spec"] = json!({});
    }
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        match kept {
            Some(finalizers) => spec.insert("finalizers".into(), finalizers),
            None => spec.remove("finalizers"),
        };
    }
}
