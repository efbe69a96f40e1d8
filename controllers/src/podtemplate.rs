//! Pods from a controller's pod template: the template's labels, annotations and spec, a
//! generated name after the owner's, and a controller reference to the owner (with
//! `blockOwnerDeletion`, so foreground deletion of the owner waits for them).

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

/// A controller reference from an object to `owner`.
pub fn controller_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod `owner` creates from `template`, named `<prefix>-<random>` by the API server.
pub fn pod_from_template<K: Resource<DynamicType = ()>>(
    owner: &K,
    template: &PodTemplateSpec,
    prefix: &str,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            namespace: owner.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_reference(owner)]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Deletes `name` if it is still the object with `uid` (not a newer one of the same name);
/// `false` when it was already gone or replaced.
pub async fn delete_exact<K>(
    api: &kube::Api<K>,
    name: &str,
    uid: Option<String>,
    propagation: Option<kube::api::PropagationPolicy>,
) -> kube::Result<bool>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::DeleteParams {
        propagation_policy: propagation,
        preconditions: Some(kube::api::Preconditions {
            uid,
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}
