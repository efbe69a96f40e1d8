//! The watch cache: per resource, the current objects held in memory, fed by one storage
//! watch, from which LISTs and the initial state of watches are served without reading the
//! store — as kube-apiserver's cacher does.
//!
//! - A cacher starts on a resource's first LIST or WATCH: it lists the prefix (paged, at one
//!   revision), then follows it with one watch. Its revision is the store's revision as far as
//!   that watch has seen it; progress requests move it on when nothing under the prefix
//!   changes.
//! - `resourceVersion=0` is served at once; `resourceVersion=N` (NotOlderThan) once the
//!   cache has reached N — LISTs and GETs alike (a GET without resourceVersion reads the
//!   store); a LIST without resourceVersion is a **consistent read** (KEP-2340):
//!   the store's current revision is asked for, then the cache is waited for until it has
//!   caught up, so it sees every write acknowledged before it.
//! - Objects sit in a persistent ordered map (cloning it is O(1)), so a LIST takes a snapshot
//!   and releases the lock at once; a paged LIST keeps its snapshot for a while, keyed by
//!   revision, and the continue pages of that list are served from it (KEP-4988). A page
//!   whose snapshot is gone, an `Exact` resourceVersion, or a cache that cannot catch up in
//!   time falls back to the store, which serves any revision it still has.
//! - Watches are served from the cacher too (`Start`, `Subscription`; the watcher side is `registry/watch.rs`): every batch the cacher applies
//!   is kept in a window of recent events and broadcast to its watchers, so N watches of a
//!   resource cost one storage watch, one decode per object and one JSON encoding per event.
//! - A watch that ends (compaction, a store restart) makes the cacher list again; its
//!   watchers are ended (they re-watch from their last resourceVersion, as after any
//!   dropped watch).
//! - Pods are indexed by `spec.nodeName` (`index.rs`): a kubelet's LIST reads its node's
//!   pods only, and its watch wakes only for batches that touch its node.
//! - Kinds shown by one API in another API's stored form (events.k8s.io Events) are not
//!   cached; `--watch-cache=false` turns the cache off.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use imbl::OrdMap;
use rudder_storage::{EventKind, KeyRange, RangeRequest, Storage, WatchRequest};
use tokio::sync::{broadcast, watch, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod index;

use self::index::{indexed_field, Index, Triggers};
use super::decoded::Object;
use super::list::{encode_continue, Filter, ListResult, Listed};
use super::metrics::WatchMetrics;
use super::object;
use crate::catalog::{self, ResourceInfo};
use crate::values::Values;

/// Rows read per page while a cacher lists its prefix.
const LIST_PAGE: i64 = 1000;
/// How long a read waits for the cache to reach a revision before the store answers it.
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);
/// How long a paged list's snapshot serves its continue pages.
const SNAPSHOT_TTL: Duration = Duration::from_secs(75);
/// Snapshots kept per resource.
const MAX_SNAPSHOTS: usize = 16;
/// How long a cacher waits before listing again after its watch failed.
const RELIST_DELAY: Duration = Duration::from_secs(1);
/// Events kept per resource for watches that start from a recent resourceVersion (they
/// share the objects of the cache, so an event costs little more than its key).
const WINDOW_EVENTS: usize = 10_000;
/// Batches a watcher may fall behind the broadcast before it catches up from the window.
const BROADCAST_BATCHES: usize = 1024;
/// How often a cacher with watchers asks the store for progress, so that bookmarks move on
/// while the resource is quiet.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(20);

pub(super) type Objects = OrdMap<Vec<u8>, Arc<Object>>;

/// One storage batch as the cache applied it, shared by every watcher of the resource; a
/// batch without events is progress (nothing under the prefix changed up to `revision`).
pub(super) struct Batch {
    /// The cache's revision once this batch was applied.
    pub revision: i64,
    pub events: Vec<CachedEvent>,
}

/// One change to one object.
pub(super) struct CachedEvent {
    pub key: Vec<u8>,
    pub revision: i64,
    pub change: Change,
}

pub(super) enum Change {
    /// Created or updated: the object now, and as it was before (none: created).
    Put {
        new: Arc<Object>,
        old: Option<Arc<Object>>,
    },
    /// Deleted: its last state, shown at the delete's revision.
    Delete { old: Arc<Object> },
}

