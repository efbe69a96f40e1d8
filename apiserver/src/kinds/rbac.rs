//! The RBAC kinds: Roles, ClusterRoles and their bindings, whose names are path segments
//! (`system:` names are allowed).

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// rbac.authorization.k8s.io/v1 ClusterRole.
pub const CLUSTER_ROLES: ResourceInfo = resource!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/clusterroles", k8s::rbac::v1::ClusterRole,
        strategy: &ClusterRoleStrategy, printer: &tables::DefaultTable);

/// rbac.authorization.k8s.io/v1 ClusterRoleBinding.
pub const CLUSTER_ROLE_BINDINGS: ResourceInfo = resource!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/clusterrolebindings", k8s::rbac::v1::ClusterRoleBinding,
        strategy: &ClusterRoleBindingStrategy, printer: &tables::other::ClusterRoleBindingTable);

/// rbac.authorization.k8s.io/v1 Role.
pub const ROLES: ResourceInfo = resource!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/roles", k8s::rbac::v1::Role,
        strategy: &RoleStrategy, printer: &tables::DefaultTable);

/// rbac.authorization.k8s.io/v1 RoleBinding.
pub const ROLE_BINDINGS: ResourceInfo = resource!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/rolebindings", k8s::rbac::v1::RoleBinding,
        strategy: &RoleBindingStrategy, printer: &tables::other::RoleBindingTable);

/// The rules of ClusterRole objects.
pub struct ClusterRoleStrategy;

impl Strategy for ClusterRoleStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::rbac::validate_cluster_role(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of ClusterRoleBinding objects.
pub struct ClusterRoleBindingStrategy;

impl Strategy for ClusterRoleBindingStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_binding(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::rbac::validate_cluster_role_binding(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of Role objects.
pub struct RoleStrategy;

impl Strategy for RoleStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::rbac::validate_role(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of RoleBinding objects.
pub struct RoleBindingStrategy;

impl Strategy for RoleBindingStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_binding(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::rbac::validate_role_binding(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
