//! Keeping the index current: once both stores have listed, a new [`Records`] is built from
//! their snapshot and published on a watch channel, then again after every change of the
//! watched generation — but at most once per [`COALESCE`], so that a burst of events (a
//! rollout touching hundreds of EndpointSlices) costs one rebuild, not hundreds.
//!
//! Until the first build the channel holds [`Records::unready`], which answers names of the
//! zone SERVFAIL rather than a cacheable NXDOMAIN.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Records;
use crate::Watched;

/// The shortest time between two rebuilds.
pub const COALESCE: Duration = Duration::from_millis(50);

/// Publishes the index of `watched` for `cluster_domain`, rebuilt as it changes, until
/// `shutdown` (or until every receiver is dropped).
pub fn follow(
    watched: Watched,
    cluster_domain: String,
    shutdown: CancellationToken,
) -> watch::Receiver<Arc<Records>> {
    let (sender, receiver) = watch::channel(Arc::new(Records::unready(&cluster_domain)));
    tokio::spawn(async move {
        let mut changes = watched.changes.clone();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sender.closed() => return,
            _ = watched.ready() => {}
        }
        loop {
            let generation = *changes.borrow_and_update();
            let services = watched.services.state();
            let slices = watched.slices.state();
            let records =
                Records::build(&services, &slices, &cluster_domain).with_serial(serial(generation));
            tracing::debug!(
                generation,
                names = records.len(),
                "cluster DNS records rebuilt"
            );
            if sender.send(Arc::new(records)).is_err() {
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = sender.closed() => return,
                // The reflectors gone, receivers keep the last index.
                changed = changes.changed() => if changed.is_err() {
                    return;
                },
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(COALESCE) => {}
            }
        }
    });
    receiver
}

/// The SOA serial for a generation: it wraps around like serials do (RFC 1982).
fn serial(generation: u64) -> u32 {
    u32::try_from(generation % (u64::from(u32::MAX) + 1)).unwrap_or_default()
}
