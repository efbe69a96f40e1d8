//! The disruption controller, as upstream's: every PodDisruptionBudget's status says how many
//! of its pods may be disrupted now — `expectedPods` (the pods its selector picks, or, for a
//! `maxUnavailable` or a percentage, the replicas their controllers ask for), `desiredHealthy`,
//! `currentHealthy` (picked pods that are Ready and not being deleted), `disruptionsAllowed`
//! (their difference, never below 0) and the `DisruptionAllowed` condition. `kubectl get pdb`
//! shows it; the eviction API (`pods/eviction` in the apiserver) spends it, recording each pod
//! it is about to delete in `disruptedPods`: such a pod counts as unhealthy until it is gone,
//! being deleted, or two minutes have passed (upstream's deletion timeout).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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

/// How long an eviction's entry in `disruptedPods` holds its pod as disrupted.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

fn deletion_timeout() -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(i64::try_from(DELETION_TIMEOUT.as_secs()).unwrap_or(i64::MAX))
}

/// The entries of `disruptedPods` still in force at `now`: pods that exist, are not being
/// deleted yet, and were evicted less than [`DELETION_TIMEOUT`] ago.
pub fn still_disrupted(
    recorded: &BTreeMap<String, Time>,
    pods: &[Arc<Pod>],
    now: jiff::Timestamp,
) -> BTreeMap<String, Time> {
    let timeout = deletion_timeout();
    recorded
        .iter()
        .filter(|(name, since)| {
            let pending = pods.iter().any(|pod| {
                pod.metadata.name.as_deref() == Some(name.as_str())
                    && pod.metadata.deletion_timestamp.is_none()
            });
            pending && since.0.checked_add(timeout).is_ok_and(|until| until > now)
        })
        .map(|(name, since)| (name.clone(), since.clone()))
        .collect()
}

/// The counts of `budget` over `pods` (those its selector picks), with `controller_scale`
/// the replicas their controllers ask for; pods in `disrupted` count as unhealthy.
pub fn counts(
    budget: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    disrupted: &BTreeSet<&str>,
    controller_scale: i32,
) -> Result<Counts> {
    let spec = budget.spec.clone().unwrap_or_default();
    let healthy = pods
        .iter()
        .filter(|pod| is_healthy(pod))
        .filter(|pod| !disrupted.contains(pod.metadata.name.as_deref().unwrap_or("")))
        .count();
    let healthy = i32::try_from(healthy).unwrap_or(i32::MAX);
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
    let current = budget.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let disrupted = still_disrupted(
        &current.disrupted_pods.clone().unwrap_or_default(),
        &pods,
        now,
    );
    let names: BTreeSet<&str> = disrupted.keys().map(String::as_str).collect();
    let counts = counts(&budget, &pods, &names, controller_scale)?;
    let allowed = counts.allowed > 0;
    // Look again when the oldest eviction in force times out.
    let next = disrupted
        .values()
        .filter_map(|since| {
            let until = since.0.checked_add(deletion_timeout()).ok()?;
            Duration::try_from(until.duration_since(now)).ok()
        })
        .min();
    let action = match next {
        Some(wait) => Action::requeue(wait + Duration::from_secs(1)),
        None => Action::await_change(),
    };
    let generation = budget.metadata.generation;
    let unchanged = current.expected_pods == counts.expected
        && current.desired_healthy == counts.desired_healthy
        && current.current_healthy == counts.current_healthy
        && current.disruptions_allowed == counts.allowed
        && current.observed_generation == generation
        && current.disrupted_pods.clone().unwrap_or_default() == disrupted
        && current
            .conditions
            .as_ref()
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "DisruptionAllowed"))
            .is_some_and(|condition| (condition.status == "True") == allowed);
    if unchanged {
        return Ok(action);
    }
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    // A merge patch removes the entries no longer in force by nulling them.
    let mut disrupted_patch = serde_json::Map::new();
    for name in current.disrupted_pods.clone().unwrap_or_default().keys() {
        disrupted_patch.insert(name.clone(), serde_json::Value::Null);
    }
    for (name, since) in &disrupted {
        disrupted_patch.insert(name.clone(), json!(since));
    }
    // Pinned to the budget read: an eviction that spent it meanwhile makes this a conflict,
    // retried on the newer state, rather than being overwritten.
    let patch = json!({"metadata": {"resourceVersion": budget.resource_version()},
        "status": {
        "observedGeneration": generation,
        "expectedPods": counts.expected,
        "desiredHealthy": counts.desired_healthy,
        "currentHealthy": counts.current_healthy,
        "disruptionsAllowed": counts.allowed,
        "disruptedPods": disrupted_patch,
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
    Ok(action)
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
        let none = BTreeSet::new();
        let of = |min, max, scale| counts(&budget(min, max), &pods, &none, scale).expect("counts");
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
        assert!(counts(&nonsense, &pods, &none, 4).is_err());
    }

    #[test]
    fn evictions_hold_their_pod_until_it_goes_or_times_out() {
        let named = |name: &str, deleting: bool| {
            let mut pod = (*pod(true)).clone();
            pod.metadata.name = Some(name.into());
            if deleting {
                pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
            }
            Arc::new(pod)
        };
        let now = jiff::Timestamp::now();
        let ago = |seconds: i64| Time(now - jiff::SignedDuration::from_secs(seconds));
        let recorded: BTreeMap<String, Time> = [
            ("fresh".to_string(), ago(5)),
            ("old".to_string(), ago(300)),
            ("going".to_string(), ago(5)),
            ("gone".to_string(), ago(5)),
        ]
        .into();
        let pods = vec![
            named("fresh", false),
            named("old", false),
            named("going", true),
        ];
        let held = still_disrupted(&recorded, &pods, now);
        assert_eq!(held.keys().collect::<Vec<_>>(), vec!["fresh"]);
        // A held pod is not healthy: 3 ready pods, one evicted, 2 must stay → none allowed.
        let budget = budget(Some(IntOrString::Int(2)), None);
        let three = vec![named("fresh", false), named("a", false), named("b", false)];
        let counted = counts(&budget, &three, &["fresh"].into(), 3).expect("counts");
        assert_eq!((counted.current_healthy, counted.allowed), (2, 0));
    }
}
