//! The SQL backends' one event source: reads newly committed revisions from the log and
//! publishes them to the hub. It runs when poked (a local commit, or a PostgreSQL notification
//! from another process) and on a short interval as a safety net for missed notifications.
//!
//! Two things can stop it from delivering, and neither may go unnoticed by watchers:
//! - compaction of another process removed rows before this one read them (the meta row's
//!   `purged_revision` says so, read after the rows): every watch ends with `Compacted`, and
//!   clients re-list — this process's own compactions wait for its poller, so they never do this;
//! - the log stays unreadable (a lost database, a broken table): after `stall_timeout`, every
//!   watch ends with an `Unavailable` error instead of waiting forever.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::reader::Reader;
use crate::error::Error;
use crate::hub::Hub;
use crate::types::Revision;

/// Revisions read per poll query.
const POLL_WINDOW: Revision = 1000;

pub(crate) struct Poller {
    pub reader: Arc<Reader>,
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
    /// Publishes every revision after `last`, forever.
    pub async fn run(self, mut last: Revision) {
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = self.poke.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
            match self.catch_up(&mut last).await {
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

    async fn catch_up(&self, last: &mut Revision) -> crate::error::Result<()> {
        loop {
            // Revisions commit in order, so once the counter shows `current`, every row at or
            // below it is visible: the window below never has a hole.
            let current = self.reader.meta().await?.revision;
            if current <= *last {
                return Ok(());
            }
            let upto = current.min(*last + POLL_WINDOW);
            let committed = self.reader.events(None, *last, upto).await?;
            // Read after the rows: a purge that removed any of them was marked before.
            let purged = self.reader.meta().await?.purged_revision;
            if purged > *last + 1 {
                tracing::warn!(
                    revision = *last,
                    purged,
                    "another server's compaction removed revisions this one had not read; \
                     its watches end with Compacted and their clients re-list"
                );
                self.hub.purged_under_the_source(purged);
                *last = purged - 1;
                self.published.send_replace(*last);
                continue;
            }
            self.hub.publish(committed, upto);
            *last = upto;
            self.published.send_replace(upto);
        }
    }
}

/// Listens for other processes' commits on `channel` and pokes the poller; reconnects when the
/// connection drops (the poll interval covers the gap).
pub(crate) async fn listen(
    url: String,
    channel: String,
    poke: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        let connected = async {
            let mut listener = PgListener::connect(&url).await?;
            listener.listen(&channel).await?;
            loop {
                listener.recv().await?;
                poke.notify_one();
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            result = connected => {
                if let Err(error) = result {
                    tracing::warn!(%error, "postgres notification listener lost its connection; reconnecting");
                }
            }
        }
        poke.notify_one();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
