//! The eviction manager: every 10 seconds it reads the node's usage ([`crate::stats`]),
//! compares the signals with the hard thresholds (`--eviction-hard`, upstream's defaults)
//! and the soft ones (`--eviction-soft`, which act once the signal has stayed over them for
//! their grace period and give pods up to `--eviction-max-pod-grace-period` to stop; a met
//! threshold stays met until `--eviction-minimum-reclaim` more is available), and publishes the pressure conditions the Node reports (MemoryPressure, DiskPressure,
//! PIDPressure — held for `--eviction-pressure-transition-period` after the signal clears).
//! Under pressure it first reclaims what the node itself holds (unused images, for disk) and
//! then evicts one pod per round in [`rank`]'s order; a pod that outgrows its own
//! local-storage limits is evicted regardless of the node. An evicted pod's worker kills its
//! containers at once and reports it Failed with reason `Evicted` and a `DisruptionTarget`
//! condition. While the node is under pressure, new pods are refused as upstream's
//! admission does ([`admit`]).

pub mod rank;
pub mod thresholds;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::image_gc::ImageGc;
use crate::stats::{machine, Collector};
use thresholds::{Condition, Threshold};

/// How often usage is looked at (upstream's `evictionMonitoringPeriod`).
pub const MONITOR_EVERY: Duration = Duration::from_secs(10);
/// How often images are collected when there is no pressure (upstream's `ImageGCPeriod`).
pub const IMAGE_GC_EVERY: Duration = Duration::from_secs(300);

/// The pressure conditions the node is under.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl Pressure {
    pub fn is(&self, condition: Condition) -> bool {
        match condition {
            Condition::MemoryPressure => self.memory,
            Condition::DiskPressure => self.disk,
            Condition::PidPressure => self.pid,
        }
    }

    fn set(&mut self, condition: Condition) {
        match condition {
            Condition::MemoryPressure => self.memory = true,
            Condition::DiskPressure => self.disk = true,
            Condition::PidPressure => self.pid = true,
        }
    }

    /// The names of the conditions that hold.
    pub fn names(&self) -> Vec<&'static str> {
        [
            Condition::MemoryPressure,
            Condition::DiskPressure,
            Condition::PidPressure,
        ]
        .into_iter()
        .filter(|c| self.is(*c))
        .map(Condition::as_str)
        .collect()
    }
}

/// How the eviction manager behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    pub hard: Vec<Threshold>,
    /// Soft thresholds, each with its grace period.
    pub soft: Vec<Threshold>,
    /// The most a pod evicted for a soft threshold gets to stop (its own
    /// `terminationGracePeriodSeconds` if shorter); `--eviction-max-pod-grace-period`.
    pub max_pod_grace_seconds: i64,
    /// How long a condition stays after its signal clears.
    pub transition_period: Duration,
    pub image_gc: crate::image_gc::Policy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            hard: thresholds::parse(thresholds::DEFAULT_HARD).unwrap_or_default(),
            soft: Vec::new(),
            max_pod_grace_seconds: 0,
            transition_period: Duration::from_secs(300),
            image_gc: crate::image_gc::Policy::default(),
        }
    }
}

/// Why `pod`, new on a node under `pressure`, is refused (`None`: admitted). Critical pods
/// always run; under memory pressure alone, pods with requests run, and BestEffort pods only
/// when they tolerate the memory-pressure taint.
pub fn admit(pod: &Pod, pressure: &Pressure) -> Option<String> {
    if pressure.names().is_empty() || rank::is_critical(pod) {
        return None;
    }
    let only_memory = pressure.memory && !pressure.disk && !pressure.pid;
    if only_memory {
        let best_effort =
            rudder_facts::pods::qos_class(pod) == rudder_facts::pods::QosClass::BestEffort;
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|all| all.iter().any(tolerates_memory_pressure));
        if !best_effort || tolerates {
            return None;
        }
    }
    Some(format!(
        "The node had condition: [{}]. ",
        pressure.names().join(", ")
    ))
}

/// Whether `t` tolerates the taint `node.kubernetes.io/memory-pressure:NoSchedule`.
fn tolerates_memory_pressure(t: &k8s_openapi::api::core::v1::Toleration) -> bool {
    let exists = t.operator.as_deref() == Some("Exists");
    let key = match t.key.as_deref() {
        None | Some("") => exists,
        Some(key) => key == "node.kubernetes.io/memory-pressure",
    };
    let value = exists || t.value.as_deref().unwrap_or("").is_empty();
    let effect = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == "NoSchedule");
    key && value && effect
}

/// One node's eviction manager.
pub struct Manager {
    settings: Settings,
    collector: Arc<Collector>,
    pods: crate::pods::Handle,
    images: ImageGc,
    pressure: watch::Sender<Pressure>,
    /// When each condition's signal was last seen over its threshold.
    last_met: BTreeMap<Condition, Instant>,
    /// Since when each threshold met in the last round has been met, by (signal, soft).
    met_since: BTreeMap<(thresholds::Signal, bool), Instant>,
    last_image_gc: Option<Instant>,
}

fn key(threshold: &Threshold) -> (thresholds::Signal, bool) {
    (threshold.signal, threshold.is_soft())
}

impl Manager {
    pub fn new(
        settings: Settings,
        collector: Arc<Collector>,
        runtime: Arc<dyn crate::runtime::Runtime>,
        pods: crate::pods::Handle,
        pressure: watch::Sender<Pressure>,
    ) -> Self {
        let images = ImageGc::new(runtime, settings.image_gc)
            .pinning(vec![crate::containerd::PAUSE_IMAGE.to_owned()]);
        Self {
            settings,
            collector,
            pods,
            images,
            pressure,
            last_met: BTreeMap::new(),
            met_since: BTreeMap::new(),
            last_image_gc: None,
        }
    }

