//! Tests of the generated documents: the index covers the catalog, kinds carry their GVK and
//! docs, patch operations declare `fieldValidation`, every `$ref` resolves, and the patch
//! metadata agrees with the strategic merge patch engine's (`patch::strategic`).

use crate::crd::Served;
use serde_json::Value;

use super::*;
use crate::patch::strategic::{root_of, FieldStrategy};

fn field_strategy(group: &str, kind: &str, path: &[&str]) -> Option<FieldStrategy> {
    crate::patch::strategic::field_strategy(root_of(group, kind), path)
}

fn doc(path: &str) -> Value {
    let (bytes, _) = v3_document(path, &Served::default())
        .map(|d| (d.bytes, d.hash))
        .expect("document served");
    serde_json::from_slice(&bytes).expect("valid JSON")
}

/// Follows a `$ref` or `allOf: [{$ref}]` to the schema it names.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    let target = schema
        .get("$ref")
        .or_else(|| schema.get("allOf").and_then(|all| all.get(0)?.get("$ref")))
        .and_then(Value::as_str);
    match target.and_then(|t| t.strip_prefix("#/components/schemas/")) {
        Some(name) => &doc["components"]["schemas"][name],
        None => schema,
    }
}

/// The property schema at `path` below `root` (list items are transparent).
fn property<'a>(doc: &'a Value, root: &'a Value, path: &[&str]) -> &'a Value {
    let mut schema = root;
    for name in path {
        let mut object = resolve(doc, schema);
        if object.get("type").and_then(Value::as_str) == Some("array") {
            object = resolve(doc, &object["items"]);
        }
        schema = &object["properties"][*name];
    }
    schema
}

#[test]
fn index_lists_every_catalog_group_version() {
    let index = v3_index(&Served::default(), &[]);
    for info in super::documented() {
        let path = gv_path(info.group, info.version);
        let url = index["paths"][&path]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} missing from the index"));
        let (_, hash) = v3_document(&path, &Served::default())
            .map(|d| (d.bytes, d.hash))
            .expect("served");
        assert_eq!(url, format!("/openapi/v3/{path}?hash={hash}"));
    }
    assert!(v3_document("apis/apps/v1beta1", &Served::default())
        .map(|d| (d.bytes, d.hash))
        .is_none());
    assert!(v3_document("/apis/apps/v1", &Served::default())
        .map(|d| (d.bytes, d.hash))
        .is_some());
}

#[test]
fn every_served_kind_has_its_schema_and_paths() {
    for info in super::documented() {
        let doc = doc(&gv_path(info.group, info.version));
        let kind = doc["components"]["schemas"]
            .as_object()
            .expect("schemas")
            .values()
            .find(|schema| {
                schema["x-kubernetes-group-version-kind"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|gvk| {
                        gvk["group"] == info.group
                            && gvk["version"] == info.version
                            && gvk["kind"] == info.kind
                    })
            });
        assert!(kind.is_some(), "{} has no schema", info.kind);
        let prefix = format!("/{}", gv_path(info.group, info.version));
        let paths = doc["paths"].as_object().expect("paths");
        assert!(
            paths
                .keys()
                .any(|path| path.starts_with(&prefix) && path.ends_with(info.plural)),
            "{} has no path",
            info.plural
        );
    }
}

