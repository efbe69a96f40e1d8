//! The Endpoints and EndpointSlice controllers: for every Service with a selector, the
//! addresses of the pods it selects — in the Service's `Endpoints` (ready addresses and
//! `notReadyAddresses`, or all as ready with `publishNotReadyAddresses`) and in its
//! EndpointSlices (`ready`/`serving`/`terminating` conditions, node names, pod references,
//! at most 100 endpoints a slice, owned by the Service so they go with it). A target port
//! given by name is looked up in each pod's containers; a pod without an IP is left out.

mod build;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub use build::{endpoints_for, slices_for, MANAGED_BY, SERVICE_NAME};

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
    /// `true`: this instance writes EndpointSlices; `false`: Endpoints.
    pub slices: bool,
}

/// The Endpoints controller (`slices: false`) or the EndpointSlice controller (`true`).
pub fn controller(
    informers: &Informers,
    client: Client,
    slices: bool,
    queue: Arc<Queue>,
    concurrency: u16,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let services = informers.get::<Service>();
    let pods = informers.get::<Pod>();
    let service_store = services.store.clone();
    let context = Arc::new(Context {
        client,
        pods: pods.store.clone(),
        slices,
    });
    let controller = Controller::for_shared_stream(
        counted(services.changes, queue.clone(), |s: &Service| {
            Some(key_of(s))
        }),
        services.store,
    )
    // A pod's change wakes every Service of its namespace that selects it.
    .watches_shared_stream(pods.changes, move |pod: Arc<Pod>| {
        selecting(&service_store, &pod)
    });
    let name = if slices { "endpointslice" } else { "endpoints" };
    runner::run(
        name,
        controller,
        context,
        queue,
        concurrency,
        shutdown,
        reconcile,
    )
    .boxed()
}

fn selector_of(service: &Service) -> Option<Selector> {
    let selector = service.spec.as_ref()?.selector.clone()?;
    if selector.is_empty() {
        return None;
    }
    Some(selector.into_iter().collect())
}

fn selecting(services: &Store<Service>, pod: &Pod) -> Vec<ObjectRef<Service>> {
    services
        .state()
        .iter()
        .filter(|service| service.namespace() == pod.namespace())
        .filter(|service| selector_of(service).is_some_and(|s| s.matches(pod.labels())))
        .map(|service| ObjectRef::from_obj(service.as_ref()))
        .collect()
}

pub async fn reconcile(service: Arc<Service>, context: Arc<Context>) -> Result<Action> {
    // Without a selector the Endpoints are the user's; a Service being deleted takes its
    // slices along (they are owned), and its Endpoints go by name below.
    let Some(selector) = selector_of(&service) else {
        return Ok(Action::await_change());
    };
    if service.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = service.namespace().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = context
        .pods
        .state()
        .into_iter()
        .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|pod| selector.matches(pod.labels()))
        .collect();
    if context.slices {
        sync_slices(&context, &service, &pods, &namespace).await?;
    } else {
        sync_endpoints(&context, &service, &pods, &namespace).await?;
    }
    Ok(Action::await_change())
}

async fn sync_endpoints(
    context: &Context,
    service: &Service,
    pods: &[Arc<Pod>],
    namespace: &str,
) -> Result<()> {
    let api = Api::<Endpoints>::namespaced(context.client.clone(), namespace);
    let wanted = endpoints_for(service, pods);
    match api.get_opt(&service.name_any()).await? {
        Some(current)
            if current.subsets == wanted.subsets && current.labels() == wanted.labels() =>
        {
            Ok(())
        }
        Some(current) => {
            let mut updated = wanted;
            updated.metadata.resource_version = current.metadata.resource_version.clone();
            api.replace(&service.name_any(), &PostParams::default(), &updated)
                .await?;
            Ok(())
        }
        None => match api.create(&PostParams::default(), &wanted).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 403 => Ok(()),
            Err(error) => Err(error.into()),
        },
    }
}

async fn sync_slices(
    context: &Context,
    service: &Service,
    pods: &[Arc<Pod>],
    namespace: &str,
) -> Result<()> {
    let api = Api::<EndpointSlice>::namespaced(context.client.clone(), namespace);
    let selector = format!(
        "{SERVICE_NAME}={},endpointslice.kubernetes.io/managed-by={MANAGED_BY}",
        service.name_any()
    );
    let current = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let wanted = slices_for(service, pods);
    // Reuse existing slices in order, create what is missing, delete what is left over.
    let mut existing = current.into_iter();
    for slice in wanted {
        match existing.next() {
            Some(old) if old.endpoints == slice.endpoints && old.ports == slice.ports => {}
            Some(old) => {
                let mut updated = stamped(slice);
                updated.metadata.name = old.metadata.name.clone();
                updated.metadata.generate_name = None;
                updated.metadata.resource_version = old.metadata.resource_version.clone();
                api.replace(&old.name_any(), &PostParams::default(), &updated)
                    .await?;
            }
            None => match api.create(&PostParams::default(), &stamped(slice)).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 403 => {}
                Err(error) => return Err(error.into()),
            },
        }
    }
    for extra in existing {
        match api
            .delete(&extra.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Upstream's annotation for when the change a slice reflects happened, from which node proxies
/// measure network programming latency; stamped with the time of this write (the change was
/// seen just before).
pub const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

fn stamped(mut slice: EndpointSlice) -> EndpointSlice {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    slice
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(TRIGGER_TIME.to_owned(), now);
    slice
}
