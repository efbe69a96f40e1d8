//! The garbage collector: deletes objects whose owners are gone, and carries out the two
//! deletion policies that involve an owner's dependents — `Foreground` (the owner waits, with
//! the `foregroundDeletion` finalizer, until the dependents that block it are gone) and
//! `Orphan` (its dependents lose their reference to it, then the `orphan` finalizer goes).
//! `Background` needs nothing more: the owner goes at once and its dependents become garbage.
//!
//! It watches the metadata of every kind the API serves (found by discovery, events aside; a
//! kind that appears later, a CRD's, is found by discovery again every 30 s, as upstream
//! resyncs its monitors) and keeps them in one [`graph`] of owner references; a change yields work for the [`worker`]s.
//! Before it deletes anything it asks the API whether an owner it does not see is really gone.
//!
//! ```text
//!   discovery ─▶ metadata watch per kind ─▶ graph (uid → node, owner → dependents)
//!                                              │ work: attempt to delete, orphan
//!                                              ▼
//!                                      workers (--concurrent-gc-syncs) ─▶ API deletes / patches
//! ```

mod graph;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::{verbs, ApiResource, Discovery, Scope};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::workqueue::Queue;
use graph::{Graph, Node, Work};

/// Kinds the collector leaves alone (upstream's ignored resources).
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// What the workers share.
pub struct Context {
    pub client: Client,
    pub graph: Mutex<Graph>,
    /// `(apiVersion, kind)` → its resource and whether it is namespaced.
    pub kinds: Mutex<Kinds>,
    pub queue: Arc<Queue>,
}

/// The kinds the collector watches.
pub type Kinds = HashMap<(String, String), (ApiResource, bool)>;

/// How often discovery looks for kinds that appeared since (upstream's resync period).
const REDISCOVERY: Duration = Duration::from_secs(30);

impl Context {
    /// The resource of `(apiVersion, kind)` and whether it is namespaced, if watched.
    fn kind(&self, api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
        self.kinds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    fn graph(&self) -> std::sync::MutexGuard<'_, Graph> {
        self.graph
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The collector, ready to run until `shutdown`.
pub fn controller(
    client: Client,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    async move {
        let kinds = loop {
            match discover(&client).await {
                Ok(kinds) => break kinds,
                Err(error) => {
                    tracing::warn!(%error, "garbage collector: discovery failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                }
            }
        };
        let context = Arc::new(Context {
            client,
            graph: Mutex::new(Graph::default()),
            kinds: Mutex::new(kinds),
            queue,
        });
        run(context, concurrency, shutdown).await;
    }
    .boxed()
}

/// Every kind that can be listed, watched, patched and deleted, by `(apiVersion, kind)`.
async fn discover(client: &Client) -> kube::Result<Kinds> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut kinds = HashMap::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            let ignored = IGNORED
                .iter()
                .any(|(g, plural)| resource.group == *g && resource.plural == *plural);
            let usable = [verbs::LIST, verbs::WATCH, verbs::DELETE, verbs::PATCH]
                .iter()
                .all(|verb| capabilities.supports_operation(verb));
            if ignored || !usable {
                continue;
            }
            let namespaced = capabilities.scope == Scope::Namespaced;
            kinds.insert(
                (resource.api_version.clone(), resource.kind.clone()),
                (resource, namespaced),
            );
        }
    }
    Ok(kinds)
}

/// What one kind's watch reports to the graph.
enum Observed {
    Applied(Node),
    Deleted(String),
    /// A (re-)list of this resource ended; `seen` are the uids it showed.
    Listed(ApiResource, HashSet<String>),
}

fn node_of(resource: &ApiResource, meta: &PartialObjectMeta<DynamicObject>) -> Option<Node> {
    Some(Node {
        resource: resource.clone(),
        namespace: meta.namespace(),
        name: meta.name_any(),
        uid: meta.uid()?,
        owners: meta.owner_references().to_vec(),
        finalizers: meta.finalizers().to_vec(),
        deleting: meta.metadata.deletion_timestamp.is_some(),
    })
}

/// One kind's metadata watch, reported into `sink`.
async fn watch_kind(resource: ApiResource, client: Client, sink: mpsc::UnboundedSender<Observed>) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &resource);
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen: HashSet<String> = HashSet::new();
    while let Some(event) = events.next().await {
        let observed = match event {
            Ok(watcher::Event::Apply(meta)) => node_of(&resource, &meta).map(Observed::Applied),
            Ok(watcher::Event::Delete(meta)) => meta.uid().map(Observed::Deleted),
            Ok(watcher::Event::Init) => {
                seen.clear();
                None
            }
            Ok(watcher::Event::InitApply(meta)) => {
                if let Some(uid) = meta.uid() {
                    seen.insert(uid);
                }
                node_of(&resource, &meta).map(Observed::Applied)
            }
            Ok(watcher::Event::InitDone) => Some(Observed::Listed(
                resource.clone(),
                std::mem::take(&mut seen),
            )),
            Err(error) => {
                tracing::debug!(%error, kind = %resource.kind, "garbage collector watch failed; retrying");
                None
            }
        };
        if let Some(observed) = observed {
            if sink.send(observed).is_err() {
                return;
            }
        }
    }
}

