//! Failing fast while the database server is down.
//!
//! Asked for a connection while the server refuses them, sqlx's pool keeps retrying until its
//! acquire timeout (the URL's `connect_timeout`, 30 s by default), so every request would hang
//! that long before failing. The breaker stands in front of the pools: when an acquire is slow
//! or a statement fails as unavailable, one probe connects directly (no pool, a short timeout
//! of its own). If the server refuses or does not answer, the breaker opens: every waiting and
//! every new acquire fails at once with `Unavailable` naming the reason, and the probe repeats
//! every [`PROBE_INTERVAL`] until a connection succeeds, which closes the breaker — so the
//! store is back within that interval of the server. A probe that connects changes nothing
//! (the slowness was load, not an outage). SQLite files are never down: their breaker is off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::any::AnyConnectOptions;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, ConnectOptions, Connection};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::translate;
use crate::error::{Error, Result};

/// An acquire slower than this makes the breaker probe the server.
const SUSPECT_AFTER: Duration = Duration::from_millis(300);
/// How often an open breaker probes; also the least time between two probes.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// How long one probe waits for a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct Breaker {
    options: Option<AnyConnectOptions>,
    probe_timeout: Duration,
    /// Why the server is down, while it is.
    down: watch::Sender<Option<String>>,
    probing: AtomicBool,
    last_probe: Mutex<Option<Instant>>,
    shutdown: CancellationToken,
}

impl Breaker {
    /// A breaker probing with `options`; `None` for a breaker that is never open (SQLite).
    pub fn new(
        options: Option<AnyConnectOptions>,
        connect_timeout: Duration,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Breaker {
            options,
            probe_timeout: connect_timeout.min(PROBE_TIMEOUT),
            down: watch::Sender::new(None),
            probing: AtomicBool::new(false),
            last_probe: Mutex::new(None),
            shutdown,
        })
    }

    fn unavailable(reason: &str) -> Error {
        Error::Unavailable {
            message: reason.to_string(),
            source: None,
        }
    }

    /// A connection from `pool`, or `Unavailable` at once while the server is down.
    pub async fn acquire(self: &Arc<Self>, pool: &AnyPool) -> Result<PoolConnection<Any>> {
        if self.options.is_none() {
            return pool.acquire().await.map_err(translate);
        }
        let mut down = self.down.subscribe();
        if let Some(reason) = down.borrow_and_update().as_deref() {
            return Err(Self::unavailable(reason));
        }
        let acquire = pool.acquire();
        tokio::pin!(acquire);
        let slow = tokio::time::sleep(SUSPECT_AFTER);
        tokio::pin!(slow);
        let mut suspected = false;
        loop {
            tokio::select! {
                result = &mut acquire => return result.map_err(translate),
                _ = &mut slow, if !suspected => {
                    suspected = true;
                    self.suspect();
                }
                changed = down.changed() => {
                    if changed.is_err() {
                        return Err(Error::Closed);
                    }
                    if let Some(reason) = down.borrow_and_update().as_deref() {
                        return Err(Self::unavailable(reason));
                    }
                }
            }
        }
    }

    /// Called with a request's error: an unavailable server is worth a probe.
    pub fn observe(self: &Arc<Self>, error: &Error) {
        if matches!(error, Error::Unavailable { .. }) {
            self.suspect();
        }
    }

    /// Starts a probe unless one is running or one ran within the probe interval.
    fn suspect(self: &Arc<Self>) {
        let Some(options) = self.options.clone() else {
            return;
        };
        {
            let mut last = self
                .last_probe
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if last.is_some_and(|at| at.elapsed() < PROBE_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let breaker = self.clone();
        tokio::spawn(async move {
            breaker.probe_until_up(options).await;
            breaker.probing.store(false, Ordering::Release);
        });
    }

    async fn probe_until_up(&self, options: AnyConnectOptions) {
        loop {
            let reason = match tokio::time::timeout(self.probe_timeout, options.connect()).await {
                Ok(Ok(connection)) => {
                    let _ = connection.close().await;
                    if self.down.send_replace(None).is_some() {
                        tracing::info!("the database answers again");
                    }
                    return;
                }
                Ok(Err(error)) => format!("the database refuses connections: {error}"),
                Err(_) => format!(
                    "the database did not accept a connection within {:?}",
                    self.probe_timeout
                ),
            };
            if self.down.send_replace(Some(reason.clone())).is_none() {
                tracing::warn!(%reason, "requests fail at once until the database is back");
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(PROBE_INTERVAL) => {}
            }
        }
    }
}
