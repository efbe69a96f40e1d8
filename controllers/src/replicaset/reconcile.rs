//! One ReplicaSet's sync: claim its pods, make their number `spec.replicas`, report status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::{order_for_deletion, Context};
use crate::error::{Error, Result};
use crate::podtemplate::{controller_reference, pod_from_template};
use crate::runner::key_of;
use rudder_facts::owners::controller_of;
use rudder_facts::pods::{is_active, is_ready};

/// upstream's `BurstReplicas`: the most pods one sync creates or deletes.
const BURST: usize = 500;

pub async fn reconcile(set: Arc<ReplicaSet>, context: Arc<Context>) -> Result<Action> {
    let key = key_of(set.as_ref());
    let (Some(uid), Some(spec)) = (set.uid(), set.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        // Its pods are the garbage collector's now.
        context.expectations.forget(&key);
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().unwrap_or_default();
    let selector = Selector::try_from(spec.selector.clone())
        .map_err(|error| Error::Invalid(format!("ReplicaSet {key}: invalid selector: {error}")))?;
    if selector.selects_all() {
        return Err(Error::Invalid(format!(
            "ReplicaSet {key}: an empty selector would select every pod"
        )));
    }
    let replicas = usize::try_from(spec.replicas.unwrap_or(1)).unwrap_or(0);
    let min_ready =
        Duration::from_secs(u64::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0));
    let pods = Api::<Pod>::namespaced(context.client.clone(), &namespace);
    // Claim: ours that match, orphans that match (adopted); release ours that stopped matching.
    // Pods another controller owns are skipped before their labels are matched (with many
    // ReplicaSets in a namespace, nearly all of them are).
    let candidates: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(|pod| controller_of(&pod.metadata).is_none_or(|owner| owner.uid == uid))
        .collect();
    let mut owned = Vec::new();
    for pod in &candidates {
        let matches = selector.matches(pod.labels());
        match controller_of(&pod.metadata) {
            Some(_) => {
                if matches {
                    owned.push(pod.clone());
                } else {
                    release(&pods, pod, &uid).await?;
                }
            }
            None if matches && pod.metadata.deletion_timestamp.is_none() => {
                adopt(&pods, pod, set.as_ref()).await?;
                owned.push(pod.clone());
            }
            None => {}
        }
    }
    let active: Vec<Arc<Pod>> = owned.iter().filter(|pod| is_active(pod)).cloned().collect();

    // The pods this ReplicaSet created carry it as their controller: they are candidates.
    let exists = |uid: &str| {
        candidates
            .iter()
            .any(|pod| pod.metadata.uid.as_deref() == Some(uid))
    };
    let live = |uid: &str| {
        candidates.iter().any(|pod| {
            pod.metadata.uid.as_deref() == Some(uid) && pod.metadata.deletion_timestamp.is_none()
        })
    };
    let mut failure = None;
    if context.expectations.satisfied(&key, exists, live) {
        if active.len() < replicas {
            let missing = (replicas - active.len()).min(BURST);
            failure = create_pods(&context, &pods, set.as_ref(), &key, missing).await;
        } else if active.len() > replicas {
            let surplus = (active.len() - replicas).min(BURST);
            delete_pods(&context, &pods, set.as_ref(), &key, active.clone(), surplus).await?;
        }
    }

    let now = Timestamp::now();
    let status = status_of(set.as_ref(), &active, min_ready, now, failure);
    if set.status.as_ref() != Some(&status) {
        let mut updated = set.as_ref().clone();
        updated.status = Some(status.clone());
        Api::<ReplicaSet>::namespaced(context.client.clone(), &namespace)
            .replace_status(&set.name_any(), &PostParams::default(), &updated)
            .await?;
    }
    // Pods that are ready but not yet available become available on their own: look again then.
    let ready = status.ready_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if !min_ready.is_zero() && ready > available {
        return Ok(Action::requeue(min_ready));
    }
    Ok(Action::await_change())
}

/// The status a sync leaves: counts over the active pods it owns, its generation, and a
/// `ReplicaFailure` condition while creating pods fails.
pub(crate) fn status_of(
    set: &ReplicaSet,
    active: &[Arc<Pod>],
    min_ready: Duration,
    now: Timestamp,
    failure: Option<String>,
) -> ReplicaSetStatus {
    let template_labels = set
        .spec
        .as_ref()
        .and_then(|spec| spec.template.as_ref())
        .and_then(|template| template.metadata.as_ref())
        .and_then(|meta| meta.labels.clone())
        .unwrap_or_default();
    let fully_labeled = active
        .iter()
        .filter(|pod| {
            let labels = pod.labels();
            template_labels
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
        })
        .count();
    let ready = active.iter().filter(|pod| is_ready(pod)).count();
    let available = active
        .iter()
        .filter(|pod| is_available(pod, min_ready, now))
        .count();
    let mut conditions: Vec<ReplicaSetCondition> = set
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|condition| condition.type_ != "ReplicaFailure")
        .collect();
    if let Some(message) = failure {
        conditions.push(ReplicaSetCondition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: Some("FailedCreate".into()),
            message: Some(message),
            last_transition_time: Some(Time(now)),
        });
    }
    let count = |n: usize| (n > 0).then(|| i32::try_from(n).unwrap_or(i32::MAX));
    ReplicaSetStatus {
        replicas: i32::try_from(active.len()).unwrap_or(i32::MAX),
        fully_labeled_replicas: count(fully_labeled),
        ready_replicas: count(ready),
        available_replicas: count(available),
        observed_generation: set.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        terminating_replicas: None,
    }
}

