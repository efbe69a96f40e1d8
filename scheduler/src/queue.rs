//! The scheduling queue: which pod to try next.
//!
//! - **activeQ**: pods ready to try, highest priority first, then first come (PrioritySort).
//! - **backoffQ**: pods that failed recently, each waiting 1 s doubling per attempt up to
//!   10 s before going back to activeQ.
//! - **unschedulable**: pods no node could take, waiting for a cluster event that one of the
//!   plugins that rejected them cares about (a node added, a pod deleted, …); any that
//!   waited 5 min are retried anyway.
//! - **gated**: pods a PreEnqueue plugin keeps out (scheduling gates) until they change.
//!
//! A pod that failed while a cluster event arrived during its own cycle goes to backoffQ
//! rather than waiting for an event that has already passed.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::node_info::PodInfo;

/// Queue timings (upstream's defaults).
#[derive(Clone, Debug)]
pub struct Timings {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub unschedulable_timeout: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            unschedulable_timeout: Duration::from_secs(300),
        }
    }
}

/// A pod in the queue, with its history.
#[derive(Clone, Debug)]
pub struct Queued {
    pub info: Arc<PodInfo>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When it first entered the queue (for the pod-scheduling SLI).
    pub first_queued: Instant,
    /// When it last entered a sub-queue.
    pub queued_at: Instant,
    /// The plugins that rejected it last.
    pub rejected_by: HashSet<&'static str>,
    /// The move-request counter when it was popped.
    pub popped_at_cycle: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped and being scheduled.
    InFlight,
}

/// An activeQ entry; stale entries (the pod moved on since) are skipped when popped.
#[derive(Debug, PartialEq, Eq)]
struct ActiveEntry {
    priority: i32,
    sequence: u64,
    uid: String,
}

impl Ord for ActiveEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.sequence.cmp(&self.sequence))
    }
}

impl PartialOrd for ActiveEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A backoffQ entry, earliest expiry first.
#[derive(Debug, PartialEq, Eq)]
struct BackoffEntry {
    until: Instant,
    sequence: u64,
    uid: String,
}

impl Ord for BackoffEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .until
            .cmp(&self.until)
            .then_with(|| other.sequence.cmp(&self.sequence))
    }
}

impl PartialOrd for BackoffEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, (Queued, Place, u64)>,
    /// The uids of `pods` in [`Place::Unschedulable`], so that events and flushes look at
    /// those alone rather than at every queued pod.
    unschedulable: HashSet<String>,
    active: BinaryHeap<ActiveEntry>,
    backoff: BinaryHeap<BackoffEntry>,
    sequence: u64,
    move_requests: u64,
    closed: bool,
}

impl Inner {
    /// Records `entry` for `uid`, keeping the unschedulable index in step.
    fn put(&mut self, uid: String, entry: (Queued, Place, u64)) {
        if entry.1 == Place::Unschedulable {
            self.unschedulable.insert(uid.clone());
        } else {
            self.unschedulable.remove(&uid);
        }
        self.pods.insert(uid, entry);
    }

    fn forget(&mut self, uid: &str) {
        self.unschedulable.remove(uid);
        self.pods.remove(uid);
    }

    /// The unschedulable pods `wake` picks.
    fn unschedulable_where(&self, wake: impl Fn(&Queued) -> bool) -> Vec<Queued> {
        self.unschedulable
            .iter()
            .filter_map(|uid| self.pods.get(uid))
            .filter(|(queued, _, _)| wake(queued))
            .map(|(queued, _, _)| queued.clone())
            .collect()
    }
}

/// Sizes of the sub-queues (`scheduler_pending_pods{queue}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub gated: usize,
}

/// Whether an update can change where the pod fits (upstream ignores status-only updates).
fn changed_for_scheduling(old: &PodInfo, new: &PodInfo) -> bool {
    old.pod.spec != new.pod.spec
        || old.pod.metadata.labels != new.pod.metadata.labels
        || old.pod.metadata.annotations != new.pod.metadata.annotations
}

/// The queue; shared by the informer handlers and the scheduling loop.
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    ready: Condvar,
    timings: Timings,
}

