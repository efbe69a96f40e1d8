//! The ServiceAccount controller: every active namespace has a `default` ServiceAccount,
//! created when the namespace appears and again if it is deleted.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

pub struct Context {
    pub client: Client,
    pub accounts: Store<ServiceAccount>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let namespaces = informers.get::<Namespace>();
    let accounts = informers.get::<ServiceAccount>();
    let context = Arc::new(Context {
        client,
        accounts: accounts.store.clone(),
    });
    let controller = Controller::for_shared_stream(
        counted(namespaces.changes, queue.clone(), |ns: &Namespace| {
            Some(key_of(ns))
        }),
        namespaces.store,
    )
    // A deleted `default` account wakes its namespace.
    .watches_shared_stream(accounts.changes, |account: Arc<ServiceAccount>| {
        (account.name_any() == DEFAULT)
            .then(|| {
                account
                    .namespace()
                    .map(|ns| ObjectRef::<Namespace>::new(&ns))
            })
            .flatten()
    });
    runner::run(
        "serviceaccount",
        controller,
        context,
        queue,
        1,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// Whether the namespace takes new objects (it exists and is not terminating).
pub fn is_active(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref())
            != Some("Terminating")
}

pub async fn reconcile(namespace: Arc<Namespace>, context: Arc<Context>) -> Result<Action> {
    if !is_active(&namespace) {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let present = context
        .accounts
        .get(&ObjectRef::new(DEFAULT).within(&name))
        .is_some_and(|account| account.metadata.deletion_timestamp.is_none());
    if present {
        return Ok(Action::await_change());
    }
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            namespace: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match Api::<ServiceAccount>::namespaced(context.client.clone(), &name)
        .create(&PostParams::default(), &account)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Already there (the informer was behind), or the namespace is going away.
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 403 => {
            Ok(Action::await_change())
        }
        Err(error) => Err(error.into()),
    }
}
