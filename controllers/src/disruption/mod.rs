//! The disruption controller, as upstream's: every PodDisruptionBudget's status says how many
//! of its pods may be disrupted now — `expectedPods` (the pods its selector picks, or, for a
//! `maxUnavailable` or a percentage, the replicas their controllers ask for), `desiredHealthy`,
//! `currentHealthy` (picked pods that are Ready and not being deleted), `disruptionsAllowed`
//! (their difference, never below 0) and the `DisruptionAllowed` condition. `kubectl get pdb`
//! shows it; the eviction API (not yet) will spend it.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub stateful_sets: Store<StatefulSet>,
    pub controllers: Store<ReplicationController>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let budgets = informers.get::<PodDisruptionBudget>();
    let pods = informers.get::<Pod>();
    let budget_store = budgets.store.clone();
    let context = Arc::new(Context {
        client,
        pods: pods.store.clone(),
        replica_sets: informers.get::<ReplicaSet>().store,
        deployments: informers.get::<Deployment>().store,
        stateful_sets: informers.get::<StatefulSet>().store,
        controllers: informers.get::<ReplicationController>().store,
    });
    let controller = Controller::for_shared_stream(
        counted(
            budgets.changes,
            queue.clone(),
            |budget: &PodDisruptionBudget| Some(key_of(budget)),
        ),
        budgets.store,
    )
    // A pod that changes wakes the budgets of its namespace.
    .watches_shared_stream(pods.changes, move |pod: Arc<Pod>| {
        let namespace = pod.namespace();
        budget_store
            .state()
            .iter()
            .filter(|budget| budget.namespace() == namespace)
            .map(|budget| ObjectRef::from_obj(budget.as_ref()))
            .collect::<Vec<_>>()
    });
    runner::run(
        "disruption",
        controller,
        context,
        queue,
        5,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// `value` of `total` (a percentage rounds up, as upstream's).
fn scaled(value: &IntOrString, total: i32) -> Result<i32> {
    match value {
        IntOrString::Int(count) => Ok(*count),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|number| number.parse().ok())
                .ok_or_else(|| {
                    Error::Invalid(format!("{text:?} is not a count or a percentage"))
                })?;
            let product = percent * i64::from(total);
            Ok(i32::try_from((product + 99) / 100).unwrap_or(i32::MAX))
        }
    }
}

fn is_healthy(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && rudder_facts::pods::is_ready(pod)
}

impl Context {
    /// The replicas the controller of `pod` asks for, once per controller.
    fn scale_of(&self, pod: &Pod, seen: &mut BTreeMap<String, i32>) {
        let Some(owner) = rudder_facts::owners::controller_of(&pod.metadata) else {
            return;
        };
        let namespace = pod.namespace().unwrap_or_default();
        let (key, replicas) = match owner.kind.as_str() {
            "ReplicaSet" => {
                let Some(set) = self
                    .replica_sets
                    .get(&ObjectRef::new(&owner.name).within(&namespace))
                else {
                    return;
                };
                // A Deployment's ReplicaSet counts as its Deployment.
                let deployment = rudder_facts::owners::controller_of(&set.metadata)
                    .filter(|owner| owner.kind == "Deployment")
                    .and_then(|owner| {
                        self.deployments
                            .get(&ObjectRef::new(&owner.name).within(&namespace))
                    });
                match deployment {
                    Some(deployment) => (
                        format!("Deployment/{}", deployment.name_any()),
                        deployment
                            .spec
                            .as_ref()
                            .and_then(|s| s.replicas)
                            .unwrap_or(1),
                    ),
                    None => (
                        format!("ReplicaSet/{}", set.name_any()),
                        set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                    ),
                }
            }
            "StatefulSet" => {
                let Some(set) = self
                    .stateful_sets
                    .get(&ObjectRef::new(&owner.name).within(&namespace))
                else {
                    return;
                };
                (
                    format!("StatefulSet/{}", set.name_any()),
                    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                )
            }
            "ReplicationController" => {
                let Some(controller) = self
                    .controllers
                    .get(&ObjectRef::new(&owner.name).within(&namespace))
                else {
                    return;
                };
                (
                    format!("ReplicationController/{}", controller.name_any()),
                    controller
                        .spec
                        .as_ref()
                        .and_then(|s| s.replicas)
                        .unwrap_or(1),
                )
            }
            _ => return,
        };
        seen.insert(key, replicas);
    }
}

/// What a budget's status says, from the pods it picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub expected: i32,
    pub desired_healthy: i32,
    pub current_healthy: i32,
    pub allowed: i32,
}

