//! The apps group: Deployments, ReplicaSets, StatefulSets, DaemonSets and ControllerRevisions.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, Refusal, METADATA_ONLY};
use crate::validation::apps::Workload;
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// apps/v1 Deployment.
pub const DEPLOYMENTS: ResourceInfo = resource!("apps", "v1", "Deployment", "deployments", "deployment", true, short: &["deploy"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "Deployment")], prefix: "/registry/deployments", k8s::apps::v1::Deployment,
        strategy: &DeploymentStrategy, printer: &tables::apps::DeploymentTable);

/// apps/v1 ReplicaSet.
pub const REPLICA_SETS: ResourceInfo = resource!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, short: &["rs"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "ReplicaSet")], prefix: "/registry/replicasets", k8s::apps::v1::ReplicaSet,
        strategy: &ReplicaSetStrategy, printer: &tables::apps::ReplicaSetTable);

/// apps/v1 StatefulSet.
pub const STATEFUL_SETS: ResourceInfo = resource!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true, short: &["sts"], categories: ALL,
        sub: &[SCALE, status_of("apps", "v1", "StatefulSet")], prefix: "/registry/statefulsets", k8s::apps::v1::StatefulSet,
        strategy: &StatefulSetStrategy, printer: &tables::apps::StatefulSetTable);

/// apps/v1 DaemonSet.
pub const DAEMON_SETS: ResourceInfo = resource!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true, short: &["ds"], categories: ALL,
        sub: &[status_of("apps", "v1", "DaemonSet")], prefix: "/registry/daemonsets", k8s::apps::v1::DaemonSet,
        strategy: &DaemonSetStrategy, printer: &tables::apps::DaemonSetTable);

/// apps/v1 ControllerRevision.
pub const CONTROLLER_REVISIONS: ResourceInfo = resource!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/controllerrevisions", k8s::apps::v1::ControllerRevision,
        strategy: &ControllerRevisionStrategy, printer: &tables::apps::ControllerRevisionTable);

/// The rules of Deployment objects.
pub struct DeploymentStrategy;

impl Strategy for DeploymentStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_deployment(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::apps::validate_workload(Workload::Deployment, object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Deployment
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of ReplicaSet objects.
pub struct ReplicaSetStrategy;

impl Strategy for ReplicaSetStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_replicaset(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::apps::validate_workload(Workload::ReplicaSet, object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Workload
    }

    fn fields(&self) -> &'static FieldSet {
        &REPLICA_SET_FIELDS
    }
}

/// The rules of StatefulSet objects.
pub struct StatefulSetStrategy;

impl Strategy for StatefulSetStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_statefulset(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::apps::validate_workload(Workload::StatefulSet, object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Workload
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of DaemonSet objects.
pub struct DaemonSetStrategy;

impl Strategy for DaemonSetStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::workloads::default_daemonset(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::apps::validate_workload(Workload::DaemonSet, object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Workload
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of ControllerRevision objects.
pub struct ControllerRevisionStrategy;

impl Strategy for ControllerRevisionStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::apps::validate_controller_revision(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// ReplicaSets expose `status.replicas`, but (as upstream) no conversion func lets a request
/// name it.
static REPLICA_SET_FIELDS: FieldSet = FieldSet {
    accepted: METADATA_ONLY.accepted,
    refusal: Refusal::Default,
    paths: &[],
    extract: super::replication_controller::replica_count,
};
