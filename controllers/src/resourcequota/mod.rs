//! The resource quota controller: counts what each ResourceQuota limits and records it in
//! the quota's status (`hard` copied from the spec, `used` counted), which the apiserver's
//! ResourceQuota admission charges new objects against.
//!
//! It counts a quota when the quota appears or its spec changes, when a pod in its namespace
//! goes away or finishes (usage given back), and every five minutes — not on every new pod:
//! admission already charged that one, and a count taken while charged pods are still being
//! written would undercount them. Pods come from the shared informer; other kinds' object
//! counts (`count/<resource>[.<group>]`, `configmaps`, …) from a list of the kind.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use rudder_facts::quantity::milli_value;
use rudder_facts::quota::{format_milli, pod_counts, pod_usage, quota_counts_pod};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// How often every quota is counted again.
const RESYNC: Duration = Duration::from_secs(300);

pub struct Context {
    pub client: Client,
    pub pods: Store<Pod>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let quotas = informers.get::<ResourceQuota>();
    let pods = informers.get::<Pod>();
    let pod_store = pods.store.clone();
    let quota_store = quotas.store.clone();
    let context = Arc::new(Context {
        client,
        pods: pods.store.clone(),
    });
    // Only a quota's own changes of spec (or a status that does not know the spec yet) wake
    // it; the status writes of admission do not.
    let seen: Arc<Mutex<HashMap<String, Option<i64>>>> = Arc::default();
    let spec_changes = quotas.changes.filter(move |quota| {
        let key = key_of(quota.as_ref());
        let generation = quota.metadata.generation;
        let unknown = quota.status.as_ref().and_then(|s| s.hard.as_ref())
            != quota.spec.as_ref().and_then(|s| s.hard.as_ref());
        let mut seen = seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let changed = seen.insert(key, generation) != Some(generation);
        futures::future::ready(changed || unknown)
    });
    let controller = Controller::for_shared_stream(
        counted(spec_changes, queue.clone(), |q: &ResourceQuota| {
            Some(key_of(q))
        }),
        quotas.store,
    )
    // A pod that is gone (or finished) gives its usage back to its namespace's quotas.
    .watches_shared_stream(pods.changes, move |pod: Arc<Pod>| {
        let gone = pod_store.get(&ObjectRef::from_obj(pod.as_ref())).is_none();
        if !gone && pod_counts(&pod) {
            return Vec::new();
        }
        let namespace = pod.namespace().unwrap_or_default();
        quota_store
            .state()
            .iter()
            .filter(|q| q.namespace().as_deref() == Some(namespace.as_str()))
            .map(|q| ObjectRef::from_obj(q.as_ref()))
            .collect()
    });
    runner::run(
        "resourcequota",
        controller,
        context,
        queue,
        5,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// The resource of a `count/<resource>[.<group>]` (or legacy) name and its kind's list, when
/// it is not pods.
fn counted_resource(name: &str) -> Option<(String, String)> {
    let legacy = [
        "configmaps",
        "secrets",
        "services",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "resourcequotas",
    ];
    if legacy.contains(&name) {
        return Some((String::new(), name.to_string()));
    }
    let rest = name.strip_prefix("count/")?;
    let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
    (resource != "pods").then(|| (group.to_string(), resource.to_string()))
}

async fn count_objects(client: &Client, namespace: &str, group: &str, plural: &str) -> Result<i64> {
    let version = if group.is_empty() {
        "v1".to_string()
    } else {
        let discovered = kube::discovery::group(client, group).await?;
        discovered.preferred_version_or_latest().to_string()
    };
    let resource = ApiResource {
        group: group.to_string(),
        version: version.clone(),
        api_version: if group.is_empty() {
            version
        } else {
            format!("{group}/{version}")
        },
        kind: String::new(),
        plural: plural.to_string(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let listed = api.list_metadata(&ListParams::default()).await?;
    Ok(listed.items.len() as i64)
}

pub async fn reconcile(quota: Arc<ResourceQuota>, context: Arc<Context>) -> Result<Action> {
    let namespace = quota.namespace().unwrap_or_default();
    let spec = quota.spec.clone().unwrap_or_default();
    let hard = spec.hard.clone().unwrap_or_default();
    let mut used: BTreeMap<String, i64> = hard.keys().map(|name| (name.clone(), 0)).collect();
    for pod in context.pods.state() {
        if pod.namespace().as_deref() != Some(namespace.as_str())
            || !pod_counts(&pod)
            || !quota_counts_pod(&spec, &pod)
        {
            continue;
        }
        for (name, amount) in pod_usage(&pod) {
            if let Some(total) = used.get_mut(&name) {
                *total += amount;
            }
        }
    }
    for name in hard.keys() {
        if let Some((group, plural)) = counted_resource(name) {
            let count = count_objects(&context.client, &namespace, &group, &plural).await?;
            used.insert(name.clone(), count * 1000);
        }
        if name == "requests.storage" {
            let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                Api::namespaced(context.client.clone(), &namespace);
            let total: i64 = claims
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter_map(|claim| {
                    let requests = claim.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?;
                    Some(milli_value(&requests.get("storage")?.0))
                })
                .sum();
            used.insert(name.clone(), total);
        }
    }
    let used: BTreeMap<String, Quantity> = used
        .into_iter()
        .map(|(name, milli)| (name, Quantity(format_milli(milli))))
        .collect();
    let status = quota.status.clone().unwrap_or_default();
    let current_used = status.used.unwrap_or_default();
    let same_used = used.len() == current_used.len()
        && used.iter().all(|(name, quantity)| {
            current_used
                .get(name)
                .is_some_and(|q| milli_value(&q.0) == milli_value(&quantity.0))
        });
    if status.hard.as_ref() != Some(&hard) || !same_used {
        // Pinned to the quota as counted: a charge admission made since wins, and this count
        // is taken again.
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": quota.resource_version()},
            "status": {"hard": hard, "used": used},
        });
        Api::<ResourceQuota>::namespaced(context.client.clone(), &namespace)
            .patch_status(
                &quota.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(Action::requeue(RESYNC))
}
