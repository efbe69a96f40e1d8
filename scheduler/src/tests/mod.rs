//! Scenarios through the whole scheduler (queue, cache, plugins, preemption) against the
//! fake cluster: nodes and pods go in as the informers would deliver them, bindings come
//! back as the bound pods, and the tests read where pods landed and what users were told.

mod scenarios;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

use crate::cluster::{FakeCluster, Write};
use crate::config::SchedulerConfiguration;
use crate::queue::Timings;
use crate::scheduler::{Listers, Scheduler, Turn};
use crate::workloads::ListedWorkloads;

/// A scheduler over a fake cluster, and the pods it was given (to confirm bindings).
pub struct Harness {
    pub scheduler: Arc<Scheduler>,
    pub fake: Arc<FakeCluster>,
    pods: BTreeMap<String, Pod>,
    budgets: Arc<std::sync::Mutex<Vec<Arc<PodDisruptionBudget>>>>,
    /// Services and controllers PodTopologySpread's default constraints see.
    pub workloads: Arc<ListedWorkloads>,
    turn: Turn,
    confirmed: usize,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config("")
    }

    pub fn with_config(yaml: &str) -> Self {
        let configuration =
            SchedulerConfiguration::parse(if yaml.is_empty() { "{}" } else { yaml })
                .expect("configuration");
        let profiles = crate::profiles(&configuration).expect("profiles");
        let fake = Arc::new(FakeCluster::default());
        let budgets: Arc<std::sync::Mutex<Vec<Arc<PodDisruptionBudget>>>> = Arc::default();
        let listed = budgets.clone();
        let workloads = Arc::new(ListedWorkloads::default());
        let scheduler = Scheduler::new(
            profiles,
            fake.clone(),
            Listers {
                budgets: Arc::new(move || listed.lock().expect("budgets").clone()),
                workloads: workloads.clone(),
                ..Listers::default()
            },
            Timings {
                initial_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(1),
                unschedulable_timeout: Duration::from_secs(300),
            },
            Arc::default(),
            tokio::runtime::Handle::current(),
        );
        Self {
            scheduler,
            fake,
            pods: BTreeMap::new(),
            budgets,
            workloads,
            turn: Turn::default(),
            confirmed: 0,
        }
    }

    pub fn node(&mut self, node: Value) {
        let node: Node = serde_json::from_value(node).expect("node");
        self.scheduler.on_node(Arc::new(node), false);
    }

    pub fn pod(&mut self, pod: Value) {
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        let name = pod.metadata.name.clone().expect("name");
        self.pods.insert(name, pod.clone());
        self.scheduler.on_pod(Arc::new(pod), false);
    }

    pub fn budget(&mut self, pdb: Value) {
        let pdb: PodDisruptionBudget = serde_json::from_value(pdb).expect("pdb");
        self.budgets.lock().expect("budgets").push(Arc::new(pdb));
    }

    pub fn delete(&mut self, name: &str) {
        if let Some(pod) = self.pods.remove(name) {
            self.scheduler.on_pod(Arc::new(pod), true);
        }
    }

    /// Schedules until the queue has nothing ready, confirming bindings as the informer would.
    pub async fn settle(&mut self) {
        for _ in 0..1000 {
            let worked = self
                .scheduler
                .schedule_next(Duration::from_millis(5), &mut self.turn);
            // Let binding tasks run.
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.confirm();
            if !worked {
                break;
            }
        }
    }

    fn confirm(&mut self) {
        let writes = self.fake.writes();
        for write in &writes[self.confirmed..] {
            match write {
                Write::Bind { pod, node } => {
                    if let Some(mut bound) = self.pods.get(pod).cloned() {
                        bound.spec.as_mut().expect("spec").node_name = Some(node.clone());
                        self.pods.insert(pod.clone(), bound.clone());
                        self.scheduler.on_pod(Arc::new(bound), false);
                    }
                }
                Write::Evict { pod } => self.delete(pod),
                _ => {}
            }
        }
        self.confirmed = writes.len();
    }

    /// Where each bound pod went.
    pub fn placements(&self) -> BTreeMap<String, String> {
        self.fake
            .writes()
            .into_iter()
            .filter_map(|w| match w {
                Write::Bind { pod, node } => Some((pod, node)),
                _ => None,
            })
            .collect()
    }

    /// Pods per node.
    pub fn per_node(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for node in self.placements().values() {
            *counts.entry(node.clone()).or_default() += 1;
        }
        counts
    }

    /// The last FailedScheduling message for `pod`.
    pub fn failure(&self, pod: &str) -> Option<String> {
        self.fake.writes().into_iter().rev().find_map(|w| match w {
            Write::Unschedulable {
                pod: p, message, ..
            } if p == pod => Some(message),
            _ => None,
        })
    }

    pub fn evicted(&self) -> Vec<String> {
        self.fake
            .writes()
            .into_iter()
            .filter_map(|w| match w {
                Write::Evict { pod } => Some(pod),
                _ => None,
            })
            .collect()
    }
}

/// A Ready node with `cpu` and `memory` allocatable, labels and taints.
pub fn node(name: &str, cpu: &str, labels: Value, taints: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    })
}

/// A pod asking for `cpu`, with extra spec fields merged in.
pub fn pod(name: &str, cpu: &str, labels: Value, spec: Value) -> Value {
    let mut base = json!({
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
    });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": base,
    })
}
