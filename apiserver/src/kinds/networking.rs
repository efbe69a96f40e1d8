//! networking.k8s.io: IngressClasses, Ingresses and NetworkPolicies.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// networking.k8s.io/v1 IngressClass.
pub const INGRESS_CLASSES: ResourceInfo = resource!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", false, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/ingressclasses", k8s::networking::v1::IngressClass,
        strategy: &IngressClassStrategy, printer: &tables::networking::IngressClassTable);

/// networking.k8s.io/v1 Ingress.
pub const INGRESSES: ResourceInfo = resource!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", true, short: &["ing"], categories: NONE,
        sub: &[status_of("networking.k8s.io", "v1", "Ingress")], prefix: "/registry/ingress", k8s::networking::v1::Ingress,
        strategy: &IngressStrategy, printer: &tables::networking::IngressTable);

/// networking.k8s.io/v1 NetworkPolicy.
pub const NETWORK_POLICIES: ResourceInfo = resource!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", true, short: &["netpol"], categories: NONE,
        sub: &[], prefix: "/registry/networkpolicies", k8s::networking::v1::NetworkPolicy,
        strategy: &NetworkPolicyStrategy, printer: &tables::networking::NetworkPolicyTable);

/// The rules of IngressClass objects.
pub struct IngressClassStrategy;

impl Strategy for IngressClassStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::networking::validate_ingress_class(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of Ingress objects.
pub struct IngressStrategy;

impl Strategy for IngressStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::networking::validate_ingress_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of NetworkPolicy objects.
pub struct NetworkPolicyStrategy;

impl Strategy for NetworkPolicyStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_network_policy(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::networking::validate_network_policy_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
