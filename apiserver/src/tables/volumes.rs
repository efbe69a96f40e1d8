//! Core (v1) storage tables: PersistentVolume and PersistentVolumeClaim.

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, is_deleting, name, opt_str_at, str_at, value_at};

use super::format::{age, age_col, col, name_col, quantity, wide};
use super::{Column, Printer};

/// The table of PersistentVolumes.
pub struct PersistentVolumeTable;

impl Printer for PersistentVolumeTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Capacity", "string", "The volume's storage capacity."),
            col(
                "Access Modes",
                "string",
                "All the ways the volume can be mounted.",
            ),
            col(
                "Reclaim Policy",
                "string",
                "What happens to the volume once its claim releases it: Retain, Delete or Recycle.",
            ),
            col(
                "Status",
                "string",
                "Whether the volume is available, bound to a claim, or released.",
            ),
            col(
                "Claim",
                "string",
                "The claim bound to this volume, as namespace/name.",
            ),
            col("StorageClass", "string", "The volume's storage class."),
            col(
                "VolumeAttributesClass",
                "string",
                "The volume's attributes class.",
            ),
            col(
                "Reason",
                "string",
                "A short CamelCase reason for a failure, if any.",
            ),
            age_col(),
            wide("VolumeMode", "string", VOLUME_MODE_DESC),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        pv_cells(obj, n, now)
    }
}

/// The table of PersistentVolumeClaims.
pub struct PersistentVolumeClaimTable;

impl Printer for PersistentVolumeClaimTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Status", "string", "The claim's current phase."),
            col(
                "Volume",
                "string",
                "The persistent volume bound to this claim.",
            ),
            col(
                "Capacity",
                "string",
                "The actual capacity of the bound volume.",
            ),
            col(
                "Access Modes",
                "string",
                "The access modes the bound volume actually has.",
            ),
            col("StorageClass", "string", "The claim's storage class."),
            col(
                "VolumeAttributesClass",
                "string",
                "The claim's volume attributes class.",
            ),
            age_col(),
            wide("VolumeMode", "string", VOLUME_MODE_DESC),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let n = Value::from(name(obj));
        pvc_cells(obj, n, now)
    }
}

const VOLUME_MODE_DESC: &str =
    "Whether the volume holds a formatted filesystem or stays a raw block device.";

/// Access modes in upstream's fixed order and short forms, de-duplicated.
fn access_modes(list: &[Value]) -> String {
    let have: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| have.contains(long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// The storage class: the legacy beta annotation wins over spec.storageClassName.
fn storage_class(obj: &Value) -> String {
    let ann = opt_str_at(
        obj,
        &[
            "metadata",
            "annotations",
            "volume.beta.kubernetes.io/storage-class",
        ],
    );
    ann.unwrap_or_else(|| str_at(obj, &["spec", "storageClassName"]))
        .to_string()
}

fn unset_or(v: Option<&str>) -> Value {
    v.unwrap_or("<unset>").into()
}

fn pv_cells(obj: &Value, n: Value, now: Timestamp) -> Vec<Value> {
    let claim = match value_at(obj, &["spec", "claimRef"]).filter(|c| c.is_object()) {
        Some(c) => format!("{}/{}", str_at(c, &["namespace"]), str_at(c, &["name"])),
        None => String::new(),
    };
    let phase = if is_deleting(obj) {
        "Terminating"
    } else {
        str_at(obj, &["status", "phase"])
    };
    vec![
        n,
        quantity(value_at(obj, &["spec", "capacity", "storage"])).into(),
        access_modes(array_at(obj, &["spec", "accessModes"])).into(),
        str_at(obj, &["spec", "persistentVolumeReclaimPolicy"]).into(),
        phase.into(),
        claim.into(),
        storage_class(obj).into(),
        unset_or(opt_str_at(obj, &["spec", "volumeAttributesClassName"])),
        str_at(obj, &["status", "reason"]).into(),
        age(obj, now),
        unset_or(opt_str_at(obj, &["spec", "volumeMode"])),
    ]
}

fn pvc_cells(obj: &Value, n: Value, now: Timestamp) -> Vec<Value> {
    let phase = if is_deleting(obj) {
        "Terminating"
    } else {
        str_at(obj, &["status", "phase"])
    };
    let volume = str_at(obj, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(value_at(obj, &["status", "capacity", "storage"])),
            access_modes(array_at(obj, &["status", "accessModes"])),
        )
    };
    vec![
        n,
        phase.into(),
        volume.into(),
        capacity.into(),
        modes.into(),
        storage_class(obj).into(),
        unset_or(opt_str_at(obj, &["spec", "volumeAttributesClassName"])),
        age(obj, now),
        unset_or(opt_str_at(obj, &["spec", "volumeMode"])),
    ]
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn row(printer: &dyn Printer, obj: Value) -> Vec<Value> {
        printer.cells(&obj, now())
    }

    const CREATED_3H: &str = "2024-05-01T09:00:00Z";

    #[test]
    fn persistent_volumes_show_claim_class_and_unset_fields() {
        let obj = json!({"metadata": {"name": "pv1", "creationTimestamp": CREATED_3H},
            "spec": {"capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast",
                "claimRef": {"namespace": "ns", "name": "data"}, "volumeMode": "Filesystem"},
            "status": {"phase": "Bound"}});
        assert_eq!(
            row(&PersistentVolumeTable, obj),
            [
                json!("pv1"),
                json!("1Gi"),
                json!("RWO,RWX"),
                json!("Retain"),
                json!("Bound"),
                json!("ns/data"),
                json!("fast"),
                json!("<unset>"),
                json!(""),
                json!("3h"),
                json!("Filesystem")
            ]
        );
    }

    #[test]
    fn claims_show_capacity_only_once_bound_and_terminating_when_deleted() {
        let pending = json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}},
                             "status": {"phase": "Pending"}});
        let r = row(&PersistentVolumeClaimTable, pending);
        assert_eq!(
            (r[1].clone(), r[3].clone(), r[8].clone()),
            (json!("Pending"), json!(""), json!("<unset>"))
        );
        let bound = json!({"metadata": {"deletionTimestamp": CREATED_3H,
                "annotations": {"volume.beta.kubernetes.io/storage-class": "legacy"}},
            "spec": {"volumeName": "pv1", "storageClassName": "fast"},
            "status": {"phase": "Bound", "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"]}});
        let r = row(&PersistentVolumeClaimTable, bound);
        assert_eq!(
            r[1..6],
            [
                json!("Terminating"),
                json!("pv1"),
                json!("5Gi"),
                json!("RWO"),
                json!("legacy")
            ]
        );
    }
}
