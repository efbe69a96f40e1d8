//! Watches on etcd: each storage watch is one etcd watch stream, its events mapped back under
//! the store's prefix.
//!
//! Progress requests need care. etcd before 3.4.31 and 3.5.13 answers a stream's progress
//! request out of band, so the answer can overtake events still queued for the watch
//! (etcd-io/etcd#15220) or never come for a new watch (#17507); Debian's 3.4.23 does both. On
//! those versions this driver fences instead: it keeps a second watcher on the same stream on a
//! key of its own, writes that key, and reports progress when the write's event arrives — etcd
//! queues a stream's events in one channel, in revision order, so every event of the watch
//! below the fence's revision came first. That holds for a watch that is caught up (etcd's
//! "synced"): one from now, or one from the past once it has delivered an event at or above the
//! revision it was created at. Until then, progress reports say only what its events proved.
//! (A watch whose client stopped reading long enough for etcd to make it a "victim" is not
//! covered; upgrade etcd for exact progress in every case.)
//!
//! ```text
//!   request_progress ─▶ [fenced] create fence watcher (once) ─▶ put fence key (revision F)
//!   etcd stream ─▶ events of the watch … event of the fence key at F ─▶ progress batch at F
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use etcd_client::proto::{PbKeyValue, PbWatchResponse};
use etcd_client::{Client, WatchOptions};
use tokio::sync::Notify;

use super::translate;
use crate::error::{Error, Result};
use crate::interface::WatchStream;
use crate::types::*;

/// How progress requests are answered on this etcd.
#[derive(Clone)]
pub(super) enum ProgressMode {
    /// etcd orders its progress answers with events.
    Native,
    /// etcd-io/etcd#15220: fence with writes of the writer's key.
    Fenced(Arc<FenceWriter>),
}

impl ProgressMode {
    /// The mode for an etcd that reports `version` (like `3.4.23`); `key` is the full etcd key
    /// fences write.
    pub fn for_version(version: &str, client: Client, key: Vec<u8>) -> Self {
        if orders_progress_with_events(version) {
            Self::Native
        } else {
            Self::Fenced(Arc::new(FenceWriter {
                client,
                key,
                tickets: std::sync::atomic::AtomicU64::new(0),
                writing: tokio::sync::Mutex::new(()),
                done: std::sync::Mutex::new((0, 0)),
            }))
        }
    }
}

/// Writes a store's fence key for all its watches: requests that arrive while a write is on its
/// way share the next one, so a burst of progress requests costs one or two writes.
pub(super) struct FenceWriter {
    client: Client,
    key: Vec<u8>,
    /// Requests so far; a write serves every ticket taken before it started.
    tickets: std::sync::atomic::AtomicU64,
    writing: tokio::sync::Mutex<()>,
    /// `(last ticket served, its revision)` of the last write.
    done: std::sync::Mutex<(u64, Revision)>,
}

impl FenceWriter {
    /// A fence revision written after this call began.
    async fn fence(&self) -> Result<Revision> {
        use std::sync::atomic::Ordering;
        let ticket = self.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let _writing = self.writing.lock().await;
        let (served, revision) = *self
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if served >= ticket {
            return Ok(revision);
        }
        let serves = self.tickets.load(Ordering::SeqCst);
        let response = self
            .client
            .kv_client()
            .put(self.key.clone(), "", None)
            .await
            .map_err(translate)?;
        let revision = response.header().map_or(0, |h| h.revision());
        *self
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = (serves, revision);
        Ok(revision)
    }
}

/// Whether this etcd answers progress requests in order with events: 3.4.31+, 3.5.13+, 3.6+.
pub(super) fn orders_progress_with_events(version: &str) -> bool {
    let mut parts = version.split('.').map(|part| {
        part.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .unwrap_or(0)
    });
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, minor) => minor >= 6,
        (major, _) => major > 3,
    }
}

/// How long a watch whose member went away keeps trying to watch again elsewhere.
const RESUME_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The fence of a [`ProgressMode::Fenced`] watch.
struct Fence {
    writer: Arc<FenceWriter>,
    /// The fence watcher's id on the stream, once etcd confirmed it.
    watcher: FenceWatcher,
    /// A progress report was asked for and not yet given.
    requested: bool,
    /// The fence revision the report waits for.
    waiting_for: Option<Revision>,
    /// Whether the watch is caught up, so that a fence proves its progress.
    caught_up: bool,
    /// The store's revision when the watch was created.
    created_at: Revision,
}

