//! `apiserver_storage_objects{resource}` for every resource in the store, as kube-apiserver
//! counts it: one loop per server that, every `--etcd-count-metric-poll-period` (1 min),
//! asks the store how many keys each resource has — one count-only range per storage prefix,
//! no values read — and sets `-1` for a resource whose count failed. Built-in resources are
//! counted from the start, custom resources while their CRD is served (their series goes
//! with the CRD). Between passes the watch cache keeps the count of the resources it holds
//! current ([`super::metrics`]).
//!
//! The loop ends with the server's shutdown token.

use std::collections::HashSet;
use std::time::Duration;

use rudder_storage::{KeyRange, RangeRequest, Storage};

use super::metrics::{resource, WatchMetrics};
use super::Registry;
use crate::catalog::{self, ResourceInfo};

/// How often objects are counted when not told (upstream's `--etcd-count-metric-poll-period`).
pub const DEFAULT_COUNT_PERIOD: Duration = Duration::from_secs(60);

/// Counts `registry`'s resources at once and then every `period` (never when it is zero) on
/// the registry's tasks, until its shutdown token is cancelled.
pub fn spawn_object_counter(registry: &Registry, period: Duration) {
    if period.is_zero() {
        return;
    }
    let registry = registry.clone();
    let shutdown = registry.shutdown.clone();
    registry.tasks.clone().spawn(async move {
        let mut counted = HashSet::new();
        loop {
            let resources = stored_resources(&registry);
            tokio::select! {
                () = shutdown.cancelled() => return,
                now = count_objects(
                    registry.storage.as_ref(),
                    &resources,
                    &registry.watch_metrics,
                    &counted,
                ) => counted = now,
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    });
}

/// One resource per storage prefix: the stored built-in resources (a kind served by two
/// APIs counts once, as the resource that owns its prefix) and the served custom resources.
fn stored_resources(registry: &Registry) -> Vec<&'static ResourceInfo> {
    let served = registry.custom.served();
    let mut prefixes = HashSet::new();
    catalog::RESOURCES
        .iter()
        .filter(|info| info.is_stored())
        .chain(served.resources.iter().copied())
        .filter(|info| prefixes.insert(info.storage_prefix))
        .collect()
}

/// Counts each of `resources` in `storage` into `metrics`; the series of resources counted
/// before (`previous`, by label) and not now are removed. Returns the labels counted.
pub(super) async fn count_objects(
    storage: &dyn Storage,
    resources: &[&'static ResourceInfo],
    metrics: &WatchMetrics,
    previous: &HashSet<String>,
) -> HashSet<String> {
    let mut counted = HashSet::with_capacity(resources.len());
    for info in resources {
        let prefix = format!("{}/", info.storage_prefix);
        let count = match storage
            .range(RangeRequest::new(KeyRange::prefix(prefix)).count_only())
            .await
        {
            Ok(response) => response.count,
            Err(error) => {
                tracing::debug!(resource = %resource(info), %error, "counting the stored objects failed");
                -1
            }
        };
        let label = resource(info);
        metrics.set_stored_objects(&label, count);
        counted.insert(label);
    }
    for gone in previous.difference(&counted) {
        metrics.remove_stored_objects(gone);
    }
    counted
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prometheus_client::registry::Registry as Metrics;

    use super::*;

    fn encode(metrics: &WatchMetrics) -> String {
        let mut registry = Metrics::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    #[tokio::test]
    async fn every_resource_is_counted_from_the_store_without_reading_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite opens");
        for key in [
            "/registry/secrets/a/one",
            "/registry/secrets/b/two",
            "/registry/deployments/a/web",
            // Not a secret: `/registry/secretsx` is another prefix.
            "/registry/secretsx/a/x",
        ] {
            storage.put(key.as_bytes(), b"{}", 0).await.expect("put");
        }
        let secrets = catalog::find("", "v1", "secrets").expect("served");
        let deployments = catalog::find("apps", "v1", "deployments").expect("served");
        let nodes = catalog::find("", "v1", "nodes").expect("served");
        let metrics = WatchMetrics::default();
        let counted = count_objects(
            storage.as_ref(),
            &[secrets, deployments, nodes],
            &metrics,
            &HashSet::from(["widgets.example.com".to_string()]),
        )
        .await;
        assert_eq!(counted.len(), 3);
        let text = encode(&metrics);
        for line in [
            "apiserver_storage_objects{resource=\"secrets\"} 2",
            "apiserver_storage_objects{resource=\"deployments.apps\"} 1",
            "apiserver_storage_objects{resource=\"nodes\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("widgets"),
            "a resource no longer served goes"
        );

        // A store that fails: -1, as upstream.
        storage.close().await;
        count_objects(storage.as_ref(), &[secrets], &metrics, &counted).await;
        let text = encode(&metrics);
        assert!(
            text.contains("apiserver_storage_objects{resource=\"secrets\"} -1"),
            "{text}"
        );
        assert!(!text.contains("deployments.apps"), "{text}");
    }

    #[test]
    fn each_storage_prefix_is_counted_once_as_its_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = runtime
            .block_on(rudder_storage::open(&url))
            .expect("sqlite opens");
        let registry = Registry::new(
            storage.clone(),
            Arc::new(rudder_admission::Chain::new()),
            crate::registry::Allocators::new(
                storage,
                crate::registry::Cidr::parse("10.96.0.0/12").expect("cidr"),
                30000..=32767,
            ),
        );
        let resources = stored_resources(&registry);
        let labels: Vec<String> = resources.iter().map(|info| resource(info)).collect();
        let events = labels
            .iter()
            .filter(|label| label.contains("events"))
            .count();
        assert_eq!(
            events, 1,
            "core and events.k8s.io Events share a prefix: {labels:?}"
        );
        assert!(labels.contains(&"secrets".to_string()));
        assert!(labels.contains(&"deployments.apps".to_string()));
        assert!(!labels
            .iter()
            .any(|label| label.contains("selfsubjectaccessreviews")));
        let prefixes: HashSet<&str> = resources.iter().map(|info| info.storage_prefix).collect();
        assert_eq!(prefixes.len(), resources.len());
    }
}
