//! The DaemonSet controller: one pod on every node the template may run on (its node selector,
//! required node affinity, and taints it tolerates — with the tolerations upstream gives every
//! DaemonSet pod), each pinned to its node by a required node-affinity term on
//! `metadata.name` so the scheduler binds it there; pods on nodes that no longer qualify, and
//! extra pods on a node, are removed, failed ones replaced. Templates are kept as
//! ControllerRevisions; RollingUpdate replaces old pods `maxUnavailable` nodes at a time, or
//! with `maxSurge` starts the new pod beside the old one first (see `rollout`); OnDelete only
//! when a pod is deleted by hand. Pods count as available `minReadySeconds` after they are
//! ready.

mod reconcile;
mod rollout;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::expectations::Expectations;
use crate::informers::Informers;
use crate::replicaset::owner_key;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub use reconcile::reconcile;

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub revisions: Store<ControllerRevision>,
    pub expectations: Arc<Expectations>,
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
    let sets = informers.get::<DaemonSet>();
    let pods = informers.get::<Pod>();
    let nodes = informers.get::<Node>();
    let revisions = informers.get::<ControllerRevision>();
    let set_store = sets.store.clone();
    let expectations = Arc::new(Expectations::default());
    let seen = expectations.clone();
    let context = Arc::new(Context {
        client: client.clone(),
        pods: pods.store.clone(),
        nodes: nodes.store.clone(),
        revisions: revisions.store.clone(),
        expectations,
        recorder: crate::events::recorder(client.clone(), "daemonset-controller", identity),
    });
    let controller = Controller::for_shared_stream(
        counted(sets.changes, queue.clone(), |set: &DaemonSet| {
            Some(key_of(set))
        }),
        sets.store,
    )
    .owns_shared_stream(counted(pods.changes, queue.clone(), move |pod: &Pod| {
        let owner = owner_key(pod, "DaemonSet")?;
        if let Some(uid) = pod.uid() {
            seen.seen(&owner, &uid);
        }
        Some(owner)
    }))
    .owns_shared_stream(revisions.changes)
    // A node that appears, changes or goes wakes every DaemonSet.
    .watches_shared_stream(nodes.changes, move |_: Arc<Node>| {
        set_store
            .state()
            .iter()
            .map(|set| ObjectRef::from_obj(set.as_ref()))
            .collect::<Vec<_>>()
    });
    runner::run(
        "daemonset",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}