/// Where the fence watcher stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FenceWatcher {
    NotCreated,
    /// Asked for; etcd has not confirmed it yet.
    Creating,
    Created(i64),
    /// etcd refused or ended it: progress falls back to what events proved.
    Broken,
}

/// The state of one etcd watch turned into a [`WatchStream`].
struct EtcdWatch {
    /// What to watch again when the member serving the watch goes away.
    target: Target,
    sender: etcd_client::WatchRequestSender,
    responses: etcd_client::WatchResponseStream,
    pending: VecDeque<PbWatchResponse>,
    prefix: Vec<u8>,
    progress: Arc<Notify>,
    done: bool,
    /// The watch's id on its stream.
    id: i64,
    /// Every event of the watch up to this revision has been delivered.
    delivered: Revision,
    fence: Option<Fence>,
}

/// What a watch asks etcd for, kept to ask again from where it got to.
#[derive(Clone)]
pub(super) struct Target {
    pub client: Client,
    /// The full etcd key (prefix included) and range end (empty: one key).
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub prev_kv: bool,
    pub max_response_bytes: usize,
}

impl Target {
    fn options(&self, start_revision: Revision) -> WatchOptions {
        let mut options = WatchOptions::new().with_start_revision(start_revision.max(0));
        if !self.range_end.is_empty() {
            options = options.with_range(self.range_end.clone());
        }
        if self.prev_kv {
            options = options.with_prev_key();
        }
        options
    }

    /// Creates the watch on etcd: its stream halves and etcd's first answer, the creation
    /// (or the refusal, as an error).
    async fn create(
        &self,
        start_revision: Revision,
    ) -> Result<(
        etcd_client::WatchRequestSender,
        etcd_client::WatchResponseStream,
        PbWatchResponse,
    )> {
        let stream = self
            .client
            .watch_client()
            .max_decoding_message_size(self.max_response_bytes)
            .watch(self.key.clone(), Some(self.options(start_revision)))
            .await
            .map_err(translate)?;
        let (sender, mut responses) = stream.split();
        let Some(first) = responses.message().await.map_err(translate)? else {
            return Err(Error::Unavailable {
                message: "etcd closed the watch stream".into(),
                source: None,
            });
        };
        let first = first.0;
        if first.canceled {
            return Err(cancel_error(&first));
        }
        Ok((sender, responses, first))
    }
}

/// Opens an etcd watch of `target` from the request's start revision and turns it into a
/// stream.
pub(super) async fn open(
    target: Target,
    request: &WatchRequest,
    prefix: Vec<u8>,
    mode: ProgressMode,
) -> Result<WatchStream> {
    let (sender, responses, first) = target.create(request.start_revision).await?;
    let mut pending = VecDeque::new();
    let created_at = first.header.as_ref().map_or(0, |h| h.revision);
    let id = first.watch_id;
    if !first.created {
        pending.push_back(first);
    }
    // Everything before the start revision is trivially delivered.
    let delivered = if request.start_revision <= 0 {
        created_at
    } else {
        request.start_revision - 1
    };
    let fence = match mode {
        ProgressMode::Native => None,
        ProgressMode::Fenced(writer) => Some(Fence {
            writer,
            watcher: FenceWatcher::NotCreated,
            requested: false,
            waiting_for: None,
            // etcd syncs a watch from now (or from the future) at once.
            caught_up: request.start_revision <= 0 || request.start_revision > created_at,
            created_at,
        }),
    };
    let progress = Arc::new(Notify::new());
    let state = EtcdWatch {
        target,
        sender,
        responses,
        pending,
        prefix,
        progress: progress.clone(),
        done: false,
        id,
        delivered,
        fence,
    };
    let batches = futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    });
    Ok(WatchStream::new(Box::pin(batches), progress))
}

impl EtcdWatch {
    fn end(&mut self, error: Error) -> Option<Result<WatchBatch>> {
        self.done = true;
        Some(Err(error))
    }

    fn progress_batch(&self, revision: Revision) -> Option<Result<WatchBatch>> {
        // Never behind an event already delivered.
        Some(Ok(WatchBatch {
            events: Vec::new(),
            revision: revision.max(self.delivered),
        }))
    }

