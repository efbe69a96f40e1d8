//! The pod garbage collector, as upstream's `podgc` controller: every 20 s it
//! - deletes the oldest terminated (Succeeded or Failed) pods beyond
//!   `--terminated-pod-gc-threshold` (12,500; 0 turns this off),
//! - fails and force-deletes pods bound to a node that no longer exists — once the node has been
//!   missing for a 40 s quarantine and a live read confirms it is gone (the pod gets the
//!   `DisruptionTarget` condition with reason `DeletionByPodGC`, and phase `Failed` if it was
//!   still running), and
//! - force-deletes pods being deleted that were never scheduled (no kubelet will finish them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::informers::Informers;

/// How the collector runs.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Terminated pods kept (0: no limit), as `--terminated-pod-gc-threshold`.
    pub terminated_threshold: usize,
    /// Between two passes.
    pub period: Duration,
    /// How long a node must be missing before its pods are orphans.
    pub quarantine: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            terminated_threshold: 12_500,
            period: Duration::from_secs(20),
            quarantine: Duration::from_secs(40),
        }
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        .unwrap_or("")
}

fn is_terminated(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|node| !node.is_empty())
}

/// The terminated pods beyond `threshold`, oldest first (0: none).
pub fn terminated_beyond(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    if threshold == 0 {
        return Vec::new();
    }
    let mut terminated: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|pod| is_terminated(pod) && pod.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    if terminated.len() <= threshold {
        return Vec::new();
    }
    terminated.sort_by(|a, b| {
        let created = |pod: &Pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    let excess = terminated.len() - threshold;
    terminated.truncate(excess);
    terminated
}

/// Pods being deleted that no node ever took.
pub fn unscheduled_terminating(pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_some() && node_of(pod).is_none())
        .cloned()
        .collect()
}

/// The nodes pods are bound to that `nodes` does not hold.
pub fn missing_nodes(pods: &[Arc<Pod>], nodes: &HashSet<String>) -> HashSet<String> {
    pods.iter()
        .filter_map(|pod| node_of(pod))
        .filter(|node| !nodes.contains(*node))
        .map(str::to_string)
        .collect()
}

struct Collector {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    settings: Settings,
    /// When each missing node was first seen missing.
    missing_since: HashMap<String, Instant>,
}

impl Collector {
    async fn delete(&self, pod: &Pod, why: &str) {
        let Some(namespace) = pod.namespace() else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => {
                tracing::info!(pod = %pod.name_any(), %namespace, why, "pod garbage-collected")
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => tracing::warn!(pod = %pod.name_any(), %error, "deleting a pod failed"),
        }
    }

    /// Marks an orphan as disrupted (and failed, if it had not ended) before it goes.
    async fn fail(&self, pod: &Pod) {
        let Some(namespace) = pod.namespace() else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let mut status = json!({"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
            "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }]});
        if !is_terminated(pod) {
            status["phase"] = json!("Failed");
        }
        let patch = Patch::Strategic(json!({"status": status}));
        if let Err(error) = api
            .patch_status(&pod.name_any(), &PatchParams::default(), &patch)
            .await
        {
            tracing::debug!(pod = %pod.name_any(), %error, "marking an orphaned pod failed");
        }
    }

    async fn pass(&mut self) {
        let pods = self.pods.state();
        for pod in terminated_beyond(&pods, self.settings.terminated_threshold) {
            self.delete(&pod, "terminated pods over the threshold")
                .await;
        }
        for pod in unscheduled_terminating(&pods) {
            self.delete(&pod, "being deleted and never scheduled").await;
        }
        let known: HashSet<String> = self.nodes.state().iter().map(|n| n.name_any()).collect();
        let missing = missing_nodes(&pods, &known);
        self.missing_since.retain(|node, _| missing.contains(node));
        let now = Instant::now();
        let nodes: Api<Node> = Api::all(self.client.clone());
        for node in missing {
            let since = *self.missing_since.entry(node.clone()).or_insert(now);
            if now.duration_since(since) < self.settings.quarantine {
                continue;
            }
            // The informer may be behind: only a live 404 makes the pods orphans.
            match nodes.get_opt(&node).await {
                Ok(None) => {}
                Ok(Some(_)) => continue,
                Err(error) => {
                    tracing::debug!(%node, %error, "checking a missing node");
                    continue;
                }
            }
            for pod in pods
                .iter()
                .filter(|pod| node_of(pod) == Some(node.as_str()))
            {
                self.fail(pod).await;
                self.delete(pod, "its node no longer exists").await;
            }
        }
    }
}

pub fn controller(
    informers: &Informers,
    client: Client,
    settings: Settings,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    // Only the stores are read: the change streams are let go.
    let pods = informers.get::<Pod>().store;
    let nodes = informers.get::<Node>().store;
    let mut collector = Collector {
        client,
        pods,
        nodes,
        settings,
        missing_since: HashMap::new(),
    };
    async move {
        let ready = async {
            let _ = collector.pods.wait_until_ready().await;
            let _ = collector.nodes.wait_until_ready().await;
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = ready => {}
        }
        let mut ticker = tokio::time::interval(collector.settings.period);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => collector.pass().await,
            }
        }
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, phase: &str, node: Option<&str>, age_seconds: i64) -> Arc<Pod> {
        let created = jiff::Timestamp::from_second(1_700_000_000 - age_seconds).expect("time");
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": phase},
        }))
        .expect("a pod");
        pod.metadata.creation_timestamp = Some(Time(created));
        Arc::new(pod)
    }

    #[test]
    fn the_oldest_terminated_pods_beyond_the_threshold_go() {
        let pods = vec![
            pod("new-done", "Succeeded", Some("n"), 10),
            pod("old-failed", "Failed", Some("n"), 300),
            pod("running", "Running", Some("n"), 1000),
            pod("mid-done", "Succeeded", Some("n"), 100),
        ];
        let doomed: Vec<String> = terminated_beyond(&pods, 1)
            .iter()
            .map(|pod| pod.name_any())
            .collect();
        assert_eq!(doomed, vec!["old-failed", "mid-done"]);
        assert!(terminated_beyond(&pods, 3).is_empty());
        assert!(
            terminated_beyond(&pods, 0).is_empty(),
            "0 turns the limit off"
        );
    }

    #[test]
    fn orphans_and_unscheduled_deletions_are_found() {
        let mut leaving = (*pod("leaving", "Pending", None, 5)).clone();
        leaving.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        let pods = vec![
            pod("here", "Running", Some("n1"), 5),
            pod("ghost", "Running", Some("gone"), 5),
            pod("waiting", "Pending", None, 5),
            Arc::new(leaving),
        ];
        let known: HashSet<String> = ["n1".to_string()].into();
        assert_eq!(missing_nodes(&pods, &known), ["gone".to_string()].into());
        let names: Vec<String> = unscheduled_terminating(&pods)
            .iter()
            .map(|pod| pod.name_any())
            .collect();
        assert_eq!(names, vec!["leaving"]);
    }
}
