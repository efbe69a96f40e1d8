//! Persistent volumes as the PV binder, the local-path provisioner, the scheduler's
//! VolumeBinding plugin and the kubelet all see them: upstream's annotation names, the
//! storage class of a claim or volume, whether a volume can serve a claim (capacity, access
//! modes, class, volume mode, label selector), the smallest volume that can, and whether a
//! volume's node affinity lets it be used on a node.
//!
//! Label selectors are matched by the caller (kube-core's `Selector`), handed in as a
//! function, so this crate stays on k8s-openapi alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::nodes::term_matches_node;
use crate::quantity;

/// The provisioner name of Rudder's built-in local-path provisioner.
pub const LOCAL_PATH_PROVISIONER: &str = "rudder.dev/local-path";
/// The default StorageClass the apiserver creates at bootstrap (as k3s ships it).
pub const LOCAL_PATH_CLASS: &str = "local-path";
/// A Node annotation set by its kubelet: where local-path volumes of that node live.
pub const STORAGE_BASE_ANNOTATION: &str = "rudder.dev/local-path-base";
/// Where local-path volumes live on a node that does not say (`rudder agent`'s default).
pub const DEFAULT_STORAGE_BASE: &str = "/var/lib/rudder/storage";
/// Set on a claim by the scheduler: the node its pod goes to (WaitForFirstConsumer).
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set on a claim once the binder has finished binding it.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume whose binding the binder (not a user) made.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set on a volume by the provisioner that created it.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Set on a claim by the binder: the provisioner expected to create its volume.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta spelling of [`STORAGE_PROVISIONER`], still set for older provisioners.
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The finalizer that keeps a claim while a pod uses it (StorageObjectInUseProtection).
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while it is bound.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";
/// The pre-1.6 spelling of a claim's or volume's class.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of classes whose volumes are created by hand only.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The label every kubelet puts on its Node, and local volumes' node affinity names.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The StorageClass a claim names (`""`: none).
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    annotation(&claim.metadata.annotations, BETA_STORAGE_CLASS)
        .or_else(|| claim.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// The StorageClass a volume belongs to (`""`: none).
pub fn volume_class(volume: &PersistentVolume) -> &str {
    annotation(&volume.metadata.annotations, BETA_STORAGE_CLASS)
        .or_else(|| volume.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// An annotation's value.
pub fn annotation<'a>(
    annotations: &'a Option<BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations.as_ref()?.get(key).map(String::as_str)
}

/// The bytes a claim requests.
pub fn claim_request(claim: &PersistentVolumeClaim) -> i64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| quantity::value(&q.0))
        .unwrap_or(0)
}

/// The bytes a volume holds.
pub fn volume_capacity(volume: &PersistentVolume) -> i64 {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| quantity::value(&q.0))
        .unwrap_or(0)
}

/// The volume a claim is bound to (`spec.volumeName`), if any.
pub fn claim_volume(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .volume_name
        .as_deref()
        .filter(|name| !name.is_empty())
}

/// The node the scheduler chose for a claim's first pod.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata.annotations, SELECTED_NODE).filter(|n| !n.is_empty())
}

/// Whether a volume's `claimRef` names this claim (and its uid, when the ref has one).
pub fn is_bound_to(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    reference.name == claim.metadata.name
        && reference.namespace == claim.metadata.namespace
        && reference
            .uid
            .as_deref()
            .is_none_or(|uid| uid.is_empty() || Some(uid) == claim.metadata.uid.as_deref())
}

/// Whether the volume's required node affinity lets it be used on `node` (none: anywhere).
pub fn node_allows(volume: &PersistentVolume, node: &Node) -> bool {
    let Some(required) = volume
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|term| term_matches_node(term, node))
}

fn volume_mode(mode: Option<&String>) -> &str {
    mode.map(String::as_str).unwrap_or("Filesystem")
}

/// Why a volume cannot serve a claim, in upstream's words where it has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    VolumeMode,
    StorageClass,
    Selector,
    AccessModes,
    Capacity,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mismatch::VolumeMode => "incompatible volumeMode",
            Mismatch::StorageClass => "storageClassName does not match",
            Mismatch::Selector => "the claim's selector does not match the volume's labels",
            Mismatch::AccessModes => "incompatible accessMode",
            Mismatch::Capacity => "requested PV is too small",
        })
    }
}

/// Whether `volume` can serve `claim`, apart from who it is bound to and its node.
pub fn satisfies(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
    selects: &dyn Fn(&LabelSelector, &BTreeMap<String, String>) -> bool,
) -> Result<(), Mismatch> {
    let (Some(spec), Some(wanted)) = (volume.spec.as_ref(), claim.spec.as_ref()) else {
        return Err(Mismatch::Capacity);
    };
    if volume_mode(spec.volume_mode.as_ref()) != volume_mode(wanted.volume_mode.as_ref()) {
        return Err(Mismatch::VolumeMode);
    }
    if volume_class(volume) != claim_class(claim) {
        return Err(Mismatch::StorageClass);
    }
    if let Some(selector) = &wanted.selector {
        let empty = BTreeMap::new();
        let labels = volume.metadata.labels.as_ref().unwrap_or(&empty);
        if !selects(selector, labels) {
            return Err(Mismatch::Selector);
        }
    }
    let offered = spec.access_modes.as_deref().unwrap_or_default();
    if !wanted
        .access_modes
        .iter()
        .flatten()
        .all(|mode| offered.contains(mode))
    {
        return Err(Mismatch::AccessModes);
    }
    if volume_capacity(volume) < claim_request(claim) {
        return Err(Mismatch::Capacity);
    }
    Ok(())
}

/// What a search for a claim's volume may pick.
pub struct Search<'a> {
    /// Only volumes usable on this node (the scheduler's question, and a claim with a
    /// selected node).
    pub node: Option<&'a Node>,
    /// Only volumes pre-bound to the claim (the binder with a WaitForFirstConsumer claim
    /// that has no node yet: the scheduler picks those).
    pub pre_bound_only: bool,
    /// Volumes already promised to other claims (the scheduler's assumptions).
    pub taken: &'a dyn Fn(&str) -> bool,
    pub selects: &'a dyn Fn(&LabelSelector, &BTreeMap<String, String>) -> bool,
}

/// The volume for `claim` among `volumes`: one pre-bound to it if any fits, else the
/// smallest Available unbound volume that satisfies it.
pub fn find_match<'v>(
    volumes: impl IntoIterator<Item = &'v PersistentVolume>,
    claim: &PersistentVolumeClaim,
    search: &Search,
) -> Option<&'v PersistentVolume> {
    let request = claim_request(claim);
    let mut best: Option<&PersistentVolume> = None;
    for volume in volumes {
        if volume.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(spec) = volume.spec.as_ref() else {
            continue;
        };
        if volume_mode(spec.volume_mode.as_ref())
            != volume_mode(claim.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        {
            continue;
        }
        if search.node.is_some_and(|node| !node_allows(volume, node)) {
            continue;
        }
        if is_bound_to(volume, claim) {
            if volume_capacity(volume) >= request {
                return Some(volume);
            }
            continue;
        }
        if search.pre_bound_only || spec.claim_ref.is_some() {
            continue;
        }
        let name = volume.metadata.name.as_deref().unwrap_or_default();
        let available =
            volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available");
        if !available || (search.taken)(name) {
            continue;
        }
        if satisfies(volume, claim, search.selects).is_err() {
            continue;
        }
        if best.is_none_or(|b| volume_capacity(volume) < volume_capacity(b)) {
            best = Some(volume);
        }
    }
    best
}

#[cfg(test)]
mod tests;
