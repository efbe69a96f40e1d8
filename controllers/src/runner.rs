//! Runs one kube-runtime `Controller` the same way for every controller: its reconciles are
//! counted and timed by its [`Queue`], run in one tracing span each, retried with the queue's
//! per-key back-off when they fail, and stopped gracefully on shutdown.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Config, Controller};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::workqueue::Queue;

/// `namespace/name` (or `name`) of an object: its key in queues and expectations.
pub fn key_of<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// Counts each change of `changes` as an add of the key `key` maps it to (its own key, or its
/// owner's for an owned object).
pub fn counted<K, S>(
    changes: S,
    queue: Arc<Queue>,
    key: impl Fn(&K) -> Option<String> + Send + 'static,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Send + Sync + 'static,
    S: Stream<Item = Arc<K>> + Send + 'static,
{
    changes.map(move |object| {
        if let Some(key) = key(&object) {
            queue.added(&key);
        }
        object
    })
}

/// Runs `controller` with `reconcile` until `shutdown`, `concurrency` reconciles at a time.
pub async fn run<K, Ctx, F, Fut>(
    name: &'static str,
    controller: Controller<K>,
    context: Arc<Ctx>,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
    reconcile: F,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug + Unpin + Send + Sync,
    Ctx: Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    let timing = queue.clone();
    let reconcile = Arc::new(reconcile);
    let instrumented = move |object: Arc<K>, context: Arc<Ctx>| {
        let key = key_of(object.as_ref());
        let started = timing.started(&key);
        let span = tracing::info_span!("reconcile", controller = name, object = %key);
        let work = reconcile(object, context);
        let timing = timing.clone();
        async move {
            let result = work.await;
            timing.finished(&key, started, result.is_ok());
            result
        }
        .instrument(span)
    };
    let error_policy = move |object: Arc<K>, error: &Error, _: Arc<Ctx>| {
        let key = key_of(object.as_ref());
        let delay = queue.backoff(&key);
        if error.is_conflict() {
            tracing::debug!(controller = name, object = %key, %error, "conflict; retrying");
        } else {
            tracing::warn!(controller = name, object = %key, %error, ?delay, "reconcile failed; retrying");
        }
        Action::requeue(delay)
    };
    controller
        .with_config(Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(instrumented, error_policy, context)
        .for_each(|_| futures::future::ready(()))
        .await;
}
