//! Unit tests of structural schemas, CEL rules and CRD serving, drawn from upstream's
//! documented behaviour (the CRD task pages: pruning, defaulting, validation rules).

use serde_json::{json, Value};

use super::rules::Rules;
use super::schema::Schema;
use super::CustomResources;
use crate::validation::Errs;

fn widget_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "string", "enum": ["small", "large"]},
                    "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                    "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                    "port": {"x-kubernetes-int-or-string": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {
                            "name": {"type": "string"},
                            "protocol": {"type": "string", "default": "TCP"}
                        }}
                    },
                    "when": {"type": "string", "format": "date-time"}
                }
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }
    })
}

fn errors_of(schema: &Schema, object: &Value) -> Vec<String> {
    let mut errors: Errs = Vec::new();
    schema.validate_root(object, &mut errors);
    errors.iter().map(|e| e.message()).collect()
}

#[test]
fn pruning_drops_undeclared_fields_but_keeps_type_meta_maps_and_preserved_subtrees() {
    let schema = Schema::compile(&widget_schema(), "openAPIV3Schema").expect("compiles");
    let mut object = json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"size": "small", "bogus": 1, "labels": {"a": "b"}, "free": {"any": {"thing": 1}},
                 "ports": [{"name": "http", "extra": true}]},
        "junk": "x"
    });
    schema.prune_root(&mut object);
    assert_eq!(
        object,
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": "small", "labels": {"a": "b"}, "free": {"any": {"thing": 1}},
                     "ports": [{"name": "http"}]}
        })
    );
}

#[test]
fn defaults_fill_absent_fields_inside_present_objects_and_list_items() {
    let schema = Schema::compile(&widget_schema(), "openAPIV3Schema").expect("compiles");
    let mut object = json!({"spec": {"size": "small", "ports": [{"name": "http"}]}});
    schema.apply_defaults(&mut object);
    assert_eq!(object["spec"]["replicas"], 1);
    assert_eq!(object["spec"]["ports"][0]["protocol"], "TCP");
    // No spec, no defaults inside it (the parent has no default of its own).
    let mut bare = json!({});
    schema.apply_defaults(&mut bare);
    assert_eq!(bare, json!({}));
    // A value the client set is kept.
    let mut set = json!({"spec": {"size": "small", "replicas": 5}});
    schema.apply_defaults(&mut set);
    assert_eq!(set["spec"]["replicas"], 5);
}

#[test]
fn validation_reports_upstreams_field_errors() {
    let schema = Schema::compile(&widget_schema(), "openAPIV3Schema").expect("compiles");
    assert!(errors_of(&schema, &json!({"spec": {"size": "small", "port": 80}})).is_empty());
    assert!(errors_of(&schema, &json!({"spec": {"size": "large", "port": "http"}})).is_empty());
    let cases = [
        (json!({"spec": {}}), "spec.size: Required value"),
        (
            json!({"spec": {"size": "medium"}}),
            "spec.size: Unsupported value: \"medium\": supported values: \"small\", \"large\"",
        ),
        (
            json!({"spec": {"size": "small", "replicas": "3"}}),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
        ),
        (
            json!({"spec": {"size": "small", "replicas": 11}}),
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ),
        (
            json!({"spec": {"size": "small", "replicas": -1}}),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            json!({"spec": {"size": "small", "name": "Abc"}}),
            "spec.name: Invalid value: \"Abc\": spec.name in body should match '^[a-z]+$'",
        ),
        (
            json!({"spec": {"size": "small", "name": "abcdefghij"}}),
            "spec.name: Too long: may not be more than 8 bytes",
        ),
        (
            json!({"spec": {"size": "small", "port": 1.5}}),
            "spec.port: Invalid value: \"number\": spec.port in body must be of type integer or string: \"number\"",
        ),
        (
            json!({"spec": {"size": "small", "labels": {"a": 1}}}),
            "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
        ),
        (
            json!({"spec": {"size": "small", "ports": [{"name": "a"}, {"name": "a"}]}}),
            "spec.ports[1]: Duplicate value: map[string]string{\"name\":\"a\"}",
        ),
        (
            json!({"spec": {"size": "small", "when": "yesterday"}}),
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ),
    ];
    for (object, expected) in cases {
        assert_eq!(
            errors_of(&schema, &object),
            vec![expected.to_string()],
            "{object}"
        );
    }
}

#[test]
fn non_structural_schemas_are_named() {
    let schema = Schema::compile(
        &json!({"type": "object", "properties": {
            "spec": {"properties": {"a": {"type": "string"}}},
            "list": {"type": "array"},
            "either": {"type": "object", "anyOf": [{"type": "string"}]}
        }}),
        "openAPIV3Schema",
    )
    .expect("compiles");
    let mut problems = Vec::new();
    schema.structural_problems("openAPIV3Schema", &mut problems);
    assert_eq!(
        problems,
        vec![
            "openAPIV3Schema.properties[either].anyOf[0].type: Forbidden: must be empty to be structural",
            "openAPIV3Schema.properties[list].items: Required value: must be specified",
            "openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
        ]
    );
    assert!(Schema::compile(&json!({"type": "string", "pattern": "(["}), "x").is_err());
}

