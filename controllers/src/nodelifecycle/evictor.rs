//! The taint-eviction-controller's loop: once a second it judges every pod on a node with
//! `NoExecute` taints ([`super::taint_eviction::verdict`]) and deletes those whose time is up,
//! each first marked `DisruptionTarget` and announced by a `TaintManagerEviction` event. A pod
//! that was waiting out its toleration and no longer has to (the taint went, or the pod moved
//! off the node) gets upstream's cancelling event instead.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::taint_eviction::{self, Verdict};
use super::{every, node_of, now_time};
use crate::informers::Informers;

/// The events' reason, as upstream's.
const REASON: &str = "TaintManagerEviction";

/// Taint-based eviction's state.
struct Evictor {
    client: Client,
    recorder: Recorder,
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// When it first saw each node's `NoExecute` taints.
    first_seen: HashMap<String, jiff::Timestamp>,
    /// The pods (by uid) waiting out a toleration at the last pass.
    waiting: HashSet<String>,
}

impl Evictor {
    async fn pass(&mut self) {
        let now = jiff::Timestamp::now();
        let mut tainted = HashMap::new();
        for node in self.nodes.state() {
            let taints = node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.clone())
                .unwrap_or_default();
            if taint_eviction::no_execute(&taints).is_empty() {
                continue;
            }
            let seen = *self.first_seen.entry(node.name_any()).or_insert(now);
            tainted.insert(node.name_any(), (taints, seen));
        }
        self.first_seen.retain(|name, _| tainted.contains_key(name));
        let mut waiting = HashSet::new();
        let mut called_off = Vec::new();
        for pod in self.pods.state() {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = pod.uid().unwrap_or_default();
            let verdict = match node_of(&pod).and_then(|node| tainted.get(node)) {
                Some((taints, seen)) => {
                    taint_eviction::verdict(&pod, &taint_eviction::no_execute(taints), *seen)
                }
                None => Verdict::Stay,
            };
            match verdict {
                Verdict::DeleteNow => self.evict(&pod).await,
                Verdict::DeleteAt(at) if at <= now => self.evict(&pod).await,
                Verdict::DeleteAt(_) => {
                    waiting.insert(uid);
                }
                Verdict::Stay if self.waiting.contains(&uid) => called_off.push(pod),
                Verdict::Stay => {}
            }
        }
        self.waiting = waiting;
        for pod in called_off {
            self.announce(&pod, "Cancelling deletion of Pod").await;
        }
    }

    /// A `TaintManagerEviction` event about `pod`: `what` and the pod's namespace/name.
    async fn announce(&self, pod: &Pod, what: &str) {
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        crate::events::publish(
            &self.recorder,
            pod,
            EventType::Normal,
            REASON,
            "Delete",
            format!("{what} {key}"),
        )
        .await;
    }

    async fn evict(&self, pod: &Pod) {
        let Some(namespace) = pod.namespace() else {
            return;
        };
        self.announce(pod, "Marking for deletion Pod").await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let name = pod.name_any();
        let patch = json!({"status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": now_time()}]}});
        if let Err(error) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!(pod = %name, %error, "marking a pod for taint eviction");
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(pod = %name, %namespace, "deleted: its node has a NoExecute taint it does not tolerate")
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => tracing::warn!(pod = %name, %error, "taint eviction failed"),
        }
    }
}

/// Taint-based eviction.
pub fn taint_eviction_controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let evictor = Evictor {
        recorder: crate::events::recorder(client.clone(), "taint-eviction-controller", identity),
        client,
        nodes: informers.get::<Node>().store,
        pods: informers.get::<Pod>().store,
        first_seen: HashMap::new(),
        waiting: HashSet::new(),
    };
    let (nodes, pods) = (evictor.nodes.clone(), evictor.pods.clone());
    let ready = async move {
        let _ = nodes.wait_until_ready().await;
        let _ = pods.wait_until_ready().await;
    };
    let evictor = std::sync::Arc::new(tokio::sync::Mutex::new(evictor));
    every(Duration::from_secs(1), shutdown, ready, move || {
        let evictor = evictor.clone();
        async move { evictor.lock().await.pass().await }.boxed()
    })
    .boxed()
}
