//! The SQL engine's side of the log poller ([`crate::log::poller`]): how it reads a window of
//! the log, and PostgreSQL's notifications from other processes' commits, which poke it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::reader::Reader;
use crate::log::poller::{Handoffs, LogSource, Window, POLL_WINDOW};
use crate::types::Revision;

#[async_trait]
impl LogSource for Reader {
    async fn read_after(&self, last: Revision) -> crate::error::Result<Window> {
        let current = self.meta().await?.revision;
        if current <= last {
            return Ok(Window {
                current,
                purged: 0,
                events: Vec::new(),
            });
        }
        let upto = current.min(last + POLL_WINDOW);
        let events = self.events(None, last, upto).await?;
        // Read after the rows: a purge that removed any of them was marked before.
        let purged = self.meta().await?.purged_revision;
        Ok(Window {
            current,
            purged,
            events,
        })
    }
}

/// Listens for other processes' commits on `channel`, announces the revision each one carries
/// and pokes the poller; reconnects when the connection drops (the poll interval covers the
/// gap). This process's own commits come back too; the poller has them already.
pub(crate) async fn listen(
    url: String,
    channel: String,
    handoffs: Arc<Handoffs>,
    poke: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        let connected = async {
            let mut listener = PgListener::connect(&url).await?;
            listener.listen(&channel).await?;
            loop {
                let notification = listener.recv().await?;
                let news = match notification.payload().parse::<Revision>() {
                    Ok(revision) => handoffs.announce(revision),
                    // Another version's payload: the poller reads the log.
                    Err(_) => {
                        handoffs.request_read();
                        true
                    }
                };
                if news {
                    poke.notify_one();
                }
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
        // Commits may have gone unannounced while disconnected.
        handoffs.request_read();
        poke.notify_one();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
