//! One Job's sync, in upstream's order: take the census of its pods; if the Job must end,
//! delete the pods still running, otherwise make the number of running pods what it should be
//! (or, suspended, none); then track the finished pods' ends (see `tracking`), write the
//! status, and add the final condition once nothing is left uncounted or terminating.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::backoff;
use super::census::{self, Census, Outcome};
use super::indexes::{compress, index_of, next_failure_counts};
use super::pod_control::{create_pods, delete_pods, publish, release_tracked, Deletion, NewPod};
use super::tracking::{harvest, has_finalizer, only_failed_replaced, Ending, Ledger};
use super::Context;
use crate::error::Result;
use crate::runner::key_of;
use rudder_facts::owners::is_controlled_by;
use rudder_facts::pods::is_ready;

/// The `spec.managedBy` of Jobs this controller runs (the default).
const MANAGER: &str = "kubernetes.io/job-controller";

fn has_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
}

/// Whether the Job has finished (completed or failed).
pub fn finished(job: &Job) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

/// How many pods should run now, and (Indexed) which indexes to start: those neither `done`
/// (succeeded or failed) nor running.
pub(crate) fn wanted(
    parallelism: i32,
    completions: Option<i32>,
    indexed: bool,
    succeeded: usize,
    done_indexes: &BTreeSet<i32>,
    running_indexes: &BTreeSet<i32>,
) -> (usize, Vec<i32>) {
    let parallelism = usize::try_from(parallelism).unwrap_or(0);
    match (completions, indexed) {
        (Some(completions), true) => {
            let missing: Vec<i32> = (0..completions)
                .filter(|i| !done_indexes.contains(i) && !running_indexes.contains(i))
                .collect();
            let remaining = (0..completions)
                .filter(|i| !done_indexes.contains(i))
                .count();
            (parallelism.min(remaining), missing)
        }
        (Some(completions), false) => {
            let completions = usize::try_from(completions).unwrap_or(0);
            (
                parallelism.min(completions.saturating_sub(succeeded)),
                Vec::new(),
            )
        }
        // Without completions, a success means no more pods.
        (None, _) => (if succeeded > 0 { 0 } else { parallelism }, Vec::new()),
    }
}

/// Whether the store's copy of the Job is older than the status this controller last wrote
/// (resourceVersions compared as numbers where they are numbers), so its counts would be stale.
fn stale(context: &Context, key: &str, job: &Job) -> bool {
    let written = context
        .written
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(key)
        .copied();
    let seen = job
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok());
    matches!((written, seen), (Some(written), Some(seen)) if seen < written)
}