/// The caches of every resource read so far.
pub struct WatchCache {
    storage: Arc<dyn Storage>,
    values: Arc<Values>,
    metrics: Arc<WatchMetrics>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// By storage prefix and version (a custom resource's versions share one prefix and each
    /// shows its objects as its own apiVersion).
    cachers: Mutex<HashMap<(&'static str, &'static str), Arc<Cacher>>>,
}

/// One resource's cache.
struct Cacher {
    prefix: Vec<u8>,
    state: RwLock<State>,
    /// The cache's revision (0 until the first list is in).
    revision: watch::Sender<i64>,
    /// Asks the feeding task for a progress notification.
    progress: Notify,
}

struct State {
    objects: Objects,
    revision: i64,
    /// Paged lists' snapshots, newest last.
    snapshots: VecDeque<(i64, Instant, Objects)>,
    /// The latest batches, oldest first: every change after `floor` is in them.
    window: VecDeque<Arc<Batch>>,
    window_events: usize,
    floor: i64,
    /// The watchers of this generation of the cache (a new list starts a new one).
    watchers: broadcast::Sender<Arc<Batch>>,
    /// The index of the resource's indexed field, if it has one.
    index: Option<Index>,
    /// The watchers of this generation that select one value of the indexed field.
    triggers: Triggers,
}

impl Default for State {
    fn default() -> Self {
        Self {
            objects: Objects::new(),
            revision: 0,
            snapshots: VecDeque::new(),
            window: VecDeque::new(),
            window_events: 0,
            floor: 0,
            watchers: broadcast::Sender::new(BROADCAST_BATCHES),
            index: None,
            triggers: Triggers::default(),
        }
    }
}

impl State {
    /// Keeps `batch` in the window (trimmed to [`WINDOW_EVENTS`]) and hands it to the watchers.
    fn publish(&mut self, batch: Batch) {
        let batch = Arc::new(batch);
        if !batch.events.is_empty() {
            self.window_events += batch.events.len();
            self.window.push_back(batch.clone());
            while self.window_events > WINDOW_EVENTS {
                let Some(oldest) = self.window.pop_front() else {
                    break;
                };
                self.window_events -= oldest.events.len();
                self.floor = oldest.revision;
            }
        }
        if let Some(index) = &self.index {
            self.triggers.publish(index, &batch);
        }
        // No receiver is not an error: nobody watches yet.
        let _ = self.watchers.send(batch);
    }

    /// A receiver of this generation's batches: those that touch `trigger` when the resource
    /// indexes the field it selects, else all.
    fn receiver(&mut self, trigger: Option<&str>) -> broadcast::Receiver<Arc<Batch>> {
        match (trigger, &self.index) {
            (Some(value), Some(_)) => self.triggers.subscribe(value),
            _ => self.watchers.subscribe(),
        }
    }

    /// Every watcher of this generation, triggered or not.
    fn watcher_count(&self) -> usize {
        self.watchers.receiver_count() + self.triggers.receiver_count()
    }
}

/// How a LIST names the revision it wants.
pub(super) enum Wanted {
    /// `resourceVersion=0`: whatever the cache holds.
    Any,
    /// `resourceVersion=N`, not older than N.
    NotOlderThan(i64),
    /// No resourceVersion: everything acknowledged before the request.
    Consistent,
    /// A continue token's revision and start key.
    Continue(i64, Vec<u8>),
}

