//! The OpenAPI documents kubectl reads: `/openapi/v3` (an index of group-versions),
//! `/openapi/v3/<api/v1 | apis/<group>/<version>>` (one document per group-version the catalog
//! serves) and `/openapi/v2` (one swagger 2.0 document). kubectl needs them for `explain`,
//! `edit`, client-side `apply` and `diff` (strategic merge patches computed from
//! `x-kubernetes-patch-strategy` / `-merge-key`) and for default `--validate=strict`, which
//! checks that the `patch` operation of a kind declares the `fieldValidation` parameter.
//!
//! The schemas are upstream's own (field docs, types, `required`, list/map/patch metadata),
//! vendored as data in `apiserver/openapi/definitions.json` (see the README there) and
//! rewritten into the v3 form by [`schemas`]; the paths are generated from the catalog by
//! [`paths`]. Every document is built once, on first use, and kept as JSON bytes with a hash
//! that serves as its ETag and as the `hash` of its URL in the index.

pub mod custom;
mod paths;
mod schemas;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use serde_json::{json, Map, Value};

use self::schemas::Data;
use crate::catalog::{self, ResourceInfo};
use crate::crd::Served;

/// The release the documents describe (as `/version` reports it).
const INFO_VERSION: &str = "v1.33.0";

/// A built document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub bytes: Bytes,
    pub hash: String,
}

impl Document {
    fn new(value: &Value) -> Self {
        Self::from_bytes(Bytes::from(serde_json::to_vec(value).unwrap_or_default()))
    }

    /// A document as another server served it (an extension apiserver's), hashed here.
    pub fn from_bytes(bytes: Bytes) -> Self {
        let hash = format!("{:032X}", fnv1a_128(&bytes));
        Document { bytes, hash }
    }
}

/// The documents of what CRDs add, built once per snapshot of the served custom resources
/// (kept on the snapshot, so a CRD change builds them anew).
#[derive(Debug)]
pub struct CustomDocuments {
    v3: BTreeMap<String, Document>,
    v2: Document,
}

static V3: LazyLock<BTreeMap<String, Document>> = LazyLock::new(|| {
    group_versions()
        .into_iter()
        .map(|(group, version)| {
            let document = Document::new(&v3_value(group, version, &Served::default()));
            (gv_path(group, version), document)
        })
        .collect()
});

static V2: LazyLock<Document> = LazyLock::new(|| Document::new(&v2_value(&Served::default())));

fn custom_documents(custom: &Served) -> Option<Arc<CustomDocuments>> {
    if custom.resources.is_empty() {
        return None;
    }
    let built = custom.openapi.get_or_init(|| {
        let v3 = custom
            .groups
            .iter()
            .flat_map(|group| {
                group
                    .versions
                    .iter()
                    .map(move |version| (group.name, *version))
            })
            .map(|(group, version)| {
                (
                    gv_path(group, version),
                    Document::new(&v3_value(group, version, custom)),
                )
            })
            .collect();
        Arc::new(CustomDocuments {
            v3,
            v2: Document::new(&v2_value(custom)),
        })
    });
    Some(built.clone())
}

/// `/openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=<HASH>"},
/// "apis/apps/v1": {...}, ...}}` for every group-version served, custom ones too, and the
/// `remote` ones aggregated extension apiservers serve (`apis/<group>/<version>`).
pub fn v3_index(custom: &Served, remote: &[(String, Document)]) -> Value {
    let documents = custom_documents(custom);
    let custom_v3 = documents.iter().flat_map(|docs| docs.v3.iter());
    let remote = remote.iter().map(|(path, document)| (path, document));
    let paths: Map<String, Value> = V3
        .iter()
        .chain(custom_v3)
        .chain(remote)
        .map(|(path, document)| {
            let url = format!("/openapi/v3/{path}?hash={}", document.hash);
            (path.clone(), json!({ "serverRelativeURL": url }))
        })
        .collect();
    json!({ "paths": paths })
}

/// `/openapi/v3/<api/v1 | apis/<group>/<version>>` (a leading `/` is ignored): the document
/// (JSON bytes and its hash, an ETag), or `None` when the group-version is not served.
pub fn v3_document(path: &str, custom: &Served) -> Option<Document> {
    let path = path.trim_start_matches('/');
    if let Some(document) = V3.get(path) {
        return Some(document.clone());
    }
    custom_documents(custom)?.v3.get(path).cloned()
}

/// `/openapi/v2`: the swagger 2.0 document of everything served, and its hash.
pub fn v2_json(custom: &Served) -> Document {
    match custom_documents(custom) {
        Some(documents) => documents.v2.clone(),
        None => V2.clone(),
    }
}

