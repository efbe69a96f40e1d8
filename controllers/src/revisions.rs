//! ControllerRevisions, as StatefulSets and DaemonSets keep them: each pod template the owner
//! has had is a ControllerRevision holding the template as a replacing patch (what
//! `kubectl rollout history|undo` read), named after the owner and a hash of it; pods carry the
//! hash of the revision they were made from in `controller-revision-hash`.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::podtemplate::controller_reference;

/// The label with a pod's (or a revision's) revision hash.
pub const REVISION_HASH: &str = "controller-revision-hash";

/// `{"spec":{"template":{…,"$patch":"replace"}}}`, as upstream stores it.
#[derive(Serialize)]
struct Patch<'a> {
    spec: PatchSpec<'a>,
}

#[derive(Serialize)]
struct PatchSpec<'a> {
    template: ReplacingTemplate<'a>,
}

#[derive(Serialize)]
struct ReplacingTemplate<'a> {
    #[serde(flatten)]
    template: &'a PodTemplateSpec,
    #[serde(rename = "$patch")]
    patch: &'static str,
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// The revision data of `template` and its hash (with the collision count).
pub fn data_and_hash(template: &PodTemplateSpec, collisions: Option<i32>) -> (Vec<u8>, String) {
    let patch = Patch {
        spec: PatchSpec {
            template: ReplacingTemplate {
                template,
                patch: "replace",
            },
        },
    };
    let data = serde_json::to_vec(&patch).unwrap_or_default();
    let mut hashed = data.clone();
    if let Some(count) = collisions {
        hashed.extend_from_slice(&count.to_le_bytes());
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let hash = fnv32a(&hashed)
        .to_string()
        .bytes()
        .map(|digit| char::from(ALPHABET[usize::from(digit) % ALPHABET.len()]))
        .collect();
    (data, hash)
}

/// A ControllerRevision of `owner` for `template`, numbered `number`, and its hash.
pub fn revision_for<K: Resource<DynamicType = ()>>(
    owner: &K,
    template: &PodTemplateSpec,
    collisions: Option<i32>,
    number: i64,
) -> Option<(ControllerRevision, String)> {
    let (data, hash) = data_and_hash(template, collisions);
    let value = serde_json::from_slice(&data).ok()?;
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|meta| meta.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.clone());
    Some((
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", owner.name_any())),
                namespace: owner.namespace(),
                labels: Some(labels),
                owner_references: Some(vec![controller_reference(owner)]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(value)),
            revision: number,
        },
        hash,
    ))
}

/// The template a revision recorded.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let template = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    serde_json::from_value(template).ok()
}

/// Whether a revision holds `template` (its data is what `revision_for` would write).
pub fn holds(revision: &ControllerRevision, template: &PodTemplateSpec) -> bool {
    let Some(RawExtension(stored)) = revision.data.as_ref() else {
        return false;
    };
    let (data, _) = data_and_hash(template, None);
    serde_json::from_slice::<serde_json::Value>(&data).is_ok_and(|wanted| &wanted == stored)
}

/// `owner`'s revisions, oldest first, and the one holding `template` — created when none
/// does. `None` when another writer created it first (the next sync sees it).
pub async fn history<K: Resource<DynamicType = ()>>(
    client: &kube::Client,
    store: &kube::runtime::reflector::Store<ControllerRevision>,
    owner: &K,
    template: &PodTemplateSpec,
    collisions: Option<i32>,
) -> crate::error::Result<
    Option<(
        Vec<std::sync::Arc<ControllerRevision>>,
        std::sync::Arc<ControllerRevision>,
    )>,
> {
    use std::sync::Arc;
    let namespace = owner.namespace().unwrap_or_default();
    let uid = owner.uid().unwrap_or_default();
    let mut revisions: Vec<Arc<ControllerRevision>> = store
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|r| rudder_facts::owners::is_controlled_by(&r.metadata, &uid))
        .collect();
    revisions.sort_by_key(|r| r.revision);
    if let Some(current) = revisions.iter().rev().find(|r| holds(r, template)).cloned() {
        return Ok(Some((revisions, current)));
    }
    let number = revisions.last().map_or(0, |r| r.revision) + 1;
    let Some((revision, _)) = revision_for(owner, template, collisions, number) else {
        return Ok(None);
    };
    match kube::Api::<ControllerRevision>::namespaced(client.clone(), &namespace)
        .create(&kube::api::PostParams::default(), &revision)
        .await
    {
        Ok(created) => {
            let created = Arc::new(created);
            revisions.push(created.clone());
            Ok(Some((revisions, created)))
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(error) => Err(error.into()),
    }
}
