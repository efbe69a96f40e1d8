//! Watches: the storage hub's events for a resource, filtered per client. An object that
//! starts or stops matching the selectors arrives as ADDED or DELETED; `resourceVersion`
//! unset or `0` first replays the current state as ADDED events; a compacted start revision
//! ends the watch with a 410 Expired ERROR event; bookmarks come from the hub's progress.
//!
//! Where the resource has a watch cache, a watch is one of its subscribers (`serve_cached`):
//! the replay is a snapshot of the cache, and the live events are the cache's batches,
//! filtered per watcher — one storage watch, one decode per object and one JSON encoding per
//! event however many watch. Otherwise (no cache, a kind the cache does not hold, or a start
//! revision older than the cache's window) the watch has a storage watch of its own.
//!
//! A watcher holds at most about a megabyte for its client: the replay is read a page at a
//! time as the client takes it, queued events count against a byte budget, and a client that
//! stops reading for 30 s (or a watch past its deadline) ends the watcher whether or not the
//! client reads again.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rudder_storage::{EventKind, KeyRange, WatchRequest};
use serde_json::{json, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::cache::{Batch, CachedEvent, Change, Start, Subscription, Wanted, WatchCache};
use super::decoded::{Decoded, Object};
use super::list::{list_prefix, Filter};
use super::object;
use super::Registry;
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result};
use crate::limits::encoded_len;
use crate::request::ListOptions;
use crate::values::Reader;

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(30);

/// A watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventKind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl WatchEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventKind::Added => "ADDED",
            WatchEventKind::Modified => "MODIFIED",
            WatchEventKind::Deleted => "DELETED",
            WatchEventKind::Bookmark => "BOOKMARK",
            WatchEventKind::Error => "ERROR",
        }
    }
}

/// One event for one client; its object is shared with every other watcher it went to (and
/// with the watch cache), JSON-encoded once for all of them.
#[derive(Clone)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    pub(crate) object: Arc<Object>,
}

impl WatchEvent {
    pub(super) fn new(kind: WatchEventKind, object: Value) -> Self {
        Self {
            kind,
            object: Arc::new(Object::plain(object)),
        }
    }

    fn error(error: &ApiError) -> Self {
        Self::new(WatchEventKind::Error, error.status())
    }

    /// The object, parsed into a tree of the caller's own.
    pub fn into_value(self) -> Value {
        self.object.value()
    }
}

fn bookmark(info: &ResourceInfo, revision: i64, initial_events_end: bool) -> WatchEvent {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent::new(
        WatchEventKind::Bookmark,
        json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata}),
    )
}

/// What one watcher may hold queued for its client, in encoded bytes (always room for one
/// event, however large).
const WATCHER_BUDGET_BYTES: usize = 1024 * 1024;
/// How long a watcher waits for its client to take an event before it is ended: a client
/// that does not read must not keep the watcher's copy of the collection alive.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of objects one page of a replay reads (the page size adapts to the objects' size).
const REPLAY_PAGE_BYTES: usize = 1024 * 1024;
/// The first replay page's size, before any object was measured: one object, which may be
/// a megabyte.
const FIRST_REPLAY_PAGE: i64 = 1;
/// The most objects one replay page reads.
const MAX_REPLAY_PAGE: i64 = 500;

/// Events waiting for a client, each holding its share of the watcher's byte budget until
/// the client takes it.
pub struct WatchEvents {
    receiver: mpsc::Receiver<Queued>,
}

struct Queued {
    event: WatchEvent,
    _budget: OwnedSemaphorePermit,
}

impl futures::Stream for WatchEvents {
    type Item = WatchEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<WatchEvent>> {
        self.receiver
            .poll_recv(cx)
            .map(|queued| queued.map(|queued| queued.event))
    }
}

/// Why a watcher stopped sending.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The client went away.
    ClientGone,
    /// The client stopped reading for [`STALL_TIMEOUT`].
    Stalled,
}

