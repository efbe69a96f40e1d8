//! Nodes: the kubelet registers its node with a status, so a create keeps it.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at_or;
use crate::selectors::{FieldSet, Fields, Refusal};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables};

/// core/v1 Node.
pub const NODES: ResourceInfo = resource!("", "v1", "Node", "nodes", "node", false, short: &["no"], categories: NONE,
        sub: &[status_of("", "v1", "Node"), core_sub(Subresource::Proxy, "NodeProxyOptions", PROXY_VERBS)], prefix: "/registry/minions", k8s::core::v1::Node,
        strategy: &NodeStrategy, printer: &tables::core::NodeTable);

/// The rules of Node objects.
pub struct NodeStrategy;

impl Strategy for NodeStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_node(object);
    }

    fn validate(&self, _object: &Value, _old: Option<&Value>, _errors: &mut Errs) {}

    fn merge_schema(&self) -> Ty {
        Ty::Node
    }

    fn fields(&self) -> &'static FieldSet {
        &NODE_FIELDS
    }
    fn keeps_status_on_create(&self) -> bool {
        true
    }
}

/// Nodes select by name and schedulability (not by namespace: they have none).
static NODE_FIELDS: FieldSet = FieldSet {
    accepted: &["metadata.name", "spec.unschedulable"],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        let unschedulable = at_or(obj, "/spec/unschedulable", "false");
        fields.insert("spec.unschedulable".into(), unschedulable);
    },
};
