//! Definitions of kinds the vendored data does not describe: custom resources (from their
//! CRD version's `openAPIV3Schema`, named as upstream names them, `com.example.v1.Widget`,
//! with `metadata` as ObjectMeta and a `<Kind>List`) and the CustomResourceDefinition kind
//! itself (an outline: its spec and status are objects). With them a custom group-version
//! has paths (so kubectl's `fieldValidation` check passes and it validates on the server)
//! and `kubectl explain` shows the CRD's schema.

use serde_json::{json, Map, Value};

use super::schemas::{v2_ref, Data};
use crate::catalog::ResourceInfo;

/// Upstream's name of a custom kind's definition: the group reversed, version, kind.
pub(super) fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The kind's schema as a swagger definition: its own properties, with apiVersion, kind
/// and metadata as every object has them, and the GVK extension.
fn kind_definition(info: &ResourceInfo, schema: &Value) -> Value {
    let mut definition = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut properties = definition
        .remove("properties")
        .and_then(|p| match p {
            Value::Object(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    properties.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
    );
    properties.insert(
        "kind".into(),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
    );
    let mut metadata = v2_ref(&Data::meta("ObjectMeta"));
    metadata["description"] = json!("Standard object's metadata.");
    properties.insert("metadata".into(), metadata);
    definition.insert("type".into(), json!("object"));
    definition.insert("properties".into(), Value::Object(properties));
    definition.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": info.group, "kind": info.kind, "version": info.version}]),
    );
    Value::Object(definition)
}

fn list_definition(info: &ResourceInfo, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", info.list_kind(), info.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "items": {"type": "array", "items": v2_ref(item)},
            "kind": {"type": "string"},
            "metadata": v2_ref(&Data::meta("ListMeta")),
        },
        "x-kubernetes-group-version-kind": [{"group": info.group, "kind": info.list_kind(), "version": info.version}],
    })
}

/// `base` with the definitions of those `resources` it lacks and whose strategy has a
/// schema, or `None` when it lacks none.
pub(super) fn overlay(base: &Data, resources: &[&'static ResourceInfo]) -> Option<Data> {
    let mut added = Vec::new();
    for info in resources {
        if base
            .definition_of(info.group, info.version, info.kind)
            .is_some()
        {
            continue;
        }
        let Some(schema) = info.strategy.openapi_schema() else {
            continue;
        };
        let name = definition_name(info.group, info.version, info.kind);
        let list = definition_name(info.group, info.version, &info.list_kind());
        added.push((
            (info.group, info.version, info.kind.to_string()),
            name.clone(),
            kind_definition(info, schema),
        ));
        added.push((
            (info.group, info.version, info.list_kind()),
            list,
            list_definition(info, &name),
        ));
    }
    (!added.is_empty()).then(|| base.with_definitions(added))
}

/// The outline of a built-in kind the vendored definitions lack: its description and its
/// top-level fields as free-form objects.
pub fn outline(description: &str, fields: &[&str]) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|field| {
            (
                field.to_string(),
                json!({"type": if *field == "webhooks" { "array" } else { "object" },
                       "x-kubernetes-preserve-unknown-fields": true}),
            )
        })
        .collect();
    json!({"description": description, "type": "object", "properties": properties})
}

/// The outline of the CustomResourceDefinition kind.
pub fn crd_outline() -> Value {
    outline(
        "CustomResourceDefinition represents a resource that should be exposed on the API server. Its name MUST be in the format <.spec.name>.<.spec.group>.",
        &["spec", "status"],
    )
}
