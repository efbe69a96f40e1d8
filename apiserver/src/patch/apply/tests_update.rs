//! managedFields for writes that are not applies (`track_update`), and the FieldsV1 codec.

use serde_json::{json, Value};

use super::tests::{deployments, entry_of, fields_of, owns, run, web, Step::Update, TIMES};
use super::*;

fn track(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    sub: Option<Subresource>,
    now: &str,
) -> Value {
    let mut new = new.clone();
    track_update(deployments(), old, &mut new, manager, sub, now);
    new
}

#[test]
fn create_owns_every_field_set_but_the_server_ones() {
    let body = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "5",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
                     "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}},
        "status": {"replicas": 0},
    });
    let object = track(None, &body, "kubectl-create", None, TIMES[0]);
    assert_eq!(
        object["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
            "time": TIMES[0], "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                    }}}}},
            },
        }])
    );
}

#[test]
fn updates_take_only_what_they_change() {
    let object = run(vec![
        Update(
            "kubectl-create",
            web(json!({"replicas": 1, "paused": false})),
        ),
        Update("kubectl-scale", json!({"spec": {"replicas": 3}})),
        Update("kubectl-edit", json!({"spec": {"paused": true}})),
    ])
    .expect("updates");
    assert!(owns(
        &object,
        "kubectl-scale",
        "Update",
        &["f:spec", "f:replicas"]
    ));
    assert!(owns(
        &object,
        "kubectl-edit",
        "Update",
        &["f:spec", "f:paused"]
    ));
    // The creator kept nothing, so its entry is gone.
    assert!(entry_of(&object, "kubectl-create", "Update").is_none());
    let order: Vec<&Value> = object["metadata"]["managedFields"]
        .as_array()
        .map(|list| list.iter().map(|e| &e["manager"]).collect())
        .unwrap_or_default();
    assert_eq!(order, vec!["kubectl-scale", "kubectl-edit"]);
}

#[test]
fn an_update_that_changes_nothing_leaves_managed_fields_alone() {
    let created = run(vec![Update("a", web(json!({"replicas": 1})))]).expect("creates");
    let again = track(Some(&created), &created, "b", None, TIMES[1]);
    assert_eq!(again, created);
    let same_manager = track(Some(&created), &created, "a", None, TIMES[1]);
    assert_eq!(
        entry_of(&same_manager, "a", "Update").map(|e| e["time"].clone()),
        Some(json!(TIMES[0]))
    );
}

#[test]
fn removing_a_field_removes_it_from_every_owner() {
    let object = run(vec![
        Update("a", web(json!({"replicas": 1, "paused": true}))),
        Update("b", json!({"spec": {"paused": null}})),
    ])
    .expect("updates");
    assert_eq!(
        fields_of(&object, "a", "Update"),
        Some(json!({"f:spec": {"f:replicas": {}}}))
    );
    assert!(entry_of(&object, "b", "Update").is_none());
}

#[test]
fn client_managed_fields_are_taken_reset_or_ignored() {
    let created = run(vec![Update("a", web(json!({"replicas": 1})))]).expect("creates");
    let given = json!([{"manager": "x", "operation": "Apply", "apiVersion": "apps/v1",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]);
    type Case = (&'static str, Value, Option<Subresource>, Value);
    let cases: Vec<Case> = vec![
        (
            "valid ones are taken as given",
            given.clone(),
            None,
            given.clone(),
        ),
        ("[{}] clears them", json!([{}]), None, Value::Null),
        ("[] clears them", json!([]), None, Value::Null),
        (
            "invalid ones fall back to the stored ones",
            json!([{"manager": "x", "operation": "Nope", "apiVersion": "v1",
                     "fieldsType": "FieldsV1"}]),
            None,
            created["metadata"]["managedFields"].clone(),
        ),
        (
            "a subresource write ignores them",
            given,
            Some(Subresource::Scale),
            created["metadata"]["managedFields"].clone(),
        ),
    ];
    for (name, fields, sub, expected) in cases {
        let mut body = created.clone();
        body["metadata"]["managedFields"] = fields;
        let object = track(Some(&created), &body, "b", sub, TIMES[1]);
        assert_eq!(object["metadata"]["managedFields"], expected, "{name}");
    }
    // Once cleared, an object stays untracked until someone applies to it.
    let mut cleared = created.clone();
    cleared["metadata"]["managedFields"] = json!([{}]);
    let cleared = track(Some(&created), &cleared, "b", None, TIMES[1]);
    let mut changed = cleared.clone();
    changed["spec"]["replicas"] = json!(4);
    let changed = track(Some(&cleared), &changed, "b", None, TIMES[2]);
    assert!(changed["metadata"].get("managedFields").is_none());
}

#[test]
fn status_writes_own_status_and_main_writes_do_not() {
    let created = run(vec![Update("a", web(json!({"replicas": 1})))]).expect("creates");
    let mut body = created.clone();
    body["status"] = json!({"replicas": 1});
    body["spec"]["replicas"] = json!(2);
    let status = track(
        Some(&created),
        &body,
        "controller",
        Some(Subresource::Status),
        TIMES[1],
    );
    let entry = entry_of(&status, "controller", "Update").expect("an entry");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
    let main = track(Some(&created), &body, "kubectl-edit", None, TIMES[1]);
    let entry = entry_of(&main, "kubectl-edit", "Update").expect("an entry");
    assert_eq!(entry["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    // Kinds without a status subresource own status like any field.
    let mut map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                         "data": {"k": "v"}, "status": {"x": 1}});
    let config_maps = crate::catalog::by_kind("", "ConfigMap").expect("served");
    track_update(config_maps, None, &mut map, "m", None, TIMES[0]);
    let fields = &map["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        fields,
        &json!({"f:data": {"f:k": {}}, "f:status": {"f:x": {}}})
    );
}

#[test]
fn at_most_ten_updaters_are_kept() {
    let mut object = run(vec![Update("m0", web(json!({"replicas": 0})))]).expect("creates");
    for i in 1..12 {
        let mut next = object.clone();
        next["metadata"]["labels"][format!("l{i}")] = json!("x");
        let now = format!("2026-01-01T01:{i:02}:00Z");
        object = track(Some(&object), &next, &format!("m{i}"), None, &now);
    }
    let entries = object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(entries.len(), 10, "{entries:#?}");
    assert!(entry_of(&object, "ancient-changes", "Update").is_some());
}

#[test]
fn fields_v1_round_trips_and_paths_print_like_upstream() {
    let fields = json!({
        "f:metadata": {"f:finalizers": {".": {}, "v:\"a\"": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:ports": {
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}}}}},
                   "f:list": {"i:3": {}}},
    });
    let set = FieldSet::from_fields_v1(&fields).expect("decodes");
    assert_eq!(set.to_fields_v1(), fields);
    let printed: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
    assert_eq!(
        printed,
        vec![
            ".metadata.finalizers",
            ".metadata.finalizers[=\"a\"]",
            ".spec.containers[name=\"c\"]",
            ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"]",
            ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"].name",
            ".spec.list[3]",
        ]
    );
    for bad in [
        json!({"x:y": {}}),
        json!({"f:a": 1}),
        json!({"k:[1]": {}}),
        json!([]),
    ] {
        assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
    }
}
