//! Work a server runs in the background for a request (a proxied connection, a spliced
//! upgrade): tracked by the server's task tracker, so `Running::wait` waits for it, and cut
//! short when the server shuts down.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a server's background work runs.
#[derive(Clone, Debug)]
pub struct Background {
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl Background {
    pub fn new(tasks: TaskTracker, shutdown: CancellationToken) -> Self {
        Self { tasks, shutdown }
    }

    /// Runs `work` until it ends or the server shuts down.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = work => {}
            }
        });
    }
}
