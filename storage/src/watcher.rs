//! Turns a hub subscription into a client's watch stream: catch up from history when the start
//! revision is older than the hub's ring, then follow the hub live, never skipping or repeating
//! a revision.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::hub::{select, Committed, Hub, Receiver, Subscription};
use crate::interface::WatchStream;
use crate::types::{KeyRange, Revision, WatchBatch, WatchRequest};

/// How many revisions one history read covers.
const HISTORY_WINDOW: Revision = 1000;

/// A backend's committed log, read back for watches that start in the past.
#[async_trait]
pub(crate) trait History: Send + Sync + 'static {
    /// The events touching `range` at revisions in `(after, upto]`, in order, with prev_kv.
    /// Fails with [`Error::Compacted`] when `after + 1` is below the compacted revision.
    async fn events(
        &self,
        range: &KeyRange,
        after: Revision,
        upto: Revision,
    ) -> Result<Vec<Committed>>;
}

enum Phase {
    CatchingUp { next: Revision },
    Live { receiver: Receiver },
    Done,
}

struct WatchState {
    phase: Phase,
    /// Progress was requested and not yet answered.
    progress_pending: bool,
    progress: Arc<Notify>,
    hub: Arc<Hub>,
    history: Arc<dyn History>,
    range: KeyRange,
    prev_kv: bool,
}

/// A watch stream over `hub` that starts at `from` (> 0).
pub(crate) fn watch_stream(
    hub: Arc<Hub>,
    history: Arc<dyn History>,
    request: WatchRequest,
    from: Revision,
) -> WatchStream {
    let progress = Arc::new(Notify::new());
    let state = WatchState {
        phase: Phase::CatchingUp { next: from },
        progress_pending: false,
        progress: progress.clone(),
        hub,
        history,
        range: request.range,
        prev_kv: request.prev_kv,
    };
    let batches = futures::stream::unfold(state, |mut state| async move {
        let item = next_batch(&mut state).await?;
        Some((item, state))
    });
    WatchStream::new(Box::pin(batches), progress)
}

async fn next_batch(state: &mut WatchState) -> Option<Result<WatchBatch>> {
    loop {
        match &mut state.phase {
            Phase::Done => return None,
            Phase::CatchingUp { next } => {
                let next = *next;
                match state.hub.subscribe(&state.range, next, state.prev_kv) {
                    Err(error) => return finish(state, error),
                    Ok(Subscription::Live { initial, receiver }) => {
                        state.phase = Phase::Live { receiver };
                        if !initial.is_empty() {
                            let revision =
                                initial.last().map_or(next, |event| event.kv.mod_revision);
                            return Some(Ok(WatchBatch {
                                events: initial,
                                revision,
                            }));
                        }
                    }
                    Ok(Subscription::NeedHistory { upto }) => {
                        let window_end = upto.min(next + HISTORY_WINDOW - 1);
                        let committed = match state
                            .history
                            .events(&state.range, next - 1, window_end)
                            .await
                        {
                            Ok(committed) => committed,
                            Err(error) => return finish(state, error),
                        };
                        state.phase = Phase::CatchingUp {
                            next: window_end + 1,
                        };
                        let events: Vec<_> = committed
                            .iter()
                            .flat_map(|c| select(&c.events, &state.range, state.prev_kv))
                            .collect();
                        if !events.is_empty() {
                            return Some(Ok(WatchBatch {
                                events,
                                revision: window_end,
                            }));
                        }
                    }
                }
            }
            Phase::Live { receiver } => {
                if state.progress_pending {
                    if let Some(revision) = state.hub.progress(receiver) {
                        state.progress_pending = false;
                        return Some(Ok(WatchBatch {
                            events: Vec::new(),
                            revision,
                        }));
                    }
                }
                let received = tokio::select! {
                    biased;
                    received = receiver.batches.recv() => received,
                    _ = state.progress.notified() => {
                        state.progress_pending = true;
                        continue;
                    }
                };
                match received {
                    Some(batch) => return Some(Ok(batch)),
                    None => {
                        let error = if receiver.lagged.load(Ordering::SeqCst) {
                            Error::WatcherTooSlow("its event queue overflowed".into())
                        } else {
                            Error::Closed
                        };
                        return finish(state, error);
                    }
                }
            }
        }
    }
}

fn finish(state: &mut WatchState, error: Error) -> Option<Result<WatchBatch>> {
    state.phase = Phase::Done;
    Some(Err(error))
}