/// The sending side: a small queue bounded by the byte budget.
struct Outbox {
    sender: mpsc::Sender<Queued>,
    budget: Arc<Semaphore>,
}

impl Outbox {
    fn new() -> (Self, WatchEvents) {
        let (sender, receiver) = mpsc::channel(64);
        let outbox = Self {
            sender,
            budget: Arc::new(Semaphore::new(WATCHER_BUDGET_BYTES)),
        };
        (outbox, WatchEvents { receiver })
    }

    /// Queues `event` of about `cost` encoded bytes, waiting at most [`STALL_TIMEOUT`].
    async fn send(&self, event: WatchEvent, cost: usize) -> Result<(), Ended> {
        if self.sender.is_closed() {
            return Err(Ended::ClientGone);
        }
        let permits = u32::try_from(cost.clamp(1, WATCHER_BUDGET_BYTES)).unwrap_or(u32::MAX);
        let budget = self.budget.clone().acquire_many_owned(permits);
        let held = match tokio::time::timeout(STALL_TIMEOUT, budget).await {
            Ok(Ok(held)) => held,
            Ok(Err(_)) => return Err(Ended::ClientGone),
            Err(_) => return Err(Ended::Stalled),
        };
        let queued = Queued {
            event,
            _budget: held,
        };
        match tokio::time::timeout(STALL_TIMEOUT, self.sender.send(queued)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Ended::ClientGone),
            Err(_) => Err(Ended::Stalled),
        }
    }

    /// Sends an event costed by its encoding (made here once, shared by every watcher).
    async fn send_measured(&self, event: WatchEvent) -> Result<(), Ended> {
        let cost = event.object.json().len();
        self.send(event, cost).await
    }
}

/// The next replay page's size: about [`REPLAY_PAGE_BYTES`] of objects as large as the last
/// page's.
fn next_page_size(items: &[super::Listed]) -> i64 {
    if items.is_empty() {
        return FIRST_REPLAY_PAGE;
    }
    let bytes: usize = items.iter().map(|item| encoded_len(item)).sum();
    let average = (bytes / items.len()).max(1);
    i64::try_from(REPLAY_PAGE_BYTES / average)
        .unwrap_or(MAX_REPLAY_PAGE)
        .clamp(1, MAX_REPLAY_PAGE)
}

impl Registry {
    /// Every object of `info` from `revision` on, for the controllers inside the apiserver
    /// (an hour at most; they list and watch again when it ends). A failure is logged with
    /// `what` and is `None`.
    pub async fn watch_kind_from(
        &self,
        info: &'static ResourceInfo,
        revision: i64,
        what: &str,
    ) -> Option<WatchEvents> {
        let mut options = ListOptions::everything();
        options.resource_version = Some(revision.to_string());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        match self.watch(info, None, &options, deadline).await {
            Ok(events) => Some(events),
            Err(error) => {
                tracing::warn!(error = %error.message, "watching {what}");
                None
            }
        }
    }

