//! The SQL backends' one event source: reads newly committed revisions from the log and
//! publishes them to the hub. It runs when poked (a local commit, or a PostgreSQL notification
//! from another process) and on a short interval as a safety net for missed notifications.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::reader::Reader;
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
}

impl Poller {
    /// Publishes every revision after `last`, forever.
    pub async fn run(self, mut last: Revision) {
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = self.poke.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
            if let Err(error) = self.catch_up(&mut last).await {
                tracing::warn!(%error, "reading the log for watchers failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
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
            self.hub.publish(committed);
            *last = upto;
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
