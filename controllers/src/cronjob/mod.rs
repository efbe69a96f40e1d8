//! The CronJob controller: creates a Job from the template at each scheduled time
//! ([`schedule`]: five-field cron, shorthands, time zones), honouring `suspend`,
//! `startingDeadlineSeconds` (a start missed by more is skipped), `concurrencyPolicy`
//! (Allow, Forbid: skip while a Job runs, Replace: delete the running ones), and upstream's
//! missed-schedule rule (after more than 100 missed starts only the latest runs, with an
//! event). It keeps `status.active`, `lastScheduleTime` and `lastSuccessfulTime`, deletes
//! finished Jobs beyond the history limits, and wakes itself at the next scheduled time.

pub mod schedule;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::job::reconcile::finished;
use crate::podtemplate::{controller_reference, delete_exact};
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;
use rudder_facts::owners::is_controlled_by;
use schedule::Schedule;

/// The annotation with the time a Job was scheduled for.
pub const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// upstream: past this many missed starts, only the latest runs.
const MAX_MISSED: usize = 100;

pub struct Context {
    pub client: Client,
    pub jobs: Store<Job>,
    pub recorder: Recorder,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let cronjobs = informers.get::<CronJob>();
    let jobs = informers.get::<Job>();
    let context = Arc::new(Context {
        client: client.clone(),
        jobs: jobs.store.clone(),
        recorder: crate::events::recorder(client.clone(), "cronjob-controller", identity),
    });
    let controller = Controller::for_shared_stream(
        counted(cronjobs.changes, queue.clone(), |cj: &CronJob| {
            Some(key_of(cj))
        }),
        cronjobs.store,
    )
    .owns_shared_stream(jobs.changes);
    runner::run(
        "cronjob", controller, context, queue, 5, shutdown, reconcile,
    )
    .boxed()
}

fn succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// The scheduled times after `since` up to `now`: how many, and the latest.
pub(crate) fn missed(
    schedule: &Schedule,
    since: Timestamp,
    now: Timestamp,
) -> (usize, Option<Timestamp>) {
    let mut count = 0;
    let mut latest = None;
    let mut at = since;
    while let Some(next) = schedule.next_after(at) {
        if next > now {
            break;
        }
        count += 1;
        latest = Some(next);
        at = next;
        // Counting far past the limit tells nothing more; jump to the end.
        if count > MAX_MISSED * 10 {
            break;
        }
    }
    (count, latest)
}

