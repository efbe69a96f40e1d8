//! The EndpointSlice mirroring controller (`endpointslicemirroring`): a Service without a
//! selector has Endpoints that someone else writes; so that clients reading EndpointSlices
//! (the node proxy, DNS) see them too, this mirrors each such Endpoints into EndpointSlices
//! (see [`build`]) managed by `endpointslicemirroring-controller.k8s.io` and owned by the
//! Endpoints, so they go with it. Endpoints labelled `endpointslice.kubernetes.io/skip-mirror`
//! (the Endpoints controller's own, the `kubernetes` Service's), leader-election locks, and
//! Endpoints whose Service is missing or has a selector are not mirrored — slices mirrored
//! earlier are then deleted. Events `InvalidIPAddress` and `TooManyAddressesToMirror` (more
//! than 1,000 addresses in a subset) go on the Endpoints, as upstream's.

pub mod build;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// The controller's name in `--controllers`.
pub const NAME: &str = "endpointslicemirroring";

pub struct Context {
    pub client: Client,
    pub services: Store<Service>,
    pub recorder: Recorder,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let endpoints = informers.get::<Endpoints>();
    let services = informers.get::<Service>();
    let slices = informers.get::<EndpointSlice>();
    let context = Arc::new(Context {
        client: client.clone(),
        services: services.store.clone(),
        recorder: crate::events::recorder(client, "endpointslice-mirroring-controller", identity),
    });
    let controller = Controller::for_shared_stream(
        counted(endpoints.changes, queue.clone(), |e: &Endpoints| {
            Some(key_of(e))
        }),
        endpoints.store,
    )
    // A Service's change (gaining or losing a selector, going) concerns its Endpoints.
    .watches_shared_stream(services.changes, |service: Arc<Service>| {
        let namespace = service.namespace().unwrap_or_default();
        Some(ObjectRef::<Endpoints>::new(&service.name_any()).within(&namespace))
    })
    // A mirrored slice changed or deleted by someone else is put back.
    .owns_shared_stream(slices.changes);
    runner::run(NAME, controller, context, queue, 5, shutdown, reconcile).boxed()
}

pub async fn reconcile(endpoints: Arc<Endpoints>, context: Arc<Context>) -> Result<Action> {
    if endpoints.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = endpoints.namespace().unwrap_or_default();
    let name = endpoints.name_any();
    let service = context
        .services
        .get(&ObjectRef::<Service>::new(&name).within(&namespace));
    let selectorless = service.as_ref().is_some_and(|service| {
        service
            .spec
            .as_ref()
            .and_then(|spec| spec.selector.as_ref())
            .is_none_or(BTreeMap::is_empty)
    });
    let api = Api::<EndpointSlice>::namespaced(context.client.clone(), &namespace);
    let existing = api
        .list(&ListParams::default().labels(&build::selector(&name)))
        .await?
        .items;
    if !selectorless || !build::wants_mirroring(&endpoints) {
        for slice in existing {
            delete(&api, &slice).await?;
        }
        return Ok(Action::await_change());
    }

    let mirror = build::mirror(&endpoints, build::MAX_PER_SUBSET);
    if mirror.invalid > 0 {
        let note = format!(
            "Skipped {} invalid IP addresses when mirroring to EndpointSlices",
            mirror.invalid
        );
        warn(&context, &endpoints, "InvalidIPAddress", note).await;
    }
    if mirror.over_capacity > 0 {
        let note = format!(
            "A max of {} addresses can be mirrored to EndpointSlices per Endpoints subset. {} addresses were skipped",
            build::MAX_PER_SUBSET,
            mirror.over_capacity
        );
        warn(&context, &endpoints, "TooManyAddressesToMirror", note).await;
    }
    // One slice per group: the first existing slice of a group is reused, the rest go.
    let mut by_group: BTreeMap<(String, String), Vec<EndpointSlice>> = BTreeMap::new();
    for slice in existing {
        by_group
            .entry(build::group_of(&slice))
            .or_default()
            .push(slice);
    }
    for wanted in mirror.slices {
        let mut current = by_group
            .remove(&build::group_of(&wanted))
            .unwrap_or_default();
        let extra = if current.is_empty() {
            Vec::new()
        } else {
            current.split_off(1)
        };
        for slice in &extra {
            delete(&api, slice).await?;
        }
        match current.pop() {
            Some(current) if build::same(&current, &wanted) => {}
            Some(current) => {
                let mut updated = wanted;
                updated.metadata.name = current.metadata.name.clone();
                updated.metadata.generate_name = None;
                updated.metadata.resource_version = current.metadata.resource_version.clone();
                api.replace(&current.name_any(), &PostParams::default(), &updated)
                    .await?;
            }
            None => match api.create(&PostParams::default(), &wanted).await {
                Ok(_) => {}
                // The namespace is terminating: nothing more is created in it.
                Err(kube::Error::Api(status)) if status.code == 403 => {}
                Err(error) => return Err(error.into()),
            },
        }
    }
    for slice in by_group.into_values().flatten() {
        delete(&api, &slice).await?;
    }
    Ok(Action::await_change())
}

async fn delete(api: &Api<EndpointSlice>, slice: &EndpointSlice) -> Result<()> {
    match api
        .delete(&slice.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

async fn warn(context: &Context, endpoints: &Endpoints, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Mirroring".into(),
        secondary: None,
    };
    if let Err(error) = context
        .recorder
        .publish(&event, &endpoints.object_ref(&()))
        .await
    {
        tracing::debug!(%error, "recording an event failed");
    }
}
