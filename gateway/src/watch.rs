//! The Watch service: many watches per stream, each a storage watch forwarded by its own task.
//!
//! ```text
//!  client ──WatchRequest──▶ stream loop ── create ──▶ storage.watch ──▶ forwarder task ──┐
//!                              │  cancel: stop the forwarder, answer canceled            │
//!                              │  progress request: ask every forwarder, answer with the │
//!                              │  lowest revision once all have delivered up to it       ▼
//!  client ◀────────────────────┴──────────────── responses (one channel) ◀──────────────┘
//! ```
//!
//! Events of one watch keep their order; a progress response (watch id -1) follows every event
//! at or below its revision on every watch of the stream, which is what clients rely on. A
//! watch the store ends (compacted history, a closed store) is cancelled toward the client and
//! forgotten by the stream, so later progress requests do not wait for it. As in etcd,
//! automatic watch ids count up and are never reused on a stream.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use etcd_client::proto::{PbWatchRequest, PbWatchRequestUnion, PbWatchResponse, PbWatchService};
use futures::{Stream, StreamExt};
use rudder_storage::{Error, EventKind, WatchRequest, WatchStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::convert;
use crate::Gateway;

type Outbound = mpsc::Sender<Result<PbWatchResponse, Status>>;

/// A progress report from a forwarder: everything of `watch` up to `revision` was sent.
struct Progress {
    watch: i64,
    revision: i64,
}

/// One watch of a stream.
struct ActiveWatch {
    /// Tells this watch from a later one that reuses its (client-chosen) id.
    serial: u64,
    task: JoinHandle<()>,
    request_progress: mpsc::Sender<()>,
}

/// What a watch asked for besides its range.
struct Options {
    id: i64,
    serial: u64,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
}

#[tonic::async_trait]
impl PbWatchService for Gateway {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<Streaming<PbWatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let inbound = request.into_inner();
        let (outbound, receiver) = mpsc::channel(256);
        tokio::spawn(self.clone().run_stream(inbound, outbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

impl Gateway {
    async fn run_stream(self, mut inbound: Streaming<PbWatchRequest>, outbound: Outbound) {
        let mut watches: HashMap<i64, ActiveWatch> = HashMap::new();
        let mut next_id = 0i64;
        let (progress_sender, mut progress_reports) = mpsc::channel::<Progress>(64);
        // Watches whose forwarder ended because the store ended them.
        let (ended_sender, mut ended) = mpsc::unbounded_channel::<(i64, u64)>();
        let mut serial = 0u64;
        // The watches a pending progress request still waits for, and the lowest revision so far.
        let mut round: Option<(Vec<i64>, i64)> = None;
        loop {
            tokio::select! {
                message = inbound.message() => {
                    let request = match message {
                        Ok(Some(request)) => request,
                        _ => break,
                    };
                    match request.request_union {
                        Some(PbWatchRequestUnion::CreateRequest(create)) => {
                            let range = match convert::watch_range(&create.key, &create.range_end) {
                                Ok(range) => range,
                                Err(reason) => {
                                    // As etcd: created and cancelled at once, with no id.
                                    let revision = self.current_revision().await.unwrap_or(0);
                                    let refused = PbWatchResponse {
                                        header: self.header(revision), watch_id: -1, created: true, canceled: true,
                                        cancel_reason: reason.into(),
                                        ..Default::default()
                                    };
                                    if outbound.send(Ok(refused)).await.is_err() { break; }
                                    continue;
                                }
                            };
                            let id = if create.watch_id != 0 { create.watch_id } else {
                                while watches.contains_key(&next_id) { next_id += 1; }
                                next_id += 1;
                                next_id - 1
                            };
                            if watches.contains_key(&id) {
                                let refused = PbWatchResponse {
                                    header: self.header(0), watch_id: id, created: true, canceled: true,
                                    cancel_reason: "etcdserver: duplicate watch ID provided on the WatchStream".into(),
                                    ..Default::default()
                                };
                                if outbound.send(Ok(refused)).await.is_err() { break; }
                                continue;
                            }
                            serial += 1;
                            let options = Options {
                                id,
                                serial,
                                no_put: create.filters.contains(&0),
                                no_delete: create.filters.contains(&1),
                                progress_notify: create.progress_notify,
                            };
                            let storage_request = WatchRequest { range, start_revision: create.start_revision, prev_kv: create.prev_kv };
                            let links = Links { outbound: &outbound, progress: &progress_sender, ended: &ended_sender };
                            if let Some(watch) = self.create(storage_request, options, links).await {
                                watches.insert(id, watch);
                            }
                        }
                        Some(PbWatchRequestUnion::CancelRequest(cancel)) => {
                            if let Some(watch) = watches.remove(&cancel.watch_id) {
                                watch.task.abort();
                                let revision = self.current_revision().await.unwrap_or(0);
                                let response = PbWatchResponse {
                                    header: self.header(revision), watch_id: cancel.watch_id, canceled: true,
                                    ..Default::default()
                                };
                                if outbound.send(Ok(response)).await.is_err() { break; }
                            }
                            if let Some((waiting, _)) = round.as_mut() { waiting.retain(|w| *w != cancel.watch_id); }
                        }
                        Some(PbWatchRequestUnion::ProgressRequest(_)) => {
                            let current = self.current_revision().await.unwrap_or(0);
                            let waiting: Vec<i64> = watches.keys().copied().collect();
                            for watch in watches.values() { let _ = watch.request_progress.try_send(()); }
                            round = Some((waiting, current));
                        }
                        None => {}
                    }
                }
                Some((id, serial)) = ended.recv() => {
                    if watches.get(&id).is_some_and(|watch| watch.serial == serial) {
                        watches.remove(&id);
                        if let Some((waiting, _)) = round.as_mut() { waiting.retain(|w| *w != id); }
                    }
                }
                Some(report) = progress_reports.recv() => {
                    if let Some((waiting, lowest)) = round.as_mut() {
                        if waiting.contains(&report.watch) {
                            waiting.retain(|w| *w != report.watch);
                            *lowest = (*lowest).min(report.revision);
                        }
                    }
                }
            }
            if let Some((waiting, revision)) = &round {
                if waiting.is_empty() {
                    let response = PbWatchResponse {
                        header: self.header(*revision),
                        watch_id: -1,
                        ..Default::default()
                    };
                    if outbound.send(Ok(response)).await.is_err() {
                        break;
                    }
                    round = None;
                }
            }
        }
        for watch in watches.into_values() {
            watch.task.abort();
        }
    }

    /// Opens a storage watch and its forwarder; answers `created` (or the refusal) first.
    async fn create(
        &self,
        request: WatchRequest,
        options: Options,
        links: Links<'_>,
    ) -> Option<ActiveWatch> {
        let Links {
            outbound,
            progress,
            ended,
        } = links;
        let (id, serial) = (options.id, options.serial);
        let revision = self.current_revision().await.unwrap_or(0);
        let created = PbWatchResponse {
            header: self.header(revision),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        let stream = match self.store.watch(request).await {
            Ok(stream) => stream,
            Err(error) => {
                // As etcd: the watch is created, then cancelled with the reason.
                let mut canceled = PbWatchResponse {
                    header: created.header,
                    watch_id: id,
                    ..Default::default()
                };
                apply_cancel(&mut canceled, &error);
                if outbound.send(Ok(created)).await.is_ok() {
                    let _ = outbound.send(Ok(canceled)).await;
                }
                return None;
            }
        };
        if outbound.send(Ok(created)).await.is_err() {
            return None;
        }
        let (request_progress, progress_requests) = mpsc::channel(4);
        let forwarder = Forwarder {
            gateway: self.clone(),
            options,
            outbound: outbound.clone(),
            progress: progress.clone(),
            ended: ended.clone(),
        };
        let task = tokio::spawn(forwarder.run(stream, progress_requests));
        Some(ActiveWatch {
            serial,
            task,
            request_progress,
        })
    }
}

/// Fills in why a watch ends, as etcd says it.
fn apply_cancel(response: &mut PbWatchResponse, error: &Error) {
    response.canceled = true;
    match error {
        // As etcd: the compact revision tells why; the reason stays empty.
        Error::Compacted { compacted, .. } => response.compact_revision = *compacted,
        other => response.cancel_reason = format!("etcdserver: {other}"),
    }
}

/// What a new watch's forwarder reports to: the client, progress rounds, and the stream loop
/// (which forgets a watch the store ended).
struct Links<'a> {
    outbound: &'a Outbound,
    progress: &'a mpsc::Sender<Progress>,
    ended: &'a mpsc::UnboundedSender<(i64, u64)>,
}

/// Forwards one storage watch to the client.
struct Forwarder {
    gateway: Gateway,
    options: Options,
    outbound: Outbound,
    progress: mpsc::Sender<Progress>,
    ended: mpsc::UnboundedSender<(i64, u64)>,
}

impl Forwarder {
    async fn run(self, mut stream: WatchStream, mut progress_requests: mpsc::Receiver<()>) {
        let interval = self.gateway.identity.progress_notify_interval;
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + interval,
            interval.max(Duration::from_millis(10)),
        );
        // Why the next progress batch was asked for.
        let (mut for_request, mut for_notify) = (false, false);
        loop {
            tokio::select! {
                Some(()) = progress_requests.recv() => { for_request = true; stream.request_progress(); }
                _ = ticker.tick(), if self.options.progress_notify => { for_notify = true; stream.request_progress(); }
                item = stream.next() => {
                    let batch = match item {
                        Some(Ok(batch)) => batch,
                        Some(Err(error)) => {
                            let mut response = PbWatchResponse { header: self.gateway.header(0), watch_id: self.options.id, ..Default::default() };
                            apply_cancel(&mut response, &error);
                            let _ = self.outbound.send(Ok(response)).await;
                            let _ = self.ended.send((self.options.id, self.options.serial));
                            return;
                        }
                        None => {
                            let _ = self.ended.send((self.options.id, self.options.serial));
                            return;
                        }
                    };
                    if batch.events.is_empty() {
                        if for_notify {
                            for_notify = false;
                            let response = PbWatchResponse { header: self.gateway.header(batch.revision), watch_id: self.options.id, ..Default::default() };
                            if self.outbound.send(Ok(response)).await.is_err() { return; }
                        }
                        if for_request {
                            for_request = false;
                            let _ = self.progress.send(Progress { watch: self.options.id, revision: batch.revision }).await;
                        }
                        continue;
                    }
                    let events: Vec<_> = batch
                        .events
                        .iter()
                        .filter(|event| match event.kind {
                            EventKind::Put => !self.options.no_put,
                            EventKind::Delete => !self.options.no_delete,
                        })
                        .map(convert::event)
                        .collect();
                    if events.is_empty() { continue; }
                    let response = PbWatchResponse {
                        header: self.gateway.header(batch.revision),
                        watch_id: self.options.id,
                        events,
                        ..Default::default()
                    };
                    if self.outbound.send(Ok(response)).await.is_err() { return; }
                }
            }
        }
    }
}
