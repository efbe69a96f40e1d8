//! State an authorizer keeps in memory and the store keeps current: listed from the store at
//! start (before the server answers anything), then fed by one watch per key prefix, as
//! upstream's authorizers are fed by informers. A watch that ends (the store restarted, its
//! history was compacted) lists its prefix again. Readers take a read lock: no store round
//! trip per decision.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use rudder_storage::{EventKind, KeyRange, RangeRequest, Storage, WatchRequest};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::values::Values;

/// How long a failed watch waits before its prefix is listed again.
const RELIST_DELAY: Duration = Duration::from_secs(1);

/// What a followed state does with the store's keys.
pub trait Follows: Default + Send + Sync + 'static {
    /// Forgets everything under `prefix` (before it is listed again).
    fn clear(&mut self, prefix: &str);
    /// Applies changes (objects as the store's values decode), `None` for a deleted key.
    fn apply_all<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a serde_json::Value>)>,
    );
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
        values: Arc<Values>,
        prefixes: &'static [&'static str],
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> rudder_storage::Result<Arc<Self>> {
        let followed = Arc::new(Self {
            state: RwLock::new(T::default()),
        });
        for prefix in prefixes {
            let revision = followed.list(storage.as_ref(), &values, prefix).await?;
            tasks.spawn(followed.clone().follow(
                storage.clone(),
                values.clone(),
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
    async fn list(
        &self,
        storage: &dyn Storage,
        values: &Values,
        prefix: &str,
    ) -> rudder_storage::Result<i64> {
        let listed = storage
            .range(RangeRequest::new(KeyRange::prefix(
                prefix.as_bytes().to_vec(),
            )))
            .await?;
        let decoded: Vec<(String, Option<Value>)> = listed
            .kvs
            .iter()
            .map(|kv| decode(values, &kv.key, &kv.value))
            .collect();
        self.write(|state| {
            state.clear(prefix);
            state.apply_all(
                decoded
                    .iter()
                    .map(|(key, object)| (key.as_str(), object.as_ref())),
            );
        });
        Ok(listed.revision)
    }

    /// Applies every change under `prefix` after `revision`, listing again when the watch ends.
    async fn follow(
        self: Arc<Self>,
        storage: Arc<dyn Storage>,
        values: Arc<Values>,
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
                    let decoded: Vec<(String, Option<Value>)> = batch
                        .events
                        .iter()
                        .map(|event| match event.kind {
                            EventKind::Put => decode(&values, &event.kv.key, &event.kv.value),
                            EventKind::Delete => {
                                (String::from_utf8_lossy(&event.kv.key).into_owned(), None)
                            }
                        })
                        .collect();
                    for event in &batch.events {
                        revision = revision.max(event.kv.mod_revision);
                    }
                    self.write(|state| {
                        state.apply_all(
                            decoded
                                .iter()
                                .map(|(key, object)| (key.as_str(), object.as_ref())),
                        );
                    });
                    revision = revision.max(batch.revision);
                }
            }
            tracing::debug!(prefix, "an authorizer's watch ended; listing again");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RELIST_DELAY) => {}
            }
            match self.list(storage.as_ref(), &values, prefix).await {
                Ok(listed) => revision = listed,
                Err(error) => tracing::warn!(prefix, %error, "listing for an authorizer failed"),
            }
        }
    }
}

/// A stored value as an object; a value that cannot be read counts as absent (and is logged).
fn decode(values: &Values, key: &[u8], bytes: &[u8]) -> (String, Option<Value>) {
    let name = String::from_utf8_lossy(key).into_owned();
    let object = match values.decode_key(key, bytes) {
        Some(Ok(object)) => Some(object),
        Some(Err(error)) => {
            tracing::warn!(key = name, %error, "a value an authorizer follows cannot be read; ignored");
            None
        }
        None => serde_json::from_slice(bytes).ok(),
    };
    (name, object)
}
