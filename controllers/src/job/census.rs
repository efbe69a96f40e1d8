//! What a Job's pods and status add up to before anything is changed: which pods run, which
//! are being deleted, which the controller still tracks (finalizer on, no removal pending),
//! the success and failure counts its decisions use (status counts plus ends not yet counted,
//! as upstream), the succeeded and failed indexes, and whether the Job must end now — and how.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use rudder_facts::pods::{is_active, is_terminal};

use super::failure_policy::{judge, Verdict};
use super::indexes::{self, fails_index, held_back, index_of, valid_index};
use super::success_policy;
use super::tracking::{has_finalizer, is_failed, succeeded, Ledger};

/// Why and how the Job ends, as its first condition (`FailureTarget` or `SuccessCriteriaMet`)
/// and later its final one (`Failed` or `Complete`) say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub success: bool,
    pub reason: String,
    pub message: String,
}

/// A Job's pods and counts at the start of a sync.
#[derive(Debug)]
pub struct Census {
    pub indexed: bool,
    /// Pods neither finished nor being deleted.
    pub active: Vec<Arc<Pod>>,
    /// Pods being deleted that have not finished.
    pub terminating: Vec<Arc<Pod>>,
    /// Pods showing the tracking finalizer with no removal pending.
    pub tracked: Vec<Arc<Pod>>,
    /// Pods taken as failed (tracked or not), for the back-off and failure counts.
    pub failed_pods: Vec<Arc<Pod>>,
    /// Successes so far (Indexed: succeeded indexes).
    pub succeeded: usize,
    /// Failures so far that count towards `backoffLimit`.
    pub failed: usize,
    /// Indexes done (`completedIndexes` and tracked successes).
    pub succeeded_indexes: BTreeSet<i32>,
    /// Indexes failed for good (with `backoffLimitPerIndex`; None without).
    pub failed_indexes: Option<BTreeSet<i32>>,
    /// Failed pods keeping their finalizer for their index's failure count.
    pub held: BTreeSet<String>,
    /// The Job must end, and how (None: it runs on).
    pub ending: Option<Outcome>,
}

fn condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// With `restartPolicy: OnFailure` a failing container restarts in place and its pod never
/// fails, so (as upstream) the restarts of the Job's pending and running pods count towards
/// `backoffLimit`: their sum reaching it ends the Job (any restart at all with a limit of 0).
fn restarts_reach_limit(spec: &JobSpec, active: &[Arc<Pod>], limit: usize) -> bool {
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    if !on_failure {
        return false;
    }
    let restarts: usize = active
        .iter()
        .filter_map(|pod| pod.status.as_ref())
        .filter(|status| matches!(status.phase.as_deref(), Some("Pending" | "Running")))
        .flat_map(|status| {
            let init = status.init_container_statuses.iter().flatten();
            init.chain(status.container_statuses.iter().flatten())
        })
        .map(|container| usize::try_from(container.restart_count).unwrap_or(0))
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

fn verdict(success: bool, reason: &str, message: impl Into<String>) -> Option<Outcome> {
    Some(Outcome {
        success,
        reason: reason.into(),
        message: message.into(),
    })
}

/// Counts `owned` (the pods the Job controls) against the Job's status; `pending` are the uids
/// whose finalizer removal the informer does not show yet.
pub fn take(job: &Job, owned: &[Arc<Pod>], pending: &HashSet<String>, now: Timestamp) -> Census {
    let spec = job.spec.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions.unwrap_or(0);
    let policy = spec.pod_failure_policy.as_ref();
    let ledger = Ledger::from_status(&status);

    let active: Vec<Arc<Pod>> = owned.iter().filter(|p| is_active(p)).cloned().collect();
    let terminating: Vec<Arc<Pod>> = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && !is_terminal(p))
        .cloned()
        .collect();
    let tracked: Vec<Arc<Pod>> = owned
        .iter()
        .filter(|p| has_finalizer(p) && p.uid().is_some_and(|uid| !pending.contains(&uid)))
        .cloned()
        .collect();
    let failed_pods: Vec<Arc<Pod>> = owned
        .iter()
        .filter(|p| is_failed(job, p, now))
        .cloned()
        .collect();
    let uncounted = |pod: &Pod| pod.uid().is_some_and(|uid| ledger.is_uncounted(&uid));
    let new_succeeded = tracked
        .iter()
        .filter(|p| succeeded(p) && !uncounted(p))
        .count();
    let new_failed = tracked
        .iter()
        .filter(|p| is_failed(job, p, now) && !uncounted(p) && judge(policy, p).counts())
        .count();
    let as_count = |n: i32| usize::try_from(n).unwrap_or(0);
    let mut succeeded_count =
        as_count(ledger.succeeded) + ledger.uncounted_succeeded.len() + new_succeeded;
    let failed = as_count(ledger.failed) + ledger.uncounted_failed.len() + new_failed;

    let mut succeeded_indexes = BTreeSet::new();
    let mut failed_indexes = None;
    let mut held = BTreeSet::new();
    if indexed {
        succeeded_indexes = indexes::parse(
            status.completed_indexes.as_deref().unwrap_or(""),
            completions,
        );
        succeeded_indexes.extend(
            tracked
                .iter()
                .filter(|p| succeeded(p))
                .filter_map(|p| valid_index(p, completions)),
        );
        succeeded_count = succeeded_indexes.len();
        if let Some(limit) = spec.backoff_limit_per_index {
            let mut failed_set =
                indexes::parse(status.failed_indexes.as_deref().unwrap_or(""), completions);
            failed_set.extend(
                tracked
                    .iter()
                    .filter(|p| is_failed(job, p, now) && fails_index(job, p, limit))
                    .filter_map(|p| valid_index(p, completions))
                    .filter(|index| !succeeded_indexes.contains(index)),
            );
            let running: BTreeSet<i32> = active.iter().filter_map(|p| index_of(p)).collect();
            let tracked_failed: Vec<Arc<Pod>> = tracked
                .iter()
                .filter(|p| is_failed(job, p, now))
                .cloned()
                .collect();
            held = held_back(&tracked_failed, &running, &succeeded_indexes, &failed_set);
            failed_indexes = Some(failed_set);
        }
    }

    let ending = decide(
        job,
        &active,
        &failed_pods,
        failed,
        &succeeded_indexes,
        failed_indexes.as_ref(),
        now,
    );
    Census {
        indexed,
        active,
        terminating,
        tracked,
        failed_pods,
        succeeded: succeeded_count,
        failed,
        succeeded_indexes,
        failed_indexes,
        held,
        ending,
    }
}

