//! The log drivers' one event source: reads newly committed revisions from the log and
//! publishes them to the hub. It runs when poked (a local commit, or a PostgreSQL notification
//! from another process) and on a short interval for commits it was not told about.
//!
//! The writer of this process already holds what its own commits wrote, so it hands them over
//! ([`Handoffs`]) and the poller publishes them without reading them back — unless revisions of
//! another process came first, which only the log has. A local write thus reaches local
//! watchers without a query after its commit.
//!
//! Two things can stop it from delivering, and neither may go unnoticed by watchers:
//! - compaction of another process removed rows before this one read them (the meta row's
//!   `purged_revision` says so, read no earlier than the rows): every watch ends with
//!   `Compacted`, and clients re-list — this process's own compactions wait for its poller, so
//!   they never do this;
//! - the log stays unreadable (a lost database, a broken table): after `stall_timeout`, every
//!   watch ends with an `Unavailable` error instead of waiting forever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::hub::{Committed, Hub};
use crate::types::Revision;

/// Revisions read per poll.
pub(crate) const POLL_WINDOW: Revision = 1000;

/// What one read of the log after `last` found.
pub(crate) struct Window {
    /// The store's revision.
    pub current: Revision,
    /// Compaction may have removed rows below this revision (read no earlier than `events`).
    pub purged: Revision,
    /// The revisions in `(last, upto]`, where `upto = min(current, last + POLL_WINDOW)`.
    pub events: Vec<Committed>,
}

/// A driver's log, as the poller reads it.
#[async_trait]
pub(crate) trait LogSource: Send + Sync + 'static {
    /// The counters and the events of the revisions after `last` (at most `POLL_WINDOW`); no
    /// events when `current <= last`. Revisions commit in order, so once the counter shows
    /// `current`, every row at or below it must be visible: the window never has a hole.
    async fn read_after(&self, last: Revision) -> Result<Window>;
}

/// At most this many commits wait to be handed over; past that (a poller that cannot keep up
/// or is failing), the queue is dropped and the poller reads those revisions from the log.
const MAX_HANDOFFS: usize = 256;

/// One local commit's revisions `(after, upto]` with every event they hold.
struct Handoff {
    after: Revision,
    upto: Revision,
    events: Vec<Committed>,
}

/// The writer's commits, handed to the poller in commit order.
#[derive(Default)]
pub(crate) struct Handoffs {
    queue: Mutex<VecDeque<Handoff>>,
    /// The highest revision another process is known to have committed (PostgreSQL's
    /// notifications carry it; this process's own come back too and are then nothing new).
    announced: AtomicI64,
    /// The highest revision this process's writer has sent a commit for: a notification up
    /// to it is this process's own, whose events come as a handoff.
    committing: AtomicI64,
    /// Something may have been committed unannounced (a lost notification connection, a
    /// commit whose outcome the writer never learnt).
    read_requested: AtomicBool,
}

impl Handoffs {
    /// Hands over the committed revisions `(after, upto]`; `events` must hold every event of
    /// them, grouped by revision in order (the poller trusts it instead of the log).
    pub fn push(&self, after: Revision, upto: Revision, events: Vec<Committed>) {
        let mut queue = self.lock();
        if queue.len() >= MAX_HANDOFFS {
            queue.clear();
        }
        queue.push_back(Handoff {
            after,
            upto,
            events,
        });
    }

    /// The next commit that continues from `last`, dropping those already published. `None`
    /// when the queue is empty or the next one starts later (the log has what is between).
    fn next_after(&self, last: Revision) -> Option<Handoff> {
        let mut queue = self.lock();
        while queue.front().is_some_and(|handoff| handoff.upto <= last) {
            queue.pop_front();
        }
        if queue.front()?.after <= last {
            return queue.pop_front();
        }
        None
    }

    /// The writer is about to commit revisions up to `upto`.
    pub fn committing(&self, upto: Revision) {
        self.committing.fetch_max(upto, Ordering::SeqCst);
    }

