//! One DaemonSet's sync: which nodes should run its pod, which pods to create, delete or
//! replace, and its status.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodTemplateSpec, Toleration,
};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::Context;
use crate::error::Result;
use crate::podtemplate::{delete_exact, pod_from_template};
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

/// Whether the DaemonSet's pod should run on `node`.
pub(crate) fn should_run(template: &PodTemplateSpec, node: &Node) -> bool {
    let Some(spec) = template.spec.as_ref() else {
        return false;
    };
    node_matches(spec, node) && untolerated(node, &daemon_tolerations(template)).is_empty()
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

    let nodes: Vec<Arc<Node>> = context.nodes.state();
    let pods: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|pod| is_controlled_by(&pod.metadata, &uid))
        .collect();
    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = node_of(pod) {
            by_node.entry(node).or_default().push(pod.clone());
        }
    }
    let mut desired = 0;
    let mut misscheduled = 0;
    let mut create_on: Vec<String> = Vec::new();
    let mut doomed: Vec<Arc<Pod>> = Vec::new();
    for node in &nodes {
        let name = node.name_any();
        let here: Vec<Arc<Pod>> = by_node.remove(&name).unwrap_or_default();
        let live: Vec<Arc<Pod>> = here
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if should_run(&spec.template, node) {
            desired += 1;
            // A failed pod is replaced; a second pod on one node goes (the oldest stays).
            let (failed, running): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
                live.into_iter().partition(|pod| is_terminal(pod));
            doomed.extend(failed);
            let mut running = running;
            running.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            });
            if running.is_empty()
                && here
                    .iter()
                    .all(|pod| pod.metadata.deletion_timestamp.is_none() || is_terminal(pod))
            {
                create_on.push(name);
            }
            doomed.extend(running.into_iter().skip(1));
        } else if !live.is_empty() {
            misscheduled += 1;
            doomed.extend(live);
        }
    }
    // Pods for nodes that are gone.
    for (_, left) in by_node {
        doomed.extend(
            left.into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none()),
        );
    }
    for pod in &doomed {
        delete_pod(&context, &pods_api, &set, pod).await?;
    }
    for node in &create_on {
        let template = pinned_to(&spec.template, node);
        let mut pod = pod_from_template(set.as_ref(), &template, &set.name_any());
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(REVISION_HASH.into(), hash.clone());
        match pods_api.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                publish(
                    &context,
                    &set,
                    "SuccessfulCreate",
                    format!("Created pod: {}", created.name_any()),
                )
                .await;
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {}
            Err(error) => return Err(error.into()),
        }
    }

    // RollingUpdate: replace old pods, maxUnavailable nodes at a time.
    let live: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && !is_terminal(pod))
        .collect();
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling && doomed.is_empty() && create_on.is_empty() {
        let max_unavailable = spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref());
        let budget = crate::deployment::resolve_unavailable(max_unavailable, desired);
        let unavailable = live.iter().filter(|pod| !is_ready(pod)).count();
        let stale: Vec<&&Arc<Pod>> = live
            .iter()
            .filter(|pod| pod.labels().get(REVISION_HASH) != Some(&hash))
            .collect();
        let room = usize::try_from(budget)
            .unwrap_or(1)
            .saturating_sub(unavailable);
        for pod in stale.into_iter().take(room) {
            delete_pod(&context, &pods_api, &set, pod).await?;
        }
    }

    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let scheduled = live.iter().filter(|pod| node_of(pod).is_some()).count();
    let ready = live.iter().filter(|pod| is_ready(pod)).count();
    let updated = live
        .iter()
        .filter(|pod| pod.labels().get(REVISION_HASH) == Some(&hash))
        .count();
    let status = DaemonSetStatus {
        current_number_scheduled: count(scheduled),
        desired_number_scheduled: desired,
        number_misscheduled: misscheduled,
        number_ready: count(ready),
        number_available: (ready > 0).then(|| count(ready)),
        number_unavailable: (usize::try_from(desired).unwrap_or(0) > ready)
            .then(|| desired - count(ready)),
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
    Ok(Action::await_change())
}

async fn delete_pod(context: &Context, api: &Api<Pod>, set: &DaemonSet, pod: &Pod) -> Result<()> {
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
