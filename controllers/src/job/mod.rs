//! The Job controller: runs a Job's pods to completion — `parallelism` at a time until
//! `completions` succeed (or, without completions, until one succeeds and the rest are done),
//! one pod per index in Indexed mode — and fails the Job past `backoffLimit` failures (with
//! `restartPolicy: OnFailure`, container restarts in its running pods) or
//! `activeDeadlineSeconds`, re-creating failed pods after client-go's exponential delay (10 s
//! doubling, at most 6 min; `backoff`, per index with `backoffLimitPerIndex`). `suspend` stops
//! its pods. Status carries the counts, the start
//! and completion times, completed indexes, and upstream's conditions (`SuccessCriteriaMet`,
//! `Complete`, `FailureTarget`, `Failed`, `Suspended`), `ready` and `terminating` counts.
//!
//! Pods are tracked with upstream's `batch.kubernetes.io/job-tracking` finalizer (`tracking`):
//! a finished pod's end is recorded, then its finalizer removed, then it is counted, so a pod
//! deleted after it finished is counted once and never run again. `podFailurePolicy`
//! (`failure_policy`) decides per failed pod whether it fails the Job, its index, is ignored
//! or counts; Indexed Jobs may limit failures per index (`indexes`: `backoffLimitPerIndex`,
//! `maxFailedIndexes`, `failedIndexes`) and succeed early by a `successPolicy`
//! (`success_policy`). `census` counts a Job's pods, `reconcile` acts on it, `pod_control`
//! writes pods, and `orphans` releases pods whose Job is gone.
//!
//! The `ttl` module is the TTL-after-finished controller, which deletes finished Jobs once
//! `ttlSecondsAfterFinished` has passed.

mod backoff;
pub(crate) mod census;
pub mod failure_policy;
pub mod indexes;
pub mod orphans;
pub(crate) mod pod_control;
pub(crate) mod reconcile;
pub mod success_policy;
#[cfg(test)]
mod tests;
pub mod tracking;
pub mod ttl;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Controller;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::expectations::Expectations;
use crate::informers::Informers;
use crate::replicaset::owner_key;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub use reconcile::reconcile;

/// What the Job controller's reconciles share.
pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    pub expectations: Arc<Expectations>,
    pub recorder: Recorder,
    /// Finalizer removals the informer does not show yet.
    pub removals: tracking::Removals,
    /// The resourceVersion of the status last written per Job (`namespace/name`).
    pub written: Mutex<HashMap<String, u64>>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let jobs = informers.get::<Job>();
    let pods = informers.get::<Pod>();
    let sources = orphans::Sources {
        jobs: jobs.store.clone(),
        pods: pods.store.clone(),
        pod_changes: informers.get::<Pod>().changes,
        job_changes: informers.watch::<Job>().changes,
    };
    let expectations = Arc::new(Expectations::default());
    let seen = expectations.clone();
    let context = Arc::new(Context {
        client: client.clone(),
        pods: pods.store.clone(),
        expectations,
        recorder: crate::events::recorder(client.clone(), "job-controller", identity),
        removals: tracking::Removals::default(),
        written: Mutex::default(),
    });
    let controller = Controller::for_shared_stream(
        counted(jobs.changes, queue.clone(), |job: &Job| Some(key_of(job))),
        jobs.store,
    )
    .owns_shared_stream(counted(pods.changes, queue.clone(), move |pod: &Pod| {
        let owner = owner_key(pod, "Job")?;
        if let Some(uid) = pod.uid() {
            seen.seen(&owner, &uid);
        }
        Some(owner)
    }));
    let orphans = orphans::run(client, sources, shutdown.clone());
    let jobs = runner::run(
        "job",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    );
    futures::future::join(jobs, orphans).map(|_| ()).boxed()
}