/// Keeps the graph current and runs the work it yields, once every kind has been listed.
async fn run(context: Arc<Context>, concurrency: u16, shutdown: CancellationToken) {
    let (sink, mut observed) = mpsc::unbounded_channel();
    let mut watches = Vec::new();
    let resources: Vec<ApiResource> = context
        .kinds
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .values()
        .map(|(r, _)| r.clone())
        .collect();
    for resource in resources {
        watches.push(tokio::spawn(watch_kind(
            resource,
            context.client.clone(),
            sink.clone(),
        )));
    }
    let mut rediscovery = tokio::time::interval(REDISCOVERY);
    rediscovery.tick().await;
    let (work_sender, work_receiver) = mpsc::unbounded_channel::<Work>();
    let pending: Arc<Mutex<HashSet<Work>>> = Arc::default();
    let mut unlisted: HashSet<String> = context
        .kinds
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .values()
        .map(|(resource, _)| format!("{}/{}", resource.api_version, resource.plural))
        .collect();
    let mut workers_started = false;
    let mut receiver = Some(work_receiver);
    let mut worker_task = None;
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = observed.recv() => next,
            _ = rediscovery.tick() => {
                watches.extend(watch_new_kinds(&context, &sink).await);
                continue;
            }
        };
        let Some(next) = next else { break };
        let work = {
            let mut graph = context.graph();
            match next {
                Observed::Applied(node) => graph.upsert(node),
                Observed::Deleted(uid) => graph.remove(&uid),
                Observed::Listed(resource, seen) => {
                    unlisted.remove(&format!("{}/{}", resource.api_version, resource.plural));
                    let mut work = Vec::new();
                    for uid in graph.uids_of(&resource) {
                        if !seen.contains(&uid) {
                            work.extend(graph.remove(&uid));
                        }
                    }
                    work
                }
            }
        };
        if workers_started {
            for item in work {
                enqueue(&work_sender, &pending, &context.queue, item);
            }
        } else if unlisted.is_empty() {
            // Everything listed: sweep the whole graph once, then follow the changes.
            workers_started = true;
            let sweep: Vec<Work> = {
                let graph = context.graph();
                graph
                    .uids()
                    .iter()
                    .filter_map(|uid| graph.get(uid))
                    .flat_map(|node| graph.work_for(node))
                    .collect()
            };
            for item in sweep {
                enqueue(&work_sender, &pending, &context.queue, item);
            }
            if let Some(receiver) = receiver.take() {
                worker_task = Some(tokio::spawn(worker::run(
                    context.clone(),
                    receiver,
                    work_sender.clone(),
                    pending.clone(),
                    concurrency,
                    shutdown.clone(),
                )));
            }
            let kinds = context
                .kinds
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .len();
            tracing::info!(kinds, "garbage collector synced");
        }
    }
    for watch in watches {
        watch.abort();
    }
    if let Some(task) = worker_task {
        let _ = task.await;
    }
}

/// Watches the kinds discovery finds that are not watched yet (a kind that goes away keeps
/// its watch, which just fails until it comes back).
async fn watch_new_kinds(
    context: &Context,
    sink: &mpsc::UnboundedSender<Observed>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let found = match discover(&context.client).await {
        Ok(found) => found,
        Err(error) => {
            tracing::debug!(%error, "garbage collector: rediscovery failed");
            return Vec::new();
        }
    };
    let mut kinds = context
        .kinds
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut started = Vec::new();
    for (key, value) in found {
        if kinds.contains_key(&key) {
            continue;
        }
        tracing::info!(kind = %value.0.kind, api_version = %value.0.api_version, "garbage collector watches a new kind");
        started.push(tokio::spawn(watch_kind(
            value.0.clone(),
            context.client.clone(),
            sink.clone(),
        )));
        kinds.insert(key, value);
    }
    started
}

/// Queues `work` unless it is already queued.
fn enqueue(
    sender: &mpsc::UnboundedSender<Work>,
    pending: &Mutex<HashSet<Work>>,
    queue: &Queue,
    work: Work,
) {
    let fresh = pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(work.clone());
    if fresh {
        queue.added(&key(&work));
        let _ = sender.send(work);
    }
}

fn key(work: &Work) -> String {
    match work {
        Work::AttemptToDelete(uid) => format!("delete/{uid}"),
        Work::Orphan(uid) => format!("orphan/{uid}"),
    }
}
