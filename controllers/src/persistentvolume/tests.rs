//! The binder's decisions, case by case, and the provisioner's volumes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{json, Value};

use super::binder::{claim_step, volume_step, ClaimStep, Reclaim, VolumeStep};
use super::provisioner::{directory_name, volume_for};

fn volume(name: &str, extra: Value) -> Arc<PersistentVolume> {
    let mut object = json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual", "hostPath": {"path": "/x"}},
        "status": {"phase": "Available"},
    });
    merge(&mut object, extra);
    Arc::new(serde_json::from_value(object).expect("volume"))
}

fn claim(extra: Value) -> PersistentVolumeClaim {
    let mut object = json!({
        "metadata": {"name": "data", "namespace": "default", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
            "resources": {"requests": {"storage": "1Gi"}}},
    });
    merge(&mut object, extra);
    serde_json::from_value(object).expect("claim")
}

fn class(mode: &str, provisioner: &str) -> StorageClass {
    serde_json::from_value(json!({"metadata": {"name": "manual"},
        "provisioner": provisioner, "volumeBindingMode": mode}))
    .expect("class")
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch,
    }
}

fn bound_to(step: &ClaimStep) -> Option<String> {
    match step {
        ClaimStep::Bind(volume) => volume.metadata.name.clone(),
        _ => None,
    }
}

fn reason(step: &ClaimStep) -> Option<&'static str> {
    match step {
        ClaimStep::Pending { note, .. } => note.as_ref().map(|n| n.reason),
        ClaimStep::Lost(note) => Some(note.reason),
        ClaimStep::Bind(_) => None,
    }
}

#[test]
fn claims_bind_wait_or_fail_as_upstreams_binder() {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
        "labels": {"kubernetes.io/hostname": "n1"}}}))
    .expect("node");
    let immediate = class("Immediate", "kubernetes.io/no-provisioner");
    let delayed = class("WaitForFirstConsumer", "rudder.dev/local-path");
    let free = volume("free", json!({}));
    let pinned = volume(
        "pinned",
        json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}),
    );
    let pre_bound = volume(
        "mine",
        json!({"spec": {"claimRef": {"name": "data", "namespace": "default"}}}),
    );
    let other = volume(
        "other",
        json!({"spec": {"claimRef": {"name": "x", "namespace": "default", "uid": "u9"}}}),
    );
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        PersistentVolumeClaim,
        Vec<Arc<PersistentVolume>>,
        Option<&StorageClass>,
        Option<&Node>,
        Option<&str>,
        Option<&str>,
    )> = vec![
        (
            "immediate: the free volume",
            claim(json!({})),
            vec![free.clone()],
            Some(&immediate),
            None,
            Some("free"),
            None,
        ),
        (
            "no class, no volume",
            claim(json!({"spec": {"storageClassName": ""}})),
            vec![free.clone()],
            None,
            None,
            None,
            Some("FailedBinding"),
        ),
        (
            "a class that does not exist",
            claim(json!({"spec": {"storageClassName": "gone"}})),
            vec![],
            None,
            None,
            None,
            Some("ProvisioningFailed"),
        ),
        (
            "delayed without a node waits",
            claim(json!({})),
            vec![free.clone()],
            Some(&delayed),
            None,
            None,
            Some("WaitForFirstConsumer"),
        ),
        (
            "delayed: a pre-bound volume binds at once",
            claim(json!({})),
            vec![pre_bound.clone()],
            Some(&delayed),
            None,
            Some("mine"),
            None,
        ),
        (
            "delayed with a node: a volume there",
            claim(
                json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}),
            ),
            vec![pinned.clone()],
            Some(&delayed),
            Some(&node),
            Some("pinned"),
            None,
        ),
        (
            "delayed with a node, none there: provisioning",
            claim(
                json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}),
            ),
            vec![],
            Some(&delayed),
            Some(&node),
            None,
            Some("ExternalProvisioning"),
        ),
        (
            "volumeName: binds to that free volume",
            claim(json!({"spec": {"volumeName": "free"}})),
            vec![free.clone()],
            None,
            None,
            Some("free"),
            None,
        ),
        (
            "volumeName: too small",
            claim(
                json!({"spec": {"volumeName": "free", "resources": {"requests": {"storage": "5Gi"}}}}),
            ),
            vec![free.clone()],
            None,
            None,
            None,
            Some("VolumeMismatch"),
        ),
        (
            "volumeName: bound elsewhere",
            claim(json!({"spec": {"volumeName": "other"}})),
            vec![other.clone()],
            None,
            None,
            None,
            Some("FailedBinding"),
        ),
        (
            "volumeName: missing",
            claim(json!({"spec": {"volumeName": "nope"}})),
            vec![],
            None,
            None,
            None,
            Some("FailedBinding"),
        ),
        (
            "bound, then the volume vanished",
            claim(json!({"spec": {"volumeName": "nope"},
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}})),
            vec![],
            None,
            None,
            None,
            Some("ClaimLost"),
        ),
    ];
    for (what, claim, volumes, class, node, bound, why) in cases {
        let step = claim_step(&claim, &volumes, class, node);
        assert_eq!(bound_to(&step).as_deref(), bound, "{what}: {step:?}");
        assert_eq!(reason(&step), why, "{what}: {step:?}");
    }
}

