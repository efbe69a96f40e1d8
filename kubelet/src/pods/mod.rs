//! The pods bound to this node: a watch on `spec.nodeName=<node>` feeds one [`worker`] per
//! pod (by uid) with each new version; a pod that disappears from the watch gets the last word
//! [`worker::Update::Gone`]. When the agent starts, the sandboxes the runtime already has are
//! handed to their pods' workers (so running pods survive an agent restart), and sandboxes of
//! pods that no longer exist are removed.

pub mod backoff;
pub mod claims;
pub mod env;
pub mod probes;
pub mod spec;
pub mod status;
pub mod volumes;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::runtime::{api, labels};
use worker::{Context, Update};

/// What the rest of the agent may see and ask of the pod workers: the pods that have workers
/// (for stats and eviction ranking), and eviction — a pod marked here is killed by its worker
/// and ends Failed with reason `Evicted`. Clones share one state.
#[derive(Clone, Default)]
pub struct Handle {
    workers: Arc<Mutex<HashMap<String, watch::Sender<Update>>>>,
    evictions: Arc<Mutex<HashMap<String, Eviction>>>,
}

/// An eviction asked of a pod's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's status message and the Evicted event's.
    pub message: String,
    /// How long its containers get between SIGTERM and SIGKILL.
    pub grace_seconds: i64,
}

impl Handle {
    fn workers(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<Update>>> {
        self.workers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn evictions(&self) -> MutexGuard<'_, HashMap<String, Eviction>> {
        self.evictions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The latest version of every pod that has a worker.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.workers()
            .values()
            .filter_map(|sender| match &*sender.borrow() {
                Update::Pod(pod) => Some(pod.clone()),
                Update::Gone => None,
            })
            .collect()
    }

    /// Asks the worker of pod `uid` to evict it with `message`, its containers given
    /// `grace_seconds` to stop; false when it has no worker.
    pub fn evict(&self, uid: &str, message: String, grace_seconds: i64) -> bool {
        let workers = self.workers();
        let Some(sender) = workers.get(uid) else {
            return false;
        };
        self.evictions().insert(
            uid.to_owned(),
            Eviction {
                message,
                grace_seconds,
            },
        );
        // Wakes the worker with the pod it has.
        sender.send_modify(|_| {});
        true
    }

    /// Why pod `uid` is to be evicted, if it is.
    pub fn eviction_of(&self, uid: &str) -> Option<String> {
        self.evictions().get(uid).map(|e| e.message.clone())
    }

    /// The eviction asked of pod `uid`, if any.
    pub fn eviction(&self, uid: &str) -> Option<Eviction> {
        self.evictions().get(uid).cloned()
    }

    /// Tracks `pod` as if it had a worker (for tests of what reads the handle).
    #[cfg(test)]
    pub(crate) fn track(&self, pod: Pod) -> watch::Receiver<Update> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (sender, receiver) = watch::channel(Update::Pod(Arc::new(pod)));
        self.workers().insert(uid, sender);
        receiver
    }

    fn forget(&self, uid: &str) {
        self.evictions().remove(uid);
    }
}

/// The workers of one node.
pub struct Manager {
    ctx: Arc<Context>,
    /// Sandboxes found at start, by pod uid, not yet claimed by a worker.
    found: HashMap<String, Vec<api::PodSandbox>>,
    tasks: TaskTracker,
}

impl Manager {
    pub fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            found: HashMap::new(),
            tasks: TaskTracker::new(),
        }
    }

    fn deliver(&mut self, pod: Pod, shutdown: &CancellationToken) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let pod = Arc::new(pod);
        if let Some(sender) = self.ctx.pods.workers().get(&uid) {
            sender.send_replace(Update::Pod(pod));
            return;
        }
        let (sender, receiver) = watch::channel(Update::Pod(pod));
        let found = self.found.remove(&uid).unwrap_or_default();
        self.tasks.spawn(worker::run(
            self.ctx.clone(),
            found,
            receiver,
            shutdown.clone(),
        ));
        self.ctx.pods.workers().insert(uid, sender);
    }

    fn gone(&mut self, uid: &str) {
        let removed = self.ctx.pods.workers().remove(uid);
        if let Some(sender) = removed {
            sender.send_replace(Update::Gone);
        }
        self.ctx.pods.forget(uid);
    }

    /// Watches this node's pods and runs their workers until `shutdown`. Containers keep
    /// running when the agent stops, as upstream's kubelet leaves them.
    pub async fn run(mut self, shutdown: CancellationToken) {
        match self.ctx.runtime.list_pod_sandboxes().await {
            Ok(sandboxes) => {
                for sandbox in sandboxes {
                    let uid = sandbox
                        .labels
                        .get(labels::POD_UID)
                        .cloned()
                        .unwrap_or_default();
                    self.found.entry(uid).or_default().push(sandbox);
                }
            }
            Err(error) => tracing::warn!(%error, "listing the runtime's sandboxes"),
        }
        let pods: Api<Pod> = Api::all(self.ctx.client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.ctx.node_name));
        let mut events = watcher::watcher(pods, config).boxed();
        let mut seen_in_list: Option<std::collections::HashSet<String>> = None;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = shutdown.cancelled() => break,
            };
            match event {
                Some(Ok(watcher::Event::Apply(pod))) => self.deliver(pod, &shutdown),
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        self.gone(uid);
                    }
                }
                Some(Ok(watcher::Event::Init)) => seen_in_list = Some(Default::default()),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let (Some(seen), Some(uid)) =
                        (seen_in_list.as_mut(), pod.metadata.uid.clone())
                    {
                        seen.insert(uid);
                    }
                    self.deliver(pod, &shutdown);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let seen = seen_in_list.take().unwrap_or_default();
                    let stale: Vec<String> = self
                        .ctx
                        .pods
                        .workers()
                        .keys()
                        .filter(|uid| !seen.contains(*uid))
                        .cloned()
                        .collect();
                    for uid in stale {
                        self.gone(&uid);
                    }
                    self.remove_orphans().await;
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "watching this node's pods");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                None => break,
            }
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Sandboxes of pods this node no longer has.
    async fn remove_orphans(&mut self) {
        let workers = self.ctx.pods.clone();
        let orphans: Vec<(String, Vec<api::PodSandbox>)> = self
            .found
            .drain()
            .filter(|(uid, _)| !workers.workers().contains_key(uid))
            .collect();
        for (uid, sandboxes) in orphans {
            tracing::info!(pod_uid = %uid, "removing the sandboxes of a pod that is gone");
            for sandbox in sandboxes {
                for container in self
                    .ctx
                    .runtime
                    .list_containers(Some(&sandbox.id))
                    .await
                    .unwrap_or_default()
                {
                    let _ = self.ctx.runtime.stop_container(&container.id, 2).await;
                }
                let _ = self.ctx.runtime.stop_pod_sandbox(&sandbox.id).await;
                let _ = self.ctx.runtime.remove_pod_sandbox(&sandbox.id).await;
            }
        }
    }

    /// How many pods have workers.
    pub fn len(&self) -> usize {
        self.ctx.pods.workers().len()
    }

    pub fn is_empty(&self) -> bool {
        self.ctx.pods.workers().is_empty()
    }
}
