//! Storage object in-use protection, as upstream's `pvc-protection` and `pv-protection`
//! controllers: a claim carries the finalizer `kubernetes.io/pvc-protection` and a volume
//! `kubernetes.io/pv-protection` (the StorageObjectInUseProtection admission plugin puts them
//! on new objects; these loops add them to older ones). Deleting a claim that a pod still
//! uses only marks it; the finalizer goes — and the deletion completes — once no pod that
//! has not finished refers to it (by `persistentVolumeClaim.claimName` or as the claim of a
//! generic ephemeral volume). Likewise a volume stays while it is Bound.

#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use rudder_facts::volumes::{
    PVC_PROTECTION_FINALIZER as PVC_FINALIZER, PV_PROTECTION_FINALIZER as PV_FINALIZER,
};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// The claims' controller in `--controllers`.
pub const PVC_PROTECTION: &str = "pvc-protection";
/// The volumes' controller in `--controllers`.
pub const PV_PROTECTION: &str = "pv-protection";

/// The claims `pod` refers to (by name, in its namespace).
pub fn claims_of(pod: &Pod) -> Vec<String> {
    let pod_name = pod.name_any();
    pod.spec
        .as_ref()
        .and_then(|spec| spec.volumes.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|volume| {
            if let Some(claim) = &volume.persistent_volume_claim {
                return Some(claim.claim_name.clone());
            }
            volume
                .ephemeral
                .as_ref()
                .map(|_| format!("{pod_name}-{}", volume.name))
        })
        .collect()
}

/// Whether `pod` keeps `claim` (a name in the pod's namespace) in use: it refers to it and
/// has not finished (upstream counts pending, unscheduled and terminating pods too).
pub fn uses(pod: &Pod, namespace: &str, claim: &str) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    pod.namespace().as_deref() == Some(namespace)
        && !finished
        && claims_of(pod).iter().any(|name| name == claim)
}

/// What a protection loop does with one object.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Put the finalizer on.
    Protect,
    /// Take the finalizer off: the deletion may complete.
    Release,
    /// Nothing.
    Keep,
}

/// The step for an object with `finalizers`, being deleted or not, and still `in_use`.
pub fn step(finalizers: &[String], finalizer: &str, deleting: bool, in_use: bool) -> Step {
    let has = finalizers.iter().any(|f| f == finalizer);
    match (has, deleting) {
        (false, false) => Step::Protect,
        (true, true) if !in_use => Step::Release,
        _ => Step::Keep,
    }
}

/// `object` with `finalizer` added or removed, written with its resourceVersion (a lost race
/// is looked at again).
async fn write_finalizers<K>(api: &Api<K>, object: &K, finalizer: &str, on: bool) -> Result<Action>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut changed = object.clone();
    let finalizers = changed.meta_mut().finalizers.get_or_insert_with(Vec::new);
    if on {
        finalizers.push(finalizer.to_owned());
    } else {
        finalizers.retain(|f| f != finalizer);
    }
    match api
        .replace(&object.name_any(), &PostParams::default(), &changed)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            Ok(Action::requeue(std::time::Duration::from_millis(200)))
        }
        Err(error) => Err(error.into()),
    }
}

pub struct ClaimContext {
    pub client: Client,
    pub pods: Store<Pod>,
}

/// `pvc-protection`: claims, woken by their own changes and by their pods'.
pub fn pvc_controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let claims = informers.get::<PersistentVolumeClaim>();
    let pods = informers.get::<Pod>();
    let context = Arc::new(ClaimContext {
        client,
        pods: pods.store.clone(),
    });
    let controller = Controller::for_shared_stream(
        counted(
            claims.changes,
            queue.clone(),
            |c: &PersistentVolumeClaim| Some(key_of(c)),
        ),
        claims.store,
    )
    .watches_shared_stream(pods.changes, |pod: Arc<Pod>| {
        let namespace = pod.namespace().unwrap_or_default();
        claims_of(&pod)
            .into_iter()
            .map(|name| ObjectRef::<PersistentVolumeClaim>::new(&name).within(&namespace))
            .collect::<Vec<_>>()
    });
    runner::run(
        PVC_PROTECTION,
        controller,
        context,
        queue,
        5,
        shutdown,
        sync_claim,
    )
    .boxed()
}

async fn sync_claim(
    claim: Arc<PersistentVolumeClaim>,
    context: Arc<ClaimContext>,
) -> Result<Action> {
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let finalizers = claim.finalizers();
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let cached_use = context
        .pods
        .state()
        .iter()
        .any(|pod| uses(pod, &namespace, &name));
    let mut decided = step(finalizers, PVC_FINALIZER, deleting, cached_use);
    if decided == Step::Release {
        // The informer may not have seen a pod created a moment ago: ask the server before
        // letting the claim go, as upstream does.
        let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
        let live = pods.list(&ListParams::default()).await?;
        if live.items.iter().any(|pod| uses(pod, &namespace, &name)) {
            decided = Step::Keep;
        }
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(context.client.clone(), &namespace);
    match decided {
        Step::Protect => write_finalizers(&claims, claim.as_ref(), PVC_FINALIZER, true).await,
        Step::Release => {
            tracing::info!(claim = %key_of(claim.as_ref()), "no pod uses the claim: its deletion completes");
            write_finalizers(&claims, claim.as_ref(), PVC_FINALIZER, false).await
        }
        Step::Keep => Ok(Action::await_change()),
    }
}

pub struct VolumeContext {
    pub client: Client,
}

/// Whether a volume is bound to a claim (its phase says so).
pub fn bound(volume: &PersistentVolume) -> bool {
    volume
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        == Some("Bound")
}

/// `pv-protection`: volumes, woken by their own changes.
pub fn pv_controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let volumes = informers.get::<PersistentVolume>();
    let controller = Controller::for_shared_stream(
        counted(volumes.changes, queue.clone(), |v: &PersistentVolume| {
            Some(key_of(v))
        }),
        volumes.store,
    );
    runner::run(
        PV_PROTECTION,
        controller,
        Arc::new(VolumeContext { client }),
        queue,
        1,
        shutdown,
        sync_volume,
    )
    .boxed()
}

async fn sync_volume(volume: Arc<PersistentVolume>, context: Arc<VolumeContext>) -> Result<Action> {
    let decided = step(
        volume.finalizers(),
        PV_FINALIZER,
        volume.metadata.deletion_timestamp.is_some(),
        bound(&volume),
    );
    let volumes: Api<PersistentVolume> = Api::all(context.client.clone());
    match decided {
        Step::Protect => write_finalizers(&volumes, volume.as_ref(), PV_FINALIZER, true).await,
        Step::Release => write_finalizers(&volumes, volume.as_ref(), PV_FINALIZER, false).await,
        Step::Keep => Ok(Action::await_change()),
    }
}