#[test]
fn deployment_schema_carries_gvk_and_field_docs() {
    let doc = doc("apis/apps/v1");
    assert_eq!(doc["openapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "Kubernetes");
    let deployment = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    let spec = &deployment["properties"]["spec"];
    assert_eq!(
        spec["allOf"],
        json!([{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}])
    );
    assert!(spec["description"]
        .as_str()
        .is_some_and(|d| d.contains("desired behavior of the Deployment")));
    let deployment_spec = resolve(&doc, spec);
    assert_eq!(deployment_spec["required"], json!(["selector", "template"]));
    assert!(deployment_spec["properties"]["replicas"]["description"].is_string());
    // The pod template's types come along, so `explain deployment.spec.template.spec` works.
    assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"].is_object());
    assert!(doc["components"]["schemas"]["io.k8s.api.autoscaling.v1.Scale"].is_object());
}

#[test]
fn pod_spec_lists_carry_list_and_patch_metadata() {
    let doc = doc("api/v1");
    let containers =
        &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(
        containers["items"],
        json!({"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"})
    );
    let node_selector =
        &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["nodeSelector"];
    assert_eq!(node_selector["x-kubernetes-map-type"], "atomic");
}

#[test]
fn patch_operations_declare_field_validation() {
    let doc = doc("apis/apps/v1");
    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "kind": "Deployment", "version": "v1"})
    );
    assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
    let query: Vec<&str> = patch["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|param| param["in"] == "query")
        .filter_map(|param| param["name"].as_str())
        .collect();
    for name in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(query.contains(&name), "{name} missing: {query:?}");
    }
    let content = patch["requestBody"]["content"]
        .as_object()
        .expect("content");
    for media in [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ] {
        assert!(content.contains_key(media), "{media}");
    }
    for method in ["get", "put", "delete"] {
        assert!(item[method].is_object(), "{method}");
    }
    let collection = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"];
    assert_eq!(collection["get"]["x-kubernetes-action"], "list");
    assert_eq!(collection["post"]["x-kubernetes-action"], "post");
    let scale = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
    assert_eq!(
        scale["patch"]["x-kubernetes-group-version-kind"]["kind"],
        "Scale"
    );
    // Every patch operation, subresources included, declares it: kubectl checks the first
    // patch operation it finds for the kind.
    for info in super::documented() {
        let doc = self::doc(&gv_path(info.group, info.version));
        for (path, item) in doc["paths"].as_object().expect("paths") {
            if let Some(patch) = item.get("patch") {
                let declares = patch["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| {
                        p["name"] == "fieldValidation"
                            && p["in"] == "query"
                            && p["schema"].is_object()
                    });
                assert!(declares, "{path}");
            }
        }
    }
}

#[test]
fn every_ref_resolves_within_its_document() {
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target);
                }
                map.values().for_each(|child| refs(child, out));
            }
            Value::Array(items) => items.iter().for_each(|child| refs(child, out)),
            _ => {}
        }
    }
    let mut index = v3_index(&Served::default(), &[]);
    let paths = index["paths"].take();
    for path in paths.as_object().expect("paths").keys() {
        let doc = doc(path);
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for target in found {
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{target} in {path}"));
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{name} in {path}"
            );
        }
    }
    let v2: Value = serde_json::from_slice(&v2_json(&Served::default()).bytes).expect("v2 JSON");
    assert_eq!(v2["swagger"], "2.0");
    let mut found = Vec::new();
    refs(&v2, &mut found);
    for target in found {
        let name = target.strip_prefix("#/definitions/").expect("v2 ref");
        assert!(v2["definitions"][name].is_object(), "{name} in v2");
    }
    let patch = &v2["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    assert!(patch["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .any(|p| p["name"] == "fieldValidation" && p["type"] == "string"));
}

#[test]
fn documents_are_cached_with_stable_hashes() {
    let (first, hash) = v3_document("api/v1", &Served::default())
        .map(|d| (d.bytes, d.hash))
        .expect("served");
    let (again, hash_again) = v3_document("api/v1", &Served::default())
        .map(|d| (d.bytes, d.hash))
        .expect("served");
    assert_eq!(first.as_ptr(), again.as_ptr());
    assert_eq!(hash, hash_again);
    assert_eq!(hash.len(), 32);
    assert_ne!(
        hash,
        v3_document("apis/apps/v1", &Served::default())
            .map(|d| (d.bytes, d.hash))
            .expect("served")
            .1
    );
    assert_eq!(
        v2_json(&Served::default()).hash,
        v2_json(&Served::default()).hash
    );
    assert_ne!(fnv1a_128(b"a"), fnv1a_128(b"b"));
}

/// (group, kind, document, field path, merge key, strategy).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    Option<&'static str>,
    &'static str,
);