impl SchedulingQueue {
    pub fn new(timings: Timings) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            ready: Condvar::new(),
            timings,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn backoff_of(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(16);
        (self.timings.initial_backoff * 2u32.pow(doublings)).min(self.timings.max_backoff)
    }

    fn place(&self, inner: &mut Inner, mut queued: Queued, place: Place) {
        inner.sequence += 1;
        let sequence = inner.sequence;
        queued.queued_at = Instant::now();
        let uid = queued.info.uid.clone();
        match place {
            Place::Active => {
                inner.active.push(ActiveEntry {
                    priority: queued.info.priority,
                    sequence,
                    uid: uid.clone(),
                });
                self.ready.notify_one();
            }
            Place::Backoff => {
                let until = queued.queued_at + self.backoff_of(queued.attempts);
                inner.backoff.push(BackoffEntry {
                    until,
                    sequence,
                    uid: uid.clone(),
                });
                self.ready.notify_one();
            }
            _ => {}
        }
        inner.put(uid, (queued, place, sequence));
    }

    /// A new or changed unscheduled pod. `gated`: a PreEnqueue plugin keeps it out.
    pub fn upsert(&self, info: Arc<PodInfo>, gated: bool) {
        let mut inner = self.lock();
        let existing = inner.pods.get(&info.uid).map(|(q, p, _)| (q.clone(), *p));
        match existing {
            Some((mut queued, Place::InFlight)) => {
                // Being scheduled: the cycle's outcome decides; keep the newer object.
                queued.info = info;
                let sequence = inner.sequence;
                inner.put(queued.info.uid.clone(), (queued, Place::InFlight, sequence));
            }
            Some((mut queued, place))
                if !changed_for_scheduling(&queued.info, &info)
                    && (place == Place::Gated) == gated =>
            {
                // Only its status moved (often our own condition): it stays where it is.
                queued.info = info;
                let sequence = inner.pods.get(&queued.info.uid).map(|e| e.2).unwrap_or(0);
                inner.put(queued.info.uid.clone(), (queued, place, sequence));
            }
            Some((mut queued, place)) => {
                queued.info = info;
                let target = if gated {
                    Place::Gated
                } else if place == Place::Backoff {
                    Place::Backoff
                } else {
                    // A changed pod may fit now: try it (after its back-off, if any).
                    Place::Active
                };
                self.place(&mut inner, queued, target);
            }
            None => {
                let now = Instant::now();
                let queued = Queued {
                    info,
                    attempts: 0,
                    first_queued: now,
                    queued_at: now,
                    rejected_by: HashSet::new(),
                    popped_at_cycle: 0,
                };
                self.place(
                    &mut inner,
                    queued,
                    if gated { Place::Gated } else { Place::Active },
                );
            }
        }
    }

    /// Forgets a pod (deleted, or bound by someone).
    pub fn remove(&self, uid: &str) {
        self.lock().forget(uid);
    }

    /// A cluster event: unschedulable pods that one of `plugins` rejected move on (to
    /// backoffQ while still backing off, else activeQ).
    pub fn on_event(&self, plugins: &HashSet<&'static str>) {
        let mut inner = self.lock();
        inner.move_requests += 1;
        let waking = inner.unschedulable_where(|q| {
            q.rejected_by.is_empty() || q.rejected_by.iter().any(|p| plugins.contains(p))
        });
        for queued in waking {
            let backing_off = queued.queued_at + self.backoff_of(queued.attempts) > Instant::now();
            self.place(
                &mut inner,
                queued,
                if backing_off {
                    Place::Backoff
                } else {
                    Place::Active
                },
            );
        }
    }

    /// The cycle could not place the pod: to unschedulable (or to backoffQ if an event
    /// came in meanwhile, or `retry` asks for it — errors and failed bindings).
    pub fn requeue(&self, mut queued: Queued, rejected_by: HashSet<&'static str>, retry: bool) {
        let mut inner = self.lock();
        // Deleted or bound while in flight: gone.
        let Some((current, Place::InFlight, _)) = inner.pods.get(&queued.info.uid) else {
            return;
        };
        queued.info = current.info.clone();
        queued.rejected_by = rejected_by;
        let missed_event = inner.move_requests > queued.popped_at_cycle;
        let place = if retry || missed_event {
            Place::Backoff
        } else {
            Place::Unschedulable
        };
        self.place(&mut inner, queued, place);
    }

