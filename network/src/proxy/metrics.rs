//! The proxy's metrics under upstream's names: how long a sync takes
//! (`kubeproxy_sync_proxy_rules_duration_seconds`), how long from an endpoint change to its
//! rules (`kubeproxy_network_programming_duration_seconds`), when the last sync happened,
//! and failed transactions; in iptables mode, as upstream's, failed `iptables-restore` runs
//! (`kubeproxy_sync_proxy_rules_iptables_restore_failures_total`) and the rules per table
//! (`kubeproxy_sync_proxy_rules_iptables_total{table}`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct Metrics {
    sync_duration: Histogram,
    programming_duration: Histogram,
    last_sync: Gauge<f64, AtomicU64>,
    failures: Counter,
    full_syncs: Counter,
    service_ports: Gauge,
    /// Rules per table (iptables mode).
    iptables_rules: Family<Vec<(String, String)>, Gauge>,
    /// Whether the proxy runs in iptables mode (the failure counter's name follows it).
    iptables: bool,
    /// Syncs done (for tests and benchmarks that wait for one).
    pub syncs: AtomicU64,
    /// The watch generation the last applied rules were computed from: a change seen at
    /// generation `g` is in the kernel once this is at least `g`.
    pub applied_generation: AtomicU64,
    /// How long the last sync took, in microseconds.
    pub last_sync_micros: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            // 1 ms … ~16 s.
            sync_duration: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            programming_duration: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            last_sync: Gauge::default(),
            failures: Counter::default(),
            full_syncs: Counter::default(),
            service_ports: Gauge::default(),
            iptables_rules: Family::default(),
            iptables: false,
            syncs: AtomicU64::new(0),
            applied_generation: AtomicU64::new(0),
            last_sync_micros: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// The metrics of a proxy in `backend`'s mode.
    pub fn for_backend(backend: &super::Backend) -> Self {
        Self {
            iptables: matches!(backend, super::Backend::Iptables(_)),
            ..Self::default()
        }
    }

    /// The rules Rudder has in iptables' nat and filter tables.
    pub fn iptables_rules(&self, nat: usize, filter: usize) {
        for (table, count) in [("nat", nat), ("filter", filter)] {
            self.iptables_rules
                .get_or_create(&vec![("table".to_owned(), table.to_owned())])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    pub fn synced(&self, took: Duration, full: bool, service_ports: usize, generation: u64) {
        self.applied_generation.store(generation, Ordering::Release);
        self.last_sync_micros.store(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        self.sync_duration.observe(took.as_secs_f64());
        if full {
            self.full_syncs.inc();
        }
        self.service_ports
            .set(i64::try_from(service_ports).unwrap_or(i64::MAX));
        self.last_sync.set(super::unix_now());
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    pub fn failed(&self) {
        self.failures.inc();
    }

    pub fn programmed(&self, seconds: f64) {
        self.programming_duration.observe(seconds);
    }

    /// Adds every metric to `registry` (prefix `kubeproxy`).
    pub fn register(&self, registry: &mut Registry) {
        let proxy = registry.sub_registry_with_prefix("kubeproxy");
        proxy.register(
            "sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            self.sync_duration.clone(),
        );
        proxy.register(
            "network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            self.programming_duration.clone(),
        );
        proxy.register(
            "sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            self.last_sync.clone(),
        );
        if self.iptables {
            proxy.register(
                "sync_proxy_rules_iptables_restore_failures",
                "Cumulative proxy iptables restore failures",
                self.failures.clone(),
            );
            proxy.register(
                "sync_proxy_rules_iptables_total",
                "Number of proxy iptables rules programmed",
                self.iptables_rules.clone(),
            );
        } else {
            proxy.register(
                "sync_proxy_rules_nftables_failures",
                "Failed nftables transactions",
                self.failures.clone(),
            );
        }
        proxy.register(
            "sync_full_proxy_rules",
            "Syncs that rewrote the whole table",
            self.full_syncs.clone(),
        );
        proxy.register(
            "sync_proxy_rules_service_ports",
            "Service ports programmed",
            self.service_ports.clone(),
        );
    }
}