/// Whether the Job ends now, in upstream's order: an ending already recorded, a `FailJob`
/// rule, `backoffLimit` (unless limited per index), `activeDeadlineSeconds`, too many or all
/// remaining indexes failed, a success policy. (Reaching `completions` is checked after the
/// pods are managed.)
fn decide(
    job: &Job,
    active: &[Arc<Pod>],
    failed_pods: &[Arc<Pod>],
    failed: usize,
    succeeded_indexes: &BTreeSet<i32>,
    failed_indexes: Option<&BTreeSet<i32>>,
    now: Timestamp,
) -> Option<Outcome> {
    let spec = job.spec.clone().unwrap_or_default();
    if let Some(met) = condition(job, "SuccessCriteriaMet") {
        return verdict(
            true,
            met.reason.as_deref().unwrap_or_default(),
            met.message.clone().unwrap_or_default(),
        );
    }
    if let Some(target) = condition(job, "FailureTarget") {
        return verdict(
            false,
            target.reason.as_deref().unwrap_or_default(),
            target.message.clone().unwrap_or_default(),
        );
    }
    let policy = spec.pod_failure_policy.as_ref();
    if let Some(message) = failed_pods.iter().find_map(|pod| match judge(policy, pod) {
        Verdict::FailJob { message } => Some(message),
        _ => None,
    }) {
        return verdict(false, "PodFailurePolicy", message);
    }
    let backoff_limit = usize::try_from(spec.backoff_limit.unwrap_or(6)).unwrap_or(0);
    if spec.backoff_limit_per_index.is_none()
        && (failed > backoff_limit || restarts_reach_limit(&spec, active, backoff_limit))
    {
        return verdict(
            false,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
    }
    let suspended = spec.suspend.unwrap_or(false);
    let started = job.status.as_ref().and_then(|s| s.start_time.as_ref());
    if let (Some(seconds), Some(start), false) = (spec.active_deadline_seconds, started, suspended)
    {
        if now >= start.0 + SignedDuration::from_secs(seconds) {
            return verdict(
                false,
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            );
        }
    }
    let completions = spec.completions.unwrap_or(0);
    if let Some(failed_indexes) = failed_indexes {
        let too_many = spec
            .max_failed_indexes
            .and_then(|max| usize::try_from(max).ok())
            .is_some_and(|max| failed_indexes.len() > max);
        if too_many {
            return verdict(
                false,
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            );
        }
        let finished = failed_indexes.len() + succeeded_indexes.len();
        if !failed_indexes.is_empty() && finished >= usize::try_from(completions).unwrap_or(0) {
            return verdict(false, "FailedIndexes", "Job has failed indexes");
        }
    }
    if spec.completion_mode.as_deref() == Some("Indexed") {
        if let Some(message) =
            success_policy::met(spec.success_policy.as_ref(), completions, succeeded_indexes)
        {
            return verdict(true, success_policy::REASON, message);
        }
    }
    None
}
