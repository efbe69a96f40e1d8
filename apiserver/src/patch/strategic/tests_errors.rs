//! Malformed patches (upstream's error messages, no panics) and the metadata table.

use serde_json::{json, Value};

use super::tests::apply;
use super::tests::pod_spec;
use super::{root_of, FieldStrategy, PatchError};

fn field_strategy(group: &str, kind: &str, path: &[&str]) -> Option<FieldStrategy> {
    super::field_strategy(root_of(group, kind), path)
}

fn error_of(kind: &str, original: Value, patch: Value) -> PatchError {
    match apply("", kind, &original, &patch) {
        Ok(value) => panic!("expected an error for {patch}, got {value}"),
        Err(err) => err,
    }
}

#[test]
fn rejects_malformed_patches() {
    let pod = pod_spec(json!({"containers": [{"name": "a", "image": "x"}]}));
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "invalid JSON document"),
        (json!("str"), "invalid JSON document"),
        (json!(3), "invalid JSON document"),
        (
            pod_spec(json!({"containers": [{"image": "y"}]})),
            "map: map[image:y] does not contain declared merge key: name",
        ),
        (
            pod_spec(json!({"containers": [{"$patch": "delete"}]})),
            "map: map[$patch:delete] does not contain declared merge key: name",
        ),
        (
            json!({"metadata": {"$patch": "foo"}}),
            "unknown patch type: foo in map: map[$patch:foo]",
        ),
        (
            json!({"metadata": {"$patch": "merge"}}),
            "unknown patch type: merge in map",
        ),
        (
            pod_spec(json!({"containers": [{"$patch": "merge", "name": "a"}]})),
            "merging lists cannot yet be specified in the patch",
        ),
        (
            pod_spec(json!({"containers": [{"$patch": "bogus", "name": "a"}]})),
            "unknown patch type: bogus",
        ),
        (json!({"spec": {"$foo": 1}}), "unknown directive \"$foo\""),
        (
            json!({"spec": {"$setElementOrderX": []}}),
            "invalid patch format of setElementOrder list",
        ),
        (
            json!({"spec": {"$deleteFromPrimitiveList": []}}),
            "invalid patch format of primitive list",
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            "invalid patch format of primitive list",
        ),
        (
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
            "expected a []interface {}, but received a map[string]interface {}",
        ),
        (
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a"}, {"name": "b"}]}}),
            "doesn't match $setElementOrder list",
        ),
        (
            json!({"spec": {"$setElementOrder/containers": [{"image": "b"}]}}),
            "does not contain declared merge key: name",
        ),
        (
            json!({"spec": {"$retainKeys": "containers"}}),
            "invalid patch format of retainKeys",
        ),
        (
            json!({"spec": {"$retainKeys": ["volumes"], "containers": []}}),
            "invalid patch format of retainKeys",
        ),
        (
            json!({"metadata": {"finalizers": ["a", 1]}}),
            "list element types are not identical",
        ),
        (
            pod_spec(json!({"containers": ["a"]})),
            "list element types are not identical",
        ),
    ];
    for (patch, want) in cases {
        let mut original = pod.clone();
        original["metadata"]["finalizers"] = json!(["f"]);
        let err = error_of("Pod", original, patch.clone());
        assert!(
            err.to_string().contains(want),
            "{patch}: {err} does not contain {want}"
        );
    }
    assert_eq!(
        error_of(
            "Pod",
            json!({"metadata": {"finalizers": []}}),
            json!({"metadata": {"finalizers": [[1]]}})
        )
        .http_status(),
        422
    );
    assert_eq!(error_of("Pod", json!({}), json!([])).http_status(), 400);
    assert!(matches!(
        error_of("Pod", json!("x"), json!({})),
        PatchError::BadJsonDoc
    ));
}

