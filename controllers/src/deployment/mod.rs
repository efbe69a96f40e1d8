//! The Deployment controller: rolls a Deployment's pod template out through ReplicaSets —
//! RollingUpdate within `maxSurge`/`maxUnavailable` ([`rolling`]) or Recreate — keeps the
//! revision annotations `kubectl rollout history|undo` read, scales proportionally when the
//! size changes mid-rollout, holds still while paused, cleans up history beyond
//! `revisionHistoryLimit`, and reports `Available` and `Progressing` as upstream does
//! ([`status`], including `ProgressDeadlineExceeded`).

mod reconcile;
mod replicasets;
mod rolling;
mod status;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::core::SelectorExt;
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::informers::Informers;
use crate::replicaset::owner_key;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub use reconcile::reconcile;

/// An absolute or percentage rollout bound over `total`, rounded up or down.
pub fn resolve_percent(
    value: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
    total: i32,
    round_up: bool,
) -> i32 {
    rolling::resolve(Some(value), 0, total, round_up)
}

/// What the Deployment controller's reconciles share.
pub struct Context {
    pub client: Client,
    pub sets: Store<ReplicaSet>,
    pub pods: Store<Pod>,
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
    let deployments = informers.get::<Deployment>();
    let sets = informers.get::<ReplicaSet>();
    let orphan_sets = informers.get::<ReplicaSet>();
    let pods = informers.get::<Pod>();
    let context = Arc::new(Context {
        client: client.clone(),
        sets: sets.store.clone(),
        pods: pods.store.clone(),
        recorder: crate::events::recorder(client.clone(), "deployment-controller", identity),
    });
    let deployment_store = deployments.store.clone();
    let set_store = sets.store.clone();
    let controller = Controller::for_shared_stream(
        counted(deployments.changes, queue.clone(), |d: &Deployment| {
            Some(key_of(d))
        }),
        deployments.store,
    )
    .owns_shared_stream(counted(sets.changes, queue.clone(), |set: &ReplicaSet| {
        owner_of_set(set)
    }))
    // An orphan ReplicaSet the selector matches is adopted.
    .watches_shared_stream(orphan_sets.changes, move |set: Arc<ReplicaSet>| {
        matching_deployments(&deployment_store, &set)
    })
    // Recreate waits for old pods to be gone: their changes wake the Deployment.
    .watches_shared_stream(pods.changes, move |pod: Arc<Pod>| {
        deployment_of_pod(&set_store, &pod)
    });
    runner::run(
        "deployment",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}

fn owner_of_set(set: &ReplicaSet) -> Option<String> {
    let owner = rudder_facts::owners::controller_of(&set.metadata)?;
    (owner.kind == "Deployment")
        .then(|| format!("{}/{}", set.namespace().unwrap_or_default(), owner.name))
}

fn matching_deployments(
    deployments: &Store<Deployment>,
    set: &ReplicaSet,
) -> Vec<ObjectRef<Deployment>> {
    if rudder_facts::owners::controller_of(&set.metadata).is_some() {
        return Vec::new();
    }
    deployments
        .state()
        .iter()
        .filter(|d| d.namespace() == set.namespace())
        .filter(|d| {
            d.spec
                .as_ref()
                .and_then(|spec| kube::core::Selector::try_from(spec.selector.clone()).ok())
                .is_some_and(|selector| !selector.selects_all() && selector.matches(set.labels()))
        })
        .map(|d| ObjectRef::from_obj(d.as_ref()))
        .collect()
}

fn deployment_of_pod(sets: &Store<ReplicaSet>, pod: &Pod) -> Option<ObjectRef<Deployment>> {
    let set_key = owner_key(pod, "ReplicaSet")?;
    let (namespace, name) = set_key.split_once('/')?;
    let set = sets.get(&ObjectRef::new(name).within(namespace))?;
    let owner = rudder_facts::owners::controller_of(&set.metadata)?;
    (owner.kind == "Deployment").then(|| ObjectRef::new(&owner.name).within(namespace))
}
