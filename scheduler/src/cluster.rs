//! The scheduler's one boundary with the API: the writes it makes. [`KubeCluster`] makes
//! them through kube-rs against the apiserver; [`FakeCluster`] records them for tests.
//!
//! Events go through a bounded queue drained in the background (as upstream's event
//! broadcaster): recording never slows a scheduling cycle, and under overload events are
//! dropped, never the scheduling.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::mpsc;

use crate::framework::PreBindAction;

/// A failed write.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct WriteError {
    pub message: String,
    /// The pod is gone or already bound (retrying will not help).
    pub gone: bool,
}

impl From<kube::Error> for WriteError {
    fn from(error: kube::Error) -> Self {
        let gone =
            matches!(&error, kube::Error::Api(status) if status.code == 404 || status.code == 409);
        Self {
            message: error.to_string(),
            gone,
        }
    }
}

/// An event about a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// The writes the scheduler makes.
pub trait Cluster: Send + Sync {
    /// `POST pods/<name>/binding` to `node`.
    fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), WriteError>>;
    /// Sets `PodScheduled=False/Unschedulable` with `message` and the nominated node.
    fn mark_unschedulable(
        &self,
        pod: &Pod,
        message: &str,
        nominated: Option<&str>,
    ) -> BoxFuture<'static, Result<(), WriteError>>;
    /// Evicts a preemption victim: the `DisruptionTarget` condition, then a delete.
    fn evict(&self, victim: &Pod) -> BoxFuture<'static, Result<(), WriteError>>;
    /// Records an event (fire and forget).
    fn record(&self, pod: &Pod, event: PodEvent);
    /// A volume write of the binding cycle (PreBind); waiting is the scheduler's.
    fn pre_bind(&self, action: &PreBindAction) -> BoxFuture<'static, Result<(), WriteError>>;
}

/// The cluster through kube-rs.
pub struct KubeCluster {
    client: Client,
    events: mpsc::Sender<(Pod, PodEvent)>,
}

impl KubeCluster {
    /// Starts the event recorder on the current runtime.
    pub fn new(client: Client, identity: &str) -> Self {
        let (events, queue) = mpsc::channel::<(Pod, PodEvent)>(1000);
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::DEFAULT_SCHEDULER_NAME.into(),
                instance: Some(identity.to_string()),
            },
        );
        let (writer, identity) = (client.clone(), identity.to_string());
        tokio::spawn(
            tokio_stream_of(queue).for_each_concurrent(8, move |(pod, event)| {
                let recorder = recorder.clone();
                let (writer, identity) = (writer.clone(), identity.clone());
                async move {
                    if !event.warning {
                        // One event per pod and reason, written directly: kube's recorder,
                        // which folds repeats into series, keeps every event it wrote and
                        // scans them all on each write — fine for the warnings, quadratic
                        // for a Scheduled event per pod.
                        if let Err(error) = create_event(writer, &identity, &pod, &event).await {
                            tracing::debug!(%error, "recording a scheduler event failed");
                        }
                        return;
                    }
                    let published = Event {
                        type_: if event.warning {
                            EventType::Warning
                        } else {
                            EventType::Normal
                        },
                        reason: event.reason.into(),
                        note: Some(event.note),
                        action: event.action.into(),
                        secondary: None,
                    };
                    if let Err(error) = recorder.publish(&published, &pod.object_ref(&())).await {
                        tracing::debug!(%error, "recording a scheduler event failed");
                    }
                }
            }),
        );
        Self { client, events }
    }

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }
}

/// Writes one `events.k8s.io/v1` Event about `pod`.
async fn create_event(
    client: Client,
    identity: &str,
    pod: &Pod,
    event: &PodEvent,
) -> Result<(), kube::Error> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = format!(
        "{}.{:016x}",
        pod.metadata.name.as_deref().unwrap_or("pod"),
        rand::random::<u64>()
    );
    let object: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "reportingController": crate::DEFAULT_SCHEDULER_NAME,
        "reportingInstance": identity,
        "action": event.action,
        "reason": event.reason,
        "type": "Normal",
        "note": event.note,
        "regarding": {
            "apiVersion": "v1", "kind": "Pod", "namespace": namespace,
            "name": pod.metadata.name, "uid": pod.metadata.uid,
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, &namespace);
    api.create(&PostParams::default(), &object)
        .await
        .map(|_| ())
}

fn tokio_stream_of<T: Send + 'static>(
    mut receiver: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

