//! metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics, the resource metrics `kubectl top`
//! reads: never stored, answered from the kubelets' Summary API on each get or list
//! (`http/resource_metrics.rs`). The entries give them discovery, RBAC attributes and
//! read-only verbs; the strategy's rules never run.

use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables;
use crate::validation::{Errs, NameRule};

/// The API group.
pub const GROUP: &str = "metrics.k8s.io";

const READ_ONLY: &[&str] = &["get", "list"];

/// The rules of a metrics kind: there are none to apply, nothing is written.
pub struct MetricsStrategy;

impl Strategy for MetricsStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, _object: &Value, _old: Option<&Value>, _errors: &mut Errs) {}

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

macro_rules! metrics {
    ($kind:expr, $plural:expr, $singular:expr, $namespaced:expr) => {
        ResourceInfo {
            group: GROUP,
            version: "v1beta1",
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $namespaced,
            short_names: NONE,
            categories: NONE,
            verbs: READ_ONLY,
            subresources: &[],
            storage_prefix: "",
            canonicalize: None,
            strategy: &MetricsStrategy,
            printer: &tables::DefaultTable,
        }
    };
}

/// metrics.k8s.io/v1beta1 NodeMetrics: a node's CPU and memory use.
pub const NODE_METRICS: ResourceInfo = metrics!("NodeMetrics", "nodes", "node", false);

/// metrics.k8s.io/v1beta1 PodMetrics: a pod's containers' CPU and memory use.
pub const POD_METRICS: ResourceInfo = metrics!("PodMetrics", "pods", "pod", true);