    /// The cycle is done with a pod it placed.
    pub fn done(&self, uid: &str) {
        let mut inner = self.lock();
        if matches!(inner.pods.get(uid), Some((_, Place::InFlight, _))) {
            inner.forget(uid);
        }
    }

    /// Waits up to `wait` for the next pod to schedule.
    pub fn pop(&self, wait: Duration) -> Option<Queued> {
        let deadline = Instant::now() + wait;
        let mut inner = self.lock();
        loop {
            if inner.closed {
                return None;
            }
            self.flush(&mut inner);
            while let Some(entry) = inner.active.pop() {
                let move_requests = inner.move_requests;
                if let Some((queued, place, sequence)) = inner.pods.get_mut(&entry.uid) {
                    if *place == Place::Active && *sequence == entry.sequence {
                        *place = Place::InFlight;
                        queued.attempts += 1;
                        queued.popped_at_cycle = move_requests;
                        return Some(queued.clone());
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let next_backoff = inner.backoff.peek().map(|e| e.until).unwrap_or(deadline);
            let until = next_backoff.min(deadline).min(now + Duration::from_secs(1));
            let (guard, _) = self
                .ready
                .wait_timeout(inner, until.saturating_duration_since(now))
                .unwrap_or_else(|p| p.into_inner());
            inner = guard;
        }
    }

    /// Moves expired back-offs to activeQ, and long-unschedulable pods on.
    fn flush(&self, inner: &mut Inner) {
        let now = Instant::now();
        while inner.backoff.peek().is_some_and(|e| e.until <= now) {
            let Some(entry) = inner.backoff.pop() else {
                break;
            };
            let current = inner.pods.get(&entry.uid).cloned();
            if let Some((queued, Place::Backoff, sequence)) = current {
                if sequence == entry.sequence {
                    self.place(inner, queued, Place::Active);
                }
            }
        }
        let timeout = self.timings.unschedulable_timeout;
        let stale = inner.unschedulable_where(|q| q.queued_at + timeout <= now);
        for queued in stale {
            self.place(inner, queued, Place::Active);
        }
    }

    /// Wakes every waiting `pop` for good.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    pub fn pending(&self) -> Pending {
        let inner = self.lock();
        let mut pending = Pending::default();
        for (_, place, _) in inner.pods.values() {
            match place {
                Place::Active | Place::InFlight => pending.active += 1,
                Place::Backoff => pending.backoff += 1,
                Place::Unschedulable => pending.unschedulable += 1,
                Place::Gated => pending.gated += 1,
            }
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(uid.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority: Some(priority),
                ..Default::default()
            }),
            ..Default::default()
        })))
    }

    fn quick() -> SchedulingQueue {
        SchedulingQueue::new(Timings {
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(40),
            unschedulable_timeout: Duration::from_millis(200),
        })
    }

    fn popped(queue: &SchedulingQueue) -> Option<String> {
        queue
            .pop(Duration::from_millis(1))
            .map(|q| q.info.uid.clone())
    }

    #[test]
    fn higher_priority_first_then_first_come() {
        let queue = quick();
        queue.upsert(pod("low", 0), false);
        queue.upsert(pod("high", 10), false);
        queue.upsert(pod("low-later", 0), false);
        assert_eq!(popped(&queue).as_deref(), Some("high"));
        assert_eq!(popped(&queue).as_deref(), Some("low"));
        assert_eq!(popped(&queue).as_deref(), Some("low-later"));
        assert_eq!(popped(&queue), None);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_their_plugins_care_about() {
        let queue = quick();
        queue.upsert(pod("p", 0), false);
        let first = queue.pop(Duration::from_millis(1)).expect("pod");
        queue.requeue(first, ["NodeResourcesFit"].into(), false);
        assert_eq!(queue.pending().unschedulable, 1);
        queue.on_event(&["TaintToleration"].into());
        assert_eq!(
            queue.pending().unschedulable,
            1,
            "not an event it waits for"
        );
        queue.on_event(&["NodeResourcesFit"].into());
        // Still backing off after one attempt: 20 ms.
        assert_eq!(queue.pending().backoff, 1);
        assert_eq!(
            queue.pop(Duration::from_millis(100)).map(|q| q.attempts),
            Some(2)
        );
    }

    #[test]
    fn a_removed_or_moved_pod_leaves_the_unschedulable_index() {
        let queue = quick();
        for uid in ["a", "b"] {
            queue.upsert(pod(uid, 0), false);
            let popped = queue.pop(Duration::from_millis(1)).expect("pod");
            queue.requeue(popped, ["NodeResourcesFit"].into(), false);
        }
        assert_eq!(queue.lock().unschedulable.len(), 2);
        queue.remove("a");
        // A spec change moves "b" on without an event.
        let mut changed = Pod::clone(&pod("b", 0).pod);
        changed.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        queue.upsert(Arc::new(PodInfo::new(Arc::new(changed))), false);
        assert!(queue.lock().unschedulable.is_empty());
        queue.on_event(&["NodeResourcesFit"].into());
        let popped: Vec<String> = std::iter::from_fn(|| popped(&queue)).collect();
        assert_eq!(popped, ["b"], "the removed pod stays gone");
    }

    #[test]
    fn an_event_during_the_cycle_sends_the_pod_to_backoff_not_unschedulable() {
        let queue = quick();
        queue.upsert(pod("p", 0), false);
        let first = queue.pop(Duration::from_millis(1)).expect("pod");
        queue.on_event(&["NodeResourcesFit"].into());
        queue.requeue(first, ["NodeResourcesFit"].into(), false);
        assert_eq!(queue.pending().backoff, 1);
    }

    #[test]
    fn unschedulable_pods_are_retried_after_the_timeout_and_gated_pods_wait() {
        let queue = quick();
        queue.upsert(pod("p", 0), false);
        queue.upsert(pod("gated", 0), true);
        let first = queue.pop(Duration::from_millis(1)).expect("pod");
        queue.requeue(first, ["NodeResourcesFit"].into(), false);
        assert_eq!(
            queue
                .pop(Duration::from_millis(50))
                .map(|q| q.info.uid.clone()),
            None
        );
        assert_eq!(
            queue
                .pop(Duration::from_millis(1500))
                .map(|q| q.info.uid.clone())
                .as_deref(),
            Some("p")
        );
        assert_eq!(queue.pending().gated, 1);
        queue.upsert(pod("gated", 0), false);
        assert_eq!(popped(&queue).as_deref(), Some("gated"));
    }

    #[test]
    fn a_status_only_update_leaves_an_unschedulable_pod_waiting_but_a_spec_change_moves_it() {
        let queue = quick();
        queue.upsert(pod("p", 0), false);
        let first = queue.pop(Duration::from_millis(1)).expect("pod");
        queue.requeue(first, ["NodeResourcesFit"].into(), false);
        let mut with_status = Pod::clone(&pod("p", 0).pod);
        with_status.status = Some(Default::default());
        queue.upsert(Arc::new(PodInfo::new(Arc::new(with_status))), false);
        assert_eq!(queue.pending().unschedulable, 1);
        let mut relabelled = Pod::clone(&pod("p", 0).pod);
        relabelled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
        queue.upsert(Arc::new(PodInfo::new(Arc::new(relabelled))), false);
        assert_eq!(queue.pending().unschedulable, 0);
    }

    #[test]
    fn back_off_doubles_to_the_maximum() {
        let queue = SchedulingQueue::new(Timings::default());
        assert_eq!(queue.backoff_of(1), Duration::from_secs(1));
        assert_eq!(queue.backoff_of(2), Duration::from_secs(2));
        assert_eq!(queue.backoff_of(4), Duration::from_secs(8));
        assert_eq!(queue.backoff_of(5), Duration::from_secs(10));
    }
}