impl WatchCache {
    pub fn new(
        storage: Arc<dyn Storage>,
        values: Arc<Values>,
        metrics: Arc<WatchMetrics>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            storage,
            values,
            metrics,
            tasks,
            shutdown,
            cachers: Mutex::default(),
        }
    }

    /// Whether `info`'s objects are cached (stored, and shown as stored).
    fn caches(info: &ResourceInfo) -> bool {
        info.is_stored() && catalog::storage_owner(info) == (info.group, info.plural)
    }

    /// The cacher of `info`, started on first use.
    fn cacher(&self, info: &'static ResourceInfo) -> Option<Arc<Cacher>> {
        if !Self::caches(info) {
            return None;
        }
        let mut cachers = self.cachers.lock().ok()?;
        if let Some(cacher) = cachers.get(&(info.storage_prefix, info.version)) {
            return Some(cacher.clone());
        }
        let state = State {
            index: indexed_field(info).map(|field| Index::new(field, info.strategy.fields())),
            ..State::default()
        };
        let cacher = Arc::new(Cacher {
            prefix: format!("{}/", info.storage_prefix).into_bytes(),
            state: RwLock::new(state),
            revision: watch::Sender::new(0),
            progress: Notify::new(),
        });
        cachers.insert((info.storage_prefix, info.version), cacher.clone());
        self.tasks.spawn(feed(
            cacher.clone(),
            info,
            self.storage.clone(),
            self.values.clone(),
            self.metrics.clone(),
            self.shutdown.clone(),
        ));
        Some(cacher)
    }

    /// The value of `info`'s indexed field that `filter` selects, if any: what a watch is
    /// triggered by.
    pub(super) fn trigger(&self, info: &ResourceInfo, filter: &Filter) -> Option<String> {
        let field = indexed_field(info)?;
        filter.fields.exact(field).map(str::to_string)
    }

    /// The store's revision now, as upstream learns it for a consistent read: a one-key
    /// range (cheaper than the store's status), keys only.
    async fn current_revision(&self, prefix: &[u8]) -> Option<i64> {
        let probe = RangeRequest::new(KeyRange::key(prefix.to_vec()))
            .keys_only()
            .with_limit(1);
        self.storage.range(probe).await.ok().map(|r| r.revision)
    }

    /// A LIST of `prefix` (a collection or one namespace's part of it) from the cache, or
    /// `None` when the store must answer it.
    pub(super) async fn list(
        &self,
        info: &'static ResourceInfo,
        prefix: &[u8],
        filter: &Filter,
        wanted: Wanted,
        limit: Option<i64>,
    ) -> Option<ListResult> {
        let cacher = self.cacher(info)?;
        // A continue page is read from its list's snapshot of the objects; a first page may
        // read the index instead.
        let (objects, revision, start, index) = match wanted {
            Wanted::Continue(revision, start) => {
                let objects = cacher.snapshot_at(revision)?;
                (objects, revision, start, None)
            }
            Wanted::Any => {
                cacher.wait_for(1).await?;
                let (objects, revision, index) = cacher.current();
                (objects, revision, prefix.to_vec(), index)
            }
            Wanted::NotOlderThan(minimum) => {
                cacher.wait_for(minimum.max(1)).await?;
                let (objects, revision, index) = cacher.current();
                (objects, revision, prefix.to_vec(), index)
            }
            Wanted::Consistent => {
                let current = self.current_revision(prefix).await?;
                cacher.wait_for(current.max(1)).await?;
                let (objects, revision, index) = cacher.current();
                (objects, revision, prefix.to_vec(), index)
            }
        };
        let end = rudder_storage::prefix_end(prefix);
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut remaining = None;
        let selected = index
            .as_ref()
            .and_then(|index| Some((index, filter.fields.exact(index.field)?)));
        let mut range: Box<dyn Iterator<Item = (&Vec<u8>, &Arc<Object>)>> = match selected {
            Some((index, value)) => Box::new(index.range(value, &start, &end)),
            None => Box::new(objects.range(start..end)),
        };
        // Only an unfiltered list can count what is left without reading it.
        let countable = filter.is_empty();
        for (key, object) in range.by_ref() {
            if limit.is_some_and(|limit| items.len() as i64 >= limit) {
                let relative = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                continue_token = Some(encode_continue(revision, &relative));
                if countable {
                    remaining = Some(1);
                }
                break;
            }
            if filter.matches_decoded(object) {
                // Cached kinds are shown as they are stored: the object itself is shared.
                items.push(Listed::shared(object.clone()));
            }
        }
        if let Some(counted) = remaining.as_mut() {
            *counted += range.count() as i64;
        } else {
            drop(range);
        }
        if continue_token.is_some() {
            cacher.keep_snapshot(revision, objects);
        }
        Some(ListResult {
            items,
            resource_version: revision,
            continue_token,
            remaining_item_count: remaining,
        })
    }
}

