//! The TTL-after-finished controller: deletes a finished Job (and, through foreground
//! deletion, its pods) once `ttlSecondsAfterFinished` has passed since it completed or failed.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub struct Context {
    pub client: Client,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let jobs = informers.get::<Job>();
    let context = Arc::new(Context { client });
    let controller = Controller::for_shared_stream(
        counted(jobs.changes, queue.clone(), |job: &Job| Some(key_of(job))),
        jobs.store,
    );
    runner::run(
        "ttl-after-finished",
        controller,
        context,
        queue,
        5,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// When the Job finished: the transition time of its `Complete` or `Failed` condition.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .filter_map(|c| c.last_transition_time.as_ref().map(|time| time.0))
        .min()
}

pub async fn reconcile(job: Arc<Job>, context: Arc<Context>) -> Result<Action> {
    let Some(ttl) = job
        .spec
        .as_ref()
        .and_then(|spec| spec.ttl_seconds_after_finished)
    else {
        return Ok(Action::await_change());
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(finished) = finished_at(&job) else {
        return Ok(Action::await_change());
    };
    let expires = finished + SignedDuration::from_secs(i64::from(ttl));
    let now = Timestamp::now();
    if now < expires {
        let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
        return Ok(Action::requeue(left + Duration::from_millis(100)));
    }
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions {
            uid: job.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Job>::namespaced(context.client.clone(), &job.namespace().unwrap_or_default())
        .delete(&job.name_any(), &params)
        .await
    {
        Ok(_) => {
            tracing::info!(job = %key_of(job.as_ref()), "deleted a finished Job past its TTL");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Action::await_change())
        }
        Err(error) => Err(error.into()),
    }
}