pub async fn reconcile(job: Arc<Job>, context: Arc<Context>) -> Result<Action> {
    let key = key_of(job.as_ref());
    let (Some(uid), Some(spec)) = (job.uid(), job.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if spec
        .managed_by
        .as_deref()
        .is_some_and(|manager| manager != MANAGER)
    {
        // Another controller runs this Job (upstream's `managedBy`).
        return Ok(Action::await_change());
    }
    if stale(&context, &key, &job) {
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let namespace = job.namespace().unwrap_or_default();
    let api = Api::<Pod>::namespaced(context.client.clone(), &namespace);
    let owned: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|pod| is_controlled_by(&pod.metadata, &uid))
        .collect();
    let pending = context.removals.pending(&key, &owned);
    if finished(&job) {
        // Nothing more to count: whatever still carries the finalizer may go. The store shows
        // the final write, so there is no stale copy left to guard against.
        context.expectations.forget(&key);
        context
            .written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&key);
        release_all(&context, &api, &key, &owned, &pending).await?;
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let census = census::take(&job, &owned, &pending, now);
    tracing::debug!(
        job = %key,
        active = census.active.len(),
        succeeded = census.succeeded,
        failed = census.failed,
        ending = ?census.ending.as_ref().map(|o| o.reason.as_str()),
        "counted the Job's pods"
    );
    let previous = job.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    let mut conditions = previous.conditions.clone().unwrap_or_default();
    let mut requeue: Option<Duration> = None;
    let suspended = spec.suspend.unwrap_or(false);
    let mut terminating = census.terminating.len();
    let mut active = census.active.clone();
    let deleting = job.metadata.deletion_timestamp.is_some();

    let mut ending = census.ending.clone();
    if ending.is_some() {
        delete_pods(&context, &api, &job, &key, &active, Deletion::Counted).await?;
        terminating += active.len();
        active.clear();
    } else if !deleting {
        if suspended {
            let deleted =
                delete_pods(&context, &api, &job, &key, &active, Deletion::Uncounted).await?;
            terminating += deleted;
            active.clear();
            set_condition(
                &mut conditions,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            );
            status.start_time = None;
        } else {
            if has_condition(&job, "Suspended") {
                set_condition(
                    &mut conditions,
                    "Suspended",
                    "False",
                    "JobResumed",
                    "Job resumed",
                    now,
                );
                status.start_time = None;
            }
            let start = status.start_time.get_or_insert(Time(now)).clone();
            requeue = manage(&context, &api, &job, &key, &uid, &census, &owned, now).await?;
            if let Some(seconds) = spec.active_deadline_seconds {
                let deadline = start.0 + SignedDuration::from_secs(seconds);
                let left = Duration::try_from(deadline.duration_since(now)).unwrap_or_default();
                requeue = Some(requeue.map_or(left, |r| r.min(left)));
            }
        }
        let reached = match spec.completions {
            Some(completions) => census.succeeded >= usize::try_from(completions).unwrap_or(0),
            None => census.succeeded > 0,
        };
        if reached && census.active.is_empty() && !suspended {
            ending = Some(Outcome {
                success: true,
                reason: "CompletionsReached".into(),
                message: "Reached expected number of succeeded pods".into(),
            });
        }
    }

    // Track the ends.
    let mut ledger = Ledger::from_status(&previous);
    let mut with_finalizer: HashSet<String> =
        census.tracked.iter().filter_map(|p| p.uid()).collect();
    ledger.settle(&with_finalizer);
    let side = match &ending {
        None => Ending::No,
        Some(outcome) if outcome.success => Ending::Success,
        Some(_) => Ending::Failure,
    };
    let harvested = harvest(
        &job,
        &census.tracked,
        &mut ledger,
        side,
        &census.held,
        &census.succeeded_indexes,
        now,
    );
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    status.active = (!active.is_empty()).then(|| count(active.len()));
    status.ready = Some(count(active.iter().filter(|p| is_ready(p)).count()));
    status.terminating = Some(count(terminating));
    if let Some(outcome) = &ending {
        let (type_, present) = if outcome.success {
            (
                "SuccessCriteriaMet",
                has_condition(&job, "SuccessCriteriaMet"),
            )
        } else {
            ("FailureTarget", has_condition(&job, "FailureTarget"))
        };
        if !present {
            set_condition(
                &mut conditions,
                type_,
                "True",
                &outcome.reason,
                &outcome.message,
                now,
            );
        }
    }
    let new_indexes = &harvested.new_indexes;
    compose(&mut status, &ledger, &conditions, &census, new_indexes);
    let mut current = write_status(&context, &key, &job, status.clone()).await?;

    // Take the finalizer off what is counted (or let go), then count it.
    let mut failure = None;
    for pod in &harvested.release {
        let Some(pod_uid) = pod.uid() else { continue };
        match release_tracked(&context, &api, &key, pod, &pod_uid).await {
            Ok(()) => {
                with_finalizer.remove(&pod_uid);
            }
            // What was released is still counted below; the sync fails after.
            Err(error) => failure = Some(error),
        }
    }
    ledger.settle(&with_finalizer);
    let all_counted = ledger.uncounted_succeeded.is_empty() && ledger.uncounted_failed.is_empty();
    let mut final_note = None;
    let settled = all_counted && terminating == 0 && !harvested.truncated;
    if let Some(outcome) = ending.as_ref().filter(|_| settled) {
        let (type_, reason, note) = if outcome.success {
            ("Complete", "Completed", "Job completed".to_string())
        } else {
            ("Failed", outcome.reason.as_str(), outcome.message.clone())
        };
        set_condition(
            &mut conditions,
            type_,
            "True",
            &outcome.reason,
            &outcome.message,
            now,
        );
        if outcome.success {
            status.completion_time = Some(Time(now));
        }
        final_note = Some((reason.to_string(), note, outcome.success));
    }
    compose(&mut status, &ledger, &conditions, &census, new_indexes);
    current = write_status(&context, &key, &current, status).await?;
    if let Some((reason, note, success)) = final_note {
        let type_ = if success {
            EventType::Normal
        } else {
            EventType::Warning
        };
        publish(&context, &current, &reason, note, type_).await;
    }
    if let Some(error) = failure {
        return Err(error);
    }
    if deleting && census.tracked.iter().all(|p| !has_finalizer(p)) {
        context.expectations.forget(&key);
    }
    Ok(match requeue {
        Some(after) => Action::requeue(after.max(Duration::from_millis(100))),
        None => Action::await_change(),
    })
}

/// Puts the ledger's counts, the indexes and the conditions into `status`.
fn compose(
    status: &mut JobStatus,
    ledger: &Ledger,
    conditions: &[JobCondition],
    census: &Census,
    new_indexes: &BTreeSet<i32>,
) {
    ledger.write(status);
    if census.indexed {
        let mut succeeded = census.succeeded_indexes.clone();
        succeeded.extend(new_indexes.iter().copied());
        let count = i32::try_from(succeeded.len()).unwrap_or(i32::MAX);
        status.succeeded = (!succeeded.is_empty()).then_some(count);
        status.completed_indexes = (!succeeded.is_empty()).then(|| compress(&succeeded));
        status.failed_indexes = census.failed_indexes.as_ref().map(compress);
    }
    status.conditions = (!conditions.is_empty()).then(|| conditions.to_vec());
}

/// Creates or deletes pods so that the right number run, once the informer shows what was
/// done before; how long to wait for the back-off of failed pods, if that holds creation back.
#[allow(clippy::too_many_arguments)]
async fn manage(
    context: &Context,
    api: &Api<Pod>,
    job: &Job,
    key: &str,
    uid: &str,
    census: &Census,
    owned: &[Arc<Pod>],
    now: Timestamp,
) -> Result<Option<Duration>> {
    let Some(spec) = job.spec.as_ref() else {
        return Ok(None);
    };
    let exists = |uid: &str| owned.iter().any(|p| p.uid().as_deref() == Some(uid));
    let live = |uid: &str| {
        owned
            .iter()
            .any(|p| p.uid().as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none())
    };
    if !context.expectations.satisfied(key, exists, live) {
        return Ok(None);
    }
    // Pods being deleted hold their place until they failed when only failed pods are
    // replaced.
    let holding: Vec<&Arc<Pod>> = if only_failed_replaced(job) {
        census
            .active
            .iter()
            .chain(census.terminating.iter())
            .collect()
    } else {
        census.active.iter().collect()
    };
    let running_indexes: BTreeSet<i32> = holding.iter().filter_map(|p| index_of(p)).collect();
    let mut done = census.succeeded_indexes.clone();
    if let Some(failed) = census.failed_indexes.as_ref() {
        done.extend(failed.iter().copied());
    }
    let (want, missing) = wanted(
        spec.parallelism.unwrap_or(1),
        spec.completions,
        census.indexed,
        census.succeeded,
        &done,
        &running_indexes,
    );
    let running = holding.len();
    let per_index = census.indexed && spec.backoff_limit_per_index.is_some();
    let mut requeue = None;
    if running < want {
        if !per_index {
            let wait = backoff::job_remaining(&census.failed_pods, now);
            if let Some(wait) = wait.filter(|w| !w.is_zero()) {
                return Ok(Some(wait));
            }
        }
        let count = want - running;
        let new: Vec<NewPod> = if census.indexed {
            let counts = next_failure_counts(job, &census.failed_pods);
            let mut ready = Vec::new();
            for index in missing {
                let failures = counts.get(&index).copied().unwrap_or(0);
                // Per index, an index still backing off waits alone.
                let wait = per_index
                    .then(|| backoff::index_remaining(&census.failed_pods, index, failures, now))
                    .flatten()
                    .filter(|w| !w.is_zero());
                if let Some(wait) = wait {
                    requeue = Some(requeue.map_or(wait, |r: Duration| r.min(wait)));
                    continue;
                }
                if ready.len() < count {
                    ready.push(NewPod {
                        index: Some(index),
                        failure_count: per_index.then_some(failures),
                    });
                }
            }
            ready
        } else {
            vec![
                NewPod {
                    index: None,
                    failure_count: None
                };
                count
            ]
        };
        create_pods(context, api, job, key, uid, new).await?;
    } else if census.active.len() > want {
        let mut extra = census.active.clone();
        extra.sort_by(|a, b| {
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
        });
        extra.truncate(census.active.len() - want);
        delete_pods(context, api, job, key, &extra, Deletion::Uncounted).await?;
    }
    Ok(requeue)
}

/// Writes `status` as the Job's (against the Job's resourceVersion) unless it already is; the
/// Job as written.
async fn write_status(context: &Context, key: &str, job: &Job, status: JobStatus) -> Result<Job> {
    if job.status.as_ref() == Some(&status) {
        return Ok(job.clone());
    }
    let mut updated = job.clone();
    updated.status = Some(status);
    let written =
        Api::<Job>::namespaced(context.client.clone(), &job.namespace().unwrap_or_default())
            .replace_status(&job.name_any(), &PostParams::default(), &updated)
            .await?;
    if let Some(version) = written
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
    {
        context
            .written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(key.to_string(), version);
    }
    Ok(written)
}

/// Takes the finalizer off every pod of a finished Job that still carries it.
async fn release_all(
    context: &Context,
    api: &Api<Pod>,
    key: &str,
    owned: &[Arc<Pod>],
    pending: &HashSet<String>,
) -> Result<()> {
    for pod in owned.iter().filter(|p| has_finalizer(p)) {
        let Some(uid) = pod.uid() else { continue };
        if pending.contains(&uid) {
            continue;
        }
        release_tracked(context, api, key, pod, &uid).await?;
    }
    Ok(())
}

fn set_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status == status {
            return;
        }
        existing.status = status.into();
        existing.reason = Some(reason.into());
        existing.message = Some(message.into());
        existing.last_transition_time = Some(Time(now));
        existing.last_probe_time = Some(Time(now));
        return;
    }
    conditions.push(JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(Time(now)),
        last_probe_time: Some(Time(now)),
    });
}
