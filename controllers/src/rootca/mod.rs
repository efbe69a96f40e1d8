//! The root-CA publisher: every active namespace has the ConfigMap `kube-root-ca.crt` whose
//! `ca.crt` is the cluster's CA bundle, so pods can verify the API server; it is put back if
//! deleted and corrected if changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::serviceaccount::is_active;
use crate::workqueue::Queue;

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// The key of the CA bundle in it.
pub const KEY: &str = "ca.crt";

pub struct Context {
    pub client: Client,
    pub maps: Store<ConfigMap>,
    pub bundle: String,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    bundle: String,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let namespaces = informers.get::<Namespace>();
    let maps = informers.get::<ConfigMap>();
    let context = Arc::new(Context {
        client,
        maps: maps.store.clone(),
        bundle,
    });
    let controller = Controller::for_shared_stream(
        counted(namespaces.changes, queue.clone(), |ns: &Namespace| {
            Some(key_of(ns))
        }),
        namespaces.store,
    )
    .watches_shared_stream(maps.changes, |map: Arc<ConfigMap>| {
        (map.name_any() == NAME)
            .then(|| map.namespace().map(|ns| ObjectRef::<Namespace>::new(&ns)))
            .flatten()
    });
    runner::run(
        "root-ca-cert-publisher",
        controller,
        context,
        queue,
        1,
        shutdown,
        reconcile,
    )
    .boxed()
}

pub async fn reconcile(namespace: Arc<Namespace>, context: Arc<Context>) -> Result<Action> {
    if !is_active(&namespace) {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let maps = Api::<ConfigMap>::namespaced(context.client.clone(), &name);
    let wanted: BTreeMap<String, String> = [(KEY.to_string(), context.bundle.clone())].into();
    let current = context.maps.get(&ObjectRef::new(NAME).within(&name));
    let result = match current {
        Some(map) if map.data.as_ref() == Some(&wanted) => return Ok(Action::await_change()),
        Some(map) => {
            let mut corrected = map.as_ref().clone();
            corrected.data = Some(wanted);
            maps.replace(NAME, &PostParams::default(), &corrected)
                .await
                .map(|_| ())
        }
        None => {
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    namespace: Some(name.clone()),
                    annotations: Some(
                        [(
                            "kubernetes.io/description".to_string(),
                            "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.".to_string(),
                        )]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                data: Some(wanted),
                ..ConfigMap::default()
            };
            maps.create(&PostParams::default(), &map).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 403 => {
            Ok(Action::requeue(std::time::Duration::from_secs(1)))
        }
        Err(error) => Err(error.into()),
    }
}
