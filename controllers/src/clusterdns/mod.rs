//! The cluster DNS endpoints controller (`cluster-dns-endpoints`): the Service
//! `kube-system/kube-dns` has no selector — its backends are the node agents' DNS servers, on
//! each labelled node's InternalIP. This keeps the EndpointSlice `kube-system/kube-dns-nodes`
//! and the Endpoints `kube-system/kube-dns` listing them (ready per the Node's `Ready`
//! condition), on the Service's ports, owned by the Service so they go with it. Any Node change
//! and any change of that Service reconciles the one key; a Service that is missing or has a
//! selector is left alone.

mod build;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted};
use crate::workqueue::Queue;

pub use build::{
    endpoints_differ, endpoints_for, endpoints_update, internal_ipv4, is_dns_node, is_managed,
    is_ready, ports, servers, slice_differs, slice_for, slice_update, DnsPort, DnsServer,
    MANAGED_BY, MAX_ENDPOINTS, NAMESPACE, NODE_LABEL, SERVICE, SLICE,
};

/// The controller's name in `--controllers`.
pub const NAME: &str = "cluster-dns-endpoints";

/// The one key every change reconciles.
const KEY: &str = "kube-system/kube-dns";

pub struct Context {
    pub client: Client,
    pub nodes: Store<Node>,
}

fn service_ref() -> ObjectRef<Service> {
    ObjectRef::new(SERVICE).within(NAMESPACE)
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let services = informers.get::<Service>();
    let nodes = informers.get::<Node>();
    let context = Arc::new(Context {
        client,
        nodes: nodes.store.clone(),
    });
    let dns_changes = services.changes.filter(|service| {
        futures::future::ready(
            service.name_any() == SERVICE && service.namespace().as_deref() == Some(NAMESPACE),
        )
    });
    let controller = Controller::for_shared_stream(
        counted(dns_changes, queue.clone(), |_: &Service| Some(KEY.into())),
        services.store,
    )
    .watches_shared_stream(
        counted(nodes.changes, queue.clone(), |_: &Node| Some(KEY.into())),
        |_: Arc<Node>| Some(service_ref()),
    );
    runner::run(NAME, controller, context, queue, 1, shutdown, reconcile).boxed()
}

pub async fn reconcile(service: Arc<Service>, context: Arc<Context>) -> Result<Action> {
    if !is_managed(&service) {
        return Ok(Action::await_change());
    }
    // Before the first list of Nodes, every node would look gone: wait for it.
    if context.nodes.wait_until_ready().await.is_err() {
        return Ok(Action::await_change());
    }
    let (servers, left_out) = servers(&context.nodes.state());
    if left_out > 0 {
        tracing::warn!(
            left_out,
            kept = MAX_ENDPOINTS,
            "more cluster DNS nodes than one EndpointSlice holds; the rest are left out"
        );
    }
    let slice = slice_for(&service, &servers);
    let endpoints = endpoints_for(&service, &servers);
    let written = match sync_slice(&context.client, &slice).await {
        Ok(()) => sync_endpoints(&context.client, &endpoints).await,
        Err(error) => Err(error),
    };
    match written {
        Ok(()) => Ok(Action::await_change()),
        // Changed or created meanwhile: read it again.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Err(error) => Err(error.into()),
    }
}

async fn sync_slice(client: &Client, wanted: &EndpointSlice) -> kube::Result<()> {
    let api = Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE);
    match api.get_opt(SLICE).await? {
        Some(current) if !slice_differs(&current, wanted) => {}
        Some(current) => {
            api.replace(
                SLICE,
                &PostParams::default(),
                &slice_update(&current, wanted),
            )
            .await?;
            tracing::info!(endpoints = wanted.endpoints.len(), "updated {SLICE}");
        }
        None => {
            api.create(&PostParams::default(), wanted).await?;
            tracing::info!(endpoints = wanted.endpoints.len(), "created {SLICE}");
        }
    }
    Ok(())
}

async fn sync_endpoints(client: &Client, wanted: &Endpoints) -> kube::Result<()> {
    let api = Api::<Endpoints>::namespaced(client.clone(), NAMESPACE);
    match api.get_opt(SERVICE).await? {
        Some(current) if !endpoints_differ(&current, wanted) => {}
        Some(current) => {
            api.replace(
                SERVICE,
                &PostParams::default(),
                &endpoints_update(&current, wanted),
            )
            .await?;
        }
        None => {
            api.create(&PostParams::default(), wanted).await?;
        }
    }
    Ok(())
}
