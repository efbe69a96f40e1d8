//! The PersistentVolume binder (`persistentvolume-binder`) and Rudder's built-in local-path
//! provisioner (`local-path-provisioner`), as upstream's PV controller and k3s'
//! local-path-provisioner behave.
//!
//! The binder binds each claim to the smallest Available volume that satisfies it (capacity,
//! access modes, class, volume mode, selector) or to the volume it or the volume names
//! (pre-binding), writing `claimRef` first and the claim's `volumeName`,
//! `pv.kubernetes.io/bind-completed` and `bound-by-controller` after; it keeps both phases
//! (Pending/Bound/Lost, Available/Bound/Released/Failed), and reclaims a volume whose claim
//! is gone by its policy (Retain: Released; Delete: the object is deleted). Claims of a
//! `WaitForFirstConsumer` class wait until the scheduler names their node
//! (`volume.kubernetes.io/selected-node`). The provisioner ([`provisioner`]) creates the
//! volume of such a claim of the `rudder.dev/local-path` class: a hostPath directory on the
//! chosen node. See docs/volumes.md.

pub mod binder;
pub mod provisioner;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use rudder_facts::volumes::{claim_class, selected_node};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::events::publish;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;
use binder::{ClaimStep, Note, Reclaim, VolumeStep};

/// The binder's name in `--controllers`.
pub const BINDER: &str = "persistentvolume-binder";
/// The provisioner's name in `--controllers`.
pub const PROVISIONER: &str = "local-path-provisioner";

/// What the binder's two loops (claims, volumes) read.
pub struct Context {
    pub client: Client,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub nodes: Store<Node>,
    pub recorder: Recorder,
}

impl Context {
    fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = claim_class(claim);
        (!name.is_empty())
            .then(|| self.classes.get(&ObjectRef::new(name)))
            .flatten()
    }

    async fn note<K: kube::Resource<DynamicType = ()>>(&self, object: &K, note: &Note) {
        publish(
            &self.recorder,
            object,
            note.event_type(),
            note.reason,
            "Binding",
            note.message.clone(),
        )
        .await;
    }
}

