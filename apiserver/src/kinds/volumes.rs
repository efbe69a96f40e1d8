//! PersistentVolumes and PersistentVolumeClaims (both Pending on create) and StorageClasses.

use k8s_openapi::api as k8s;
use serde_json::{json, Value};

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 PersistentVolume.
pub const PERSISTENT_VOLUMES: ResourceInfo = resource!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false, short: &["pv"], categories: NONE,
        sub: &[status_of("", "v1", "PersistentVolume")], prefix: "/registry/persistentvolumes", k8s::core::v1::PersistentVolume,
        strategy: &PersistentVolumeStrategy, printer: &tables::volumes::PersistentVolumeTable);

/// core/v1 PersistentVolumeClaim.
pub const PERSISTENT_VOLUME_CLAIMS: ResourceInfo = resource!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true, short: &["pvc"], categories: NONE,
        sub: &[status_of("", "v1", "PersistentVolumeClaim")], prefix: "/registry/persistentvolumeclaims", k8s::core::v1::PersistentVolumeClaim,
        strategy: &PersistentVolumeClaimStrategy, printer: &tables::volumes::PersistentVolumeClaimTable);

/// storage.k8s.io/v1 StorageClass.
pub const STORAGE_CLASSES: ResourceInfo = resource!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false, short: &["sc"], categories: NONE,
        sub: &[], prefix: "/registry/storageclasses", k8s::storage::v1::StorageClass,
        strategy: &StorageClassStrategy, printer: &tables::other::StorageClassTable);

/// The rules of PersistentVolume objects.
pub struct PersistentVolumeStrategy;

impl Strategy for PersistentVolumeStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_pv(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_pv_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Pending"});
    }
}

/// The rules of PersistentVolumeClaim objects.
pub struct PersistentVolumeClaimStrategy;

impl Strategy for PersistentVolumeClaimStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_pvc(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_pvc(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::PersistentVolumeClaim
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Pending"});
    }
}

/// The rules of StorageClass objects.
pub struct StorageClassStrategy;

impl Strategy for StorageClassStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_storage_class(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::misc::validate_storage_class(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
