//! The garbage collector's workers: each item of work is looked at against the graph (and,
//! for an owner the graph does not hold, against the API), then carried out with deletes and
//! patches. A failed item comes back after the queue's back-off.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use serde::Serialize;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::graph::{Node, Work, FOREGROUND, ORPHAN};
use super::{enqueue, key, Context};
use crate::error::Result;

pub async fn run(
    context: Arc<Context>,
    mut receiver: mpsc::UnboundedReceiver<Work>,
    sender: mpsc::UnboundedSender<Work>,
    pending: Arc<Mutex<HashSet<Work>>>,
    concurrency: u16,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(usize::from(concurrency.max(1))));
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = receiver.recv() => item,
        };
        let Some(item) = item else { return };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Taken off the pending set first: a change while it runs queues it again.
        pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&item);
        let (context, sender, pending, shutdown) = (
            context.clone(),
            sender.clone(),
            pending.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move {
            let name = key(&item);
            let started = context.queue.started(&name);
            let span =
                tracing::info_span!("reconcile", controller = "garbage-collector", object = %name);
            let result = tracing::Instrument::instrument(process(&context, &item), span).await;
            context.queue.finished(&name, started, result.is_ok());
            if let Err(error) = result {
                let delay = context.queue.backoff(&name);
                tracing::warn!(%error, object = %name, ?delay, "garbage collection failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(delay) => enqueue(&sender, &pending, &context.queue, item),
                }
            }
            drop(slot);
        });
    }
}

async fn process(context: &Context, work: &Work) -> Result<()> {
    match work {
        Work::AttemptToDelete(uid) => attempt_to_delete(context, uid).await,
        Work::Orphan(uid) => orphan(context, uid).await,
    }
}

/// How an owner reference stands.
enum OwnerState {
    /// The owner exists.
    Solid,
    /// The owner is gone (or never was, or cannot own this object).
    Dangling,
    /// The owner is being deleted in the foreground, waiting for its dependents.
    Waiting,
}

async fn owner_state(context: &Context, node: &Node, owner: &OwnerReference) -> Result<OwnerState> {
    let known = context.graph().get(&owner.uid).map(|owner| {
        if owner.deleting && owner.has_finalizer(FOREGROUND) {
            OwnerState::Waiting
        } else {
            OwnerState::Solid
        }
    });
    if let Some(state) = known {
        return Ok(state);
    }
    // Not in the graph: ask the API, by name, and compare the uid.
    let Some((resource, namespaced)) = context.kind(&owner.api_version, &owner.kind) else {
        // A kind this collector does not know: never delete on that uncertainty.
        return Ok(OwnerState::Solid);
    };
    let api: Api<DynamicObject> = match (namespaced, node.namespace.as_deref()) {
        (true, Some(namespace)) => {
            Api::namespaced_with(context.client.clone(), namespace, &resource)
        }
        // A cluster-scoped object cannot be owned by a namespaced one.
        (true, None) => return Ok(OwnerState::Dangling),
        (false, _) => Api::all_with(context.client.clone(), &resource),
    };
    match api.get_metadata_opt(&owner.name).await? {
        Some(meta) if meta.metadata.uid.as_deref() == Some(owner.uid.as_str()) => {
            let foreground = meta.metadata.deletion_timestamp.is_some()
                && meta
                    .metadata
                    .finalizers
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f == FOREGROUND);
            Ok(if foreground {
                OwnerState::Waiting
            } else {
                OwnerState::Solid
            })
        }
        _ => Ok(OwnerState::Dangling),
    }
}