/// The binder: one loop over claims, one over volumes, on one queue.
pub fn binder_controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let claims = informers.get::<PersistentVolumeClaim>();
    let claim_volumes = informers.get::<PersistentVolume>();
    let volumes = informers.get::<PersistentVolume>();
    let volume_claims = informers.get::<PersistentVolumeClaim>();
    let classes = informers.get::<StorageClass>();
    let nodes = informers.get::<Node>();
    let context = Arc::new(Context {
        client: client.clone(),
        claims: claims.store.clone(),
        volumes: volumes.store.clone(),
        classes: classes.store.clone(),
        nodes: nodes.store,
        recorder: crate::events::recorder(client, "persistentvolume-controller", identity),
    });
    let class_claims = claims.store.clone();
    let volume_claims_store = claims.store.clone();
    // Claims: woken by their own changes, by their volume's, and by a class appearing.
    let claim_loop = Controller::for_shared_stream(
        counted(
            claims.changes,
            queue.clone(),
            |c: &PersistentVolumeClaim| Some(key_of(c)),
        ),
        claims.store,
    )
    .watches_shared_stream(
        claim_volumes.changes,
        move |volume: Arc<PersistentVolume>| {
            // A volume names its claim; an unclaimed one may suit any unbound claim of its class
            // (the volume may show up after the claim was first looked at).
            let spec = volume.spec.as_ref();
            if let Some(reference) = spec.and_then(|s| s.claim_ref.as_ref()) {
                return match (reference.name.as_deref(), reference.namespace.as_deref()) {
                    (Some(name), Some(namespace)) => vec![ObjectRef::new(name).within(namespace)],
                    _ => Vec::new(),
                };
            }
            let class = spec
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default();
            volume_claims_store
                .state()
                .iter()
                .filter(|c| {
                    claim_class(c) == class
                        && c.spec.as_ref().is_some_and(|s| s.volume_name.is_none())
                })
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect::<Vec<_>>()
        },
    )
    .watches_shared_stream(classes.changes, move |class: Arc<StorageClass>| {
        let name = class.name_any();
        class_claims
            .state()
            .iter()
            .filter(|c| {
                claim_class(c) == name && c.spec.as_ref().is_some_and(|s| s.volume_name.is_none())
            })
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect::<Vec<_>>()
    });
    // Volumes: woken by their own changes and by their claim's.
    let volume_store = volumes.store.clone();
    let volume_loop = Controller::for_shared_stream(
        counted(volumes.changes, queue.clone(), |v: &PersistentVolume| {
            Some(key_of(v))
        }),
        volumes.store,
    )
    .watches_shared_stream(
        volume_claims.changes,
        move |claim: Arc<PersistentVolumeClaim>| {
            volume_store
                .state()
                .iter()
                .filter(|v| {
                    v.spec
                        .as_ref()
                        .and_then(|s| s.claim_ref.as_ref())
                        .is_some_and(|r| {
                            r.name == claim.metadata.name && r.namespace == claim.metadata.namespace
                        })
                })
                .map(|v| ObjectRef::from_obj(v.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let claims_run = runner::run(
        BINDER,
        claim_loop,
        context.clone(),
        queue.clone(),
        5,
        shutdown.clone(),
        sync_claim,
    );
    let volumes_run = runner::run(
        BINDER,
        volume_loop,
        context,
        queue,
        5,
        shutdown,
        sync_volume,
    );
    async move {
        tokio::join!(claims_run, volumes_run);
    }
    .boxed()
}

/// How often a pending claim is looked at again (upstream's `--pvclaimbinder-sync-period`).
const CLAIM_SYNC_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

/// One claim's sync.
pub async fn sync_claim(
    claim: Arc<PersistentVolumeClaim>,
    context: Arc<Context>,
) -> Result<Action> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let volumes = context.volumes.state();
    let class = context.class_of(&claim);
    let node = selected_node(&claim).and_then(|name| context.nodes.get(&ObjectRef::new(name)));
    match binder::claim_step(&claim, &volumes, class.as_deref(), node.as_deref()) {
        ClaimStep::Bind(volume) => binder::bind(&context.client, &volume, &claim).await?,
        ClaimStep::Pending { note, provisioner } => {
            if let Some(provisioner) = provisioner {
                binder::annotate_provisioner(&context.client, &claim, &provisioner).await?;
            }
            if let Some(note) = note {
                context.note(claim.as_ref(), &note).await;
            }
            binder::set_claim_phase(&context.client, &claim, "Pending", None).await?;
            // Looked at again after upstream's claim sync period, whatever changes meanwhile.
            return Ok(Action::requeue(CLAIM_SYNC_PERIOD));
        }
        ClaimStep::Lost(note) => {
            context.note(claim.as_ref(), &note).await;
            binder::set_claim_phase(&context.client, &claim, "Lost", None).await?;
        }
    }
    Ok(Action::await_change())
}

/// One volume's sync.
pub async fn sync_volume(volume: Arc<PersistentVolume>, context: Arc<Context>) -> Result<Action> {
    if volume.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let claim = volume
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| {
            context
                .claims
                .get(&ObjectRef::new(r.name.as_deref()?).within(r.namespace.as_deref()?))
        });
    let claim = match claim {
        Some(claim) => Some(claim),
        // The cache may lag behind a claim just created: ask before releasing.
        None => live_claim(&context.client, &volume).await?,
    };
    let client = &context.client;
    match binder::volume_step(&volume, claim.as_deref()) {
        VolumeStep::Phase(phase) => binder::set_volume_phase(client, &volume, phase, None).await?,
        // This change of the volume woke the claim loop too (it maps a volume to the claim it
        // names), which finishes the binding.
        VolumeStep::AwaitClaim => {}
        VolumeStep::Unbind => binder::unbind(client, &volume).await?,
        VolumeStep::Reclaim(reclaim) => {
            let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
            match reclaim {
                Reclaim::Retain => {
                    binder::set_volume_phase(client, &volume, "Released", None).await?
                }
                Reclaim::Delete => {
                    if phase != Some("Released") {
                        binder::set_volume_phase(client, &volume, "Released", None).await?;
                    }
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: volume.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    match Api::<PersistentVolume>::all(client.clone())
                        .delete(&volume.name_any(), &params)
                        .await
                    {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(error) => return Err(error.into()),
                    }
                }
                Reclaim::Unsupported(policy) => {
                    let message = format!("reclaim policy {policy:?} is not supported; the volume must be reclaimed by hand");
                    if phase != Some("Failed") {
                        let note = Note {
                            warning: true,
                            reason: "VolumeFailedRecycle",
                            message: message.clone(),
                        };
                        context.note(volume.as_ref(), &note).await;
                    }
                    binder::set_volume_phase(client, &volume, "Failed", Some(&message)).await?;
                }
            }
        }
    }
    Ok(Action::await_change())
}

/// The claim a volume's `claimRef` names, read from the API.
async fn live_claim(
    client: &Client,
    volume: &PersistentVolume,
) -> Result<Option<Arc<PersistentVolumeClaim>>> {
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(None);
    };
    let (Some(namespace), Some(name)) = (reference.namespace.as_deref(), reference.name.as_deref())
    else {
        return Ok(None);
    };
    if reference.uid.as_deref().unwrap_or_default().is_empty() {
        return Ok(None);
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    Ok(claims.get_opt(name).await?.map(Arc::new))
}