    /// Starts a watch; events arrive until the client goes away or stops reading, `deadline`
    /// passes, the store fails, or the watch is closed for falling behind. What the watcher
    /// holds for its client is bounded by [`WATCHER_BUDGET_BYTES`], and a replay of the
    /// current state is read page by page as the client takes it.
    #[tracing::instrument(level = "debug", name = "registry.watch", skip_all, fields(resource = info.plural, namespace))]
    pub async fn watch(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        options: &ListOptions,
        deadline: tokio::time::Instant,
    ) -> Result<WatchEvents> {
        let filter = Filter::new(info, options)?;
        let prefix = list_prefix(info, namespace, &filter);
        let (outbox, events) = Outbox::new();
        let replay = options
            .resource_version
            .as_deref()
            .is_none_or(|rv| rv == "0")
            || options.send_initial_events;
        let mut start_revision = match options.resource_version.as_deref() {
            None | Some("0") | Some("") => 0,
            Some(version) => version.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: \"{version}\": must be a non-negative integer"
                ))
            })?,
        };
        if let Some(cache) = self.caches(info) {
            let start = if replay {
                Start::Replay(match options.resource_version.as_deref() {
                    None | Some("") => Wanted::Consistent,
                    Some("0") => Wanted::Any,
                    Some(_) => Wanted::NotOlderThan(start_revision),
                })
            } else {
                Start::After(start_revision)
            };
            let trigger = cache.trigger(info, &filter);
            if let Some(subscription) = cache.subscribe(info, start, trigger.as_deref()).await {
                let watcher = CachedWatcher {
                    info,
                    filter,
                    prefix,
                    allow_bookmarks: options.allow_bookmarks,
                    initial_events_end: options.send_initial_events && options.allow_bookmarks,
                    cache: cache.clone(),
                };
                self.tasks.spawn(watcher.serve(
                    subscription,
                    outbox,
                    deadline,
                    self.shutdown.clone(),
                ));
                return Ok(events);
            }
        }
        let mut page_options = options.clone();
        page_options.limit = Some(FIRST_REPLAY_PAGE);
        page_options.continue_token = None;
        page_options.resource_version = None;
        let mut first_page = None;
        if replay {
            let page = self.list(info, namespace, &page_options).await?;
            start_revision = page.resource_version;
            first_page = Some(page);
        }
        let request = WatchRequest::new(KeyRange::prefix(prefix))
            .from_revision(start_revision + 1)
            .with_prev_kv();
        let stream = self.storage.watch(request).await;
        let allow_bookmarks = options.allow_bookmarks;
        let initial_events_end = options.send_initial_events && allow_bookmarks;
        let registry = self.clone();
        let namespace = namespace.map(str::to_string);
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let run = async {
                let mut stream = match stream {
                    Ok(stream) => stream,
                    Err(error) => {
                        let error = ApiError::from_watch(error, start_revision, start_revision);
                        return outbox.send_measured(WatchEvent::error(&error)).await;
                    }
                };
                let mut page = first_page;
                while let Some(listed) = page.take() {
                    page_options.limit = Some(next_page_size(&listed.items));
                    page_options.continue_token = listed.continue_token;
                    for object in listed.items {
                        let event = WatchEvent {
                            kind: WatchEventKind::Added,
                            object: object.into_shared(),
                        };
                        outbox.send_measured(event).await?;
                    }
                    if page_options.continue_token.is_some() {
                        match registry
                            .list(info, namespace.as_deref(), &page_options)
                            .await
                        {
                            Ok(next) => page = Some(next),
                            Err(error) => {
                                return outbox.send_measured(WatchEvent::error(&error)).await
                            }
                        }
                    }
                }
                if initial_events_end {
                    outbox
                        .send_measured(bookmark(info, start_revision, true))
                        .await?;
                }
                let mut last_revision = start_revision;
                let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
                ticker.tick().await;
                loop {
                    tokio::select! {
                        _ = outbox.sender.closed() => return Err(Ended::ClientGone),
                        _ = ticker.tick(), if allow_bookmarks => stream.request_progress(),
                        batch = stream.next() => {
                            let batch = match batch {
                                None => return Ok(()),
                                Some(Ok(batch)) => batch,
                                Some(Err(error)) => {
                                    let error = ApiError::from_watch(error, start_revision, last_revision);
                                    return outbox.send_measured(WatchEvent::error(&error)).await;
                                }
                            };
                            if batch.events.is_empty() {
                                if allow_bookmarks && batch.revision > 0 {
                                    last_revision = last_revision.max(batch.revision);
                                    outbox.send_measured(bookmark(info, last_revision, false)).await?;
                                }
                                continue;
                            }
                            let reader = registry.values.reader(info);
                            for event in batch.events {
                                last_revision = last_revision.max(event.kv.mod_revision);
                                let cost = event.kv.value.len();
                                if let Some(out) = translate(&filter, &reader, &registry.decoded, event) {
                                    let out = match registry.served_event(info, out).await {
                                        Ok(out) => out,
                                        Err(error) => return outbox.send_measured(WatchEvent::error(&error)).await,
                                    };
                                    outbox.send(out, cost).await?;
                                }
                            }
                        }
                    }
                }
            };
            tokio::select! {
                ended = run => {
                    if ended == Err(Ended::Stalled) {
                        tracing::debug!(resource = info.plural, "watch ended: its client stopped reading");
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
                () = shutdown.cancelled() => {}
            }
        });
        Ok(events)
    }
}

