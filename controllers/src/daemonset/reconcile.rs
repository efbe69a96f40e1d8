//! One DaemonSet's sync: which nodes should run its pod, which pods to create, delete or
//! replace, and its status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, DaemonSetStatus, RollingUpdateDaemonSet,
};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::rollout::{self, surplus_on_node, NodeSlot};
use super::Context;
use crate::error::Result;
use crate::podtemplate::{delete_exact, pod_from_template};
use crate::replicaset::is_available;
use crate::revisions::{history, REVISION_HASH};
use rudder_facts::nodes::{node_matches, untolerated};
use rudder_facts::owners::is_controlled_by;
use rudder_facts::pods::{is_ready, is_terminal};

/// The tolerations every DaemonSet pod gets (upstream's `AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(template: &PodTemplateSpec) -> Vec<Toleration> {
    let mut tolerations = template
        .spec
        .as_ref()
        .and_then(|spec| spec.tolerations.clone())
        .unwrap_or_default();
    let host_network = template
        .spec
        .as_ref()
        .and_then(|spec| spec.host_network)
        .unwrap_or(false);
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    for (key, effect) in wanted {
        let present = tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect));
        if !present {
            tolerations.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                value: None,
                toleration_seconds: None,
            });
        }
    }
    tolerations
}

/// Whether the DaemonSet's pod should run on `node`: it matches, and every `NoSchedule` and
/// `NoExecute` taint is tolerated.
pub(crate) fn should_run(template: &PodTemplateSpec, node: &Node) -> bool {
    let Some(spec) = template.spec.as_ref() else {
        return false;
    };
    node_matches(spec, node) && untolerated(node, &daemon_tolerations(template)).is_empty()
}

/// Whether a pod already on `node` may stay there: as upstream, a `NoSchedule` taint (an
/// unreachable node's, say) keeps new pods off but does not evict; only a `NoExecute` one does.
pub(crate) fn should_continue_running(template: &PodTemplateSpec, node: &Node) -> bool {
    let Some(spec) = template.spec.as_ref() else {
        return false;
    };
    node_matches(spec, node)
        && untolerated(node, &daemon_tolerations(template))
            .iter()
            .all(|taint| taint.effect != "NoExecute")
}

/// The node a DaemonSet pod is for: where it runs, or the node its affinity pins it to.
fn node_of(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = spec.node_name.clone().filter(|n| !n.is_empty()) {
        return Some(node);
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|term| term.match_fields.iter().flatten())
        .find(|field| field.key == "metadata.name" && field.operator == "In")
        .and_then(|field| field.values.as_ref()?.first().cloned())
}

fn pinned_to(template: &PodTemplateSpec, node: &str) -> PodTemplateSpec {
    let mut template = template.clone();
    let tolerations = daemon_tolerations(&template);
    if let Some(spec) = template.spec.as_mut() {
        spec.tolerations = Some(tolerations);
        let pin = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
        };
        let affinity = spec.affinity.get_or_insert_with(Affinity::default);
        let node_affinity = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        // The pin replaces the required terms (as upstream, which intersects them with the
        // node name; the node already satisfies the template's own terms).
        node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
            node_selector_terms: vec![pin],
        });
    }
    template
}

fn revision_hash(revision: &ControllerRevision) -> Option<&str> {
    revision.labels().get(REVISION_HASH).map(String::as_str)
}

