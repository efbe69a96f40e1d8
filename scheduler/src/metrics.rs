//! The scheduler's metrics, under upstream's names: attempts by result, attempt latency,
//! pending pods per sub-queue, the pod-scheduling SLI (queued → bound), preemption victims.
//! Plain atomics back the counts a benchmark reads directly.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::queue::Pending;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: &'static str,
}

fn latency() -> Histogram {
    // 1 ms … ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Every metric of one scheduler.
pub struct Metrics {
    attempts: Family<ResultLabel, Counter>,
    attempt_duration: Family<ResultLabel, Histogram, fn() -> Histogram>,
    pending: Family<QueueLabel, Gauge>,
    sli: Histogram,
    victims: Histogram,
    /// Bound pods, and the time (µs) spent in binding writes (for benchmarks).
    pub bound: AtomicU64,
    pub binding_micros: AtomicU64,
    pub scheduling_micros: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(latency),
            pending: Family::default(),
            sli: latency(),
            victims: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
            bound: AtomicU64::new(0),
            binding_micros: AtomicU64::new(0),
            scheduling_micros: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result",
            self.attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            self.attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type",
            self.pending.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue",
            self.sli.clone(),
        );
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            self.victims.clone(),
        );
    }

    /// One attempt's result (`scheduled`, `unschedulable`, `error`) and latency.
    pub fn attempt(&self, result: &'static str, profile: &str, seconds: f64) {
        let label = ResultLabel {
            result,
            profile: profile.to_string(),
        };
        self.attempts.get_or_create(&label).inc();
        self.attempt_duration.get_or_create(&label).observe(seconds);
    }

    pub fn scheduled(&self, queued_seconds: f64, binding_micros: u64) {
        self.sli.observe(queued_seconds);
        self.bound.fetch_add(1, Ordering::Relaxed);
        self.binding_micros
            .fetch_add(binding_micros, Ordering::Relaxed);
    }

    pub fn preempted(&self, victims: usize) {
        self.victims.observe(victims as f64);
    }

    pub fn set_pending(&self, pending: Pending) {
        for (queue, n) in [
            ("active", pending.active),
            ("backoff", pending.backoff),
            ("unschedulable", pending.unschedulable),
            ("gated", pending.gated),
        ] {
            self.pending
                .get_or_create(&QueueLabel { queue })
                .set(n as i64);
        }
    }

    pub fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }
}
