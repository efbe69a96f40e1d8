//! The Job controller's writes to pods: creating them from the template (with upstream's
//! labels, the tracking finalizer and, Indexed, their index and its failure count), deleting
//! them, and taking the tracking finalizer off.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, Pod, PodTemplateSpec};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::indexes::{FAILURE_COUNT, INDEX};
use super::tracking::FINALIZER;
use super::Context;
use crate::error::Result;
use crate::podtemplate::{delete_exact, pod_from_template};

/// A pod to create: Indexed, its index and the failures its index had before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewPod {
    pub index: Option<i32>,
    pub failure_count: Option<i32>,
}

/// The template with the labels upstream gives a Job's pods, the tracking finalizer, and
/// (Indexed) its index and failure count.
pub fn template_for(job: &Job, uid: &str, new: NewPod) -> PodTemplateSpec {
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
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.into());
    }
    if let Some(index) = new.index {
        labels.insert(INDEX.into(), index.to_string());
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(INDEX.into(), index.to_string());
        if let Some(count) = new.failure_count {
            annotations.insert(FAILURE_COUNT.into(), count.to_string());
        }
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

pub async fn create_pods(
    context: &Context,
    api: &Api<Pod>,
    job: &Job,
    key: &str,
    uid: &str,
    pods: Vec<NewPod>,
) -> Result<()> {
    let requests = pods.into_iter().map(|new| {
        let template = template_for(job, uid, new);
        let prefix = match new.index {
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

/// Whether a deleted pod's end is still to be counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The Job is ending: the finalizer stays until the tracking counts the pod.
    Counted,
    /// Suspension or surplus: the finalizer comes off first, the pod is not a failure.
    Uncounted,
}

/// Deletes `pods`; how many deletes were issued or found done.
pub async fn delete_pods(
    context: &Context,
    api: &Api<Pod>,
    job: &Job,
    key: &str,
    pods: &[Arc<Pod>],
    deletion: Deletion,
) -> Result<usize> {
    let mut deleted = 0;
    for pod in pods {
        if deletion == Deletion::Uncounted {
            if let Some(uid) = pod.uid() {
                release_tracked(context, api, key, pod, &uid).await?;
            }
        }
        if delete_exact(api, &pod.name_any(), pod.uid(), None).await? {
            if let Some(uid) = pod.uid() {
                context.expectations.deleted(key, uid);
            }
            let note = format!("Deleted pod: {}", pod.name_any());
            publish(context, job, "SuccessfulDelete", note, EventType::Normal).await;
        }
        deleted += 1;
    }
    Ok(deleted)
}

/// A strategic-merge patch that takes one value out of `metadata.finalizers`, leaving any
/// other finalizer (and any change made meanwhile) as it is.
#[derive(Debug, serde::Serialize)]
struct FinalizerRemoval {
    metadata: RemovalFromMetadata,
}

#[derive(Debug, serde::Serialize)]
struct RemovalFromMetadata {
    #[serde(rename = "$deleteFromPrimitiveList/finalizers")]
    finalizers: [&'static str; 1],
}

/// Takes the tracking finalizer off `pod`; true when the pod no longer carries it (or is gone).
pub async fn release(api: &Api<Pod>, pod: &Pod) -> Result<bool> {
    if !pod.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(true);
    }
    let patch = FinalizerRemoval {
        metadata: RemovalFromMetadata {
            finalizers: [FINALIZER],
        },
    };
    match api
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(true),
        Err(error) => Err(error.into()),
    }
}

/// [`release`], remembered in the Job's pending removals while the informer catches up (and
/// forgotten again if it failed).
pub async fn release_tracked(
    context: &Context,
    api: &Api<Pod>,
    key: &str,
    pod: &Pod,
    uid: &str,
) -> Result<()> {
    context.removals.expect(key, uid.to_string());
    if let Err(error) = release(api, pod).await {
        context.removals.failed(key, uid);
        return Err(error);
    }
    Ok(())
}

pub async fn publish(context: &Context, job: &Job, reason: &str, note: String, type_: EventType) {
    crate::events::publish(&context.recorder, job, type_, reason, "Sync", note).await;
}
