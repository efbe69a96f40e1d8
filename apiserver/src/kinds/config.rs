//! ConfigMaps, Secrets and ServiceAccounts.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at;
use crate::selectors::{FieldSet, Fields, Refusal, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 ConfigMap.
pub const CONFIG_MAPS: ResourceInfo = resource!("", "v1", "ConfigMap", "configmaps", "configmap", true, short: &["cm"], categories: NONE,
        sub: &[], prefix: "/registry/configmaps", k8s::core::v1::ConfigMap,
        strategy: &ConfigMapStrategy, printer: &tables::core::ConfigMapTable);

/// core/v1 Secret.
pub const SECRETS: ResourceInfo = resource!("", "v1", "Secret", "secrets", "secret", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/secrets", k8s::core::v1::Secret,
        strategy: &SecretStrategy, printer: &tables::core::SecretTable);

/// core/v1 ServiceAccount.
pub const SERVICE_ACCOUNTS: ResourceInfo = resource!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true, short: &["sa"], categories: NONE,
        sub: &[SubresourceInfo { name: Subresource::Token, kind: GroupVersionKind { group: "authentication.k8s.io", version: "v1", kind: "TokenRequest" }, verbs: CREATE_ONLY }],
        prefix: "/registry/serviceaccounts", k8s::core::v1::ServiceAccount,
        strategy: &ServiceAccountStrategy, printer: &tables::core::ServiceAccountTable);

/// The rules of ConfigMap objects.
pub struct ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_config_map(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of Secret objects.
pub struct SecretStrategy;

impl Strategy for SecretStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_secret(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_secret(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &SECRET_FIELDS
    }
}

/// The rules of ServiceAccount objects.
pub struct ServiceAccountStrategy;

impl Strategy for ServiceAccountStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_service_account(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::ServiceAccount
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// Secrets select by type.
static SECRET_FIELDS: FieldSet = FieldSet {
    accepted: &["type", "metadata.namespace", "metadata.name"],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        fields.insert("type".into(), at(obj, "/type"));
    },
};