#[test]
fn merge_keys_agree_with_the_patch_engine_on_known_fields() {
    let cases: &[Case] = &[
        (
            "",
            "Pod",
            "api/v1",
            &["spec", "containers"],
            Some("name"),
            "merge",
        ),
        (
            "",
            "Pod",
            "api/v1",
            &["spec", "containers", "env"],
            Some("name"),
            "merge",
        ),
        (
            "",
            "Pod",
            "api/v1",
            &["spec", "containers", "ports"],
            Some("containerPort"),
            "merge",
        ),
        (
            "",
            "Pod",
            "api/v1",
            &["spec", "volumes"],
            Some("name"),
            "merge,retainKeys",
        ),
        (
            "",
            "Service",
            "api/v1",
            &["spec", "ports"],
            Some("port"),
            "merge",
        ),
        (
            "",
            "Node",
            "api/v1",
            &["status", "addresses"],
            Some("type"),
            "merge",
        ),
        (
            "",
            "ConfigMap",
            "api/v1",
            &["metadata", "ownerReferences"],
            Some("uid"),
            "merge",
        ),
        (
            "apps",
            "Deployment",
            "apis/apps/v1",
            &["spec", "strategy"],
            None,
            "retainKeys",
        ),
        (
            "apps",
            "Deployment",
            "apis/apps/v1",
            &["spec", "template", "spec", "initContainers", "volumeMounts"],
            Some("mountPath"),
            "merge",
        ),
        (
            "batch",
            "CronJob",
            "apis/batch/v1",
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "containers",
            ],
            Some("name"),
            "merge",
        ),
    ];
    for (group, kind, gv, path, key, strategy) in cases {
        let doc = doc(gv);
        let root = kind_schema(&doc, group, kind);
        let field = property(&doc, root, path);
        assert_eq!(
            field["x-kubernetes-patch-merge-key"].as_str(),
            *key,
            "{kind} {path:?}"
        );
        assert_eq!(
            field["x-kubernetes-patch-strategy"], *strategy,
            "{kind} {path:?}"
        );
        let engine = field_strategy(group, kind, path).expect("engine knows the field");
        assert_eq!(engine.merge_key, *key, "{kind} {path:?}");
        assert_eq!(engine.strategy, *strategy, "{kind} {path:?}");
    }
}

fn kind_schema<'a>(doc: &'a Value, group: &str, kind: &str) -> &'a Value {
    doc["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .values()
        .find(|schema| {
            schema["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|gvk| gvk["group"] == group && gvk["kind"] == kind)
        })
        .expect("kind schema")
}

/// Every field of every stored kind that the documents give a patch strategy, and that a
/// strategic merge patch can reach, has the same strategy and merge key in the patch engine,
/// so client-side apply (which computes patches from the documents) and the server (which
/// applies them with the engine) agree.
#[test]
fn every_documented_patch_strategy_agrees_with_the_patch_engine() {
    fn walk(
        doc: &Value,
        info: &ResourceInfo,
        schema: &Value,
        path: &mut Vec<String>,
        bad: &mut Vec<String>,
    ) {
        if path.len() > 12 {
            return;
        }
        let mut object = resolve(doc, schema);
        if object.get("type").and_then(Value::as_str) == Some("array") {
            object = resolve(doc, &object["items"]);
        }
        let Some(properties) = object.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, field) in properties {
            path.push(name.clone());
            let names: Vec<&str> = path.iter().map(String::as_str).collect();
            let documented = field
                .get("x-kubernetes-patch-strategy")
                .and_then(Value::as_str);
            let engine = field_strategy(info.group, info.kind, &names);
            if let Some(strategy) = documented {
                let key = field
                    .get("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str);
                let agrees = engine.is_some_and(|e| e.strategy == strategy && e.merge_key == key);
                if !agrees {
                    bad.push(format!(
                        "{} {}: {strategy} {key:?} vs {engine:?}",
                        info.kind,
                        names.join(".")
                    ));
                }
            }
            // A list without a merge strategy is replaced wholesale, so nothing below it is
            // ever merged (upstream's engine does not look, and neither does ours).
            let is_list = resolve(doc, field).get("type").and_then(Value::as_str) == Some("array");
            if !is_list || documented.is_some_and(|strategy| strategy.contains("merge")) {
                walk(doc, info, field, path, bad);
            }
            path.pop();
        }
    }
    let mut bad = Vec::new();
    for info in catalog::RESOURCES.iter().filter(|info| info.is_stored()) {
        let doc = doc(&gv_path(info.group, info.version));
        let root = kind_schema(&doc, info.group, info.kind);
        walk(&doc, info, root, &mut Vec::new(), &mut bad);
    }
    assert!(bad.is_empty(), "disagreements:\n{}", bad.join("\n"));
}
