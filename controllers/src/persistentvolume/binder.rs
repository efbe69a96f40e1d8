//! What the binder decides for one claim or one volume, as pure functions of the objects
//! (tested case by case), and the API writes that carry a decision out.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use rudder_facts::volumes::{
    self, claim_class, claim_volume, is_bound_to, satisfies, selected_node, Search, BIND_COMPLETED,
    BOUND_BY_CONTROLLER, NO_PROVISIONER, STORAGE_PROVISIONER,
};
use serde_json::json;

use crate::error::Result;

/// An event to record about the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            message: message.into(),
        }
    }

    fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason,
            message: message.into(),
        }
    }

    pub fn event_type(&self) -> EventType {
        if self.warning {
            EventType::Warning
        } else {
            EventType::Normal
        }
    }
}

/// What happens to a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep {
    /// Bind it to this volume (whatever of the binding is missing on either side).
    Bind(Arc<PersistentVolume>),
    /// It stays Pending; `provisioner`: the one expected to create its volume.
    Pending {
        note: Option<Note>,
        provisioner: Option<String>,
    },
    /// Its volume is gone or bound elsewhere after the binding completed.
    Lost(Note),
}

/// Upstream's label-selector semantics through kube-core.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

fn waits_for_first_consumer(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

/// The step for `claim` given every volume, its class (`None`: none or not found) and the
/// node it was scheduled to.
pub fn claim_step(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    class: Option<&StorageClass>,
    node: Option<&Node>,
) -> ClaimStep {
    let completed = volumes::annotation(&claim.metadata.annotations, BIND_COMPLETED).is_some();
    if let Some(wanted) = claim_volume(claim) {
        let Some(volume) = volumes.iter().find(|v| v.name_any() == wanted) else {
            if completed {
                return ClaimStep::Lost(Note::warning(
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                ));
            }
            return ClaimStep::Pending {
                note: Some(Note::normal(
                    "FailedBinding",
                    format!("volume \"{wanted}\" not found"),
                )),
                provisioner: None,
            };
        };
        let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_none() {
            // Pre-bound by the user to a free volume: it must still fit.
            return match satisfies(volume, claim, &selects) {
                Ok(()) => ClaimStep::Bind(volume.clone()),
                Err(mismatch) => ClaimStep::Pending {
                    note: Some(Note::warning(
                        "VolumeMismatch",
                        format!("Cannot bind to requested volume \"{wanted}\": {mismatch}"),
                    )),
                    provisioner: None,
                },
            };
        }
        if is_bound_to(volume, claim) {
            return ClaimStep::Bind(volume.clone());
        }
        if completed {
            return ClaimStep::Lost(Note::warning(
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            ));
        }
        return ClaimStep::Pending {
            note: Some(Note::normal(
                "FailedBinding",
                format!("volume \"{wanted}\" already bound to a different claim."),
            )),
            provisioner: None,
        };
    }
    let delayed = waits_for_first_consumer(class);
    let chosen = selected_node(claim);
    let none = |_: &str| false;
    let search = Search {
        node: if delayed { node } else { None },
        // Without a node, the scheduler picks volumes for delayed claims.
        pre_bound_only: delayed && chosen.is_none(),
        taken: &none,
        selects: &selects,
    };
    if let Some(volume) = volumes::find_match(volumes.iter().map(Arc::as_ref), claim, &search) {
        let name = volume.name_any();
        if let Some(found) = volumes.iter().find(|v| v.name_any() == name) {
            return ClaimStep::Bind(found.clone());
        }
    }
    if delayed && chosen.is_none() {
        return ClaimStep::Pending {
            note: Some(Note::normal(
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )),
            provisioner: None,
        };
    }
    let class_name = claim_class(claim);
    match class {
        Some(class) if class.provisioner != NO_PROVISIONER => ClaimStep::Pending {
            note: Some(Note::normal(
                "ExternalProvisioning",
                format!(
                    "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
                    class.provisioner
                ),
            )),
            provisioner: Some(class.provisioner.clone()),
        },
        None if !class_name.is_empty() => ClaimStep::Pending {
            note: Some(Note::warning(
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io \"{class_name}\" not found"),
            )),
            provisioner: None,
        },
        _ => ClaimStep::Pending {
            note: Some(Note::normal(
                "FailedBinding",
                if class_name.is_empty() {
                    "no persistent volumes available for this claim and no storage class is set"
                } else {
                    "no persistent volumes available for this claim"
                },
            )),
            provisioner: None,
        },
    }
}

