//! Server-side apply: ownership moved by other writes, refused configurations, status, and
//! kubectl's move from client-side to server-side apply.

use serde_json::{json, Value};

use super::tests::{
    conflicts, containers, deploy_apply, entry_of, fields_of, owns, run, web, Step::Apply,
    Step::Update, TIMES,
};
use super::*;

#[test]
fn an_edit_takes_the_field_and_the_old_owner_then_conflicts() {
    let object = run(vec![
        Apply("kubectl", web(json!({"replicas": 2, "paused": false}))),
        Update("kubectl-edit", json!({"spec": {"replicas": 5}})),
    ])
    .expect("updates");
    assert!(owns(
        &object,
        "kubectl-edit",
        "Update",
        &["f:spec", "f:replicas"]
    ));
    assert!(!owns(
        &object,
        "kubectl",
        "Apply",
        &["f:spec", "f:replicas"]
    ));
    assert!(owns(&object, "kubectl", "Apply", &["f:spec", "f:paused"]));
    let edit = entry_of(&object, "kubectl-edit", "Update").expect("an entry");
    assert_eq!(edit["time"], TIMES[1]);
    assert!(edit.get("subresource").is_none());
    let config = web(json!({"replicas": 2, "paused": false}));
    let found = conflicts(deploy_apply(
        Some(&object),
        &config,
        "kubectl",
        false,
        TIMES[2],
    ));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].field, ".spec.replicas");
    assert_eq!(
        found[0].message,
        "conflict with \"kubectl-edit\" using apps/v1"
    );
}

#[test]
fn bad_configurations_are_refused() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "a container without its name",
            web(containers(json!([{"image": "nginx"}]))),
            ".spec.template.spec.containers: element 0: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)",
        ),
        (
            "two containers with one name",
            web(containers(json!([{"name": "a"}, {"name": "a"}]))),
            ".spec.template.spec.containers: duplicate entries for key [name=\"a\"]",
        ),
        (
            "another version",
            json!({"apiVersion": "apps/v1beta1", "kind": "Deployment",
                   "metadata": {"name": "web"}}),
            "Incorrect version specified in apply patch. Specified patch version: apps/v1beta1, expected: apps/v1",
        ),
        (
            "another kind",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"}}),
            "invalid object type: apps/v1, Kind=StatefulSet",
        ),
        (
            "managedFields set",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "managedFields": []}}),
            "metadata.managedFields must be nil",
        ),
    ];
    for (name, config, message) in cases {
        let error = run(vec![Apply("a", config)]).expect_err(name);
        assert_eq!(error.to_string(), message, "{name}");
        let bad_request = matches!(error, ApplyError::BadRequest(_));
        assert_eq!(bad_request, !name.contains("container"), "{name}");
    }
}

#[test]
fn status_is_not_owned_through_the_main_resource() {
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                        "spec": {"replicas": 1}, "status": {"replicas": 1}});
    let object = run(vec![Apply("a", config)]).expect("applies");
    assert_eq!(
        fields_of(&object, "a", "Apply"),
        Some(json!({"f:spec": {"f:replicas": {}}}))
    );
}

#[test]
fn kubectl_takes_over_what_its_last_applied_configuration_set() {
    let last = web(json!({"replicas": 2}));
    let annotations = json!({"kubectl.kubernetes.io/last-applied-configuration": last.to_string()});
    let created = json!({"metadata": {"name": "web", "annotations": annotations},
                         "spec": {"replicas": 2}, "apiVersion": "apps/v1", "kind": "Deployment"});
    let config = web(json!({"replicas": 3}));
    let object = run(vec![
        Update("kubectl-client-side-apply", created),
        Apply("kubectl", config.clone()),
    ])
    .expect("no conflict for fields last-applied set");
    assert_eq!(object["spec"]["replicas"], 3);
    let annotation =
        &object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"];
    let refreshed: Value = serde_json::from_str(annotation.as_str().unwrap_or("")).expect("JSON");
    assert_eq!(refreshed, config);
    // Another applier gets no such pass.
    let result = run(vec![
        Update(
            "kubectl-client-side-apply",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": annotations}, "spec": {"replicas": 2}}),
        ),
        Apply("helm", web(json!({"replicas": 3}))),
    ]);
    assert_eq!(conflicts(result).len(), 1);
}

#[test]
fn applying_onto_an_untracked_object_credits_a_placeholder() {
    let current = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"name": "web", "uid": "u"}, "spec": {"replicas": 1}});
    let config = web(json!({"replicas": 2}));
    let found = conflicts(deploy_apply(
        Some(&current),
        &config,
        "kubectl",
        false,
        TIMES[0],
    ));
    assert_eq!(
        found[0].message,
        "conflict with \"before-first-apply\" using apps/v1"
    );
    let forced = deploy_apply(Some(&current), &config, "kubectl", true, TIMES[0]).expect("forced");
    assert!(entry_of(&forced, "before-first-apply", "Update").is_none());
    assert_eq!(forced["metadata"]["uid"], "u");
}

#[test]
fn a_dropped_struct_goes_with_the_untracked_fields_inside() {
    let config = web(json!({"replicas": 1, "strategy": {"rollingUpdate": {"maxSurge": 1}}}));
    let mut object = run(vec![Apply("a", config)]).expect("applies");
    // Defaults the store fills in after the apply are nobody's.
    object["spec"]["strategy"]["type"] = json!("RollingUpdate");
    object["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!("25%");
    object["spec"]["revisionHistoryLimit"] = json!(10);
    let object = deploy_apply(
        Some(&object),
        &web(json!({"replicas": 1})),
        "a",
        false,
        TIMES[1],
    )
    .expect("applies");
    assert_eq!(
        object["spec"],
        json!({"replicas": 1, "revisionHistoryLimit": 10})
    );
}

#[test]
fn merged_lists_follow_the_configuration_order_for_shared_items() {
    let names = |list: &[&str]| {
        let items: Vec<Value> = list.iter().map(|n| json!({"name": n})).collect();
        web(containers(Value::Array(items)))
    };
    // (live order, applied order, merged order)
    let cases: [(&[&str], &[&str], &[&str]); 3] = [
        (&["a", "b", "c"], &["c", "a"], &["b", "c", "a"]),
        (&["a", "b"], &["a", "x"], &["a", "b", "x"]),
        (&["a", "b"], &["x", "b"], &["a", "x", "b"]),
    ];
    for (live, config, merged) in cases {
        let object =
            run(vec![Apply("one", names(live)), Apply("two", names(config))]).expect("applies");
        let found: Vec<&str> = object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map(|list| list.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(found, merged, "{live:?} + {config:?}");
    }
}