impl WatchCache {
    /// The cached object under `key` as the cache holds it now — without starting a cacher
    /// or waiting for one to catch up; `None` when there is no cacher yet, it has not listed
    /// yet, or it holds no such object. A guess that a write checks against the store.
    pub(super) fn peek(&self, info: &ResourceInfo, key: &[u8]) -> Option<Arc<Object>> {
        if !Self::caches(info) {
            return None;
        }
        let cacher = self
            .cachers
            .lock()
            .ok()?
            .get(&(info.storage_prefix, info.version))?
            .clone();
        cacher.read(|state| {
            if state.revision == 0 {
                return None;
            }
            state.objects.get(key).cloned()
        })
    }

    /// A GET of `key` from the cache once it has reached `minimum` (`resourceVersion=0`: 1,
    /// whatever it holds): `Some(None)` when the cache holds no such object, `None` when the
    /// store must answer (the kind is not cached, or the cache did not get there in time).
    pub(super) async fn get(
        &self,
        info: &'static ResourceInfo,
        key: &[u8],
        minimum: i64,
    ) -> Option<Option<Arc<Object>>> {
        let cacher = self.cacher(info)?;
        cacher.wait_for(minimum.max(1)).await?;
        Some(cacher.read(|state| state.objects.get(key).cloned()))
    }
}

/// Where a watch served from the cache starts.
pub(super) enum Start {
    /// The objects as of a revision reached as a LIST would (`Wanted`), then their changes.
    Replay(Wanted),
    /// The changes after this revision.
    After(i64),
}

/// A watcher's place in its resource's cache.
pub(super) struct Subscription {
    /// The objects to replay (a replay only), as of `revision`.
    pub snapshot: Option<Objects>,
    /// Batches after `revision` the window already holds.
    pub backlog: Vec<Arc<Batch>>,
    /// The batches from here on (closed when the cache lists again).
    pub receiver: broadcast::Receiver<Arc<Batch>>,
    pub revision: i64,
}

impl WatchCache {
    /// A watcher of `info` starting at `start`, or `None` when the store must serve the watch:
    /// the kind is not cached, the cache did not reach the revision in time, or the changes
    /// after the revision asked for are older than the window.
    /// A watcher that selects `trigger`, one value of the resource's indexed field, receives
    /// only the batches that touch that value.
    pub(super) async fn subscribe(
        &self,
        info: &'static ResourceInfo,
        start: Start,
        trigger: Option<&str>,
    ) -> Option<Subscription> {
        let cacher = self.cacher(info)?;
        match start {
            Start::Replay(wanted) => {
                let minimum = match wanted {
                    Wanted::Any => 1,
                    Wanted::NotOlderThan(minimum) => minimum.max(1),
                    Wanted::Consistent => self.current_revision(&cacher.prefix).await?.max(1),
                    Wanted::Continue(..) => return None,
                };
                cacher.wait_for(minimum).await?;
                Some(cacher.write(|state| Subscription {
                    snapshot: Some(state.objects.clone()),
                    backlog: Vec::new(),
                    receiver: state.receiver(trigger),
                    revision: state.revision,
                }))
            }
            Start::After(revision) => {
                cacher.wait_for(1).await?;
                cacher.write(|state| {
                    if revision < state.floor {
                        return None;
                    }
                    let backlog = state
                        .window
                        .iter()
                        .filter(|batch| batch.revision > revision)
                        .cloned()
                        .collect();
                    Some(Subscription {
                        snapshot: None,
                        backlog,
                        receiver: state.receiver(trigger),
                        revision,
                    })
                })
            }
        }
    }
}

impl Cacher {
    /// Reads the state (a poisoned lock still holds consistent data: every write is one
    /// closure that cannot panic half-way through the map operations it makes).
    fn read<T>(&self, look: impl FnOnce(&State) -> T) -> T {
        match self.state.read() {
            Ok(state) => look(&state),
            Err(poisoned) => look(&poisoned.into_inner()),
        }
    }

    /// The objects, the revision they are at and the index over them (all O(1) clones).
    fn current(&self) -> (Objects, i64, Option<Index>) {
        self.read(|state| (state.objects.clone(), state.revision, state.index.clone()))
    }

    fn write<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        match self.state.write() {
            Ok(mut state) => change(&mut state),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }

