//! One Job's sync: count its pods, decide whether it is done, failed or suspended, make the
//! number of active pods what it should be, and report status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{EnvVar, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::Context;
use crate::error::Result;
use crate::podtemplate::{delete_exact, pod_from_template};
use crate::runner::key_of;
use rudder_facts::owners::is_controlled_by;
use rudder_facts::pods::{is_active, is_ready};

/// The index of an Indexed Job's pod.
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// upstream's default backoff before re-creating failed pods, and its cap.
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(360);

/// The Job's pods, by what became of them.
pub(crate) struct Pods {
    pub active: Vec<Arc<Pod>>,
    pub succeeded: Vec<Arc<Pod>>,
    pub failed: Vec<Arc<Pod>>,
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
}

pub(crate) fn index_of(pod: &Pod) -> Option<i32> {
    pod.annotations()
        .get(INDEX)
        .and_then(|index| index.parse().ok())
}

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

/// `0-2,4,6-7` from a set of indexes (upstream's `completedIndexes`).
pub(crate) fn compress(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    for &index in indexes {
        run = match run {
            Some((start, end)) if index == end + 1 => Some((start, index)),
            Some((start, end)) => {
                parts.push(if start == end {
                    start.to_string()
                } else {
                    format!("{start}-{end}")
                });
                Some((index, index))
            }
            None => Some((index, index)),
        };
    }
    if let Some((start, end)) = run {
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// How many pods should run now, and (Indexed) which indexes to start.
pub(crate) fn wanted(
    parallelism: i32,
    completions: Option<i32>,
    indexed: bool,
    succeeded: usize,
    succeeded_indexes: &BTreeSet<i32>,
    active_indexes: &BTreeSet<i32>,
) -> (usize, Vec<i32>) {
    let parallelism = usize::try_from(parallelism).unwrap_or(0);
    match (completions, indexed) {
        (Some(completions), true) => {
            let missing: Vec<i32> = (0..completions)
                .filter(|i| !succeeded_indexes.contains(i) && !active_indexes.contains(i))
                .collect();
            let remaining = (0..completions)
                .filter(|i| !succeeded_indexes.contains(i))
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

pub async fn reconcile(job: Arc<Job>, context: Arc<Context>) -> Result<Action> {
    let key = key_of(job.as_ref());
    let (Some(uid), Some(spec)) = (job.uid(), job.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if job.metadata.deletion_timestamp.is_some() || finished(&job) {
        context.expectations.forget(&key);
        return Ok(Action::await_change());
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
    let pods = Pods {
        active: owned.iter().filter(|p| is_active(p)).cloned().collect(),
        succeeded: owned
            .iter()
            .filter(|p| phase(p) == Some("Succeeded"))
            .cloned()
            .collect(),
        failed: owned
            .iter()
            .filter(|p| phase(p) == Some("Failed"))
            .cloned()
            .collect(),
    };
    let now = Timestamp::now();
    let previous = job.status.clone().unwrap_or_default();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let succeeded_indexes: BTreeSet<i32> =
        pods.succeeded.iter().filter_map(|p| index_of(p)).collect();
    let succeeded = if indexed {
        succeeded_indexes.len()
    } else {
        pods.succeeded.len()
    }
    .max(usize::try_from(previous.succeeded.unwrap_or(0)).unwrap_or(0));
    let failed = pods
        .failed
        .len()
        .max(usize::try_from(previous.failed.unwrap_or(0)).unwrap_or(0));
    let mut conditions = previous.conditions.clone().unwrap_or_default();
    let mut status = JobStatus {
        start_time: previous.start_time.clone(),
        ..JobStatus::default()
    };
    let mut requeue: Option<Duration> = None;

    let suspended = spec.suspend.unwrap_or(false);
    if suspended {
        delete_pods(&context, &api, &job, &key, &pods.active).await?;
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
        }
        let start = status.start_time.get_or_insert(Time(now)).clone();
        let deadline = spec
            .active_deadline_seconds
            .map(|seconds| start.0 + SignedDuration::from_secs(seconds));
        let backoff_limit = usize::try_from(spec.backoff_limit.unwrap_or(6)).unwrap_or(0);
        let done = match (spec.completions, indexed) {
            (Some(completions), _) => succeeded >= usize::try_from(completions).unwrap_or(0),
            (None, _) => succeeded > 0 && pods.active.is_empty(),
        };
        let failure = if failed > backoff_limit {
            Some((
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ))
        } else if deadline.is_some_and(|deadline| now >= deadline) {
            Some((
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            ))
        } else {
            None
        };
        if let Some((reason, message)) = failure {
            delete_pods(&context, &api, &job, &key, &pods.active).await?;
            set_condition(
                &mut conditions,
                "FailureTarget",
                "True",
                reason,
                message,
                now,
            );
            set_condition(&mut conditions, "Failed", "True", reason, message, now);
            publish(&context, &job, reason, message.into(), EventType::Warning).await;
        } else if done {
            let message = "Reached expected number of succeeded pods";
            set_condition(
                &mut conditions,
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                message,
                now,
            );
            set_condition(
                &mut conditions,
                "Complete",
                "True",
                "CompletionsReached",
                message,
                now,
            );
            status.completion_time = Some(Time(now));
            publish(
                &context,
                &job,
                "Completed",
                "Job completed".into(),
                EventType::Normal,
            )
            .await;
        } else {
            let active_indexes: BTreeSet<i32> =
                pods.active.iter().filter_map(|p| index_of(p)).collect();
            let (want, missing_indexes) = wanted(
                spec.parallelism.unwrap_or(1),
                spec.completions,
                indexed,
                succeeded,
                &succeeded_indexes,
                &active_indexes,
            );
            let exists = |uid: &str| owned.iter().any(|p| p.uid().as_deref() == Some(uid));
            let live = |uid: &str| {
                owned.iter().any(|p| {
                    p.uid().as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()
                })
            };
            if context.expectations.satisfied(&key, exists, live) {
                if pods.active.len() < want {
                    match backoff_remaining(&pods.failed, now) {
                        Some(wait) if !wait.is_zero() => requeue = Some(wait),
                        _ => {
                            let count = want - pods.active.len();
                            let indexes: Vec<Option<i32>> = if indexed {
                                missing_indexes.into_iter().take(count).map(Some).collect()
                            } else {
                                vec![None; count]
                            };
                            create_pods(&context, &api, &job, &key, &uid, indexes).await?;
                        }
                    }
                } else if pods.active.len() > want {
                    let mut extra = pods.active.clone();
                    extra.sort_by(|a, b| {
                        b.metadata
                            .creation_timestamp
                            .cmp(&a.metadata.creation_timestamp)
                    });
                    extra.truncate(pods.active.len() - want);
                    delete_pods(&context, &api, &job, &key, &extra).await?;
                }
            }
            if let Some(deadline) = deadline {
                let left =
                    std::time::Duration::try_from(deadline.duration_since(now)).unwrap_or_default();
                requeue = Some(requeue.map_or(left, |r| r.min(left)));
            }
        }
    }

    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    status.active = (!pods.active.is_empty()).then(|| count(pods.active.len()));
    status.ready = Some(count(pods.active.iter().filter(|p| is_ready(p)).count()));
    status.succeeded = (succeeded > 0).then(|| count(succeeded));
    status.failed = (failed > 0).then(|| count(failed));
    status.completion_time = status.completion_time.or(previous.completion_time.clone());
    status.completed_indexes =
        (indexed && !succeeded_indexes.is_empty()).then(|| compress(&succeeded_indexes));
    status.terminating = Some(count(
        owned
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_some() && !rudder_facts::pods::is_terminal(p)
            })
            .count(),
    ));
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    if job.status.as_ref() != Some(&status) {
        let mut updated = job.as_ref().clone();
        updated.status = Some(status);
        Api::<Job>::namespaced(context.client.clone(), &namespace)
            .replace_status(&job.name_any(), &PostParams::default(), &updated)
            .await?;
    }
    Ok(match requeue {
        Some(after) => Action::requeue(after.max(Duration::from_millis(100))),
        None => Action::await_change(),
    })
}

/// How long until failed pods may be replaced: 10 s doubling per failure (at most 6 min) from
/// the latest failure.
pub(crate) fn backoff_remaining(failed: &[Arc<Pod>], now: Timestamp) -> Option<Duration> {
    if failed.is_empty() {
        return None;
    }
    let exponent = u32::try_from(failed.len() - 1).unwrap_or(u32::MAX).min(16);
    let delay = BACKOFF_BASE
        .checked_mul(2u32.pow(exponent))
        .unwrap_or(BACKOFF_MAX)
        .min(BACKOFF_MAX);
    let last = failed.iter().filter_map(|pod| finished_at(pod)).max()?;
    let ready_at = last + SignedDuration::try_from(delay).ok()?;
    Some(std::time::Duration::try_from(ready_at.duration_since(now)).unwrap_or_default())
}

/// When a pod's containers finished (or, lacking that, when it was created).
fn finished_at(pod: &Pod) -> Option<Timestamp> {
    let finished = pod
        .status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|status| {
            status
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .as_ref()
        })
        .map(|time| time.0)
        .max();
    finished.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|time| time.0))
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

/// The template with the labels upstream gives a Job's pods, and (Indexed) its index.
fn template_for(job: &Job, uid: &str, index: Option<i32>) -> PodTemplateSpec {
    let mut template = job
        .spec
        .as_ref()
        .map(|spec| spec.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    let name = job.name_any();
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid.to_string()),
        ("batch.kubernetes.io/job-name", name.clone()),
        ("controller-uid", uid.to_string()),
        ("job-name", name.clone()),
    ] {
        labels.entry(key.into()).or_insert(value);
    }
    if let Some(index) = index {
        labels.insert(INDEX.into(), index.to_string());
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(INDEX.into(), index.to_string());
        if let Some(spec) = template.spec.as_mut() {
            spec.hostname
                .get_or_insert_with(|| format!("{name}-{index}"));
            for container in spec.containers.iter_mut() {
                container.env.get_or_insert_with(Vec::new).push(EnvVar {
                    name: "JOB_COMPLETION_INDEX".into(),
                    value: Some(index.to_string()),
                    value_from: None,
                });
            }
        }
    }
    template
}

async fn create_pods(
    context: &Context,
    api: &Api<Pod>,
    job: &Job,
    key: &str,
    uid: &str,
    indexes: Vec<Option<i32>>,
) -> Result<()> {
    let requests = indexes.into_iter().map(|index| {
        let template = template_for(job, uid, index);
        let prefix = match index {
            Some(index) => format!("{}-{index}", job.name_any()),
            None => job.name_any(),
        };
        let pod = pod_from_template(job, &template, &prefix);
        async move { api.create(&PostParams::default(), &pod).await }
    });
    for result in futures::future::join_all(requests).await {
        match result {
            Ok(pod) => {
                if let Some(uid) = pod.uid() {
                    context.expectations.created(key, uid);
                }
                publish(
                    context,
                    job,
                    "SuccessfulCreate",
                    format!("Created pod: {}", pod.name_any()),
                    EventType::Normal,
                )
                .await;
            }
            Err(kube::Error::Api(status))
                if status.code == 403 && status.message.contains("being terminated") => {}
            Err(error) => {
                publish(
                    context,
                    job,
                    "FailedCreate",
                    format!("Error creating: {error}"),
                    EventType::Warning,
                )
                .await;
                return Err(error.into());
            }
        }
    }
    Ok(())
}

async fn delete_pods(
    context: &Context,
    api: &Api<Pod>,
    job: &Job,
    key: &str,
    pods: &[Arc<Pod>],
) -> Result<()> {
    for pod in pods {
        if delete_exact(api, &pod.name_any(), pod.uid(), None).await? {
            if let Some(uid) = pod.uid() {
                context.expectations.deleted(key, uid);
            }
            let note = format!("Deleted pod: {}", pod.name_any());
            publish(context, job, "SuccessfulDelete", note, EventType::Normal).await;
        }
    }
    Ok(())
}

async fn publish(context: &Context, job: &Job, reason: &str, note: String, type_: EventType) {
    crate::events::publish(&context.recorder, job, type_, reason, "Sync", note).await;
}