    async fn next(&mut self) -> Option<Result<WatchBatch>> {
        if self.done {
            return None;
        }
        loop {
            let response = match self.pending.pop_front() {
                Some(response) => response,
                None => {
                    let received = tokio::select! {
                        received = self.responses.message() => received,
                        _ = self.progress.notified() => {
                            if let Some(item) = self.progress_requested().await {
                                return Some(item);
                            }
                            continue;
                        }
                    };
                    match received {
                        Ok(Some(response)) => response.0,
                        Ok(None) => {
                            let lost = Error::Unavailable {
                                message: "etcd closed the watch stream".into(),
                                source: None,
                            };
                            if let Some(item) = self.resume(lost).await {
                                return Some(item);
                            }
                            continue;
                        }
                        // The stream broke (a member gone, a connection reset): a new
                        // watch from where this one got to tells a refusal (compaction) from
                        // a lost connection.
                        Err(error) => {
                            if let Some(item) = self.resume(translate(error)).await {
                                return Some(item);
                            }
                            continue;
                        }
                    }
                }
            };
            if let Some(item) = self.handle(response).await {
                return Some(item);
            }
        }
    }

    /// The member serving the watch went away (`lost` says how): watches again from the
    /// revision after the last one delivered, through whichever member answers, for up to
    /// [`RESUME_FOR`], as etcd's own client does; ends the stream with `lost` (or the new
    /// watch's refusal, a compaction say) if it cannot. A progress request that was waiting
    /// is answered with what has been delivered.
    async fn resume(&mut self, lost: Error) -> Option<Result<WatchBatch>> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(50);
        let (sender, responses, first) = loop {
            match self.target.create(self.delivered + 1).await {
                Ok(created) => break created,
                Err(error @ (Error::Compacted { .. } | Error::InvalidArgument(_))) => {
                    return self.end(error)
                }
                Err(error) if started.elapsed() >= RESUME_FOR => {
                    tracing::warn!(%lost, %error, "an etcd watch could not be resumed");
                    return self.end(lost);
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(500));
                }
            }
        };
        tracing::info!(%lost, from = self.delivered + 1, "resumed an etcd watch");
        self.sender = sender;
        self.responses = responses;
        self.id = first.watch_id;
        self.pending.clear();
        if !first.created {
            self.pending.push_back(first.clone());
        }
        let created_at = first.header.as_ref().map_or(0, |h| h.revision);
        let delivered = self.delivered;
        if let Some(fence) = self.fence.as_mut() {
            let requested = std::mem::take(&mut fence.requested);
            fence.watcher = FenceWatcher::NotCreated;
            fence.waiting_for = None;
            fence.created_at = created_at;
            fence.caught_up = delivered >= created_at;
            if requested {
                return self.progress_batch(delivered);
            }
        }
        None
    }

    /// Starts answering a progress request; returns a report when one can be given at once.
    async fn progress_requested(&mut self) -> Option<Result<WatchBatch>> {
        let Some(fence) = self.fence.as_mut() else {
            // A broken stream shows on the receiving side too, which resumes the watch; the
            // report then says what has been delivered.
            if let Err(error) = self.sender.request_progress().await {
                tracing::debug!(%error, "a watch-progress request could not be sent");
                return self.progress_batch(self.delivered);
            }
            return None;
        };
        if !fence.caught_up || fence.watcher == FenceWatcher::Broken {
            return self.progress_batch(self.delivered);
        }
        fence.requested = true;
        match fence.watcher {
            FenceWatcher::NotCreated => {
                fence.watcher = FenceWatcher::Creating;
                let key = fence.writer.key.clone();
                if let Err(error) = self.sender.watch(key, None).await {
                    tracing::debug!(%error, "the watch-progress fence could not be watched");
                    fence.watcher = FenceWatcher::NotCreated;
                    fence.requested = false;
                    return self.progress_batch(self.delivered);
                }
                None
            }
            FenceWatcher::Created(_) if fence.waiting_for.is_none() => self.write_fence().await,
            _ => None,
        }
    }

    /// Writes the fence key; its event will carry the progress report. When the write fails
    /// (no quorum, say) the watch goes on and the report says what has been delivered.
    async fn write_fence(&mut self) -> Option<Result<WatchBatch>> {
        let fence = self.fence.as_mut()?;
        match fence.writer.fence().await {
            Ok(revision) => {
                fence.waiting_for = Some(revision);
                None
            }
            Err(error) => {
                tracing::debug!(%error, "a watch-progress fence could not be written");
                fence.requested = false;
                self.progress_batch(self.delivered)
            }
        }
    }

    /// Turns one etcd response into what the stream yields, if anything.
    async fn handle(&mut self, response: PbWatchResponse) -> Option<Result<WatchBatch>> {
        let revision = response.header.as_ref().map_or(0, |h| h.revision);
        // (Without a fence every response is this watch's, the stream-wide progress (-1) too.)
        if self.fence.is_some() && response.watch_id != self.id {
            return self.handle_fence(response, revision).await;
        }
        if response.canceled {
            return self.end(cancel_error(&response));
        }
        let fence_key = self.fence.as_ref().map(|fence| fence.writer.key.clone());
        let events: Vec<Event> = response
            .events
            .iter()
            .filter(|event| {
                fence_key.is_none() || event.kv.as_ref().map(|kv| &kv.key) != fence_key.as_ref()
            })
            .map(|event| Event {
                kind: if event.r#type == 1 {
                    EventKind::Delete
                } else {
                    EventKind::Put
                },
                kv: event
                    .kv
                    .as_ref()
                    .map(|kv| strip(&self.prefix, kv))
                    .unwrap_or_default(),
                prev_kv: event.prev_kv.as_ref().map(|kv| strip(&self.prefix, kv)),
            })
            .collect();
        if events.is_empty() {
            // With no events, etcd's progress report: trusted only where etcd orders it.
            return match (&self.fence, response.events.is_empty()) {
                (None, true) => self.progress_batch(revision),
                _ => None,
            };
        }
        let last = events.last().map_or(0, |event| event.kv.mod_revision);
        self.delivered = self.delivered.max(last);
        if let Some(fence) = self.fence.as_mut() {
            if !fence.caught_up && self.delivered >= fence.created_at {
                fence.caught_up = true;
            }
        }
        // Not the response's header revision: while etcd catches a watcher up it sends a
        // thousand revisions at a time, each response carrying the store's current revision,
        // and a batch's revision promises every event up to it.
        Some(Ok(WatchBatch {
            events,
            revision: last,
        }))
    }

    /// A response of the fence watcher: its creation, or the event of a fence write.
    async fn handle_fence(
        &mut self,
        response: PbWatchResponse,
        revision: Revision,
    ) -> Option<Result<WatchBatch>> {
        let fence = self.fence.as_mut()?;
        if response.canceled {
            fence.watcher = FenceWatcher::Broken;
            tracing::warn!(reason = %response.cancel_reason, "etcd ended the watch-progress fence");
            if std::mem::take(&mut fence.requested) {
                return self.progress_batch(self.delivered);
            }
            return None;
        }
        if response.created && fence.watcher == FenceWatcher::Creating {
            fence.watcher = FenceWatcher::Created(response.watch_id);
            if fence.requested {
                return self.write_fence().await;
            }
            return None;
        }
        let waiting_for = fence.waiting_for?;
        let seen = response
            .events
            .iter()
            .filter_map(|event| event.kv.as_ref().map(|kv| kv.mod_revision))
            .max()
            .unwrap_or(0)
            .max(if response.events.is_empty() {
                0
            } else {
                revision
            });
        if seen < waiting_for {
            return None;
        }
        fence.waiting_for = None;
        fence.requested = false;
        self.progress_batch(waiting_for)
    }
}

fn strip(prefix: &[u8], kv: &PbKeyValue) -> KeyValue {
    KeyValue {
        key: kv.key.strip_prefix(prefix).unwrap_or(&kv.key).to_vec(),
        value: kv.value.clone(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    }
}

fn cancel_error(response: &PbWatchResponse) -> Error {
    if response.compact_revision > 0 {
        Error::Compacted {
            requested: 0,
            compacted: response.compact_revision,
        }
    } else {
        Error::Backend {
            message: format!("etcd cancelled the watch: {}", response.cancel_reason),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::orders_progress_with_events;

    #[test]
    fn progress_is_trusted_only_on_etcd_versions_with_both_fixes() {
        for version in ["3.4.23", "3.4.30", "3.5.0", "3.5.12", "3.3.25"] {
            assert!(!orders_progress_with_events(version), "{version}");
        }
        for version in ["3.4.31", "3.5.13", "3.5.17", "3.6.0", "3.6.4-rc.1"] {
            assert!(orders_progress_with_events(version), "{version}");
        }
    }
}
