//! State an authorizer keeps in memory and the store keeps current: listed from the store at
//! start (before the server answers anything), then fed by one watch per key prefix, as
//! upstream's authorizers are fed by informers. A watch that ends (the store restarted, its
//! history was compacted) lists its prefix again. Readers take a read lock: no store round
//! trip per decision.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use rudder_storage::{EventKind, KeyRange, RangeRequest, Storage, WatchRequest};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a failed watch waits before its prefix is listed again.
const RELIST_DELAY: Duration = Duration::from_secs(1);

/// What a followed state does with the store's keys.
pub trait Follows: Default + Send + Sync + 'static {
    /// Forgets everything under `prefix` (before it is listed again).
    fn clear(&mut self, prefix: &str);
    /// Applies changes, `None` for a deleted key.
    fn apply_all<'a>(&mut self, changes: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>);
}

/// A state and the watches that keep it current.
#[derive(Default)]
pub struct Followed<T> {
    state: RwLock<T>,
}

impl<T: Follows> Followed<T> {
    /// Lists `prefixes`, then keeps them current on `tasks` until `shutdown`.
    pub async fn start(
        storage: Arc<dyn Storage>,
        prefixes: &'static [&'static str],
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> rudder_storage::Result<Arc<Self>> {
        let followed = Arc::new(Self {
            state: RwLock::new(T::default()),
        });
        for prefix in prefixes {
            let revision = followed.list(storage.as_ref(), prefix).await?;
            tasks.spawn(followed.clone().follow(
                storage.clone(),
                prefix,
                revision,
                shutdown.clone(),
            ));
        }
        Ok(followed)
    }

    /// Runs `judge` on the current state.
    pub fn read<R>(&self, judge: impl FnOnce(&T) -> R) -> R {
        match self.state.read() {
            Ok(state) => judge(&state),
            Err(poisoned) => judge(&poisoned.into_inner()),
        }
    }

    fn write(&self, change: impl FnOnce(&mut T)) {
        match self.state.write() {
            Ok(mut state) => change(&mut state),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }

    /// Replaces what the state holds under `prefix` with the store's; returns the revision read.
    async fn list(&self, storage: &dyn Storage, prefix: &str) -> rudder_storage::Result<i64> {
        let listed = storage
            .range(RangeRequest::new(KeyRange::prefix(
                prefix.as_bytes().to_vec(),
            )))
            .await?;
        let keys: Vec<String> = listed
            .kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect();
        self.write(|state| {
            state.clear(prefix);
            state.apply_all(
                keys.iter()
                    .zip(&listed.kvs)
                    .map(|(key, kv)| (key.as_str(), Some(kv.value.as_slice()))),
            );
        });
        Ok(listed.revision)
    }

    /// Applies every change under `prefix` after `revision`, listing again when the watch ends.
    async fn follow(
        self: Arc<Self>,
        storage: Arc<dyn Storage>,
        prefix: &'static str,
        mut revision: i64,
        shutdown: CancellationToken,
    ) {
        loop {
            let request = WatchRequest::new(KeyRange::prefix(prefix.as_bytes().to_vec()))
                .from_revision(revision + 1);
            if let Ok(mut stream) = storage.watch(request).await {
                loop {
                    let batch = tokio::select! {
                        () = shutdown.cancelled() => return,
                        batch = stream.next() => batch,
                    };
                    let Some(Ok(batch)) = batch else { break };
                    let keys: Vec<String> = batch
                        .events
                        .iter()
                        .map(|event| String::from_utf8_lossy(&event.kv.key).into_owned())
                        .collect();
                    for event in &batch.events {
                        revision = revision.max(event.kv.mod_revision);
                    }
                    self.write(|state| {
                        state.apply_all(keys.iter().zip(&batch.events).map(|(key, event)| {
                            let value =
                                (event.kind == EventKind::Put).then_some(event.kv.value.as_slice());
                            (key.as_str(), value)
                        }));
                    });
                    revision = revision.max(batch.revision);
                }
            }
            tracing::debug!(prefix, "an authorizer's watch ended; listing again");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RELIST_DELAY) => {}
            }
            match self.list(storage.as_ref(), prefix).await {
                Ok(listed) => revision = listed,
                Err(error) => tracing::warn!(prefix, %error, "listing for an authorizer failed"),
            }
        }
    }
}
