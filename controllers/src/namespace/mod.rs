//! The namespace controller: empties a namespace that is being deleted — every namespaced kind
//! the API serves (found by discovery), with the usual graceful deletion, so a kubelet's pods
//! shut down properly — reports how far it got in upstream's conditions, and once nothing is
//! left removes the `kubernetes` finalizer through `namespaces/{name}/finalize` and deletes
//! the namespace for good.
//!
//! Conditions, as upstream's: `NamespaceDeletionDiscoveryFailure` (some group could not be
//! discovered), `NamespaceDeletionContentFailure` (some delete failed),
//! `NamespaceContentRemaining` (objects left) and `NamespaceFinalizersRemaining` (objects left
//! that wait for finalizers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{verbs, ApiResource, Discovery, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// The finalizer the API server puts on every namespace and this controller removes.
pub const FINALIZER: &str = "kubernetes";

pub struct Context {
    pub client: Client,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let namespaces = informers.get::<Namespace>();
    let context = Arc::new(Context { client });
    let controller = Controller::for_shared_stream(
        counted(namespaces.changes, queue.clone(), |ns: &Namespace| {
            Some(key_of(ns))
        }),
        namespaces.store,
    );
    runner::run(
        "namespace",
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// What emptying the namespace found this time.
#[derive(Default, Debug)]
struct Progress {
    discovery_failures: Vec<String>,
    delete_failures: Vec<String>,
    /// Objects left, by resource.
    remaining: BTreeMap<String, usize>,
    /// Finalizers of the objects left, with how many carry each.
    finalizers: BTreeMap<String, usize>,
}

impl Progress {
    fn empty(&self) -> bool {
        self.remaining.is_empty()
            && self.discovery_failures.is_empty()
            && self.delete_failures.is_empty()
    }
}

pub async fn reconcile(namespace: Arc<Namespace>, context: Arc<Context>) -> Result<Action> {
    if namespace.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let finalizers = namespace
        .spec
        .as_ref()
        .and_then(|spec| spec.finalizers.clone())
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let progress = empty(&context.client, &name).await;
    update_conditions(&context.client, &namespace, &progress).await?;
    if !progress.empty() {
        tracing::debug!(namespace = %name, ?progress, "namespace not empty yet");
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let finalized = Namespace {
        metadata: namespace.metadata.clone(),
        spec: Some(NamespaceSpec {
            finalizers: Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect()),
        }),
        status: namespace.status.clone(),
    };
    let api = Api::<Namespace>::all(context.client.clone());
    let finalized = match api
        .replace_subresource("finalize", &name, &PostParams::default(), &finalized)
        .await
    {
        Ok(finalized) => finalized,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Action::await_change()),
        Err(error) => return Err(error.into()),
    };
    tracing::info!(namespace = %name, "namespace emptied and finalized");
    // With no finalizer left, deleting it again removes it (as upstream's controller does).
    let spec_done = finalized
        .spec
        .as_ref()
        .and_then(|spec| spec.finalizers.as_ref())
        .is_none_or(|finalizers| finalizers.is_empty());
    if spec_done && finalized.finalizers().is_empty() {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Action::await_change())
}

/// Deletes everything in the namespace and counts what is left.
async fn empty(client: &Client, namespace: &str) -> Progress {
    let mut progress = Progress::default();
    let discovery = match Discovery::new(client.clone()).run().await {
        Ok(discovery) => discovery,
        Err(error) => {
            progress.discovery_failures.push(error.to_string());
            return progress;
        }
    };
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if capabilities.scope != Scope::Namespaced
                || !capabilities.supports_operation(verbs::LIST)
                || !capabilities.supports_operation(verbs::DELETE)
            {
                continue;
            }
            empty_resource(client, namespace, &resource, &capabilities, &mut progress).await;
        }
    }
    progress
}

