//! What the store holds and what the watch cache and the watches do, under kube-apiserver's
//! metric names: `apiserver_storage_objects{resource}` (objects of each resource: counted in
//! the store every minute by [`super::object_count`], and kept current by the watch cache for
//! the resources it holds),
//! `apiserver_watch_events_total{group,version,resource}` (events sent to watch clients),
//! `apiserver_registered_watchers{group,version,kind}`, `apiserver_longrunning_requests`
//! (watches being served), and the cache's own: `apiserver_watch_cache_events_received_total`,
//! `apiserver_watch_cache_events_dispatched_total`, `apiserver_watch_cache_initializations_total`
//! and `apiserver_watch_cache_resource_version`, each by `resource`.
//!
//! Labels are resources of the catalog (or of a served CRD), never anything a client wrote.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::catalog::ResourceInfo;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupVersionResource {
    group: String,
    version: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupVersionKind {
    group: String,
    version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LongRunning {
    component: &'static str,
    group: String,
    resource: String,
    scope: &'static str,
    subresource: String,
    verb: &'static str,
    version: String,
}

/// The watch metrics of one server.
#[derive(Default)]
pub struct WatchMetrics {
    storage_objects: Family<ResourceLabel, Gauge>,
    watch_events: Family<GroupVersionResource, Counter>,
    registered_watchers: Family<GroupVersionKind, Gauge>,
    longrunning: Family<LongRunning, Gauge>,
    cache_received: Family<ResourceLabel, Counter>,
    cache_dispatched: Family<ResourceLabel, Counter>,
    cache_initializations: Family<ResourceLabel, Counter>,
    cache_revision: Family<ResourceLabel, Gauge>,
}

/// `plural` or `plural.group`, as upstream names a resource in these labels.
pub(super) fn resource(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

fn resource_label(info: &ResourceInfo) -> ResourceLabel {
    ResourceLabel {
        resource: resource(info),
    }
}

impl WatchMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apiserver_storage_objects",
            "Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1",
            self.storage_objects.clone(),
        );
        registry.register(
            "apiserver_watch_events",
            "Number of events sent in watch clients",
            self.watch_events.clone(),
        );
        registry.register(
            "apiserver_registered_watchers",
            "Number of currently registered watchers for a given resources",
            self.registered_watchers.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way",
            self.longrunning.clone(),
        );
        registry.register(
            "apiserver_watch_cache_events_received",
            "Counter of events received in watch cache broken by resource type",
            self.cache_received.clone(),
        );
        registry.register(
            "apiserver_watch_cache_events_dispatched",
            "Counter of events dispatched in watch cache broken by resource type",
            self.cache_dispatched.clone(),
        );
        registry.register(
            "apiserver_watch_cache_initializations",
            "Counter of watch cache initializations broken by resource type",
            self.cache_initializations.clone(),
        );
        registry.register(
            "apiserver_watch_cache_resource_version",
            "Current resource version of watch cache broken by resource type",
            self.cache_revision.clone(),
        );
    }

    /// The store holds `count` objects of the resource labelled `resource` (-1: counting
    /// failed).
    pub(super) fn set_stored_objects(&self, resource: &str, count: i64) {
        self.storage_objects
            .get_or_create(&ResourceLabel {
                resource: resource.into(),
            })
            .set(count);
    }

    /// The resource labelled `resource` is no longer served.
    pub(super) fn remove_stored_objects(&self, resource: &str) {
        self.storage_objects.remove(&ResourceLabel {
            resource: resource.into(),
        });
    }

    /// The cache of `info` listed its objects (again).
    pub(super) fn cache_initialized(&self, info: &ResourceInfo, objects: usize, revision: i64) {
        let label = resource_label(info);
        self.cache_initializations.get_or_create(&label).inc();
        self.storage_objects
            .get_or_create(&label)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.cache_revision.get_or_create(&label).set(revision);
    }

    /// The cache of `info` applied `events` changes, now holding `objects` at `revision`.
    pub(super) fn cache_applied(
        &self,
        info: &ResourceInfo,
        events: usize,
        objects: usize,
        revision: i64,
    ) {
        let label = resource_label(info);
        self.cache_received
            .get_or_create(&label)
            .inc_by(u64::try_from(events).unwrap_or(0));
        self.storage_objects
            .get_or_create(&label)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.cache_revision.get_or_create(&label).set(revision);
    }

    /// The cache of `info` handed one batch to `watchers` watchers.
    pub(super) fn cache_dispatched(&self, info: &ResourceInfo, watchers: usize) {
        self.cache_dispatched
            .get_or_create(&resource_label(info))
            .inc_by(u64::try_from(watchers).unwrap_or(0));
    }

    /// One event went to a watch client of `info`.
    pub fn event_sent(&self, info: &ResourceInfo) {
        self.watch_events
            .get_or_create(&GroupVersionResource {
                group: info.group.to_string(),
                version: info.version.to_string(),
                resource: info.plural.to_string(),
            })
            .inc();
    }

    /// A watch of `info` is served until the guard goes.
    pub fn watching(&self, info: &ResourceInfo, namespaced: bool) -> WatchGuard {
        let registered = self
            .registered_watchers
            .get_or_create(&GroupVersionKind {
                group: info.group.to_string(),
                version: info.version.to_string(),
                kind: info.kind.to_string(),
            })
            .clone();
        let longrunning = self
            .longrunning
            .get_or_create(&LongRunning {
                component: "apiserver",
                group: info.group.to_string(),
                resource: info.plural.to_string(),
                scope: if namespaced { "namespace" } else { "cluster" },
                subresource: String::new(),
                verb: "WATCH",
                version: info.version.to_string(),
            })
            .clone();
        registered.inc();
        longrunning.inc();
        WatchGuard {
            registered,
            longrunning,
        }
    }
}

/// Counts one watch while it is served.
pub struct WatchGuard {
    registered: Gauge,
    longrunning: Gauge,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.registered.dec();
        self.longrunning.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_counts_while_it_is_served() {
        let metrics = WatchMetrics::default();
        let pods = crate::catalog::find("", "v1", "pods").expect("served");
        let guard = metrics.watching(pods, true);
        metrics.event_sent(pods);
        metrics.cache_initialized(pods, 3, 10);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
            text
        };
        let text = encode(&registry);
        for line in [
            "apiserver_registered_watchers{group=\"\",version=\"v1\",kind=\"Pod\"} 1",
            "apiserver_watch_events_total{group=\"\",version=\"v1\",resource=\"pods\"} 1",
            "apiserver_storage_objects{resource=\"pods\"} 3",
            "apiserver_watch_cache_resource_version{resource=\"pods\"} 10",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains("apiserver_longrunning_requests{component=\"apiserver\",group=\"\",resource=\"pods\",scope=\"namespace\",subresource=\"\",verb=\"WATCH\",version=\"v1\"} 1"), "{text}");
        drop(guard);
        let text = encode(&registry);
        assert!(
            text.contains(
                "apiserver_registered_watchers{group=\"\",version=\"v1\",kind=\"Pod\"} 0"
            ),
            "{text}"
        );
    }
}