/// A watch served from the watch cache.
struct CachedWatcher {
    info: &'static ResourceInfo,
    filter: Filter,
    /// The keys it watches (the resource, or one namespace of it).
    prefix: Vec<u8>,
    allow_bookmarks: bool,
    initial_events_end: bool,
    cache: Arc<WatchCache>,
}

impl CachedWatcher {
    /// Replays the snapshot (if any), then follows the cache's batches until the client goes,
    /// stops reading, the deadline passes, or the cache lists again.
    async fn serve(
        self,
        subscription: Subscription,
        outbox: Outbox,
        deadline: tokio::time::Instant,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let plural = self.info.plural;
        tokio::select! {
            ended = self.run(subscription, &outbox) => {
                if ended == Err(Ended::Stalled) {
                    tracing::debug!(resource = plural, "watch ended: its client stopped reading");
                }
            }
            () = tokio::time::sleep_until(deadline) => {}
            () = shutdown.cancelled() => {}
        }
    }

    async fn run(&self, subscription: Subscription, outbox: &Outbox) -> Result<(), Ended> {
        let mut last = subscription.revision;
        if let Some(snapshot) = subscription.snapshot {
            let end = rudder_storage::prefix_end(&self.prefix);
            for (_, object) in snapshot.range(self.prefix.clone()..end) {
                if self.filter.matches_decoded(object) {
                    let event = WatchEvent {
                        kind: WatchEventKind::Added,
                        object: object.clone(),
                    };
                    outbox.send_measured(event).await?;
                }
            }
            if self.initial_events_end {
                outbox
                    .send_measured(bookmark(self.info, last, true))
                    .await?;
            }
        }
        for batch in &subscription.backlog {
            self.deliver(batch, &mut last, outbox).await?;
        }
        let mut receiver = subscription.receiver;
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = outbox.sender.closed() => return Err(Ended::ClientGone),
                _ = ticker.tick(), if self.allow_bookmarks => {
                    outbox.send_measured(bookmark(self.info, last, false)).await?;
                }
                received = receiver.recv() => match received {
                    Ok(batch) => self.deliver(&batch, &mut last, outbox).await?,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        // Behind the broadcast: catch up from the window, or end (the client
                        // watches again from its last resourceVersion).
                        let trigger = self.cache.trigger(self.info, &self.filter);
                        let Some(again) = self.cache.subscribe(self.info, Start::After(last), trigger.as_deref()).await else {
                            return Ok(());
                        };
                        for batch in &again.backlog {
                            self.deliver(batch, &mut last, outbox).await?;
                        }
                        receiver = again.receiver;
                    }
                    // The cache listed again: its watchers end, as after a dropped watch.
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    /// Sends what of `batch` this watcher sees and has not seen yet.
    async fn deliver(&self, batch: &Batch, last: &mut i64, outbox: &Outbox) -> Result<(), Ended> {
        for event in &batch.events {
            if event.revision <= *last || !event.key.starts_with(&self.prefix) {
                continue;
            }
            if let Some(out) = translate_cached(&self.filter, event) {
                outbox.send_measured(out).await?;
            }
        }
        *last = (*last).max(batch.revision);
        Ok(())
    }
}

/// A cached change as this client sees it (None when neither state matches its selectors).
fn translate_cached(filter: &Filter, event: &CachedEvent) -> Option<WatchEvent> {
    match &event.change {
        Change::Delete { old } => filter.matches_decoded(old).then(|| WatchEvent {
            kind: WatchEventKind::Deleted,
            object: old.clone(),
        }),
        Change::Put { new, old } => {
            let new_matches = filter.matches_decoded(new);
            let kind = match old.as_ref().map(|old| filter.matches_decoded(old)) {
                None | Some(false) if new_matches => WatchEventKind::Added,
                Some(true) if new_matches => WatchEventKind::Modified,
                Some(true) => WatchEventKind::Deleted,
                _ => return None,
            };
            Some(WatchEvent {
                kind,
                object: new.clone(),
            })
        }
    }
}

/// A storage event as this client sees it (None when neither state matches its selectors).
/// Objects are decoded once for all watches ([`Decoded`]) and copied only when they match.
fn translate(
    filter: &Filter,
    reader: &Reader,
    decoded: &Decoded,
    event: rudder_storage::Event,
) -> Option<WatchEvent> {
    let revision = event.kv.mod_revision;
    // The kind's rules, by address: one API's view of a stored object is not another's.
    let view = filter.strategy as *const dyn crate::kinds::Strategy as *const () as usize;
    let decode = |kv: &rudder_storage::KeyValue| {
        decoded.get_or_decode(
            view,
            &kv.key,
            kv.mod_revision,
            revision,
            filter.strategy.fields(),
            || {
            match reader.decode(&kv.key, &kv.value) {
                Ok(object) => Some(
                    filter
                        .strategy
                        .stored_to_api(object::with_resource_version(object, revision)),
                ),
                Err(error) => {
                    tracing::warn!(key = %String::from_utf8_lossy(&kv.key), %error, "a watched value cannot be read; the event is skipped");
                    None
                }
            }
        })
    };
    let old = event.prev_kv.as_ref().and_then(decode);
    match event.kind {
        EventKind::Delete => {
            let old = old?;
            filter.matches_decoded(&old).then(|| WatchEvent {
                kind: WatchEventKind::Deleted,
                object: old,
            })
        }
        EventKind::Put => {
            let new = decode(&event.kv)?;
            let new_matches = filter.matches_decoded(&new);
            let kind = match old.map(|old| filter.matches_decoded(&old)) {
                None | Some(false) if new_matches => WatchEventKind::Added,
                Some(true) if new_matches => WatchEventKind::Modified,
                Some(true) => WatchEventKind::Deleted,
                _ => return None,
            };
            Some(WatchEvent { kind, object: new })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn event(bytes: usize) -> WatchEvent {
        WatchEvent::new(WatchEventKind::Added, json!({"data": "x".repeat(bytes)}))
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_holds_one_budget_and_is_ended() {
        let (outbox, mut events) = Outbox::new();
        // A 1 MiB object always fits once, whatever its size…
        outbox
            .send(event(16), WATCHER_BUDGET_BYTES + 10)
            .await
            .expect("the first event is queued");
        // …but nothing more is held until the client takes it: the watcher waits, then ends.
        let started = tokio::time::Instant::now();
        assert_eq!(outbox.send(event(16), 100).await, Err(Ended::Stalled));
        assert!(started.elapsed() >= STALL_TIMEOUT);
        // Taking an event frees its share of the budget.
        assert!(events.next().await.is_some());
        outbox.send(event(16), 100).await.expect("room again");
        drop(events);
        assert_eq!(outbox.send(event(16), 100).await, Err(Ended::ClientGone));
    }

    #[tokio::test(start_paused = true)]
    async fn small_events_queue_until_the_budget_is_spent() {
        let (outbox, _events) = Outbox::new();
        let mut queued = 0;
        while outbox.send(event(0), 64 * 1024).await.is_ok() {
            queued += 1;
        }
        assert_eq!(queued, WATCHER_BUDGET_BYTES / (64 * 1024));
    }

    #[test]
    fn replay_pages_hold_about_a_megabyte_of_objects() {
        assert_eq!(next_page_size(&[]), FIRST_REPLAY_PAGE);
        let big = vec![super::super::Listed::new(json!({"data": "x".repeat(1024 * 1024)})); 2];
        assert_eq!(next_page_size(&big), 1);
        let small = vec![super::super::Listed::new(json!({"a": 1})); 3];
        assert_eq!(next_page_size(&small), MAX_REPLAY_PAGE);
    }
}