    /// Some process committed up to `revision` (a notification's payload). Returns whether
    /// that is news to the poller: not when it is this process's own commit, which the writer
    /// hands over (a notification can arrive before the writer has learnt its commit
    /// succeeded). Another process's commit below one of ours is found anyway: the handoff
    /// then does not follow on from what the poller has, and it reads the log.
    pub fn announce(&self, revision: Revision) -> bool {
        if revision <= self.committing.load(Ordering::SeqCst) {
            return false;
        }
        self.announced.fetch_max(revision, Ordering::Relaxed);
        true
    }

    /// The poller's next run reads the log, whatever it was handed.
    pub fn request_read(&self) {
        self.read_requested.store(true, Ordering::Relaxed);
    }

    fn announced(&self) -> Revision {
        self.announced.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Handoff>> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub(crate) struct Poller {
    pub source: Arc<dyn LogSource>,
    /// This process's commits, published without reading them back.
    pub handoffs: Arc<Handoffs>,
    pub hub: Arc<Hub>,
    pub poke: Arc<Notify>,
    pub interval: Duration,
    pub shutdown: CancellationToken,
    /// How long the log may stay unreadable before watches end with an error.
    pub stall_timeout: Duration,
    /// The last revision published, for the writer (which purges only below it).
    pub published: watch::Sender<Revision>,
}

impl Poller {
    /// Publishes every revision after `last`, until shutdown.
    pub async fn run(self, mut last: Revision) {
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let ticked = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = self.poke.notified() => false,
                _ = tokio::time::sleep(self.interval) => true,
            };
            match self.catch_up(&mut last, ticked).await {
                Ok(()) => failing_since = None,
                Err(error) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    tracing::warn!(%error, "reading the log for watchers failed; retrying");
                    if since.elapsed() >= self.stall_timeout {
                        self.hub.fail_all(&Error::Unavailable {
                            message: format!(
                                "the watch log could not be read for {:?}: {error}",
                                self.stall_timeout
                            ),
                            source: None,
                        });
                        failing_since = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // Try again soon, not only at the next poke.
                    self.poke.notify_one();
                }
            }
        }
    }

    /// Publishes what is known to be committed after `last`: the writer's handoffs, and what
    /// only the log has — read when no handoff explains the wake-up, when another process
    /// announced a later revision, and at every interval tick (`ticked`).
    async fn catch_up(&self, last: &mut Revision, ticked: bool) -> Result<()> {
        let mut handed_over = false;
        let mut must_read = ticked || self.handoffs.read_requested.swap(false, Ordering::Relaxed);
        // The store's revision as the last read of the log found it.
        let mut seen_current = 0;
        loop {
            if let Some(handoff) = self.handoffs.next_after(*last) {
                // The hub skips revisions it already has (a window may have ended mid-commit).
                self.hub.publish(handoff.events, handoff.upto);
                *last = handoff.upto;
                self.published.send_replace(*last);
                handed_over = true;
                continue;
            }
            let known = seen_current.max(self.handoffs.announced());
            if handed_over && !must_read && known <= *last {
                // Nothing else is known to be committed: what other processes commit next
                // pokes the poller (a notification) or waits for the interval.
                return Ok(());
            }
            must_read = false;
            let window = self.source.read_after(*last).await?;
            seen_current = window.current;
            if window.current <= *last {
                return Ok(());
            }
            if window.purged > *last + 1 {
                tracing::warn!(
                    revision = *last,
                    purged = window.purged,
                    "another server's compaction removed revisions this one had not read; \
                     its watches end with Compacted and their clients re-list"
                );
                self.hub.purged_under_the_source(window.purged);
                *last = window.purged - 1;
                self.published.send_replace(*last);
                continue;
            }
            let upto = window.current.min(*last + POLL_WINDOW);
            self.hub.publish(window.events, upto);
            *last = upto;
            self.published.send_replace(upto);
        }
    }
}
