//! One StatefulSet's sync, in upstream's order: its revisions, failed pods replaced, missing
//! pods created (in order, with their claims), pods beyond the replicas removed (highest
//! first), the rolling update advanced (see `rolling`), history trimmed, status reported.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::rolling::{self, Member};
use super::Context;
use crate::error::Result;
use crate::podtemplate::{controller_reference, delete_exact, pod_from_template};
use crate::replicaset::is_available;
use crate::revisions::{history, template_of, REVISION_HASH};
use rudder_facts::owners::is_controlled_by;
use rudder_facts::pods::{is_ready, is_terminal};

/// upstream's labels on a StatefulSet's pods.
pub const POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";
const HISTORY_LIMIT: i32 = 10;

/// Running, ready, and so for `min_ready` (a StatefulSet's `minReadySeconds`).
fn running_and_available(pod: &Pod, min_ready: Duration, now: Timestamp) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && is_available(pod, min_ready, now)
}

/// The ordinal in a pod's name `<set>-<ordinal>`.
pub(crate) fn ordinal(set: &str, pod: &Pod) -> Option<i32> {
    pod.name_any()
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.labels().get(REVISION_HASH).map(String::as_str)
}

fn revision_hash(revision: &ControllerRevision) -> Option<&str> {
    revision.labels().get(REVISION_HASH).map(String::as_str)
}

