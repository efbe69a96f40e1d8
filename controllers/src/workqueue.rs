//! Each controller's work queue, measured as upstream measures its queues, and its per-key
//! back-off.
//!
//! kube-runtime's `Controller` keeps the queue itself (one pending reconcile per object, so a
//! burst of changes to one object costs one reconcile). This module watches it from the
//! outside: a key is *queued* from the first change that triggers it until its reconcile
//! starts, and *in work* until it ends. That gives upstream's metrics, labelled by controller
//! name — `workqueue_depth`, `workqueue_adds_total`, `workqueue_queue_duration_seconds`,
//! `workqueue_work_duration_seconds`, `workqueue_retries_total` — and client-go's default
//! back-off for failing keys: 5 ms doubling per consecutive failure, at most 1000 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// The `name` label every workqueue metric carries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub name: String,
}

fn duration_histogram() -> Histogram {
    // upstream: 10 buckets from 1 µs, ×10 each.
    Histogram::new(exponential_buckets(1e-6, 10.0, 10))
}

/// The workqueue metrics of every controller of one manager.
pub struct QueueMetrics {
    depth: Family<QueueLabel, Gauge>,
    adds: Family<QueueLabel, Counter>,
    retries: Family<QueueLabel, Counter>,
    queue_duration: Family<QueueLabel, Histogram, fn() -> Histogram>,
    work_duration: Family<QueueLabel, Histogram, fn() -> Histogram>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl QueueMetrics {
    pub fn new() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
        }
    }

    /// Registers the metrics under upstream's names.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
    }
}

/// One controller's queue bookkeeping.
pub struct Queue {
    label: QueueLabel,
    metrics: Arc<QueueMetrics>,
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    /// Keys triggered and not yet started, with when they were first triggered.
    waiting: HashMap<String, Instant>,
    /// Consecutive failures per key.
    failures: HashMap<String, u32>,
}

/// client-go's `DefaultControllerRateLimiter` item back-off.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1000);

impl Queue {
    pub fn new(name: &str, metrics: Arc<QueueMetrics>) -> Arc<Self> {
        Arc::new(Self {
            label: QueueLabel {
                name: name.to_string(),
            },
            metrics,
            state: Mutex::new(QueueState::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A change triggered `key`'s reconcile (a second trigger before it starts is the same add).
    pub fn added(&self, key: &str) {
        let mut state = self.state();
        if state.waiting.contains_key(key) {
            return;
        }
        state.waiting.insert(key.to_string(), Instant::now());
        self.metrics.adds.get_or_create(&self.label).inc();
        self.metrics
            .depth
            .get_or_create(&self.label)
            .set(state.waiting.len() as i64);
    }

    /// `key`'s reconcile starts; returns its start, for [`Queue::finished`].
    pub fn started(&self, key: &str) -> Instant {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(since) = state.waiting.remove(key) {
            self.metrics
                .queue_duration
                .get_or_create(&self.label)
                .observe((now - since).as_secs_f64());
        }
        self.metrics
            .depth
            .get_or_create(&self.label)
            .set(state.waiting.len() as i64);
        now
    }

    /// `key`'s reconcile ended; a success resets its back-off.
    pub fn finished(&self, key: &str, started: Instant, succeeded: bool) {
        self.metrics
            .work_duration
            .get_or_create(&self.label)
            .observe(started.elapsed().as_secs_f64());
        if succeeded {
            self.state().failures.remove(key);
        }
    }

    /// `key` failed again: how long to wait before retrying it.
    pub fn backoff(&self, key: &str) -> Duration {
        self.metrics.retries.get_or_create(&self.label).inc();
        let mut state = self.state();
        let failures = state.failures.entry(key.to_string()).or_insert(0);
        let delay = backoff_after(*failures);
        *failures = failures.saturating_add(1);
        delay
    }
}

/// The delay after `failures` earlier consecutive failures: 5 ms × 2^failures, at most 1000 s.
pub fn backoff_after(failures: u32) -> Duration {
    let factor = 2u32.checked_pow(failures.min(31)).unwrap_or(u32::MAX);
    BACKOFF_BASE
        .checked_mul(factor)
        .map_or(BACKOFF_MAX, |delay| delay.min(BACKOFF_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_from_five_milliseconds_to_a_thousand_seconds() {
        assert_eq!(backoff_after(0), Duration::from_millis(5));
        assert_eq!(backoff_after(1), Duration::from_millis(10));
        assert_eq!(backoff_after(10), Duration::from_millis(5120));
        assert_eq!(backoff_after(30), BACKOFF_MAX);
        assert_eq!(backoff_after(u32::MAX), BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_counts_once_while_queued_and_a_success_resets_its_back_off() {
        let metrics = Arc::new(QueueMetrics::new());
        let queue = Queue::new("replicaset", metrics.clone());
        queue.added("default/web");
        queue.added("default/web");
        let label = QueueLabel {
            name: "replicaset".into(),
        };
        assert_eq!(metrics.adds.get_or_create(&label).get(), 1);
        assert_eq!(metrics.depth.get_or_create(&label).get(), 1);
        let started = queue.started("default/web");
        assert_eq!(metrics.depth.get_or_create(&label).get(), 0);
        assert_eq!(queue.backoff("default/web"), Duration::from_millis(5));
        assert_eq!(queue.backoff("default/web"), Duration::from_millis(10));
        queue.finished("default/web", started, true);
        assert_eq!(queue.backoff("default/web"), Duration::from_millis(5));
        assert_eq!(metrics.retries.get_or_create(&label).get(), 3);
    }
}