#[test]
fn never_panics_on_odd_inputs() {
    let values = [
        Value::Null,
        json!(true),
        json!(1),
        json!(1.5),
        json!("s"),
        json!([]),
        json!([null]),
        json!([1, "a"]),
        json!([[1]]),
        json!([{"$patch": "replace"}]),
        json!([{"$patch": "delete", "name": "a"}]),
        json!([{"name": "a"}, {"name": null}]),
        json!({}),
        json!({"$patch": 1}),
        json!({"$retainKeys": [1, null]}),
        json!({"$setElementOrder/containers": [null, 1]}),
        json!({"$deleteFromPrimitiveList/x": [{}]}),
    ];
    let fields = [
        "containers",
        "finalizers",
        "volumes",
        "x",
        "metadata",
        "spec",
    ];
    for original in &values {
        for patch in &values {
            for field in fields {
                let wrap =
                    |v: &Value| json!({"spec": {field: v.clone()}, "metadata": {field: v.clone()}});
                let _ = apply("", "Pod", &wrap(original), &wrap(patch));
                let _ = apply("apps", "Deployment", &wrap(original), patch);
            }
        }
    }
}

#[test]
fn field_strategies_follow_the_go_tags() {
    let merge = |key| {
        Some(FieldStrategy {
            merge_key: Some(key),
            strategy: "merge",
        })
    };
    let cases: Vec<(&str, &str, &[&str], Option<FieldStrategy>)> = vec![
        ("", "Pod", &["spec", "containers"], merge("name")),
        ("", "Pod", &["spec", "initContainers", "env"], merge("name")),
        (
            "",
            "Pod",
            &["spec", "ephemeralContainers", "volumeMounts"],
            merge("mountPath"),
        ),
        (
            "",
            "Pod",
            &["spec", "containers", "ports"],
            merge("containerPort"),
        ),
        (
            "",
            "Pod",
            &["spec", "containers", "volumeDevices"],
            merge("devicePath"),
        ),
        ("", "Pod", &["spec", "containers", "envFrom"], None),
        ("", "Pod", &["spec", "containers", "resizePolicy"], None),
        ("", "Pod", &["spec", "tolerations"], None),
        ("", "Pod", &["spec", "hostAliases"], merge("ip")),
        (
            "",
            "Pod",
            &["spec", "topologySpreadConstraints"],
            merge("topologyKey"),
        ),
        (
            "",
            "Pod",
            &["spec", "volumes"],
            Some(FieldStrategy {
                merge_key: Some("name"),
                strategy: "merge,retainKeys",
            }),
        ),
        ("", "Pod", &["status", "conditions"], merge("type")),
        (
            "",
            "Pod",
            &["metadata", "finalizers"],
            Some(FieldStrategy {
                merge_key: None,
                strategy: "merge",
            }),
        ),
        ("", "Service", &["spec", "ports"], merge("port")),
        ("", "ServiceAccount", &["secrets"], merge("name")),
        ("", "Node", &["status", "addresses"], merge("type")),
        ("", "Node", &["spec", "taints"], None),
        (
            "",
            "ConfigMap",
            &["metadata", "ownerReferences"],
            merge("uid"),
        ),
        ("", "Endpoints", &["subsets"], None),
        (
            "apps",
            "Deployment",
            &["spec", "strategy"],
            Some(FieldStrategy {
                merge_key: None,
                strategy: "retainKeys",
            }),
        ),
        ("apps", "DaemonSet", &["spec", "updateStrategy"], None),
        (
            "apps",
            "StatefulSet",
            &["spec", "template", "spec", "imagePullSecrets"],
            merge("name"),
        ),
        (
            "apps",
            "ReplicaSet",
            &["status", "conditions"],
            merge("type"),
        ),
        (
            "batch",
            "CronJob",
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "containers",
                "env",
            ],
            merge("name"),
        ),
        ("batch", "Job", &["status", "conditions"], merge("type")),
        (
            "policy",
            "PodDisruptionBudget",
            &["spec", "selector"],
            Some(FieldStrategy {
                merge_key: None,
                strategy: "replace",
            }),
        ),
        ("", "Pod", &[], None),
        ("", "Pod", &["spec", "nope", "containers"], None),
    ];
    for (group, kind, path, want) in cases {
        assert_eq!(
            field_strategy(group, kind, path),
            want,
            "{group}/{kind} {path:?}"
        );
    }
}