/// The built-in resources the documents describe: all but metrics.k8s.io, whose kinds
/// upstream's schema data does not hold (metrics-server publishes them itself).
fn documented() -> impl Iterator<Item = &'static ResourceInfo> {
    catalog::RESOURCES
        .iter()
        .filter(|info| info.group != crate::kinds::metrics::GROUP)
}

/// The served group-versions in discovery order (core first).
fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for info in documented() {
        if !out.contains(&(info.group, info.version)) {
            out.push((info.group, info.version));
        }
    }
    out
}

/// `api/v1` or `apis/<group>/<version>`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The definitions a set of resources needs: their kinds, list kinds and subresource kinds,
/// the shared meta types, and everything those refer to.
fn definitions_for(data: &Data, resources: &[&'static ResourceInfo]) -> Vec<String> {
    let mut roots: Vec<String> = schemas::EXTRA.iter().map(|name| Data::meta(name)).collect();
    for info in resources {
        let mut kinds = vec![
            (info.group, info.version, info.kind.to_string()),
            (info.group, info.version, info.list_kind()),
        ];
        for sub in info.subresources {
            kinds.push((sub.kind.group, sub.kind.version, sub.kind.kind.to_string()));
        }
        for (group, version, kind) in kinds {
            roots.extend(
                data.definition_of(group, version, &kind)
                    .map(str::to_string),
            );
        }
    }
    data.closure(roots).into_iter().collect()
}

fn info_value() -> Value {
    json!({ "title": "Kubernetes", "version": INFO_VERSION })
}

fn bearer_token() -> Value {
    json!({ "BearerToken": {
        "description": "Bearer Token authentication",
        "in": "header",
        "name": "authorization",
        "type": "apiKey"
    }})
}

/// The v3 document of one group-version.
fn v3_value(group: &str, version: &str, custom: &Served) -> Value {
    let resources: Vec<&'static ResourceInfo> = documented()
        .filter(|info| info.group == group && info.version == version)
        .chain(custom.in_group_version(group, version))
        .collect();
    let overlaid = custom::overlay(schemas::data(), &resources);
    let data = overlaid.as_ref().unwrap_or_else(|| schemas::data());
    let schemas: Map<String, Value> = definitions_for(data, &resources)
        .into_iter()
        .filter_map(|name| data.v3_schema(&name).map(|schema| (name, schema)))
        .collect();
    json!({
        "openapi": "3.0.0",
        "info": info_value(),
        "paths": paths::render(data, &resources, true),
        "components": { "schemas": schemas, "securitySchemes": bearer_token() },
    })
}

/// The swagger 2.0 document of every served resource.
fn v2_value(custom: &Served) -> Value {
    let resources: Vec<&'static ResourceInfo> = documented()
        .chain(custom.resources.iter().copied())
        .collect();
    let overlaid = custom::overlay(schemas::data(), &resources);
    let data = overlaid.as_ref().unwrap_or_else(|| schemas::data());
    let definitions: Map<String, Value> = definitions_for(data, &resources)
        .into_iter()
        .filter_map(|name| {
            let schema = data.definitions.get(&name)?.clone();
            Some((name, schema))
        })
        .collect();
    json!({
        "swagger": "2.0",
        "info": info_value(),
        "paths": paths::render(data, &resources, false),
        "definitions": definitions,
        "security": [{ "BearerToken": [] }],
        "securityDefinitions": bearer_token(),
    })
}

/// FNV-1a, 128 bits: a stable content hash for ETags and index URLs.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(*byte)).wrapping_mul(PRIME)
    })
}

/// A built-in kind's schema as upstream's definitions give it, for walking field paths (the
/// ValidatingAdmissionPolicy type check): nodes may `$ref` other definitions, which
/// [`resolve_ref`] follows.
pub fn kind_schema(group: &str, version: &str, kind: &str) -> Option<&'static Value> {
    let data = schemas::data();
    let name = data.definition_of(group, version, kind)?;
    data.definitions.get(name)
}

/// `node`, or the definition it refers to (`$ref`, or `allOf: [{$ref}]`).
pub fn resolve_ref(node: &Value) -> &Value {
    let reference = node["$ref"]
        .as_str()
        .or_else(|| node["allOf"][0]["$ref"].as_str());
    reference
        .and_then(|r| r.strip_prefix("#/definitions/"))
        .and_then(|name| schemas::data().definitions.get(name))
        .unwrap_or(node)
}