/// Ready, and for at least `min_ready`.
pub(crate) fn is_available(pod: &Pod, min_ready: Duration, now: Timestamp) -> bool {
    if !is_ready(pod) {
        return false;
    }
    if min_ready.is_zero() {
        return true;
    }
    let since = pod
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .and_then(|ready| ready.last_transition_time.as_ref())
        .map(|time| time.0);
    let Some(since) = since else {
        return false;
    };
    let Ok(min_ready) = k8s_openapi::jiff::SignedDuration::try_from(min_ready) else {
        return false;
    };
    since
        .checked_add(min_ready)
        .is_ok_and(|ready_at| ready_at <= now)
}

/// Creates `missing` pods in slow-start batches (1, 2, 4, …); stops at a batch with a failure
/// and returns its message.
async fn create_pods(
    context: &Context,
    pods: &Api<Pod>,
    set: &ReplicaSet,
    key: &str,
    missing: usize,
) -> Option<String> {
    let template = set.spec.as_ref()?.template.clone()?;
    let mut created = 0;
    let mut batch = 1;
    while created < missing {
        let size = batch.min(missing - created);
        let requests = (0..size).map(|_| {
            let pod = pod_from_template(set, &template, &set.name_any());
            async move { pods.create(&PostParams::default(), &pod).await }
        });
        let results = futures::future::join_all(requests).await;
        let mut failure = None;
        for result in results {
            match result {
                Ok(pod) => {
                    created += 1;
                    if let Some(uid) = pod.uid() {
                        context.expectations.created(key, uid);
                    }
                    publish(
                        context,
                        set,
                        "SuccessfulCreate",
                        "Create",
                        format!("Created pod: {}", pod.name_any()),
                        EventType::Normal,
                    )
                    .await;
                }
                // A terminating namespace refuses new pods; that is not the set's failure.
                Err(kube::Error::Api(status))
                    if status.code == 403 && status.message.contains("being terminated") =>
                {
                    return None;
                }
                Err(error) => failure = Some(error.to_string()),
            }
        }
        if let Some(message) = failure {
            publish(
                context,
                set,
                "FailedCreate",
                "Create",
                format!("Error creating: {message}"),
                EventType::Warning,
            )
            .await;
            return Some(message);
        }
        batch *= 2;
    }
    None
}

/// Deletes `surplus` of `active`, the lowest-ranked first.
async fn delete_pods(
    context: &Context,
    pods: &Api<Pod>,
    set: &ReplicaSet,
    key: &str,
    mut active: Vec<Arc<Pod>>,
    surplus: usize,
) -> Result<()> {
    order_for_deletion(&mut active);
    let doomed = &active[..surplus.min(active.len())];
    let requests = doomed.iter().map(|pod| {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        async move { (pod, pods.delete(&pod.name_any(), &params).await) }
    });
    for (pod, result) in futures::future::join_all(requests).await {
        match result {
            Ok(_) => {
                if let Some(uid) = pod.uid() {
                    context.expectations.deleted(key, uid);
                }
                publish(
                    context,
                    set,
                    "SuccessfulDelete",
                    "Delete",
                    format!("Deleted pod: {}", pod.name_any()),
                    EventType::Normal,
                )
                .await;
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => {
                publish(
                    context,
                    set,
                    "FailedDelete",
                    "Delete",
                    format!("Error deleting: {error}"),
                    EventType::Warning,
                )
                .await;
                return Err(error.into());
            }
        }
    }
    Ok(())
}

/// Makes `set` the controller of orphan `pod` (the uid in the patch is a precondition).
async fn adopt(pods: &Api<Pod>, pod: &Pod, set: &ReplicaSet) -> Result<()> {
    let mut owners: Vec<OwnerReference> = pod.owner_references().to_vec();
    owners.push(controller_reference(set));
    patch_owners(pods, pod, owners).await
}

/// Gives up `pod`, which no longer matches the selector.
async fn release(pods: &Api<Pod>, pod: &Pod, uid: &str) -> Result<()> {
    let owners: Vec<OwnerReference> = pod
        .owner_references()
        .iter()
        .filter(|owner| owner.uid != uid)
        .cloned()
        .collect();
    patch_owners(pods, pod, owners).await
}

async fn patch_owners(pods: &Api<Pod>, pod: &Pod, owners: Vec<OwnerReference>) -> Result<()> {
    let patch = Pod {
        metadata: ObjectMeta {
            uid: pod.uid(),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    };
    match pods
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone, or replaced by another pod of the same name: nothing to claim.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 422 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

async fn publish(
    context: &Context,
    set: &ReplicaSet,
    reason: &str,
    action: &str,
    note: String,
    type_: EventType,
) {
    crate::events::publish(&context.recorder, set, type_, reason, action, note).await;
}
