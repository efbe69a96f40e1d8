//! The Spanner driver's side of the log poller ([`crate::log::poller`]): the counters and
//! the rows of a window come from one read-only snapshot, so it can never see a counter
//! without its rows. Spanner has no notifications (and the emulator no change streams): other
//! servers' commits are found every `poll_interval`.

use async_trait::async_trait;

use super::reader::Reader;
use crate::log::poller::{LogSource, Window, POLL_WINDOW};
use crate::types::Revision;

#[async_trait]
impl LogSource for Reader {
    async fn read_after(&self, last: Revision) -> crate::error::Result<Window> {
        let (meta, events) = self.events(None, last, last + POLL_WINDOW).await?;
        Ok(Window {
            current: meta.revision,
            purged: meta.purged_revision,
            events,
        })
    }
}
