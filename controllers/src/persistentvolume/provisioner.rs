//! The local-path provisioner, as k3s ships rancher's: for an unbound claim of a class whose
//! provisioner is `rudder.dev/local-path`, once the scheduler has named its node, a
//! PersistentVolume `pvc-<claim uid>` with a `hostPath` (DirectoryOrCreate) at
//! `<base>/pvc-<uid>_<namespace>_<name>` on that node, pinned there by required node
//! affinity, pre-bound to the claim (the binder finishes the binding). `<base>` is what the
//! node's kubelet announces in its `rudder.dev/local-path-base` annotation (its
//! `<data-dir>/storage`), else `/var/lib/rudder/storage`. The node's kubelet creates the
//! directory when a pod mounts it and removes it once the volume is gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use rudder_facts::volumes::{
    annotation, claim_class, claim_volume, selected_node, DEFAULT_STORAGE_BASE, HOSTNAME_LABEL,
    LOCAL_PATH_PROVISIONER, PROVISIONED_BY, STORAGE_BASE_ANNOTATION,
};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::events::publish;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

pub struct Context {
    pub client: Client,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub nodes: Store<Node>,
    pub recorder: Recorder,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let claims = informers.get::<PersistentVolumeClaim>();
    let volumes = informers.get::<PersistentVolume>();
    let classes = informers.get::<StorageClass>();
    let nodes = informers.get::<Node>();
    let context = Arc::new(Context {
        client: client.clone(),
        volumes: volumes.store,
        classes: classes.store,
        nodes: nodes.store,
        recorder: crate::events::recorder(client, LOCAL_PATH_PROVISIONER, identity),
    });
    let controller = Controller::for_shared_stream(
        counted(
            claims.changes,
            queue.clone(),
            |c: &PersistentVolumeClaim| Some(key_of(c)),
        ),
        claims.store,
    );
    runner::run(
        super::PROVISIONER,
        controller,
        context,
        queue,
        2,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// The name of the volume provisioned for a claim.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.uid().unwrap_or_default())
}

/// The directory name of a claim's volume under a node's storage base.
pub fn directory_name(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}_{}_{}",
        volume_name(claim),
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

/// The volume for `claim` of `class` on `node` (whose kubelet keeps volumes under `base`).
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &str,
    base: &str,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let request = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .unwrap_or_else(|| Quantity("0".into()));
    let path = format!("{}/{}", base.trim_end_matches('/'), directory_name(claim));
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(claim)),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_string(),
                LOCAL_PATH_PROVISIONER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), request)])),
            access_modes: spec.access_modes.clone(),
            host_path: Some(HostPathVolumeSource {
                path,
                type_: Some("DirectoryOrCreate".into()),
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: claim.namespace(),
                name: Some(claim.name_any()),
                uid: claim.uid(),
                resource_version: claim.resource_version(),
                ..ObjectReference::default()
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: Some(class.name_any()),
            volume_mode: Some(spec.volume_mode.unwrap_or_else(|| "Filesystem".into())),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![node.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

pub async fn reconcile(claim: Arc<PersistentVolumeClaim>, context: Arc<Context>) -> Result<Action> {
    if claim.metadata.deletion_timestamp.is_some() || claim_volume(&claim).is_some() {
        return Ok(Action::await_change());
    }
    let class_name = claim_class(&claim);
    let Some(class) = context.classes.get(&ObjectRef::new(class_name)) else {
        return Ok(Action::await_change());
    };
    if class.provisioner != LOCAL_PATH_PROVISIONER || class_name.is_empty() {
        return Ok(Action::await_change());
    }
    let name = volume_name(&claim);
    if context.volumes.get(&ObjectRef::new(&name)).is_some() {
        return Ok(Action::await_change());
    }
    let Some(node) = selected_node(&claim) else {
        if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
            let message = "configuration error, no node was specified: local-path volumes need a class with volumeBindingMode WaitForFirstConsumer".to_string();
            publish(
                &context.recorder,
                claim.as_ref(),
                EventType::Warning,
                "ProvisioningFailed",
                "Provisioning",
                message,
            )
            .await;
        }
        return Ok(Action::await_change());
    };
    let base = context
        .nodes
        .get(&ObjectRef::new(node))
        .and_then(|n| {
            annotation(&n.metadata.annotations, STORAGE_BASE_ANNOTATION).map(String::from)
        })
        .unwrap_or_else(|| DEFAULT_STORAGE_BASE.to_string());
    let key = key_of(claim.as_ref());
    publish(
        &context.recorder,
        claim.as_ref(),
        EventType::Normal,
        "Provisioning",
        "Provisioning",
        format!("External provisioner is provisioning volume for claim \"{key}\""),
    )
    .await;
    let volume = volume_for(&claim, &class, node, &base);
    match Api::<PersistentVolume>::all(context.client.clone())
        .create(&PostParams::default(), &volume)
        .await
    {
        Ok(_) => {
            publish(
                &context.recorder,
                claim.as_ref(),
                EventType::Normal,
                "ProvisioningSucceeded",
                "Provisioning",
                format!("Successfully provisioned volume {name}"),
            )
            .await;
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => {
            publish(
                &context.recorder,
                claim.as_ref(),
                EventType::Warning,
                "ProvisioningFailed",
                "Provisioning",
                format!("failed to provision volume with StorageClass \"{class_name}\": {error}"),
            )
            .await;
            return Err(error.into());
        }
    }
    Ok(Action::await_change())
}
