//! Turns a hub subscription into a client's watch stream: catch up from history when the start
//! revision is older than the hub's ring (or the watch fell behind the hub's queue bound), then
//! follow the hub live, never skipping or repeating a revision.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::hub::{select, Committed, Ended, Hub, Receiver, Subscription};
use crate::interface::WatchStream;
use crate::types::{KeyRange, Revision, WatchBatch, WatchRequest};

/// How many revisions one history read covers.
const HISTORY_WINDOW: Revision = 1000;
/// At most this many queued revisions go into one batch for the client.
const REVISIONS_PER_BATCH: usize = 512;

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

/// Where a watch stands.
enum Phase {
    /// Reading the log from `next` on (the hub's ring does not reach back that far).
    CatchingUp { next: Revision },
    /// Subscribed: `pending` holds revisions taken from the hub and not yet handed out.
    Live {
        pending: VecDeque<Arc<Committed>>,
        receiver: Receiver,
    },
    /// Ended (after an error was yielded).
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
                match state.hub.subscribe(&state.range, next) {
                    Err(error) => return finish(state, error),
                    Ok(Subscription::Live { initial, receiver }) => {
                        state.phase = Phase::Live {
                            pending: initial.into(),
                            receiver,
                        };
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
                            .flat_map(|c| select(c, &state.range, state.prev_kv))
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
            Phase::Live { pending, receiver } => {
                if state.progress_pending && pending.is_empty() {
                    if let Some(revision) = state.hub.progress(receiver) {
                        state.progress_pending = false;
                        return Some(Ok(WatchBatch {
                            events: Vec::new(),
                            revision,
                        }));
                    }
                }
                if pending.is_empty() {
                    let received = tokio::select! {
                        biased;
                        received = receiver.recv() => received,
                        _ = state.progress.notified() => {
                            state.progress_pending = true;
                            continue;
                        }
                    };
                    match received {
                        Ok(committed) => pending.push_back(committed),
                        Err(Ended::Behind { resume_from }) => {
                            // Too far behind for the hub's queue: read the rest from the log.
                            state.phase = Phase::CatchingUp { next: resume_from };
                            continue;
                        }
                        Err(Ended::Failed(error)) => return finish(state, error),
                    }
                }
                while pending.len() < REVISIONS_PER_BATCH {
                    match receiver.try_recv() {
                        Some(committed) => pending.push_back(committed),
                        None => break,
                    }
                }
                let mut events = Vec::new();
                let mut revision = 0;
                for committed in pending.drain(..) {
                    events.extend(select(&committed, &state.range, state.prev_kv));
                    revision = committed.revision;
                }
                if !events.is_empty() {
                    return Some(Ok(WatchBatch { events, revision }));
                }
            }
        }
    }
}

fn finish(state: &mut WatchState, error: Error) -> Option<Result<WatchBatch>> {
    state.phase = Phase::Done;
    Some(Err(error))
}