    /// Runs a round every [`MONITOR_EVERY`] until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(MONITOR_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.round().await,
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// One look at the node: conditions, reclaim, at most one eviction for pressure (or
    /// every pod over its own storage limits).
    pub async fn round(&mut self) {
        let summary = self.collector.summary().await;
        let pods = self.pods.pods();
        let stats: HashMap<String, crate::stats::summary::PodStats> = summary
            .pods
            .iter()
            .map(|p| (p.pod_ref.uid.clone(), p.clone()))
            .collect();
        let mut evicted_for_storage = false;
        for pod in pods.iter().filter(|p| !rudder_facts::pods::is_terminal(p)) {
            let uid = pod.metadata.uid.as_deref().unwrap_or("");
            let Some(message) = stats
                .get(uid)
                .and_then(|s| rank::local_storage_violation(pod, s))
            else {
                continue;
            };
            if self.pods.eviction_of(uid).is_none() && !rank::is_critical(pod) {
                tracing::info!(pod = %uid, %message, "evicting a pod over its local storage limits");
                evicted_for_storage |= self.pods.evict(uid, message, 0);
            }
        }
        let observations = thresholds::observe(&summary);
        let now = Instant::now();
        let all: Vec<Threshold> = self
            .settings
            .hard
            .iter()
            .chain(&self.settings.soft)
            .cloned()
            .collect();
        let met = thresholds::met_after(&all, &observations, |t| {
            self.met_since.contains_key(&key(t))
        });
        let since = std::mem::take(&mut self.met_since);
        for (threshold, _) in &met {
            self.last_met.insert(threshold.signal.condition(), now);
            let first = since.get(&key(threshold)).copied().unwrap_or(now);
            self.met_since.insert(key(threshold), first);
        }
        let mut pressure = Pressure::default();
        for (condition, at) in &self.last_met {
            if now.duration_since(*at) < self.settings.transition_period {
                pressure.set(*condition);
            }
        }
        self.pressure.send_if_modified(|old| {
            let changed = *old != pressure;
            if changed {
                tracing::info!(conditions = ?pressure.names(), "node pressure changed");
            }
            *old = pressure;
            changed
        });
        if evicted_for_storage {
            return;
        }
        // A soft threshold acts once the signal has stayed over it for its grace period.
        let due = |t: &Threshold| {
            t.grace_period.is_none_or(|grace| {
                self.met_since
                    .get(&key(t))
                    .is_some_and(|first| now.duration_since(*first) >= grace)
            })
        };
        let mut met: Vec<(Threshold, thresholds::Observation)> = met
            .into_iter()
            .filter(|(t, _)| due(t))
            .map(|(t, o)| (t.clone(), o))
            .collect();
        if met.is_empty() {
            self.periodic_image_gc(&summary).await;
            return;
        }
        if met.iter().any(|(t, _)| t.signal.is_disk()) {
            let freed = self.images.free_all_unused().await;
            if freed > 0 {
                let summary = self.collector.summary().await;
                let observations = thresholds::observe(&summary);
                let due: Vec<Threshold> = met.iter().map(|(t, _)| t.clone()).collect();
                met = thresholds::met_after(&due, &observations, |_| true)
                    .into_iter()
                    .map(|(t, o)| (t.clone(), o))
                    .collect();
                if met.is_empty() {
                    tracing::info!(freed, "unused images relieved the disk pressure");
                    return;
                }
            }
        }
        // Memory first, then disk, then pids, as the signals are ordered; hard before soft.
        met.sort_by_key(|(t, _)| key(t));
        let Some((threshold, seen)) = met.first() else {
            return;
        };
        let ranked = rank::rank(threshold.signal, &pods, &stats);
        for pod in ranked {
            let uid = pod.metadata.uid.as_deref().unwrap_or("");
            if self.pods.eviction_of(uid).is_some() {
                // Being evicted already: its resources are on their way back.
                return;
            }
            let message = rank::pressure_message(threshold, *seen, &pod, stats.get(uid));
            let grace = self.grace_for(threshold, &pod);
            tracing::warn!(pod = %uid, threshold = %threshold, grace, %message, "evicting a pod");
            if self.pods.evict(uid, message, grace) {
                return;
            }
        }
        tracing::warn!(threshold = %threshold, "over an eviction threshold with no pod to evict");
    }

    /// How long `pod`'s containers get to stop when evicted for `threshold`: nothing for a
    /// hard threshold; for a soft one its own grace period, at most
    /// `--eviction-max-pod-grace-period`.
    fn grace_for(&self, threshold: &Threshold, pod: &Pod) -> i64 {
        if !threshold.is_soft() {
            return 0;
        }
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        own.min(self.settings.max_pod_grace_seconds).max(0)
    }

    async fn periodic_image_gc(&mut self, summary: &crate::stats::summary::Summary) {
        let due = self
            .last_image_gc
            .is_none_or(|at| at.elapsed() >= IMAGE_GC_EVERY);
        if !due {
            return;
        }
        self.last_image_gc = Some(Instant::now());
        let Some(fs) = summary
            .node
            .runtime
            .as_ref()
            .and_then(|r| r.image_fs.as_ref())
        else {
            return;
        };
        let (Some(capacity), Some(available)) = (fs.capacity_bytes, fs.available_bytes) else {
            return;
        };
        let imagefs = machine::Filesystem {
            capacity,
            available,
            ..Default::default()
        };
        self.images.collect(&imagefs).await;
    }
}

#[cfg(test)]
mod tests;