impl Cluster for KubeCluster {
    fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), WriteError>> {
        let api = self.pods(pod);
        let name = name(pod);
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        async move {
            api.create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await?;
            Ok(())
        }
        .boxed()
    }

    fn mark_unschedulable(
        &self,
        pod: &Pod,
        message: &str,
        nominated: Option<&str>,
    ) -> BoxFuture<'static, Result<(), WriteError>> {
        let unchanged = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref() == Some(message)
            })
            && nominated.is_none();
        let api = self.pods(pod);
        let name = name(pod);
        let mut status = json!({
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }],
        });
        if let Some(node) = nominated {
            status["nominatedNodeName"] = json!(node);
        }
        async move {
            if unchanged {
                return Ok(());
            }
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": status})),
            )
            .await?;
            Ok(())
        }
        .boxed()
    }

    fn evict(&self, victim: &Pod) -> BoxFuture<'static, Result<(), WriteError>> {
        let api = self.pods(victim);
        let name = name(victim);
        let uid = victim.metadata.uid.clone();
        let message = format!(
            "{}: preempting to accommodate a higher priority pod",
            crate::DEFAULT_SCHEDULER_NAME
        );
        let condition = json!({"status": {"conditions": [{
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]}});
        async move {
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(condition))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(error.into()),
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(error) => Err(error.into()),
            }
        }
        .boxed()
    }

    fn record(&self, pod: &Pod, event: PodEvent) {
        if self.events.try_send((pod.clone(), event)).is_err() {
            tracing::debug!("scheduler event queue full; event dropped");
        }
    }

    fn pre_bind(&self, action: &PreBindAction) -> BoxFuture<'static, Result<(), WriteError>> {
        let client = self.client.clone();
        let action = action.clone();
        async move {
            match action {
                PreBindAction::SelectNode {
                    namespace,
                    claim,
                    node,
                } => {
                    let patch = json!({"metadata": {"annotations": {
                        rudder_facts::volumes::SELECTED_NODE: node}}});
                    Api::<PersistentVolumeClaim>::namespaced(client, &namespace)
                        .patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                }
                PreBindAction::BindVolume {
                    volume,
                    namespace,
                    claim,
                    uid,
                } => {
                    // As the PV binder would: the volume's claimRef, pinned to the version
                    // read (a volume taken meanwhile fails the binding, and the pod retries).
                    let volumes: Api<PersistentVolume> = Api::all(client);
                    let mut current = volumes.get(&volume).await?;
                    let spec = current.spec.get_or_insert_with(Default::default);
                    let free = spec.claim_ref.is_none();
                    spec.claim_ref = Some(ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("PersistentVolumeClaim".into()),
                        namespace: Some(namespace),
                        name: Some(claim),
                        uid: Some(uid),
                        ..ObjectReference::default()
                    });
                    if free {
                        current
                            .metadata
                            .annotations
                            .get_or_insert_with(Default::default)
                            .insert(
                                rudder_facts::volumes::BOUND_BY_CONTROLLER.into(),
                                "yes".into(),
                            );
                    }
                    volumes
                        .replace(&volume, &PostParams::default(), &current)
                        .await?;
                }
                PreBindAction::WaitBound { .. } => {}
            }
            Ok(())
        }
        .boxed()
    }
}

/// A write the fake saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Bind {
        pod: String,
        node: String,
    },
    Unschedulable {
        pod: String,
        message: String,
        nominated: Option<String>,
    },
    Evict {
        pod: String,
    },
    Event {
        pod: String,
        reason: &'static str,
        note: String,
    },
    PreBind(PreBindAction),
}

/// Records writes; bindings of pods named in `refuse` fail.
#[derive(Default)]
pub struct FakeCluster {
    pub writes: Arc<Mutex<Vec<Write>>>,
    pub refuse: Mutex<Vec<String>>,
}

impl FakeCluster {
    pub fn writes(&self) -> Vec<Write> {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn push(&self, write: Write) {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(write);
    }
}

impl Cluster for FakeCluster {
    fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), WriteError>> {
        let pod = name(pod);
        let refused = self
            .refuse
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&pod);
        if !refused {
            self.push(Write::Bind {
                pod,
                node: node.to_string(),
            });
        }
        async move {
            if refused {
                Err(WriteError {
                    message: "refused".into(),
                    gone: false,
                })
            } else {
                Ok(())
            }
        }
        .boxed()
    }

    fn mark_unschedulable(
        &self,
        pod: &Pod,
        message: &str,
        nominated: Option<&str>,
    ) -> BoxFuture<'static, Result<(), WriteError>> {
        self.push(Write::Unschedulable {
            pod: name(pod),
            message: message.to_string(),
            nominated: nominated.map(String::from),
        });
        async { Ok(()) }.boxed()
    }

    fn evict(&self, victim: &Pod) -> BoxFuture<'static, Result<(), WriteError>> {
        self.push(Write::Evict { pod: name(victim) });
        async { Ok(()) }.boxed()
    }

    fn pre_bind(&self, action: &PreBindAction) -> BoxFuture<'static, Result<(), WriteError>> {
        self.push(Write::PreBind(action.clone()));
        async { Ok(()) }.boxed()
    }

    fn record(&self, pod: &Pod, event: PodEvent) {
        self.push(Write::Event {
            pod: name(pod),
            reason: event.reason,
            note: event.note,
        });
    }
}