pub async fn reconcile(set: Arc<StatefulSet>, context: Arc<Context>) -> Result<Action> {
    let (Some(uid), Some(spec)) = (set.uid(), set.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = set.name_any();
    let namespace = set.namespace().unwrap_or_default();
    let pods_api = Api::<Pod>::namespaced(context.client.clone(), &namespace);
    let in_namespace =
        |object: &ObjectMeta| object.namespace.as_deref() == Some(namespace.as_str());

    // Revisions: the one holding the template now is the update revision.
    let collisions = set.status.as_ref().and_then(|s| s.collision_count);
    let Some((revisions, update)) = history(
        &context.client,
        &context.revisions,
        set.as_ref(),
        &spec.template,
        collisions,
    )
    .await?
    else {
        return Ok(Action::requeue(std::time::Duration::from_millis(200)));
    };
    let update_hash = revision_hash(&update).unwrap_or_default().to_string();
    let previous = set.status.clone().unwrap_or_default();
    let current_hash = previous
        .current_revision
        .as_deref()
        .and_then(|current| revisions.iter().find(|r| r.name_any() == current))
        .and_then(|r| revision_hash(r).map(str::to_string))
        .unwrap_or_else(|| update_hash.clone());

    let pods: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| in_namespace(&pod.metadata) && is_controlled_by(&pod.metadata, &uid))
        .collect();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let wanted = start..start + replicas;
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let partition = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let min_ready =
        Duration::from_secs(u64::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0));
    let now = Timestamp::now();
    let available = |pod: &Pod| running_and_available(pod, min_ready, now);
    let by_ordinal: BTreeMap<i32, Arc<Pod>> = pods
        .iter()
        .filter_map(|pod| Some((ordinal(&name, pod)?, pod.clone())))
        .collect();

    let mut changed = false;
    // Failed pods are replaced.
    for pod in by_ordinal
        .values()
        .filter(|pod| is_terminal(pod) && pod.metadata.deletion_timestamp.is_none())
    {
        delete_pod(&context, &pods_api, &set, pod).await?;
        changed = true;
    }
    // Missing pods, in order.
    if !changed {
        for ordinal in wanted.clone() {
            match by_ordinal.get(&ordinal) {
                Some(pod) => {
                    if !parallel && !available(pod) {
                        break;
                    }
                }
                None => {
                    let hash = if rolling && ordinal < partition {
                        current_hash.clone()
                    } else {
                        update_hash.clone()
                    };
                    let template_revision = revisions
                        .iter()
                        .find(|r| revision_hash(r) == Some(hash.as_str()))
                        .cloned()
                        .unwrap_or_else(|| update.clone());
                    create_pod(
                        &context,
                        &pods_api,
                        &set,
                        ordinal,
                        &hash,
                        &template_revision,
                    )
                    .await?;
                    changed = true;
                    if !parallel {
                        break;
                    }
                }
            }
        }
    }
    // Pods beyond the replicas, highest first.
    if !changed {
        let all_ready = by_ordinal.values().all(|pod| available(pod));
        for (_, pod) in by_ordinal
            .iter()
            .rev()
            .filter(|(ordinal, _)| !wanted.contains(ordinal))
        {
            if pod.metadata.deletion_timestamp.is_some() {
                if !parallel {
                    break;
                }
                continue;
            }
            if !parallel && !all_ready {
                break;
            }
            delete_pod(&context, &pods_api, &set, pod).await?;
            scaled_down_claims(&context, &set, pod).await?;
            changed = true;
            if !parallel {
                break;
            }
        }
    }
    // The rolling update: from the highest ordinal down to `partition`, at most
    // `maxUnavailable` pods unhealthy at a time.
    if !changed && rolling {
        let rolling_update = spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref());
        let members: Vec<Member<'_>> = by_ordinal
            .iter()
            .filter(|(ordinal, _)| wanted.contains(ordinal))
            .map(|(ordinal, pod)| Member {
                ordinal: *ordinal,
                pod,
                healthy: available(pod) && pod.metadata.deletion_timestamp.is_none(),
                updated: hash_of(pod) == Some(update_hash.as_str()),
            })
            .collect();
        let budget = rolling::max_unavailable(rolling_update, replicas);
        let missing = usize::try_from(replicas)
            .unwrap_or(0)
            .saturating_sub(members.len());
        let ordered_and_waiting = !parallel && (missing > 0 || members.iter().any(|m| !m.healthy));
        let next = if ordered_and_waiting {
            Vec::new()
        } else {
            rolling::next_to_replace(&members, missing, partition, budget)
        };
        for ordinal in next {
            if let Some(pod) = by_ordinal.get(&ordinal) {
                delete_pod(&context, &pods_api, &set, pod).await?;
            }
        }
    }

    // Status.
    let live: Vec<&Arc<Pod>> = by_ordinal
        .values()
        .filter(|pod| !is_terminal(pod))
        .collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let updated = live
        .iter()
        .filter(|pod| hash_of(pod) == Some(update_hash.as_str()))
        .count();
    let current = live
        .iter()
        .filter(|pod| hash_of(pod) == Some(current_hash.as_str()))
        .count();
    let ready = live.iter().filter(|pod| is_ready(pod)).count();
    let available_count = live.iter().filter(|pod| available(pod)).count();
    let update_name = update.name_any();
    let current_name = if updated == usize::try_from(replicas).unwrap_or(0) && ready == updated {
        update_name.clone()
    } else {
        revisions
            .iter()
            .find(|r| revision_hash(r) == Some(current_hash.as_str()))
            .map_or(update_name.clone(), |r| r.name_any())
    };
    let status = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas: count(live.len()),
        ready_replicas: (ready > 0).then(|| count(ready)),
        available_replicas: Some(count(available_count)),
        current_replicas: (current > 0).then(|| count(current)),
        updated_replicas: (updated > 0).then(|| count(updated)),
        current_revision: Some(current_name),
        update_revision: Some(update_name),
        collision_count: previous.collision_count,
        conditions: previous.conditions.clone(),
    };
    if set.status.as_ref() != Some(&status) {
        let mut changed_set = set.as_ref().clone();
        changed_set.status = Some(status);
        Api::<StatefulSet>::namespaced(context.client.clone(), &namespace)
            .replace_status(&name, &PostParams::default(), &changed_set)
            .await?;
    }
    trim_history(
        &context,
        &set,
        &revisions,
        &pods,
        &update_hash,
        &current_hash,
    )
    .await?;
    if available_count < ready {
        // Pods ready but not yet for minReadySeconds: look again when they may be.
        return Ok(Action::requeue(min_ready.min(Duration::from_secs(30))));
    }
    Ok(Action::await_change())
}

