//! The ReplicaSet controller: keeps `spec.replicas` pods of a ReplicaSet's template running,
//! adopting matching orphans and releasing pods that stop matching, and reports the counts in
//! its status.
//!
//! It creates missing pods in slow-start batches (1, 2, 4, … at most 500 per sync; a batch with
//! a failure stops the sync), deletes surplus pods in upstream's order ([`ranking`]), and
//! remembers what it created and deleted until the pod informer shows it ([`Expectations`]),
//! so a reconcile triggered before the informer catches up never creates twice.
//!
//! [`Expectations`]: crate::expectations::Expectations

mod ranking;
mod reconcile;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::core::SelectorExt;
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::expectations::Expectations;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub(crate) use ranking::order_for_deletion;
pub(crate) use reconcile::is_available;
pub use reconcile::reconcile;

/// What the ReplicaSet controller's reconciles share.
pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub expectations: Arc<Expectations>,
    pub recorder: Recorder,
}

/// The controller, ready to run until `shutdown`.
pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let sets = informers.get::<ReplicaSet>();
    let pods = informers.get::<Pod>();
    let orphans = informers.get::<Pod>();
    let expectations = Arc::new(Expectations::default());
    let seen = expectations.clone();
    let context = Arc::new(Context {
        client: client.clone(),
        pods: pods.store.clone(),
        expectations,
        recorder: crate::events::recorder(client.clone(), "replicaset-controller", identity),
    });
    let set_store = sets.store.clone();
    let controller = Controller::for_shared_stream(
        counted(sets.changes, queue.clone(), |set: &ReplicaSet| {
            Some(key_of(set))
        }),
        sets.store,
    )
    .owns_shared_stream(counted(pods.changes, queue.clone(), move |pod: &Pod| {
        let owner = owner_key(pod, "ReplicaSet")?;
        if let Some(uid) = pod.uid() {
            seen.seen(&owner, &uid);
        }
        Some(owner)
    }))
    // An orphan that a ReplicaSet's selector matches wakes it, to be adopted.
    .watches_shared_stream(orphans.changes, move |pod: Arc<Pod>| {
        matching_orphan_owners(&set_store, &pod)
    });
    runner::run(
        "replicaset",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// `namespace/name` of the object of `kind` that controls `pod`, if one does.
pub(crate) fn owner_key(pod: &Pod, kind: &str) -> Option<String> {
    let owner = rudder_facts::owners::controller_of(&pod.metadata)?;
    (owner.kind == kind).then(|| format!("{}/{}", pod.namespace().unwrap_or_default(), owner.name))
}

/// The ReplicaSets of `pod`'s namespace whose selector matches it, when nothing controls it.
fn matching_orphan_owners(sets: &Store<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    if rudder_facts::owners::controller_of(&pod.metadata).is_some() {
        return Vec::new();
    }
    let labels = pod.labels();
    sets.state()
        .iter()
        .filter(|set| set.namespace() == pod.namespace())
        .filter(|set| {
            set.spec
                .as_ref()
                .and_then(|spec| kube::core::Selector::try_from(spec.selector.clone()).ok())
                .is_some_and(|selector| !selector.selects_all() && selector.matches(labels))
        })
        .map(|set| ObjectRef::from_obj(set.as_ref()))
        .collect()
}