async fn empty_resource(
    client: &Client,
    namespace: &str,
    resource: &ApiResource,
    capabilities: &kube::discovery::ApiCapabilities,
    progress: &mut Progress,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let label = if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    };
    let params = DeleteParams::background();
    let deleted = if capabilities.supports_operation(verbs::DELETE_COLLECTION) {
        api.delete_collection(&params, &ListParams::default())
            .await
            .map(|_| ())
    } else {
        delete_each(&api, &params).await
    };
    if let Err(error) = deleted {
        if !matches!(&error, kube::Error::Api(status) if status.code == 404 || status.code == 405) {
            progress.delete_failures.push(format!("{label}: {error}"));
        }
    }
    match api.list_metadata(&ListParams::default()).await {
        Ok(left) if !left.items.is_empty() => {
            progress.remaining.insert(label, left.items.len());
            for item in &left.items {
                for finalizer in item.finalizers() {
                    *progress.finalizers.entry(finalizer.clone()).or_default() += 1;
                }
            }
        }
        Ok(_) => {}
        Err(error) => progress.delete_failures.push(format!("{label}: {error}")),
    }
}

async fn delete_each(api: &Api<DynamicObject>, params: &DeleteParams) -> kube::Result<()> {
    for item in api.list_metadata(&ListParams::default()).await?.items {
        match api.delete(&item.name_any(), params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

fn condition(
    type_: &str,
    failing: bool,
    reason_bad: &str,
    message: String,
    now: Timestamp,
) -> NamespaceCondition {
    let (status, reason) = if failing {
        ("True", reason_bad)
    } else {
        (
            "False",
            match type_ {
                "NamespaceDeletionDiscoveryFailure" => "ResourcesDiscovered",
                "NamespaceDeletionContentFailure" => "ContentDeleted",
                "NamespaceContentRemaining" => "ContentRemoved",
                _ => "ContentHasNoFinalizers",
            },
        )
    };
    NamespaceCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(Time(now)),
    }
}

fn counts(items: &BTreeMap<String, usize>, noun: &str) -> String {
    items
        .iter()
        .map(|(what, count)| format!("{what} has {count} {noun}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn update_conditions(
    client: &Client,
    namespace: &Namespace,
    progress: &Progress,
) -> Result<()> {
    let now = Timestamp::now();
    let wanted = vec![
        condition(
            "NamespaceDeletionDiscoveryFailure",
            !progress.discovery_failures.is_empty(),
            "DiscoveryFailed",
            if progress.discovery_failures.is_empty() {
                "All resources successfully discovered".into()
            } else {
                format!(
                    "Discovery failed for some groups: {}",
                    progress.discovery_failures.join("; ")
                )
            },
            now,
        ),
        condition(
            "NamespaceDeletionContentFailure",
            !progress.delete_failures.is_empty(),
            "ContentDeletionFailed",
            if progress.delete_failures.is_empty() {
                "All content successfully deleted, may be waiting on finalization".into()
            } else {
                format!(
                    "Failed to delete all resource types: {}",
                    progress.delete_failures.join("; ")
                )
            },
            now,
        ),
        condition(
            "NamespaceContentRemaining",
            !progress.remaining.is_empty(),
            "SomeResourcesRemain",
            if progress.remaining.is_empty() {
                "All content successfully removed".into()
            } else {
                format!(
                    "Some resources are remaining: {}",
                    counts(&progress.remaining, "resource instances")
                )
            },
            now,
        ),
        condition(
            "NamespaceFinalizersRemaining",
            !progress.finalizers.is_empty(),
            "SomeFinalizersRemain",
            if progress.finalizers.is_empty() {
                "All content-preserving finalizers finished".into()
            } else {
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    counts(&progress.finalizers, "resource instances")
                )
            },
            now,
        ),
    ];
    let current = namespace
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let same = |a: &NamespaceCondition, b: &NamespaceCondition| {
        a.type_ == b.type_ && a.status == b.status && a.reason == b.reason && a.message == b.message
    };
    let unchanged =
        current.len() == wanted.len() && wanted.iter().all(|w| current.iter().any(|c| same(c, w)));
    if unchanged {
        return Ok(());
    }
    // Keep a condition's transition time while its status stays.
    let merged: Vec<NamespaceCondition> = wanted
        .into_iter()
        .map(|mut w| {
            if let Some(c) = current
                .iter()
                .find(|c| c.type_ == w.type_ && c.status == w.status)
            {
                w.last_transition_time = c.last_transition_time.clone();
            }
            w
        })
        .collect();
    let mut updated = namespace.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .conditions = Some(merged);
    match Api::<Namespace>::all(client.clone())
        .replace_status(&namespace.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}