fn rules_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.replicas", "message": "replicas must be at least minReplicas"},
                {"rule": "self.replicas <= 100", "messageExpression": "'replicas ' + string(self.replicas) + ' is over 100'"},
                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable", "reason": "FieldValueForbidden"}
            ],
            "properties": {
                "replicas": {"type": "integer"},
                "minReplicas": {"type": "integer"},
                "mode": {"type": "string"}
            }
        }}
    })
}

fn rule_errors(rules: &Rules, object: &Value, old: Option<&Value>) -> Vec<String> {
    let mut errors: Errs = Vec::new();
    rules.validate(object, old, &mut errors);
    errors.iter().map(|e| e.message()).collect()
}

#[test]
fn cel_rules_run_with_messages_message_expressions_and_transition_rules() {
    let rules = Rules::compile(&rules_schema(), kube_cel::RootContext::default())
        .expect("compiles")
        .expect("has rules");
    let ok = json!({"spec": {"replicas": 3, "minReplicas": 1, "mode": "a"}});
    assert!(rule_errors(&rules, &ok, None).is_empty());
    assert_eq!(
        rule_errors(
            &rules,
            &json!({"spec": {"replicas": 1, "minReplicas": 2, "mode": "a"}}),
            None
        ),
        vec!["spec: Invalid value: \"object\": replicas must be at least minReplicas"]
    );
    assert_eq!(
        rule_errors(
            &rules,
            &json!({"spec": {"replicas": 101, "minReplicas": 2, "mode": "a"}}),
            None
        ),
        vec!["spec: Invalid value: \"object\": replicas 101 is over 100"]
    );
    // The transition rule runs on updates only.
    let changed = json!({"spec": {"replicas": 3, "minReplicas": 1, "mode": "b"}});
    assert!(rule_errors(&rules, &changed, None).is_empty());
    assert_eq!(
        rule_errors(&rules, &changed, Some(&ok)),
        vec!["spec: Forbidden: mode is immutable"]
    );
}

#[test]
fn rules_that_do_not_compile_are_refused_and_schemas_without_rules_have_none() {
    let bad = json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]});
    let problems = Rules::compile(&bad, kube_cel::RootContext::default())
        .err()
        .expect("refused");
    assert!(
        problems[0].starts_with("openAPIV3Schema.x-kubernetes-validations: Invalid value:"),
        "{problems:?}"
    );
    assert!(
        Rules::compile(&widget_schema(), kube_cel::RootContext::default())
            .expect("compiles")
            .is_none()
    );
}

fn widget_crd(versions: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "uid": "u1"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": versions
        }
    })
}

#[test]
fn served_versions_become_catalog_entries_in_priority_order_and_are_reused() {
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": widget_schema()},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}})
    };
    let crd = widget_crd(json!([
        version("v1beta1", false),
        version("v1", true),
        version("v1alpha1", false)
    ]));
    let custom = CustomResources::default();
    assert!(custom.replace(std::slice::from_ref(&crd)).is_empty());
    let served = custom.served();
    let group = served.group("example.com").expect("served");
    assert_eq!(group.versions, vec!["v1", "v1beta1", "v1alpha1"]);
    let v1 = served.find("example.com", "v1", "widgets").expect("v1");
    assert_eq!(v1.storage_prefix, "/registry/example.com/widgets");
    assert_eq!(v1.short_names, &["wd"]);
    assert!(v1.namespaced);
    assert_eq!(v1.subresources.len(), 2);
    // The beta version stores as v1 and shows as v1beta1.
    let beta = served
        .find("example.com", "v1beta1", "widgets")
        .expect("beta");
    let shown_beta = json!({"apiVersion": "example.com/v1beta1"});
    let stored = beta.strategy.api_to_stored(&shown_beta);
    assert_eq!(stored["apiVersion"], "example.com/v1");
    let shown = beta
        .strategy
        .stored_to_api(json!({"apiVersion": "example.com/v1", "spec": {"size": "small"}}));
    assert_eq!(shown["apiVersion"], "example.com/v1beta1");
    assert_eq!(shown["spec"]["replicas"], 1, "defaulted on read");
    // The same spec again: the same entries, and the snapshot is not replaced.
    let generation = served.generation;
    custom.replace(std::slice::from_ref(&crd));
    assert_eq!(custom.served().generation, generation);
    assert!(std::ptr::eq(
        custom.find("example.com", "v1", "widgets").expect("v1"),
        v1
    ));
    custom.replace(&[]);
    assert!(custom.find("example.com", "v1", "widgets").is_none());
}

#[test]
fn printer_columns_follow_the_crd_and_default_to_age() {
    let crd = widget_crd(json!([{
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": widget_schema()},
        "additionalPrinterColumns": [
            {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Missing", "type": "string", "jsonPath": ".status.nothing", "priority": 1}
        ]
    }]));
    let custom = CustomResources::default();
    custom.replace(&[crd]);
    let info = custom.find("example.com", "v1", "widgets").expect("served");
    let names: Vec<&str> = info.printer.columns().iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["Name", "Size", "Replicas", "Missing"]);
    let cells = info.printer.cells(
        &json!({"metadata": {"name": "w"}, "spec": {"size": "small", "replicas": 2}}),
        jiff::Timestamp::now(),
    );
    assert_eq!(
        cells,
        vec![json!("w"), json!("small"), json!(2), Value::Null]
    );
}
