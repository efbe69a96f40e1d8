//! Finalizer-based pod tracking (upstream's `batch.kubernetes.io/job-tracking`): every pod the
//! controller creates carries the finalizer, so a pod cannot vanish before its end is counted.
//! A finished pod goes through three steps, each written before the next is taken:
//!
//! ```text
//!  pod finished ──▶ its uid in status.uncountedTerminatedPods ──▶ finalizer removed from
//!   (or deleted        (succeeded / failed list; Indexed            the pod (it may go now)
//!    before it)         successes go to completedIndexes)               │
//!                                                                       ▼
//!                   status.succeeded / status.failed += 1, uid dropped from the list
//! ```
//!
//! A uid in the list whose pod is gone or shows no finalizer any more is counted, so a pod
//! deleted by anyone after it finished is counted exactly once, and a Job never runs a finished
//! pod's work again because the pod went. Removals that the informer does not show yet are
//! remembered ([`Removals`]) so that the stale copy of the pod is not counted twice.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::{Job, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::failure_policy::judge;
use super::indexes::valid_index;

/// The finalizer on every pod of a Job until its end is counted.
pub const FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// At most this many ends wait in `uncountedTerminatedPods` (and are released) per sync, as
/// upstream: the status stays small and a big Job does not hold the controller up; the rest
/// are taken in the next sync.
pub const MAX_UNCOUNTED: usize = 500;

/// Whether the pod carries the tracking finalizer.
pub fn has_finalizer(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == FINALIZER)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Whether the pod succeeded.
pub fn succeeded(pod: &Pod) -> bool {
    phase(pod) == Some("Succeeded")
}

/// Whether the Job replaces a pod only once it is `Failed` (upstream's
/// `podReplacementPolicy: Failed`, the default with a `podFailurePolicy`), rather than as soon
/// as it is being deleted.
pub fn only_failed_replaced(job: &Job) -> bool {
    let spec = job.spec.as_ref();
    match spec.and_then(|s| s.pod_replacement_policy.as_deref()) {
        Some(policy) => policy == "Failed",
        None => spec.is_some_and(|s| s.pod_failure_policy.is_some()),
    }
}

/// Whether the controller takes `pod` as failed: its phase says so, or it is being deleted
/// before it finished — at once, or (when only failed pods are replaced) once nobody will
/// finish it any more: it was never scheduled, or its grace period is over.
pub fn is_failed(job: &Job, pod: &Pod, now: Timestamp) -> bool {
    match phase(pod) {
        Some("Failed") => return true,
        Some("Succeeded") => return false,
        _ => {}
    }
    let Some(deleted) = pod.metadata.deletion_timestamp.as_ref() else {
        return false;
    };
    if !only_failed_replaced(job) {
        return true;
    }
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|node| !node.is_empty());
    !scheduled || deleted.0 <= now
}

/// The counts of the Job's finished pods as its status keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Counted successes (`status.succeeded`; Indexed Jobs count indexes instead).
    pub succeeded: i32,
    /// Counted failures (`status.failed`).
    pub failed: i32,
    /// Finished successfully, finalizer not yet removed.
    pub uncounted_succeeded: Vec<String>,
    /// Failed, finalizer not yet removed.
    pub uncounted_failed: Vec<String>,
}

impl Ledger {
    pub fn from_status(status: &JobStatus) -> Self {
        let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        Ledger {
            succeeded: status.succeeded.unwrap_or(0),
            failed: status.failed.unwrap_or(0),
            uncounted_succeeded: uncounted.succeeded.unwrap_or_default(),
            uncounted_failed: uncounted.failed.unwrap_or_default(),
        }
    }

    /// Writes the ledger into `status` (upstream keeps the empty lists).
    pub fn write(&self, status: &mut JobStatus) {
        status.succeeded = (self.succeeded > 0).then_some(self.succeeded);
        status.failed = (self.failed > 0).then_some(self.failed);
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
            succeeded: (!self.uncounted_succeeded.is_empty())
                .then(|| self.uncounted_succeeded.clone()),
            failed: (!self.uncounted_failed.is_empty()).then(|| self.uncounted_failed.clone()),
        });
    }

    /// Whether `uid` waits in either list.
    pub fn is_uncounted(&self, uid: &str) -> bool {
        self.uncounted_succeeded.iter().any(|u| u == uid)
            || self.uncounted_failed.iter().any(|u| u == uid)
    }

    /// Counts every waiting uid whose pod no longer carries the finalizer (`with_finalizer`
    /// lacks it: gone, or its removal done); whether anything moved.
    pub fn settle(&mut self, with_finalizer: &HashSet<String>) -> bool {
        let before = (self.uncounted_succeeded.len(), self.uncounted_failed.len());
        self.uncounted_succeeded
            .retain(|uid| with_finalizer.contains(uid));
        self.uncounted_failed
            .retain(|uid| with_finalizer.contains(uid));
        let counted = |was: usize, now: usize| i32::try_from(was - now).unwrap_or(i32::MAX);
        self.succeeded = self
            .succeeded
            .saturating_add(counted(before.0, self.uncounted_succeeded.len()));
        self.failed = self
            .failed
            .saturating_add(counted(before.1, self.uncounted_failed.len()));
        before != (self.uncounted_succeeded.len(), self.uncounted_failed.len())
    }
}