/// The counts of `budget` over `pods` (those its selector picks), with `controller_scale`
/// the replicas their controllers ask for.
pub fn counts(
    budget: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    controller_scale: i32,
) -> Result<Counts> {
    let spec = budget.spec.clone().unwrap_or_default();
    let healthy =
        i32::try_from(pods.iter().filter(|pod| is_healthy(pod)).count()).unwrap_or(i32::MAX);
    let (expected, desired) = match (&spec.min_available, &spec.max_unavailable) {
        (Some(IntOrString::Int(min)), _) => (i32::try_from(pods.len()).unwrap_or(i32::MAX), *min),
        (Some(min), _) => (controller_scale, scaled(min, controller_scale)?),
        (None, Some(max)) => {
            let unavailable = scaled(max, controller_scale)?;
            (controller_scale, (controller_scale - unavailable).max(0))
        }
        (None, None) => (i32::try_from(pods.len()).unwrap_or(i32::MAX), 0),
    };
    Ok(Counts {
        expected,
        desired_healthy: desired,
        current_healthy: healthy,
        allowed: (healthy - desired).max(0),
    })
}

pub async fn reconcile(budget: Arc<PodDisruptionBudget>, context: Arc<Context>) -> Result<Action> {
    let namespace = budget.namespace().unwrap_or_default();
    let spec = budget.spec.clone().unwrap_or_default();
    // policy/v1: an empty selector picks every pod of the namespace, none picks none.
    let selector = match spec.selector.clone() {
        Some(selector) => {
            Some(Selector::try_from(selector).map_err(|error| Error::Invalid(error.to_string()))?)
        }
        None => None,
    };
    let pods: Vec<Arc<Pod>> = match &selector {
        None => Vec::new(),
        Some(selector) => context
            .pods
            .state()
            .into_iter()
            .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|pod| !rudder_facts::pods::is_terminal(pod))
            .filter(|pod| selector.matches(&pod.labels().clone()))
            .collect(),
    };
    let mut scales = BTreeMap::new();
    for pod in &pods {
        context.scale_of(pod, &mut scales);
    }
    let controller_scale: i32 = scales.values().sum();
    let counts = counts(&budget, &pods, controller_scale)?;
    let allowed = counts.allowed > 0;
    let current = budget.status.clone().unwrap_or_default();
    let generation = budget.metadata.generation;
    let unchanged = current.expected_pods == counts.expected
        && current.desired_healthy == counts.desired_healthy
        && current.current_healthy == counts.current_healthy
        && current.disruptions_allowed == counts.allowed
        && current.observed_generation == generation
        && current
            .conditions
            .as_ref()
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "DisruptionAllowed"))
            .is_some_and(|condition| (condition.status == "True") == allowed);
    if unchanged {
        return Ok(Action::await_change());
    }
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let patch = json!({"status": {
        "observedGeneration": generation,
        "expectedPods": counts.expected,
        "desiredHealthy": counts.desired_healthy,
        "currentHealthy": counts.current_healthy,
        "disruptionsAllowed": counts.allowed,
        "disruptedPods": current.disrupted_pods.unwrap_or_default(),
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": status,
            "reason": reason,
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }],
    }});
    Api::<PodDisruptionBudget>::namespaced(context.client.clone(), &namespace)
        .patch_status(
            &budget.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
        PodDisruptionBudget {
            spec: Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                min_available: min,
                max_unavailable: max,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
            .expect("a pod"),
        )
    }

    #[test]
    fn allowed_disruptions_are_healthy_pods_beyond_the_desired() {
        let pods = vec![pod(true), pod(true), pod(true), pod(false)];
        let of = |min, max, scale| counts(&budget(min, max), &pods, scale).expect("counts");
        let min2 = of(Some(IntOrString::Int(2)), None, 4);
        assert_eq!(
            (
                min2.expected,
                min2.desired_healthy,
                min2.current_healthy,
                min2.allowed
            ),
            (4, 2, 3, 1)
        );
        // maxUnavailable counts the controllers' replicas: 5 wanted, 1 may be missing.
        let max1 = of(None, Some(IntOrString::Int(1)), 5);
        assert_eq!(
            (max1.expected, max1.desired_healthy, max1.allowed),
            (5, 4, 0)
        );
        // Percentages round up: 50% of 5 is 3.
        let half = of(Some(IntOrString::String("50%".into())), None, 5);
        assert_eq!((half.desired_healthy, half.allowed), (3, 0));
        let quarter = of(None, Some(IntOrString::String("25%".into())), 4);
        assert_eq!((quarter.desired_healthy, quarter.allowed), (3, 0));
        let nonsense = budget(Some(IntOrString::String("lots".into())), None);
        assert!(counts(&nonsense, &pods, 4).is_err());
    }
}