pub async fn reconcile(set: Arc<DaemonSet>, context: Arc<Context>) -> Result<Action> {
    let (Some(uid), Some(spec)) = (set.uid(), set.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().unwrap_or_default();
    let pods_api = Api::<Pod>::namespaced(context.client.clone(), &namespace);

    // The revision of the template now.
    let collisions = set.status.as_ref().and_then(|s| s.collision_count);
    let Some((_, update)) = history(
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
    let hash = revision_hash(&update).unwrap_or_default().to_string();

    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let nodes: Vec<Arc<Node>> = context.nodes.state();
    let pods: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|pod| is_controlled_by(&pod.metadata, &uid))
        .collect();
    let key = format!("{namespace}/{}", set.name_any());
    let exists = |uid: &str| pods.iter().any(|p| p.uid().as_deref() == Some(uid));
    let live = |uid: &str| {
        pods.iter()
            .any(|p| p.uid().as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none())
    };
    let caught_up = context.expectations.satisfied(&key, exists, live);

    let eligible: Vec<&Arc<Node>> = nodes
        .iter()
        .filter(|node| should_run(&spec.template, node))
        .collect();
    let desired = count(eligible.len());
    let rolling_update = spec
        .update_strategy
        .as_ref()
        .filter(|s| s.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate")
        .map(|s| s.rolling_update.clone().unwrap_or_default());
    let (max_surge, max_unavailable) = match &rolling_update {
        Some(rolling) => surge_and_unavailable(rolling, desired),
        None => (0, 0),
    };
    let min_ready =
        Duration::from_secs(u64::try_from(spec.min_ready_seconds.unwrap_or(0)).unwrap_or(0));
    let now = Timestamp::now();
    let available = |pod: &Pod| is_available(pod, min_ready, now);
    let is_new = |pod: &Pod| pod.labels().get(REVISION_HASH) == Some(&hash);

    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = node_of(pod) {
            by_node.entry(node).or_default().push(pod.clone());
        }
    }
    let mut misscheduled = 0;
    let mut create_on: Vec<String> = Vec::new();
    let mut doomed: Vec<Arc<Pod>> = Vec::new();
    let mut kept: Vec<(String, Vec<Arc<Pod>>)> = Vec::new();
    for node in &nodes {
        let name = node.name_any();
        let here: Vec<Arc<Pod>> = by_node.remove(&name).unwrap_or_default();
        let live: Vec<Arc<Pod>> = here
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if !should_run(&spec.template, node) {
            if !live.is_empty() {
                misscheduled += 1;
                if !should_continue_running(&spec.template, node) {
                    doomed.extend(live);
                }
            }
            continue;
        }
        // A failed pod is replaced; of several on one node, the surplus goes.
        let (failed, mut running): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
            live.into_iter().partition(|pod| is_terminal(pod));
        doomed.extend(failed);
        running.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        let surplus = surplus_on_node(&running, max_surge > 0, is_new, is_ready);
        running.retain(|pod| !surplus.iter().any(|s| Arc::ptr_eq(s, pod)));
        doomed.extend(surplus);
        let terminating = here
            .iter()
            .any(|pod| pod.metadata.deletion_timestamp.is_some() && !is_terminal(pod));
        if running.is_empty() && !terminating {
            create_on.push(name);
        } else {
            kept.push((name, running));
        }
    }
    // Pods for nodes that are gone.
    for (_, left) in by_node {
        doomed.extend(
            left.into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none()),
        );
    }
    if caught_up && rolling_update.is_some() && doomed.is_empty() && create_on.is_empty() {
        let slots: Vec<NodeSlot<'_>> = kept
            .iter()
            .map(|(node, running)| NodeSlot {
                node,
                old: running.iter().find(|p| !is_new(p)).map(|p| p.as_ref()),
                new: running.iter().find(|p| is_new(p)).map(|p| p.as_ref()),
            })
            .collect();
        let step = rollout::step(&slots, max_surge, max_unavailable, available);
        doomed.extend(
            pods.iter()
                .filter(|pod| step.delete.contains(&pod.name_any()))
                .cloned(),
        );
        create_on = step.create_on;
    }
    if caught_up {
        for pod in &doomed {
            delete_pod(&context, &pods_api, &set, &key, pod).await?;
        }
        for node in &create_on {
            create_pod(&context, &pods_api, &set, &key, node, &hash).await?;
        }
    }

    // Status, node by node, from the oldest live pod each node holds (as upstream).
    let (mut scheduled, mut ready, mut available_nodes, mut updated) = (0, 0, 0, 0);
    let mut waiting_for_min_ready = false;
    let mut oldest_on: BTreeMap<String, &Arc<Pod>> = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && !is_terminal(pod))
    {
        if let Some(node) = node_of(pod) {
            let slot = oldest_on.entry(node).or_insert(pod);
            if pod.metadata.creation_timestamp < slot.metadata.creation_timestamp {
                *slot = pod;
            }
        }
    }
    for node in &eligible {
        let Some(pod) = oldest_on.get(&node.name_any()).copied() else {
            continue;
        };
        scheduled += 1;
        if is_ready(pod) {
            ready += 1;
            if available(pod) {
                available_nodes += 1;
            } else {
                waiting_for_min_ready = true;
            }
        }
        if is_new(pod) {
            updated += 1;
        }
    }
    let status = DaemonSetStatus {
        current_number_scheduled: count(scheduled),
        desired_number_scheduled: desired,
        number_misscheduled: misscheduled,
        number_ready: count(ready),
        number_available: (available_nodes > 0).then(|| count(available_nodes)),
        number_unavailable: (desired > count(available_nodes))
            .then(|| desired - count(available_nodes)),
        updated_number_scheduled: (updated > 0).then(|| count(updated)),
        observed_generation: set.metadata.generation,
        collision_count: set.status.as_ref().and_then(|s| s.collision_count),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if set.status.as_ref() != Some(&status) {
        let mut updated_set = set.as_ref().clone();
        updated_set.status = Some(status);
        Api::<DaemonSet>::namespaced(context.client.clone(), &namespace)
            .replace_status(&set.name_any(), &PostParams::default(), &updated_set)
            .await?;
    }
    if !caught_up {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    if waiting_for_min_ready {
        return Ok(Action::requeue(min_ready.min(Duration::from_secs(30))));
    }
    Ok(Action::await_change())
}

async fn delete_pod(
    context: &Context,
    api: &Api<Pod>,
    set: &DaemonSet,
    key: &str,
    pod: &Pod,
) -> Result<()> {
    if let Some(uid) = pod.uid() {
        context.expectations.deleted(key, uid);
    }
    if delete_exact(api, &pod.name_any(), pod.uid(), None).await? {
        publish(
            context,
            set,
            "SuccessfulDelete",
            format!("Deleted pod: {}", pod.name_any()),
        )
        .await;
    }
    Ok(())
}

/// A pod of the current template (`hash`), pinned to `node`.
async fn create_pod(
    context: &Context,
    api: &Api<Pod>,
    set: &DaemonSet,
    key: &str,
    node: &str,
    hash: &str,
) -> Result<()> {
    let Some(spec) = set.spec.as_ref() else {
        return Ok(());
    };
    let template = pinned_to(&spec.template, node);
    let mut pod = pod_from_template(set, &template, &set.name_any());
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_HASH.into(), hash.to_string());
    match api.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            if let Some(uid) = created.uid() {
                context.expectations.created(key, uid);
            }
            publish(
                context,
                set,
                "SuccessfulCreate",
                format!("Created pod: {}", created.name_any()),
            )
            .await;
            Ok(())
        }
        // Forbidden: the namespace is terminating (or a quota says no); the next change retries.
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// `(maxSurge, maxUnavailable)` over `desired` nodes, percentages rounded up (as upstream for
/// DaemonSets); both zero would never move, so unavailability is then 1.
pub(crate) fn surge_and_unavailable(
    rolling: &RollingUpdateDaemonSet,
    desired: i32,
) -> (usize, usize) {
    let resolve = |value: Option<&IntOrString>, default: i32| match value {
        None => default,
        Some(value) => crate::deployment::resolve_percent(value, desired, true),
    };
    let surge = resolve(rolling.max_surge.as_ref(), 0);
    let mut unavailable = resolve(rolling.max_unavailable.as_ref(), 1);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    let size = |n: i32| usize::try_from(n).unwrap_or(0);
    (size(surge), size(unavailable))
}

async fn publish(context: &Context, set: &DaemonSet, reason: &str, note: String) {
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
