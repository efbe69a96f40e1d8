//! Pods that carry the Job tracking finalizer but have no Job left to count them — their Job
//! was deleted, or they were released from it — lose the finalizer, so they can go (upstream's
//! orphan queue). Two events lead here: a pod changes (a pod whose controller is not a Job is
//! left alone; one whose Job the informer does not show is checked with a live read first, so
//! a Job the informer has not caught up with keeps its pods), and a Job is deleted (each of its
//! pods still holding the finalizer is released — the pod's own last change may have come
//! while the informer still showed the Job).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::pod_control::release;
use super::reconcile::finished;
use super::tracking::has_finalizer;
use crate::error::Result;
use crate::informers::Change;
use rudder_facts::owners::is_controlled_by;

/// What an orphan candidate's controller reference says.
#[derive(Debug, PartialEq, Eq)]
pub enum Owner {
    /// No controller at all: an orphan.
    None,
    /// Controlled by something that is not a batch/v1 Job: not ours to touch.
    Other,
    /// Controlled by the Job `name` with `uid`.
    Job { name: String, uid: String },
}

/// The controller of `pod`, as far as the Job controller cares.
pub fn owner(pod: &Pod) -> Owner {
    let Some(reference) = pod
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    else {
        return Owner::None;
    };
    if reference.kind != "Job" || reference.api_version != "batch/v1" {
        return Owner::Other;
    }
    Owner::Job {
        name: reference.name.clone(),
        uid: reference.uid.clone(),
    }
}

/// Whether `job` (if any) still counts the pods of a Job with `uid`.
fn counts_pods(job: Option<&Job>, uid: &str) -> bool {
    job.is_some_and(|job| job.uid().as_deref() == Some(uid) && !finished(job))
}

/// What wakes the orphan loop.
enum Event {
    /// A pod changed (or was deleted).
    Pod(Arc<Pod>),
    /// A Job was deleted.
    JobGone(Arc<Job>),
}

/// The informers the orphan loop reads.
pub struct Sources<P, J> {
    pub jobs: Store<Job>,
    pub pods: Store<Pod>,
    pub pod_changes: P,
    pub job_changes: J,
}

/// Releases the finalizer of each pod that no Job will count, until `shutdown`.
pub async fn run<P, J>(client: Client, sources: Sources<P, J>, shutdown: CancellationToken)
where
    P: Stream<Item = Arc<Pod>> + Send + 'static,
    J: Stream<Item = Change<Job>> + Send + 'static,
{
    let pod_events = sources.pod_changes.map(Event::Pod);
    let job_events = sources
        .job_changes
        .filter(|change| futures::future::ready(change.deleted))
        .map(|change| Event::JobGone(change.object));
    let mut events = Box::pin(
        futures::stream::select(pod_events, job_events).take_until(shutdown.cancelled_owned()),
    );
    while let Some(event) = events.next().await {
        let pods: Vec<Arc<Pod>> = match event {
            Event::Pod(pod) if has_finalizer(&pod) => vec![pod],
            Event::Pod(_) => continue,
            Event::JobGone(job) => {
                let Some(uid) = job.uid() else { continue };
                sources
                    .pods
                    .state()
                    .into_iter()
                    .filter(|pod| has_finalizer(pod))
                    .filter(|pod| is_controlled_by(&pod.metadata, &uid))
                    .collect()
            }
        };
        for pod in pods {
            let span =
                tracing::info_span!("orphan job pod", pod = %crate::runner::key_of(pod.as_ref()));
            if let Err(error) = settle(&client, &sources.jobs, &pod).instrument(span).await {
                tracing::warn!(%error, pod = %pod.name_any(), "cannot release an orphaned Job pod");
            }
        }
    }
}

async fn settle(client: &Client, jobs: &Store<Job>, pod: &Pod) -> Result<()> {
    let namespace = pod.namespace().unwrap_or_default();
    match owner(pod) {
        Owner::Other => return Ok(()),
        Owner::None => {}
        Owner::Job { name, uid } => {
            let cached = jobs.get(&ObjectRef::new(&name).within(&namespace));
            if counts_pods(cached.as_deref(), &uid) {
                return Ok(());
            }
            if cached.is_none() {
                let live = Api::<Job>::namespaced(client.clone(), &namespace)
                    .get_opt(&name)
                    .await?;
                if counts_pods(live.as_ref(), &uid) {
                    return Ok(());
                }
            }
            // A Job that exists but has finished is the Job controller's to release.
            if cached.is_some_and(|job| job.uid().as_deref() == Some(uid.as_str())) {
                return Ok(());
            }
        }
    }
    release(&Api::namespaced(client.clone(), &namespace), pod).await?;
    tracing::info!(pod = %pod.name_any(), "released an orphaned Job pod's tracking finalizer");
    Ok(())
}