/// How the Job is ending, if it is: upstream puts every remaining pod's end on the same side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Still running.
    No,
    /// Succeeded (`SuccessCriteriaMet`): pods still running are just let go.
    Success,
    /// Failed (`FailureTarget`): pods still running count as failed.
    Failure,
}

/// What the tracked pods' ends do this sync.
#[derive(Debug, Default)]
pub struct Harvest {
    /// The pods whose finalizer comes off once the ledger is written.
    pub release: Vec<Arc<Pod>>,
    /// Indexes that succeeded and were not in `completedIndexes` yet (Indexed Jobs).
    pub new_indexes: BTreeSet<i32>,
    /// Whether [`MAX_UNCOUNTED`] stopped the harvest short (the Job cannot finish this sync).
    pub truncated: bool,
}

/// Enters the ends of `tracked` pods (those showing the finalizer, no removal pending) into
/// `ledger`, and says which pods may lose the finalizer: finished ones (but not those in
/// `held`, kept for their index's failure count), and all of them when the Job is deleted or
/// ending. Ignored failures are released without being counted.
pub fn harvest(
    job: &Job,
    tracked: &[Arc<Pod>],
    ledger: &mut Ledger,
    ending: Ending,
    held: &BTreeSet<String>,
    completed: &BTreeSet<i32>,
    now: Timestamp,
) -> Harvest {
    let spec = job.spec.as_ref();
    let indexed = spec.and_then(|s| s.completion_mode.as_deref()) == Some("Indexed");
    let completions = spec.and_then(|s| s.completions).unwrap_or(0);
    let policy = spec.and_then(|s| s.pod_failure_policy.as_ref());
    let deleting = job.metadata.deletion_timestamp.is_some();
    let mut harvest = Harvest::default();
    for pod in tracked {
        let Some(uid) = pod.uid() else {
            continue;
        };
        let failed = is_failed(job, pod, now);
        let releasable =
            deleting || ending != Ending::No || succeeded(pod) || (failed && !held.contains(&uid));
        if !releasable {
            continue;
        }
        let waiting = ledger.uncounted_succeeded.len()
            + ledger.uncounted_failed.len()
            + harvest.new_indexes.len();
        // An end already waiting is always released: that only shortens the list.
        if waiting >= MAX_UNCOUNTED && !ledger.is_uncounted(&uid) {
            harvest.truncated = true;
            break;
        }
        harvest.release.push(pod.clone());
        if succeeded(pod) && !ledger.uncounted_failed.contains(&uid) {
            if indexed {
                if let Some(index) = valid_index(pod, completions) {
                    if !completed.contains(&index) {
                        harvest.new_indexes.insert(index);
                    }
                }
            } else if !ledger.uncounted_succeeded.contains(&uid) {
                ledger.uncounted_succeeded.push(uid);
            }
        } else if failed || ending == Ending::Failure {
            let in_range = !indexed || valid_index(pod, completions).is_some();
            if !ledger.uncounted_failed.contains(&uid) && in_range && judge(policy, pod).counts() {
                ledger.uncounted_failed.push(uid);
            }
        }
    }
    harvest
}

/// The finalizer removals each Job sent that its informer may not show yet, by Job key.
#[derive(Default)]
pub struct Removals {
    jobs: Mutex<HashMap<String, HashSet<String>>>,
}

impl Removals {
    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The finalizer of `uid` is being removed for `job`.
    pub fn expect(&self, job: &str, uid: String) {
        self.jobs().entry(job.to_string()).or_default().insert(uid);
    }

    /// The removal of `uid`'s finalizer failed: nothing to wait for.
    pub fn failed(&self, job: &str, uid: &str) {
        if let Some(uids) = self.jobs().get_mut(job) {
            uids.remove(uid);
        }
    }

    /// The removals `pods` (the informer's view) do not show yet; those it shows are forgotten.
    pub fn pending(&self, job: &str, pods: &[Arc<Pod>]) -> HashSet<String> {
        let mut jobs = self.jobs();
        let Some(uids) = jobs.get_mut(job) else {
            return HashSet::new();
        };
        uids.retain(|uid| {
            pods.iter()
                .any(|pod| pod.uid().as_deref() == Some(uid.as_str()) && has_finalizer(pod))
        });
        let pending = uids.clone();
        if uids.is_empty() {
            jobs.remove(job);
        }
        pending
    }

    /// Forgets `job` (deleted or finished).
    pub fn forget(&self, job: &str) {
        self.jobs().remove(job);
    }
}