pub async fn reconcile(cronjob: Arc<CronJob>, context: Arc<Context>) -> Result<Action> {
    let (Some(uid), Some(spec)) = (cronjob.uid(), cronjob.spec.as_ref()) else {
        return Ok(Action::await_change());
    };
    if cronjob.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = cronjob.namespace().unwrap_or_default();
    let jobs_api = Api::<Job>::namespaced(context.client.clone(), &namespace);
    let mut owned: Vec<Arc<Job>> = context
        .jobs
        .state()
        .into_iter()
        .filter(|job| job.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|job| is_controlled_by(&job.metadata, &uid))
        .collect();
    owned.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    });
    let previous = cronjob.status.clone().unwrap_or_default();
    let mut status = CronJobStatus {
        last_schedule_time: previous.last_schedule_time.clone(),
        last_successful_time: previous.last_successful_time.clone(),
        active: None,
    };
    // Finished Jobs leave the active list; report the ones newly seen completing.
    for job in owned.iter().filter(|job| finished(job)) {
        let was_active = previous
            .active
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|reference| reference.uid == job.uid());
        if was_active {
            let condition = if succeeded(job) { "Complete" } else { "Failed" };
            publish(
                &context,
                &cronjob,
                "SawCompletedJob",
                format!(
                    "Saw completed job: {}, condition: {condition}",
                    job.name_any()
                ),
                EventType::Normal,
            )
            .await;
        }
        if succeeded(job) {
            let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
            if completed.as_ref().map(|t| t.0) > status.last_successful_time.as_ref().map(|t| t.0) {
                status.last_successful_time = completed;
            }
        }
    }
    let mut active: Vec<Arc<Job>> = owned
        .iter()
        .filter(|job| !finished(job) && job.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();

    let schedule = match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
        Ok(schedule) => Some(schedule),
        Err(error) => {
            publish(
                &context,
                &cronjob,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {error}", spec.schedule),
                EventType::Warning,
            )
            .await;
            None
        }
    };
    let now = Timestamp::now();
    let mut requeue = None;
    if let (Some(schedule), false) = (&schedule, spec.suspend.unwrap_or(false)) {
        let since = status
            .last_schedule_time
            .as_ref()
            .or(cronjob.metadata.creation_timestamp.as_ref())
            .map_or(now, |time| time.0);
        let (count, latest) = missed(schedule, since, now);
        if count > MAX_MISSED {
            publish(&context, &cronjob, "TooManyMissedTimes", format!("too many missed start times: {count}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"), EventType::Warning).await;
        }
        if let Some(scheduled) = latest {
            let too_late = spec.starting_deadline_seconds.is_some_and(|deadline| {
                scheduled
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(deadline))
                    .is_ok_and(|limit| limit < now)
            });
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            if too_late {
                publish(
                    &context,
                    &cronjob,
                    "MissSchedule",
                    format!("Missed scheduled time to start a job: {scheduled}"),
                    EventType::Warning,
                )
                .await;
            } else if policy == "Forbid" && !active.is_empty() {
                // Skipped: it will be looked at again when the running Job finishes.
                publish(&context, &cronjob, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid".into(), EventType::Normal).await;
            } else {
                if policy == "Replace" {
                    for job in active.drain(..) {
                        delete_job(&jobs_api, &job).await?;
                        publish(
                            &context,
                            &cronjob,
                            "SuccessfulDelete",
                            format!("Deleted job {}", job.name_any()),
                            EventType::Normal,
                        )
                        .await;
                    }
                }
                if let Some(job) = create_job(&jobs_api, &cronjob, scheduled).await? {
                    publish(
                        &context,
                        &cronjob,
                        "SuccessfulCreate",
                        format!("Created job {}", job.name_any()),
                        EventType::Normal,
                    )
                    .await;
                    active.push(Arc::new(job));
                }
                status.last_schedule_time = Some(Time(scheduled));
            }
        }
        if let Some(next) = schedule.next_after(now) {
            let wait = std::time::Duration::try_from(next.duration_since(now)).unwrap_or_default();
            requeue = Some(wait + Duration::from_millis(100));
        }
    }

    // History: keep the newest finished Jobs within each limit.
    let finished_jobs: Vec<&Arc<Job>> = owned.iter().filter(|job| finished(job)).collect();
    for (want_success, limit) in [
        (true, spec.successful_jobs_history_limit.unwrap_or(3)),
        (false, spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let kind: Vec<&&Arc<Job>> = finished_jobs
            .iter()
            .filter(|job| succeeded(job) == want_success)
            .collect();
        let excess = kind
            .len()
            .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        for job in kind.into_iter().take(excess) {
            delete_job(&jobs_api, job).await?;
        }
    }

    status.active = (!active.is_empty()).then(|| active.iter().map(|job| reference(job)).collect());
    if cronjob.status.as_ref() != Some(&status) {
        let mut updated = cronjob.as_ref().clone();
        updated.status = Some(status);
        Api::<CronJob>::namespaced(context.client.clone(), &namespace)
            .replace_status(&cronjob.name_any(), &PostParams::default(), &updated)
            .await?;
    }
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

fn reference(job: &Job) -> ObjectReference {
    let mut reference = job.object_ref(&());
    reference.field_path = None;
    reference
}

/// Creates the Job for `scheduled`, named after the CronJob and the minute (so a second try
/// for the same time finds the first); `None` when it already exists.
async fn create_job(
    api: &Api<Job>,
    cronjob: &CronJob,
    scheduled: Timestamp,
) -> Result<Option<Job>> {
    let Some(template) = cronjob.spec.as_ref().map(|spec| spec.job_template.clone()) else {
        return Ok(None);
    };
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED.into(), scheduled.to_string());
    let minutes = scheduled.as_second().div_euclid(60);
    let job = Job {
        metadata: ObjectMeta {
            name: Some(format!("{}-{minutes}", cronjob.name_any())),
            namespace: cronjob.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_reference(cronjob)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    };
    match api.create(&PostParams::default(), &job).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(error) => Err(error.into()),
    }
}

async fn delete_job(api: &Api<Job>, job: &Job) -> Result<()> {
    let policy = Some(PropagationPolicy::Background);
    delete_exact(api, &job.name_any(), job.uid(), policy).await?;
    Ok(())
}

async fn publish(
    context: &Context,
    cronjob: &CronJob,
    reason: &str,
    note: String,
    type_: EventType,
) {
    crate::events::publish(&context.recorder, cronjob, type_, reason, "Sync", note).await;
}