async fn attempt_to_delete(context: &Context, uid: &str) -> Result<()> {
    let Some(node) = context.graph().get(uid).cloned() else {
        return Ok(());
    };
    if node.deleting {
        if node.has_finalizer(FOREGROUND) {
            let blocking = context
                .graph()
                .dependents_of(uid)
                .iter()
                .filter(|dependent| {
                    dependent
                        .owners
                        .iter()
                        .any(|owner| owner.uid == uid && owner.block_owner_deletion == Some(true))
                })
                .count();
            if blocking == 0 {
                remove_finalizer(context, &node, FOREGROUND).await?;
            }
        }
        return Ok(());
    }
    if node.owners.is_empty() {
        return Ok(());
    }
    let mut solid = 0;
    let mut gone: Vec<String> = Vec::new();
    let mut waiting = 0;
    for owner in &node.owners {
        match owner_state(context, &node, owner).await? {
            OwnerState::Solid => solid += 1,
            OwnerState::Dangling => gone.push(owner.uid.clone()),
            OwnerState::Waiting => {
                waiting += 1;
                gone.push(owner.uid.clone());
            }
        }
    }
    if solid > 0 {
        // Still owned: only drop the references to owners that are gone or leaving.
        if !gone.is_empty() {
            let owners = node
                .owners
                .iter()
                .filter(|owner| !gone.contains(&owner.uid))
                .cloned()
                .collect();
            patch_meta(context, &node, MetaFields::owners(&node, owners)).await?;
        }
        return Ok(());
    }
    let has_dependents = !context.graph().dependents_of(uid).is_empty();
    let policy = if waiting > 0 && has_dependents {
        // An owner waits in the foreground: so must this object's own dependents.
        PropagationPolicy::Foreground
    } else if node.has_finalizer(ORPHAN) {
        PropagationPolicy::Orphan
    } else if node.has_finalizer(FOREGROUND) {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    };
    tracing::info!(kind = %node.resource.kind, namespace = ?node.namespace, name = %node.name, ?policy, "deleting an object whose owners are gone");
    delete(context, &node, policy).await
}

async fn orphan(context: &Context, uid: &str) -> Result<()> {
    let Some(owner) = context.graph().get(uid).cloned() else {
        return Ok(());
    };
    if !(owner.deleting && owner.has_finalizer(ORPHAN)) {
        return Ok(());
    }
    let dependents: Vec<Node> = context
        .graph()
        .dependents_of(uid)
        .into_iter()
        .cloned()
        .collect();
    for dependent in dependents {
        let owners = dependent
            .owners
            .iter()
            .filter(|reference| reference.uid != uid)
            .cloned()
            .collect();
        patch_meta(context, &dependent, MetaFields::owners(&dependent, owners)).await?;
    }
    remove_finalizer(context, &owner, ORPHAN).await
}

fn api_for(context: &Context, node: &Node) -> Api<DynamicObject> {
    match node.namespace.as_deref() {
        Some(namespace) => Api::namespaced_with(context.client.clone(), namespace, &node.resource),
        None => Api::all_with(context.client.clone(), &node.resource),
    }
}

async fn delete(context: &Context, node: &Node, policy: PropagationPolicy) -> Result<()> {
    let params = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions {
            uid: Some(node.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api_for(context, node).delete(&node.name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

async fn remove_finalizer(context: &Context, node: &Node, finalizer: &str) -> Result<()> {
    let finalizers = node
        .finalizers
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    patch_meta(
        context,
        node,
        MetaFields {
            uid: node.uid.clone(),
            owner_references: None,
            finalizers: Some(finalizers),
        },
    )
    .await
}

#[derive(Debug, Serialize)]
struct MetaPatch {
    metadata: MetaFields,
}

/// The metadata a patch writes; the uid makes it apply only to the object it was meant for.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    uid: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<Vec<String>>,
}

impl MetaFields {
    fn owners(node: &Node, owners: Vec<OwnerReference>) -> Self {
        Self {
            uid: node.uid.clone(),
            owner_references: Some(owners),
            finalizers: None,
        }
    }
}

async fn patch_meta(context: &Context, node: &Node, fields: MetaFields) -> Result<()> {
    let patch = MetaPatch { metadata: fields };
    match api_for(context, node)
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone, or replaced by an object of the same name.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 422 => Ok(()),
        Err(error) => Err(error.into()),
    }
}
