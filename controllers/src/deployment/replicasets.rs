//! A Deployment's ReplicaSets: which one is new (its template is the Deployment's, the
//! `pod-template-hash` label aside), the revision annotations upstream keeps on them, how a new
//! one is named and built, and how one is scaled.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde::Serialize;

use crate::error::Result;
use crate::podtemplate::controller_reference;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
pub const TEMPLATE_HASH: &str = "pod-template-hash";

/// Deployment annotations that are not copied to its ReplicaSets (upstream's skip list).
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// A ReplicaSet's revision (0 when it has none).
pub fn revision(set: &ReplicaSet) -> i64 {
    set.annotations()
        .get(REVISION)
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// The template without its `pod-template-hash` label.
fn without_hash(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut template = template.clone();
    if let Some(labels) = template
        .metadata
        .as_mut()
        .and_then(|meta| meta.labels.as_mut())
    {
        labels.remove(TEMPLATE_HASH);
    }
    template
}

/// Whether two templates are the same, the hash label aside.
pub fn same_template(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

/// The ReplicaSet whose template is `deployment`'s (the oldest, if several are).
pub fn find_new(deployment: &Deployment, sets: &[Arc<ReplicaSet>]) -> Option<Arc<ReplicaSet>> {
    let template = deployment.spec.as_ref()?.template.clone();
    sets.iter()
        .find(|set| {
            set.spec
                .as_ref()
                .and_then(|spec| spec.template.as_ref())
                .is_some_and(|own| same_template(own, &template))
        })
        .cloned()
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// The `pod-template-hash` of a template: a hash of it (and of the collision count, which a
/// name clash bumps) in the alphabet upstream uses for generated names.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&without_hash(template)).unwrap_or_default();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    fnv32a(&bytes)
        .to_string()
        .bytes()
        .map(|digit| char::from(ALPHABET[usize::from(digit) % ALPHABET.len()]))
        .collect()
}

/// The annotations a Deployment's ReplicaSets carry: its own (minus the skip list), its
/// revision, and the sizes it had when they were last scaled.
pub fn set_annotations(
    deployment: &Deployment,
    revision: i64,
    max_replicas: i32,
) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = deployment
        .annotations()
        .iter()
        .filter(|(key, _)| !NOT_COPIED.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1);
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.insert(DESIRED_REPLICAS.into(), replicas.to_string());
    annotations.insert(MAX_REPLICAS.into(), max_replicas.to_string());
    annotations
}

/// A new ReplicaSet for `deployment`'s template: named after it and the hash, the hash label
/// on its template and selector, controlled by it.
pub fn new_set(
    deployment: &Deployment,
    hash: &str,
    replicas: i32,
    annotations: BTreeMap<String, String>,
) -> Option<ReplicaSet> {
    let spec = deployment.spec.as_ref()?;
    let mut template = spec.template.clone();
    template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(TEMPLATE_HASH.into(), hash.into());
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(TEMPLATE_HASH.into(), hash.into());
    let labels = template
        .metadata
        .as_ref()
        .and_then(|meta| meta.labels.clone());
    Some(ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", deployment.name_any())),
            namespace: deployment.namespace(),
            labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_reference(deployment)]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    })
}

/// The part of a ReplicaSet a scale writes.
#[derive(Debug, Serialize)]
struct ScalePatch<'a> {
    metadata: ScaleMeta<'a>,
    spec: ScaleSpec,
}

#[derive(Debug, Serialize)]
struct ScaleMeta<'a> {
    annotations: &'a BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ScaleSpec {
    replicas: i32,
    min_ready_seconds: i32,
}

/// Sets a ReplicaSet's replicas and annotations (and the Deployment's `minReadySeconds`).
pub async fn scale(
    api: &Api<ReplicaSet>,
    set: &ReplicaSet,
    replicas: i32,
    annotations: &BTreeMap<String, String>,
    min_ready_seconds: i32,
) -> Result<ReplicaSet> {
    let patch = ScalePatch {
        metadata: ScaleMeta { annotations },
        spec: ScaleSpec {
            replicas,
            min_ready_seconds,
        },
    };
    Ok(api
        .patch(
            &set.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?)
}