#[test]
fn provisioning_is_asked_of_the_classes_provisioner() {
    let delayed = class("WaitForFirstConsumer", "rudder.dev/local-path");
    let claim =
        claim(json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}));
    match claim_step(&claim, &[], Some(&delayed), None) {
        ClaimStep::Pending { provisioner, .. } => {
            assert_eq!(provisioner.as_deref(), Some("rudder.dev/local-path"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn volumes_follow_their_claims() {
    let bound_ref = json!({"spec": {"claimRef": {"name": "data", "namespace": "default", "uid": "u1"},
        "persistentVolumeReclaimPolicy": "Retain"}});
    let retained = volume("v", bound_ref.clone());
    let mut deleting = bound_ref.clone();
    deleting["spec"]["persistentVolumeReclaimPolicy"] = json!("Delete");
    let deleted = volume("v", deleting);
    let recycled = volume(
        "v",
        json!({"spec": {"claimRef": {"name": "data", "namespace": "default", "uid": "u1"},
        "persistentVolumeReclaimPolicy": "Recycle"}}),
    );
    let bound_claim = claim(json!({"spec": {"volumeName": "v"}}));
    let elsewhere = claim(json!({"spec": {"volumeName": "w"}}));
    let recreated = claim(json!({"metadata": {"uid": "u2"}}));
    assert_eq!(
        volume_step(&volume("v", json!({})), None),
        VolumeStep::Phase("Available")
    );
    assert_eq!(
        volume_step(&retained, Some(&bound_claim)),
        VolumeStep::Phase("Bound")
    );
    // The binder is between its write of the volume and its write of the claim: the volume's
    // phase is left alone (it was briefly set back to Available, which a reader could see).
    assert_eq!(
        volume_step(&retained, Some(&claim(json!({})))),
        VolumeStep::AwaitClaim
    );
    assert_eq!(
        volume_step(&retained, None),
        VolumeStep::Reclaim(Reclaim::Retain)
    );
    assert_eq!(
        volume_step(&retained, Some(&recreated)),
        VolumeStep::Reclaim(Reclaim::Retain)
    );
    assert_eq!(
        volume_step(&deleted, None),
        VolumeStep::Reclaim(Reclaim::Delete)
    );
    assert!(matches!(
        volume_step(&recycled, None),
        VolumeStep::Reclaim(Reclaim::Unsupported(_))
    ));
    // Ours, but the claim went to another volume: freed.
    let mut ours = bound_ref;
    ours["metadata"] = json!({"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}});
    assert_eq!(
        volume_step(&volume("v", ours.clone()), Some(&elsewhere)),
        VolumeStep::Unbind
    );
    let freed = super::binder::unbound(&volume("v", ours));
    assert!(freed.spec.and_then(|s| s.claim_ref).is_none());
    assert!(freed.metadata.annotations.unwrap_or_default().is_empty());
    // A user's pre-binding to a claim that went elsewhere keeps the claim's name, not its uid.
    assert_eq!(volume_step(&retained, Some(&elsewhere)), VolumeStep::Unbind);
    let freed = super::binder::unbound(&retained);
    let reference = freed.spec.and_then(|s| s.claim_ref).expect("claimRef kept");
    assert_eq!(reference.name.as_deref(), Some("data"));
    assert_eq!(reference.uid, None);
}

#[test]
fn a_provisioned_volume_lives_on_the_chosen_node() {
    let class: StorageClass = serde_json::from_value(json!({"metadata": {"name": "local-path"},
        "provisioner": "rudder.dev/local-path", "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("class");
    let claim = claim(json!({"spec": {"storageClassName": "local-path"}}));
    let volume = volume_for(&claim, &class, "n1", "/data/storage/");
    let spec = volume.spec.expect("spec");
    assert_eq!(volume.metadata.name.as_deref(), Some("pvc-u1"));
    assert_eq!(directory_name(&claim), "pvc-u1_default_data");
    let host = spec.host_path.expect("hostPath");
    assert_eq!(host.path, "/data/storage/pvc-u1_default_data");
    assert_eq!(host.type_.as_deref(), Some("DirectoryOrCreate"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.claim_ref.and_then(|r| r.uid).as_deref(), Some("u1"));
    let term = &spec
        .node_affinity
        .and_then(|a| a.required)
        .expect("affinity")
        .node_selector_terms[0];
    let requirement = &term.match_expressions.as_ref().expect("expressions")[0];
    assert_eq!(requirement.key, "kubernetes.io/hostname");
    assert_eq!(requirement.values.as_deref(), Some(&["n1".to_string()][..]));
    assert_eq!(spec.capacity.expect("capacity")["storage"].0, "1Gi");
    assert_eq!(
        volume.metadata.annotations.expect("annotations")["pv.kubernetes.io/provisioned-by"],
        "rudder.dev/local-path"
    );
}