    fn snapshot_at(&self, revision: i64) -> Option<Objects> {
        let state = self.state.read().ok()?;
        if state.revision == revision {
            return Some(state.objects.clone());
        }
        state
            .snapshots
            .iter()
            .find(|(at, taken, _)| *at == revision && taken.elapsed() < SNAPSHOT_TTL)
            .map(|(_, _, objects)| objects.clone())
    }

    fn keep_snapshot(&self, revision: i64, objects: Objects) {
        self.write(|state| {
            if state.snapshots.iter().any(|(at, _, _)| *at == revision) {
                return;
            }
            state
                .snapshots
                .retain(|(_, taken, _)| taken.elapsed() < SNAPSHOT_TTL);
            if state.snapshots.len() >= MAX_SNAPSHOTS {
                state.snapshots.pop_front();
            }
            state
                .snapshots
                .push_back((revision, Instant::now(), objects));
        });
    }

    /// Waits until the cache has reached `revision`, asking the store for progress; `None`
    /// when it does not within [`FRESHNESS_WAIT`].
    async fn wait_for(&self, revision: i64) -> Option<()> {
        let mut seen = self.revision.subscribe();
        let deadline = tokio::time::Instant::now() + FRESHNESS_WAIT;
        loop {
            if *seen.borrow_and_update() >= revision {
                return Some(());
            }
            self.progress.notify_one();
            match tokio::time::timeout_at(deadline, seen.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

/// Lists the prefix, then follows it, listing again whenever the watch ends.
async fn feed(
    cacher: Arc<Cacher>,
    info: &'static ResourceInfo,
    storage: Arc<dyn Storage>,
    values: Arc<Values>,
    metrics: Arc<WatchMetrics>,
    shutdown: CancellationToken,
) {
    loop {
        // The watch starts first, from now, and the list after it: every change the list
        // does not show arrives on the watch (those it shows are skipped). A watch from now
        // is one the store reports exact progress for at once (etcd before 3.4.31 does not
        // for a watch from the past until it has caught up).
        let request = WatchRequest::new(KeyRange::prefix(cacher.prefix.clone()));
        let started = tokio::select! {
            () = shutdown.cancelled() => return,
            started = storage.watch(request) => started,
        };
        let listed = match started {
            Ok(stream) => tokio::select! {
                () = shutdown.cancelled() => return,
                listed = list_all(&cacher, info, storage.as_ref(), &values, &metrics) => listed.map(|revision| (stream, revision)),
            },
            Err(error) => Err(error),
        };
        match listed {
            Ok((stream, revision)) => {
                follow(
                    &cacher, info, &values, &metrics, stream, revision, &shutdown,
                )
                .await;
            }
            Err(error) => {
                tracing::warn!(resource = info.plural, %error, "the watch cache could not list or watch; trying again");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RELIST_DELAY) => {}
        }
    }
}

fn decode(info: &ResourceInfo, values: &Values, kv: &rudder_storage::KeyValue) -> Option<Object> {
    match values.decode(info, &kv.key, &kv.value) {
        Ok(object) => Some(Object::new(
            info.strategy
                .stored_to_api(object::with_resource_version(object, kv.mod_revision)),
            info.strategy.fields(),
        )),
        Err(error) => {
            tracing::warn!(key = %String::from_utf8_lossy(&kv.key), %error, "a stored value cannot be read; the watch cache leaves it out");
            None
        }
    }
}

/// Reads the whole prefix at one revision into the cache; returns that revision.
async fn list_all(
    cacher: &Cacher,
    info: &ResourceInfo,
    storage: &dyn Storage,
    values: &Values,
    metrics: &WatchMetrics,
) -> rudder_storage::Result<i64> {
    let end = rudder_storage::prefix_end(&cacher.prefix);
    let mut start = cacher.prefix.clone();
    let mut revision = 0;
    let mut objects = Objects::new();
    loop {
        let response = storage
            .range(
                RangeRequest::new(KeyRange::between(start.clone(), end.clone()))
                    .at_revision(revision)
                    .with_limit(LIST_PAGE),
            )
            .await?;
        if revision == 0 {
            revision = response.revision;
        }
        let more = response.more;
        for kv in &response.kvs {
            if let Some(object) = decode(info, values, kv) {
                objects.insert(kv.key.clone(), Arc::new(object));
            }
            start = kv.key.clone();
            start.push(0);
        }
        if !more || response.kvs.is_empty() {
            break;
        }
    }
    metrics.cache_initialized(info, objects.len(), revision);
    cacher.write(|state| {
        if let Some(index) = state.index.as_mut() {
            *index = Index::new(index.field, info.strategy.fields());
            for (key, object) in &objects {
                index.update(key, None, Some(object));
            }
        }
        state.triggers = Triggers::default();
        state.objects = objects;
        state.revision = revision;
        state.snapshots.clear();
        // The watchers of the previous generation end (their sender goes); the window starts
        // again from the list.
        state.window.clear();
        state.window_events = 0;
        state.floor = revision;
        state.watchers = broadcast::Sender::new(BROADCAST_BATCHES);
    });
    cacher.revision.send_replace(revision);
    Ok(revision)
}

/// Applies the prefix's changes after `listed` (the list's revision) until the watch ends,
/// keeping each batch in the window and handing it to the watchers.
async fn follow(
    cacher: &Cacher,
    info: &ResourceInfo,
    values: &Values,
    metrics: &WatchMetrics,
    mut stream: rudder_storage::WatchStream,
    listed: i64,
    shutdown: &CancellationToken,
) {
    let mut progress = tokio::time::interval(PROGRESS_INTERVAL);
    progress.tick().await;
    loop {
        let batch = tokio::select! {
            () = shutdown.cancelled() => return,
            () = cacher.progress.notified() => {
                stream.request_progress();
                continue;
            }
            _ = progress.tick() => {
                // Only watchers need the cache to move on while the resource is quiet.
                if cacher.read(State::watcher_count) > 0 {
                    stream.request_progress();
                }
                continue;
            }
            batch = stream.next() => batch,
        };
        let batch = match batch {
            Some(Ok(batch)) => batch,
            Some(Err(error)) => {
                tracing::debug!(resource = info.plural, %error, "the watch cache's watch ended; listing again");
                return;
            }
            None => return,
        };
        // Decoded outside the lock (this task is the cache's only writer, so what it reads
        // of the current objects here is still current when it writes).
        let decoded: Vec<(Vec<u8>, Option<Object>, i64)> = batch
            .events
            .iter()
            .filter(|event| event.kv.mod_revision > listed)
            .map(|event| {
                let object = match event.kind {
                    EventKind::Put => decode(info, values, &event.kv),
                    EventKind::Delete => None,
                };
                (event.kv.key.clone(), object, event.kv.mod_revision)
            })
            .collect();
        let mut reached = batch.revision;
        cacher.write(|state| {
            let mut events = Vec::with_capacity(decoded.len());
            for (key, object, revision) in decoded {
                reached = reached.max(revision);
                let change = match object {
                    Some(object) => {
                        let new = Arc::new(object);
                        let old = state.objects.insert(key.clone(), new.clone());
                        if let Some(index) = state.index.as_mut() {
                            index.update(&key, old.as_ref(), Some(&new));
                        }
                        Change::Put { new, old }
                    }
                    None => {
                        let Some(old) = state.objects.remove(&key) else {
                            continue;
                        };
                        if let Some(index) = state.index.as_mut() {
                            index.update(&key, Some(&old), None);
                        }
                        Change::Delete {
                            old: Arc::new(Object::new(
                                object::with_resource_version(old.value(), revision),
                                info.strategy.fields(),
                            )),
                        }
                    }
                };
                events.push(CachedEvent {
                    key,
                    revision,
                    change,
                });
            }
            reached = reached.max(state.revision);
            let moved = reached > state.revision;
            state.revision = reached;
            if moved || !events.is_empty() {
                metrics.cache_applied(info, events.len(), state.objects.len(), reached);
                metrics.cache_dispatched(info, state.watcher_count());
                state.publish(Batch {
                    revision: reached,
                    events,
                });
            }
        });
        cacher.revision.send_if_modified(|current| {
            let moved = reached > *current;
            *current = (*current).max(reached);
            moved
        });
    }
}

#[cfg(test)]
mod tests;