async fn create_pod(
    context: &Context,
    api: &Api<Pod>,
    set: &StatefulSet,
    ordinal: i32,
    hash: &str,
    revision: &ControllerRevision,
) -> Result<()> {
    let Some(spec) = set.spec.as_ref() else {
        return Ok(());
    };
    // The pod's template: the one its revision recorded (the set's own if it is the update).
    let template = template_of(revision).unwrap_or_else(|| spec.template.clone());
    let name = format!("{}-{ordinal}", set.name_any());
    let mut pod = pod_from_template(set, &template, &set.name_any());
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(name.clone());
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME.into(), name.clone());
    labels.insert(POD_INDEX.into(), ordinal.to_string());
    labels.insert(REVISION_HASH.into(), hash.into());
    if let Some(pod_spec) = pod.spec.as_mut() {
        pod_spec.hostname = Some(name.clone());
        if !spec.service_name.as_deref().unwrap_or_default().is_empty() {
            pod_spec.subdomain = spec.service_name.clone();
        }
        let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
        for claim in spec.volume_claim_templates.iter().flatten() {
            let template_name = claim.metadata.name.clone().unwrap_or_default();
            let claim_name = format!("{template_name}-{name}");
            ensure_claim(context, set, claim, &claim_name).await?;
            volumes.retain(|volume| volume.name != template_name);
            volumes.push(Volume {
                name: template_name,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name,
                    read_only: None,
                }),
                ..Volume::default()
            });
        }
    }
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            publish(
                context,
                set,
                "SuccessfulCreate",
                format!(
                    "create Pod {name} in StatefulSet {} successful",
                    set.name_any()
                ),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 403 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Creates a pod's claim unless it exists; owned by the set when `whenDeleted: Delete`.
async fn ensure_claim(
    context: &Context,
    set: &StatefulSet,
    template: &PersistentVolumeClaim,
    claim_name: &str,
) -> Result<()> {
    let namespace = set.namespace().unwrap_or_default();
    let exists = context.claims.state().iter().any(|c| {
        c.namespace().as_deref() == Some(namespace.as_str()) && c.name_any() == claim_name
    });
    if exists {
        return Ok(());
    }
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    if let Some(selector) = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
    {
        labels.extend(selector);
    }
    let delete_with_set = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name.into()),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations: template.metadata.annotations.clone(),
            owner_references: delete_with_set.then(|| {
                let mut owner = controller_reference(set);
                owner.controller = Some(false);
                vec![owner]
            }),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    match Api::<PersistentVolumeClaim>::namespaced(context.client.clone(), &namespace)
        .create(&PostParams::default(), &claim)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// With `whenScaled: Delete`, a scaled-down pod's claims go with it (owned by the pod).
async fn scaled_down_claims(context: &Context, set: &StatefulSet, pod: &Pod) -> Result<()> {
    let Some(spec) = set.spec.as_ref() else {
        return Ok(());
    };
    let delete = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_scaled.as_deref())
        == Some("Delete");
    if !delete {
        return Ok(());
    }
    let namespace = set.namespace().unwrap_or_default();
    let api = Api::<PersistentVolumeClaim>::namespaced(context.client.clone(), &namespace);
    for template in spec.volume_claim_templates.iter().flatten() {
        let claim_name = format!(
            "{}-{}",
            template.metadata.name.clone().unwrap_or_default(),
            pod.name_any()
        );
        let Some(mut claim) = api.get_opt(&claim_name).await? else {
            continue;
        };
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            controller: Some(false),
            block_owner_deletion: None,
        };
        claim
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(owner);
        api.replace(&claim_name, &PostParams::default(), &claim)
            .await?;
    }
    Ok(())
}

async fn delete_pod(context: &Context, api: &Api<Pod>, set: &StatefulSet, pod: &Pod) -> Result<()> {
    if delete_exact(api, &pod.name_any(), pod.uid(), None).await? {
        publish(
            context,
            set,
            "SuccessfulDelete",
            format!(
                "delete Pod {} in StatefulSet {} successful",
                pod.name_any(),
                set.name_any()
            ),
        )
        .await;
    }
    Ok(())
}

/// Deletes old revisions beyond `revisionHistoryLimit` that no pod uses.
async fn trim_history(
    context: &Context,
    set: &StatefulSet,
    revisions: &[Arc<ControllerRevision>],
    pods: &[Arc<Pod>],
    update: &str,
    current: &str,
) -> Result<()> {
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(HISTORY_LIMIT)
        .max(0);
    let unused: Vec<&Arc<ControllerRevision>> = revisions
        .iter()
        .filter(|r| {
            let hash = revision_hash(r);
            hash != Some(update)
                && hash != Some(current)
                && !pods.iter().any(|pod| hash_of(pod) == hash)
        })
        .collect();
    let excess = unused
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    let api = Api::<ControllerRevision>::namespaced(
        context.client.clone(),
        &set.namespace().unwrap_or_default(),
    );
    for revision in unused.into_iter().take(excess) {
        match api
            .delete(&revision.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

async fn publish(context: &Context, set: &StatefulSet, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note),
        action: "Sync".into(),
        secondary: None,
    };
    if let Err(error) = context.recorder.publish(&event, &set.object_ref(&())).await {
        tracing::debug!(%error, "recording an event failed");
    }
}