/// What happens to a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeStep {
    /// Its phase should be this.
    Phase(&'static str),
    /// Its claim is not bound yet: the binder is between its two writes (or a user pre-bound
    /// the volume). Nothing changes here; the claim's sync finishes the binding.
    AwaitClaim,
    /// Bound to a claim that is bound elsewhere: free it (a user's pre-binding keeps the
    /// claim's name, without its uid).
    Unbind,
    /// Its claim is gone; reclaim it by its policy.
    Reclaim(Reclaim),
}

/// A released volume's fate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// `Retain`: Released, left to the administrator.
    Retain,
    /// `Delete`: the PersistentVolume object is deleted.
    Delete,
    /// `Recycle` (deprecated upstream): not done; the volume is marked Failed.
    Unsupported(String),
}

/// The step for `volume` given the claim its `claimRef` names (`None`: not found, or a
/// claim of the same name with another uid).
pub fn volume_step(volume: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumeStep {
    let spec = volume.spec.clone().unwrap_or_default();
    let Some(reference) = spec.claim_ref.as_ref() else {
        return VolumeStep::Phase("Available");
    };
    if reference.uid.as_deref().unwrap_or_default().is_empty() {
        // Pre-bound to a claim by name: available to that claim only.
        return VolumeStep::Phase("Available");
    }
    let claim = claim.filter(|c| c.metadata.uid == reference.uid);
    let Some(claim) = claim else {
        return VolumeStep::Reclaim(
            match spec
                .persistent_volume_reclaim_policy
                .as_deref()
                .unwrap_or("Retain")
            {
                "Delete" => Reclaim::Delete,
                "Retain" => Reclaim::Retain,
                other => Reclaim::Unsupported(other.to_string()),
            },
        );
    };
    match claim_volume(claim) {
        None => VolumeStep::AwaitClaim,
        Some(name) if Some(name) == volume.metadata.name.as_deref() => VolumeStep::Phase("Bound"),
        Some(_) => VolumeStep::Unbind,
    }
}

/// `volume` freed from a claim that is bound elsewhere: a binding we made goes entirely, a
/// user's pre-binding keeps the claim's name so that it can bind again once that claim is free.
pub fn unbound(volume: &PersistentVolume) -> PersistentVolume {
    let mut volume = volume.clone();
    let ours = volumes::annotation(&volume.metadata.annotations, BOUND_BY_CONTROLLER).is_some();
    if let Some(spec) = volume.spec.as_mut() {
        if ours {
            spec.claim_ref = None;
        } else if let Some(reference) = spec.claim_ref.as_mut() {
            reference.uid = None;
            reference.resource_version = None;
        }
    }
    volume.annotations_mut().remove(BOUND_BY_CONTROLLER);
    volume
}

/// Writes `phase` (and `message`) to a volume's status unless it has it.
pub async fn set_volume_phase(
    client: &Client,
    volume: &PersistentVolume,
    phase: &str,
    message: Option<&str>,
) -> Result<()> {
    let status = volume.status.clone().unwrap_or_default();
    if status.phase.as_deref() == Some(phase) && status.message.as_deref() == message {
        return Ok(());
    }
    let patch = json!({"status": {"phase": phase, "message": message,
        "lastPhaseTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}});
    Api::<PersistentVolume>::all(client.clone())
        .patch_status(
            &volume.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Writes `phase` to a claim's status unless it has it (Bound: with the volume's capacity and
/// access modes).
pub async fn set_claim_phase(
    client: &Client,
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<()> {
    let status = claim.status.clone().unwrap_or_default();
    let spec = volume.and_then(|v| v.spec.as_ref());
    let capacity = spec.and_then(|s| s.capacity.clone());
    let modes = spec.and_then(|s| s.access_modes.clone());
    if status.phase.as_deref() == Some(phase)
        && (volume.is_none() || (status.capacity == capacity && status.access_modes == modes))
    {
        return Ok(());
    }
    let patch = match volume {
        Some(_) => json!({"status": {"phase": phase, "capacity": capacity, "accessModes": modes}}),
        None => json!({"status": {"phase": phase}}),
    };
    Api::<PersistentVolumeClaim>::namespaced(
        client.clone(),
        &claim.namespace().unwrap_or_default(),
    )
    .patch_status(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Binds `volume` and `claim` to each other: the volume's `claimRef` and phase, then the
/// claim's `volumeName`, annotations and phase — each write only if missing, each pinned to
/// the resourceVersion read, so a concurrent change makes the sync start again.
pub async fn bind(
    client: &Client,
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<()> {
    let mut volume = volume.clone();
    if !is_bound_to(&volume, claim)
        || volume
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.as_deref())
            .is_none_or(str::is_empty)
    {
        let spec = volume.spec.get_or_insert_with(Default::default);
        let by_us = spec.claim_ref.is_none();
        spec.claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: claim.namespace(),
            name: Some(claim.name_any()),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..ObjectReference::default()
        });
        if by_us {
            volume
                .annotations_mut()
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        volume = Api::<PersistentVolume>::all(client.clone())
            .replace(&volume.name_any(), &PostParams::default(), &volume)
            .await?;
    }
    set_volume_phase(client, &volume, "Bound", None).await?;
    let name = volume.name_any();
    let mut claim = claim.clone();
    let completed = volumes::annotation(&claim.metadata.annotations, BIND_COMPLETED).is_some();
    if claim_volume(&claim) != Some(name.as_str()) || !completed {
        if claim_volume(&claim).is_none() {
            claim.spec.get_or_insert_with(Default::default).volume_name = Some(name.clone());
            claim
                .annotations_mut()
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        claim
            .annotations_mut()
            .insert(BIND_COMPLETED.into(), "yes".into());
        claim = Api::<PersistentVolumeClaim>::namespaced(
            client.clone(),
            &claim.namespace().unwrap_or_default(),
        )
        .replace(&claim.name_any(), &PostParams::default(), &claim)
        .await?;
    }
    set_claim_phase(client, &claim, "Bound", Some(&volume)).await
}

/// Frees a volume from a claim that went elsewhere ([`unbound`]) and makes it Available.
pub async fn unbind(client: &Client, volume: &PersistentVolume) -> Result<()> {
    let volume = unbound(volume);
    let volume = Api::<PersistentVolume>::all(client.clone())
        .replace(&volume.name_any(), &PostParams::default(), &volume)
        .await?;
    set_volume_phase(client, &volume, "Available", None).await
}

/// Names the provisioner expected to create a claim's volume on the claim (both spellings).
pub async fn annotate_provisioner(
    client: &Client,
    claim: &PersistentVolumeClaim,
    provisioner: &str,
) -> Result<()> {
    if volumes::annotation(&claim.metadata.annotations, STORAGE_PROVISIONER) == Some(provisioner) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {
        STORAGE_PROVISIONER: provisioner,
        volumes::BETA_STORAGE_PROVISIONER: provisioner,
    }}});
    Api::<PersistentVolumeClaim>::namespaced(
        client.clone(),
        &claim.namespace().unwrap_or_default(),
    )
    .patch(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}
