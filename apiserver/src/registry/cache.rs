//! The watch cache: per resource, the current objects held in memory, fed by one storage
//! watch, from which LISTs and the initial state of watches are served without reading the
//! store — as kube-apiserver's cacher does.
//!
//! - A cacher starts on a resource's first LIST or WATCH: it lists the prefix (paged, at one
//!   revision), then follows it with one watch. Its revision is the store's revision as far as
//!   that watch has seen it; progress requests move it on when nothing under the prefix
//!   changes.
//! - `resourceVersion=0` is served at once; `resourceVersion=N` (NotOlderThan) once the
//!   cache has reached N; a LIST without resourceVersion is a **consistent read** (KEP-2340):
//!   the store's current revision is asked for, then the cache is waited for until it has
//!   caught up, so it sees every write acknowledged before it.
//! - Objects sit in a persistent ordered map (cloning it is O(1)), so a LIST takes a snapshot
//!   and releases the lock at once; a paged LIST keeps its snapshot for a while, keyed by
//!   revision, and the continue pages of that list are served from it (KEP-4988). A page
//!   whose snapshot is gone, an `Exact` resourceVersion, or a cache that cannot catch up in
//!   time falls back to the store, which serves any revision it still has.
//! - Watches are served from the cacher too (`fanout.rs`): every batch the cacher applies
//!   is kept in a window of recent events and broadcast to its watchers, so N watches of a
//!   resource cost one storage watch, one decode per object and one JSON encoding per event.
//! - A watch that ends (compaction, a store restart) makes the cacher list again; its
//!   watchers are ended (they re-watch from their last resourceVersion, as after any
//!   dropped watch).
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
        // No receiver is not an error: nobody watches yet.
        let _ = self.watchers.send(batch);
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
        let cacher = Arc::new(Cacher {
            prefix: format!("{}/", info.storage_prefix).into_bytes(),
            state: RwLock::default(),
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
        let (objects, revision, start) = match wanted {
            Wanted::Continue(revision, start) => {
                let objects = cacher.snapshot_at(revision)?;
                (objects, revision, start)
            }
            Wanted::Any => {
                cacher.wait_for(1).await?;
                let (objects, revision) = cacher.current();
                (objects, revision, prefix.to_vec())
            }
            Wanted::NotOlderThan(minimum) => {
                cacher.wait_for(minimum.max(1)).await?;
                let (objects, revision) = cacher.current();
                (objects, revision, prefix.to_vec())
            }
            Wanted::Consistent => {
                let current = self.current_revision(prefix).await?;
                cacher.wait_for(current.max(1)).await?;
                let (objects, revision) = cacher.current();
                (objects, revision, prefix.to_vec())
            }
        };
        let end = rudder_storage::prefix_end(prefix);
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut remaining = None;
        let mut range = objects.range(start..end);
        for (key, object) in range.by_ref() {
            if limit.is_some_and(|limit| items.len() as i64 >= limit) {
                let relative = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                continue_token = Some(encode_continue(revision, &relative));
                if filter.is_empty() {
                    remaining = Some(1);
                }
                break;
            }
            if filter.matches_decoded(object) {
                // Cached kinds are shown as they are stored: the object itself is shared.
                items.push(Listed::shared(object.clone()));
            }
        }
        if continue_token.is_some() {
            if let Some(counted) = remaining.as_mut() {
                *counted += range.count() as i64;
            }
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
    pub(super) async fn subscribe(
        &self,
        info: &'static ResourceInfo,
        start: Start,
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
                Some(cacher.read(|state| Subscription {
                    snapshot: Some(state.objects.clone()),
                    backlog: Vec::new(),
                    receiver: state.watchers.subscribe(),
                    revision: state.revision,
                }))
            }
            Start::After(revision) => {
                cacher.wait_for(1).await?;
                cacher.read(|state| {
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
                        receiver: state.watchers.subscribe(),
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

    fn current(&self) -> (Objects, i64) {
        match self.state.read() {
            Ok(state) => (state.objects.clone(), state.revision),
            Err(poisoned) => {
                let state = poisoned.into_inner();
                (state.objects.clone(), state.revision)
            }
        }
    }

    fn write(&self, change: impl FnOnce(&mut State)) {
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
                if cacher.read(|state| state.watchers.receiver_count()) > 0 {
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
                        Change::Put { new, old }
                    }
                    None => match state.objects.remove(&key) {
                        Some(old) => Change::Delete {
                            old: Arc::new(Object::new(object::with_resource_version(
                                old.value.clone(),
                                revision,
                            ))),
                        },
                        None => continue,
                    },
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
                metrics.cache_dispatched(info, state.watchers.receiver_count());
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
mod tests {
    use super::super::store::tests::write;
    use super::super::{Input, Registry};
    use crate::catalog;
    use crate::request::{ListOptions, VersionMatch};
    use serde_json::json;

    async fn cached_registry() -> (
        Registry,
        std::sync::Arc<dyn rudder_storage::Storage>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite opens");
        let cidr = super::super::Cidr::parse("10.96.0.0/12").expect("cidr");
        let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
        let registry = Registry::new(
            storage.clone(),
            std::sync::Arc::new(rudder_admission::Chain::new()),
            allocators,
        )
        .with_watch_cache();
        (registry, storage, dir)
    }

    async fn create(registry: &Registry, name: &str) {
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        let input = Input {
            object: json!({"metadata": {"name": name, "namespace": "default"}, "data": {"n": name}}),
            duplicate_fields: Vec::new(),
        };
        registry
            .create(configmaps, Some("default"), input, &write())
            .await
            .expect("created");
    }

    fn names(items: &[super::Listed]) -> Vec<String> {
        items
            .iter()
            .map(|item| item["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_list_without_resource_version_sees_every_write_before_it() {
        let (registry, storage, _dir) = cached_registry().await;
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        let everything = ListOptions::everything();
        assert!(registry
            .list(configmaps, None, &everything)
            .await
            .expect("lists")
            .items
            .is_empty());
        for (round, name) in ["a", "b", "c"].iter().enumerate() {
            create(&registry, name).await;
            let listed = registry
                .list(configmaps, None, &everything)
                .await
                .expect("lists");
            assert_eq!(listed.items.len(), round + 1, "{:?}", names(&listed.items));
        }
        // A write that bypasses the registry (another server on the store) is seen too.
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "d", "namespace": "default", "uid": "u"}});
        storage
            .create(
                b"/registry/configmaps/default/d",
                &serde_json::to_vec(&object).expect("json"),
                0,
            )
            .await
            .expect("raw create");
        let listed = registry
            .list(configmaps, Some("default"), &everything)
            .await
            .expect("lists");
        assert_eq!(names(&listed.items), ["a", "b", "c", "d"]);
        let status = storage.status().await.expect("status");
        assert_eq!(listed.resource_version, status.revision);
        // Deletes leave the cache at once as well.
        storage
            .delete(b"/registry/configmaps/default/a", None)
            .await
            .expect("raw delete");
        let listed = registry
            .list(configmaps, None, &everything)
            .await
            .expect("lists");
        assert_eq!(names(&listed.items), ["b", "c", "d"]);
    }

    #[tokio::test]
    async fn paged_lists_continue_from_their_snapshot() {
        let (registry, _storage, _dir) = cached_registry().await;
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        for name in ["a", "b", "c", "d", "e"] {
            create(&registry, name).await;
        }
        let mut options = ListOptions::everything();
        options.limit = Some(2);
        let first = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(names(&first.items), ["a", "b"]);
        assert_eq!(first.remaining_item_count, Some(3));
        // Writes after the first page do not show in its continuation.
        create(&registry, "bb").await;
        let mut seen = names(&first.items);
        let mut token = first.continue_token;
        while let Some(next) = token {
            options.continue_token = Some(next);
            let page = registry
                .list(configmaps, None, &options)
                .await
                .expect("lists");
            assert_eq!(page.resource_version, first.resource_version);
            seen.extend(names(&page.items));
            token = page.continue_token;
        }
        assert_eq!(seen, ["a", "b", "c", "d", "e"]);
        options.continue_token = None;
        options.limit = None;
        let now = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(now.items.len(), 6);
    }

    #[tokio::test]
    async fn resource_versions_are_honoured_from_the_cache_or_the_store() {
        let (registry, _storage, _dir) = cached_registry().await;
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        create(&registry, "a").await;
        let at_one = registry
            .list(configmaps, None, &ListOptions::everything())
            .await
            .expect("lists")
            .resource_version;
        create(&registry, "b").await;
        // resourceVersion=0 takes what the cache holds, which may lag a write by a moment;
        // after a consistent read it holds both.
        let consistent = registry
            .list(configmaps, None, &ListOptions::everything())
            .await
            .expect("lists");
        assert_eq!(consistent.items.len(), 2);
        let mut options = ListOptions::everything();
        options.resource_version = Some("0".into());
        let any = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(any.items.len(), 2, "the cache already holds both");
        options.resource_version = Some(at_one.to_string());
        options.version_match = VersionMatch::Exact;
        let exact = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(names(&exact.items), ["a"], "Exact is the store's");
        assert_eq!(exact.resource_version, at_one);
        options.version_match = VersionMatch::NotOlderThan;
        let newer = registry
            .list(configmaps, None, &options)
            .await
            .expect("lists");
        assert_eq!(newer.items.len(), 2);
        assert!(newer.resource_version > at_one);
        options.resource_version = Some((newer.resource_version + 1000).to_string());
        let error = registry
            .list(configmaps, None, &options)
            .await
            .expect_err("too new");
        assert_eq!(error.code, 504);
    }

    async fn next_event(
        events: &mut crate::registry::WatchEvents,
    ) -> (crate::registry::WatchEventKind, String, String) {
        use futures::StreamExt;
        let event = tokio::time::timeout(std::time::Duration::from_secs(5), events.next())
            .await
            .expect("an event in time")
            .expect("the watch goes on");
        let value = event.object.value.clone();
        (
            event.kind,
            value["metadata"]["name"].as_str().unwrap_or("").to_string(),
            value["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    }

    fn far_deadline() -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(60)
    }

    #[tokio::test]
    async fn watchers_share_the_caches_events_and_one_storage_watch() {
        use crate::registry::WatchEventKind::*;
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let metrics = std::sync::Arc::new(rudder_storage::instrumented::StorageMetrics::default());
        let storage = rudder_storage::instrumented::Instrumented::wrap(
            rudder_storage::open(&url).await.expect("sqlite opens"),
            metrics.clone(),
        );
        let cidr = super::super::Cidr::parse("10.96.0.0/12").expect("cidr");
        let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
        let registry = Registry::new(
            storage.clone(),
            std::sync::Arc::new(rudder_admission::Chain::new()),
            allocators,
        )
        .with_watch_cache();
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        create(&registry, "a").await;
        let mut watchers = Vec::new();
        for _ in 0..3 {
            let events = registry
                .watch(configmaps, None, &ListOptions::everything(), far_deadline())
                .await
                .expect("watches");
            watchers.push(events);
        }
        for events in watchers.iter_mut() {
            let (kind, name, _) = next_event(events).await;
            assert_eq!((kind, name.as_str()), (Added, "a"), "the replay");
        }
        create(&registry, "b").await;
        storage
            .delete(b"/registry/configmaps/default/a", None)
            .await
            .expect("raw delete");
        let status = storage.status().await.expect("status");
        for events in watchers.iter_mut() {
            let (kind, name, _) = next_event(events).await;
            assert_eq!((kind, name.as_str()), (Added, "b"));
            let (kind, name, version) = next_event(events).await;
            assert_eq!((kind, name.as_str()), (Deleted, "a"));
            assert_eq!(
                version,
                status.revision.to_string(),
                "a deletion shows its revision"
            );
        }
        let mut text = String::new();
        let mut exposition = prometheus_client::registry::Registry::default();
        metrics.register(&mut exposition);
        prometheus_client::encoding::text::encode(&mut text, &exposition).expect("encodes");
        let watches = text
            .lines()
            .find(|line| {
                line.starts_with("etcd_request_duration_seconds_count")
                    && line.contains("operation=\"watch\"")
            })
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|count| count.parse::<u64>().ok());
        assert_eq!(
            watches,
            Some(1),
            "three watchers, one storage watch (the cache's):\n{text}"
        );
    }

    #[tokio::test]
    async fn a_watch_from_a_recent_revision_gets_the_changes_after_it() {
        use crate::registry::WatchEventKind::*;
        let (registry, _storage, _dir) = cached_registry().await;
        let configmaps = catalog::find("", "v1", "configmaps").expect("served");
        create(&registry, "a").await;
        let listed = registry
            .list(configmaps, None, &ListOptions::everything())
            .await
            .expect("lists");
        create(&registry, "b").await;
        create(&registry, "c").await;
        let mut options = ListOptions::everything();
        options.resource_version = Some(listed.resource_version.to_string());
        let mut events = registry
            .watch(configmaps, None, &options, far_deadline())
            .await
            .expect("watches");
        assert_eq!(next_event(&mut events).await.1, "b");
        assert_eq!(next_event(&mut events).await.1, "c");
        // A label selector: objects entering and leaving it are ADDED and DELETED.
        let mut options = ListOptions::everything();
        options.label_selector = "app=web".into();
        let mut selected = registry
            .watch(configmaps, Some("default"), &options, far_deadline())
            .await
            .expect("watches");
        let configmap = |labels: serde_json::Value| Input {
            object: json!({"metadata": {"name": "b", "namespace": "default", "labels": labels}}),
            duplicate_fields: Vec::new(),
        };
        for labels in [
            json!({"app": "web"}),
            json!({"app": "web", "x": "y"}),
            json!({}),
        ] {
            registry
                .update(
                    configmaps,
                    Some("default"),
                    "b",
                    None,
                    configmap(labels),
                    &write(),
                )
                .await
                .expect("updated");
        }
        assert_eq!(next_event(&mut selected).await.0, Added);
        assert_eq!(next_event(&mut selected).await.0, Modified);
        assert_eq!(next_event(&mut selected).await.0, Deleted);
    }

    #[test]
    fn the_window_keeps_the_latest_events_and_says_from_where() {
        let mut state = super::State::default();
        let event = |revision: i64| super::CachedEvent {
            key: b"/k".to_vec(),
            revision,
            change: super::Change::Delete {
                old: std::sync::Arc::new(super::Object::new(json!({}))),
            },
        };
        for revision in 1..=(super::WINDOW_EVENTS as i64 + 5) {
            state.publish(super::Batch {
                revision,
                events: vec![event(revision)],
            });
        }
        assert_eq!(state.window_events, super::WINDOW_EVENTS);
        assert_eq!(
            state.floor, 5,
            "changes after revision 5 are all in the window"
        );
        // Progress is broadcast, not kept.
        state.publish(super::Batch {
            revision: 100_000,
            events: Vec::new(),
        });
        assert_eq!(state.window.len(), super::WINDOW_EVENTS);
    }
}
