//! The RBAC policy in memory: listed from the store at start (before the server answers
//! anything) and kept current by one watch per RBAC prefix, as upstream's RBAC authorizer is
//! fed by informers. A watch that ends (the store restarted, its history was compacted) is
//! listed again. Authorization reads the policy under a read lock: no store round trip.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use rudder_storage::{EventKind, KeyRange, RangeRequest, Storage, WatchRequest};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Policy, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS};

/// How long a failed watch waits before the prefix is listed again.
const RELIST_DELAY: Duration = Duration::from_secs(1);

/// The policy, shared by the authorizer and the watches that keep it current.
#[derive(Default)]
pub struct PolicyCache {
    policy: RwLock<Policy>,
}

impl PolicyCache {
    /// Lists the four RBAC prefixes, then keeps them current on `tasks` until `shutdown`.
    pub async fn start(
        storage: Arc<dyn Storage>,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> rudder_storage::Result<Arc<Self>> {
        let cache = Arc::new(Self::default());
        for prefix in [CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS] {
            let revision = cache.list(storage.as_ref(), prefix).await?;
            tasks.spawn(
                cache
                    .clone()
                    .follow(storage.clone(), prefix, revision, shutdown.clone()),
            );
        }
        Ok(cache)
    }

    /// Runs `judge` on the current policy.
    pub fn read<T>(&self, judge: impl FnOnce(&Policy) -> T) -> T {
        match self.policy.read() {
            Ok(policy) => judge(&policy),
            Err(poisoned) => judge(&poisoned.into_inner()),
        }
    }

    fn write(&self, change: impl FnOnce(&mut Policy)) {
        match self.policy.write() {
            Ok(mut policy) => change(&mut policy),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }

    /// Replaces what the cache holds under `prefix` with the store's; returns the revision read.
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
        self.write(|policy| {
            policy.clear(prefix);
            policy.apply_all(
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
                    self.write(|policy| {
                        policy.apply_all(keys.iter().zip(&batch.events).map(|(key, event)| {
                            let value =
                                (event.kind == EventKind::Put).then_some(event.kv.value.as_slice());
                            (key.as_str(), value)
                        }));
                    });
                    revision = revision.max(batch.revision);
                }
            }
            tracing::debug!(prefix, "the RBAC watch ended; listing again");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RELIST_DELAY) => {}
            }
            match self.list(storage.as_ref(), prefix).await {
                Ok(listed) => revision = listed,
                Err(error) => tracing::warn!(prefix, %error, "listing RBAC objects failed"),
            }
        }
    }
}
