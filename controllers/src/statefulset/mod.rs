//! The StatefulSet controller: pods with stable names (`<set>-<ordinal>`), hostnames under the
//! governing Service, and their own PersistentVolumeClaims from `volumeClaimTemplates`; created
//! in order and each Running and Ready before the next (OrderedReady) or all at once
//! (Parallel), removed from the highest ordinal down; templates kept as ControllerRevisions
//! ([`revisions`]) and rolled out from the highest ordinal down to `partition`, `maxUnavailable`
//! pods (default 1) at a time (RollingUpdate), or only to pods deleted by hand (OnDelete); a
//! pod counts as available `minReadySeconds` after it is ready;
//! `persistentVolumeClaimRetentionPolicy` decides whether claims go with the set or with
//! scaled-down pods.

mod reconcile;
mod rolling;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::informers::Informers;
use crate::replicaset::owner_key;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub use reconcile::reconcile;

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub revisions: Store<ControllerRevision>,
    pub claims: Store<PersistentVolumeClaim>,
    pub recorder: Recorder,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let sets = informers.get::<StatefulSet>();
    let pods = informers.get::<Pod>();
    let revisions = informers.get::<ControllerRevision>();
    let claims = informers.get::<PersistentVolumeClaim>();
    let context = Arc::new(Context {
        client: client.clone(),
        pods: pods.store.clone(),
        revisions: revisions.store.clone(),
        claims: claims.store.clone(),
        recorder: crate::events::recorder(client.clone(), "statefulset-controller", identity),
    });
    let controller = Controller::for_shared_stream(
        counted(sets.changes, queue.clone(), |set: &StatefulSet| {
            Some(key_of(set))
        }),
        sets.store,
    )
    .owns_shared_stream(counted(pods.changes, queue.clone(), |pod: &Pod| {
        owner_key(pod, "StatefulSet")
    }))
    .owns_shared_stream(revisions.changes);
    runner::run(
        "statefulset",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}
