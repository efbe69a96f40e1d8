//! Shared informers: one watch of each resource type for every controller that needs it.
//!
//! A controller asks for an [`Informer`] of a type while the manager is being assembled; the
//! first request creates the type's reflector, and every request hands out a read-only
//! [`Store`] of it and a subscription of its own to the type's changes. [`Informers::run`]
//! then runs one watch per type — after every subscription exists, so none misses the initial
//! list — and [`Informers::synced`] says when every store holds its first full list, before
//! which no controller should act.
//!
//! A change is the object's new state, or its last state when it was deleted — deletions
//! included, which kube-runtime's own shared streams leave out and which controllers need (a
//! deleted pod must wake its ReplicaSet). When a watch has to re-list, objects that vanished
//! meanwhile are reported as deleted too. Subscriptions are unbounded queues of `Arc`s: a slow
//! controller costs pointers, never lost changes, and never holds the others up.
//!
//! ```text
//!   apiserver ──watch Pods──▶ reflector ──▶ Store<Pod> (read by every controller)
//!                                 └──▶ changes ──▶ ReplicaSet controller
//!                                      changes ──▶ garbage collector …
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;

/// A read-only view of one type's objects and a subscription to their changes.
pub struct Informer<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    /// Each change's object: its new state, or its last state if it was deleted.
    pub changes: UnboundedReceiverStream<Arc<K>>,
}

/// One change, saying whether the object was deleted (for clients that keep state of their
/// own per object, like the scheduler's cache).
#[derive(Debug)]
pub struct Change<K> {
    /// The new state, or the last state of a deleted object.
    pub object: Arc<K>,
    pub deleted: bool,
}

/// A read-only view of one type's objects and a subscription to its [`Change`]s.
pub struct Watched<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    pub changes: UnboundedReceiverStream<Change<K>>,
}

/// A subscriber: of objects, or of changes with their kind.
enum Subscriber<K> {
    Objects(mpsc::UnboundedSender<Arc<K>>),
    Changes(mpsc::UnboundedSender<Change<K>>),
}

type Subscribers<K> = Arc<Mutex<Vec<Subscriber<K>>>>;

/// One type's store and its subscribers.
struct Entry<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    subscribers: Subscribers<K>,
}

/// The informers of one controller-manager.
pub struct Informers {
    client: Client,
    entries: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    /// The reflectors to run, one per type.
    pending: Mutex<Vec<BoxFuture<'static, ()>>>,
    /// How many types' stores hold their first full list.
    listed: Arc<watch::Sender<usize>>,
}

impl Informers {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            entries: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            listed: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Returns once every informer asked for so far holds its first full list — upstream's
    /// `WaitForCacheSync`: a controller that acted before would see a ReplicaSet but not yet
    /// its pods, and create them again (as a newly elected leader, or a restarted server,
    /// over a cluster that already has them).
    pub async fn synced(&self) {
        let types = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len();
        let mut listed = self.listed.subscribe();
        // The sender lives as long as `self`: the wait ends only by the count.
        let _ = listed.wait_for(|count| *count >= types).await;
    }

    /// The informer of every `K` in the cluster; one watch for every caller.
    pub fn get<K>(&self) -> Informer<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = entries
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(self.create::<K>()));
        match entry.downcast_ref::<Entry<K>>() {
            Some(entry) => subscribe(entry),
            // A TypeId names one type: the entry under it is always that type's.
            None => {
                let fresh = self.create::<K>();
                let informer = subscribe(&fresh);
                *entry = Box::new(fresh);
                informer
            }
        }
    }

    /// As [`Informers::get`], with changes that say whether the object was deleted.
    pub fn watch<K>(&self) -> Watched<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let informer = self.get::<K>();
        let (sender, receiver) = mpsc::unbounded_channel();
        // `get` created the entry; subscribe to it a second way.
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = entries
            .get(&TypeId::of::<K>())
            .and_then(|entry| entry.downcast_ref::<Entry<K>>())
        {
            entry
                .subscribers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(Subscriber::Changes(sender));
        }
        Watched {
            store: informer.store,
            changes: UnboundedReceiverStream::new(receiver),
        }
    }

    fn create<K>(&self) -> Entry<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let (store, writer) = reflector::store::<K>();
        let subscribers: Subscribers<K> = Arc::default();
        let api: Api<K> = Api::all(self.client.clone());
        let reflect = reflect(
            api,
            writer,
            store.clone(),
            subscribers.clone(),
            self.listed.clone(),
        );
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(reflect.boxed());
        Entry { store, subscribers }
    }

    /// Runs every informer asked for so far until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let reflectors: Vec<_> = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = futures::future::join_all(reflectors) => {}
        }
    }
}

fn subscribe<K>(entry: &Entry<K>) -> Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let (sender, receiver) = mpsc::unbounded_channel();
    entry
        .subscribers
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Subscriber::Objects(sender));
    Informer {
        store: entry.store.clone(),
        changes: UnboundedReceiverStream::new(receiver),
    }
}

fn broadcast<K>(subscribers: &Subscribers<K>, object: &Arc<K>, deleted: bool) {
    subscribers
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .retain(|subscriber| match subscriber {
            Subscriber::Objects(sender) => sender.send(object.clone()).is_ok(),
            Subscriber::Changes(sender) => sender
                .send(Change {
                    object: object.clone(),
                    deleted,
                })
                .is_ok(),
        });
}

/// One type's watch: keeps `writer`'s store current and tells every subscriber each change.
async fn reflect<K>(
    api: Api<K>,
    mut writer: reflector::store::Writer<K>,
    store: Store<K>,
    subscribers: Subscribers<K>,
    listed: Arc<watch::Sender<usize>>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // During a re-list: what the store held before it, to report what vanished.
    let mut before_relist: Option<HashMap<ObjectRef<K>, Arc<K>>> = None;
    let mut first_list_done = false;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, kind = std::any::type_name::<K>(), "watch failed; retrying");
                continue;
            }
        };
        match &event {
            watcher::Event::Init => {
                before_relist = Some(
                    store
                        .state()
                        .into_iter()
                        .map(|object| (ObjectRef::from_obj(object.as_ref()), object))
                        .collect(),
                );
            }
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                if let Some(before) = before_relist.as_mut() {
                    before.remove(&ObjectRef::from_obj(object));
                }
            }
            _ => {}
        }
        writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                broadcast(&subscribers, &Arc::new(object), false)
            }
            watcher::Event::Delete(object) => broadcast(&subscribers, &Arc::new(object), true),
            watcher::Event::InitDone => {
                for (_, vanished) in before_relist.take().unwrap_or_default() {
                    broadcast(&subscribers, &vanished, true);
                }
                if !first_list_done {
                    first_list_done = true;
                    listed.send_modify(|count| *count += 1);
                }
            }
            watcher::Event::Init => {}
        }
    }
}
