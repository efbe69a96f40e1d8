//! Server-side apply, as the upstream docs describe it
//! (kubernetes.io/docs/reference/using-api/server-side-apply): creation, no-op re-apply,
//! conflicts and forcing, pruning, and the list and map merge semantics.

use serde_json::{json, Value};

use super::*;

pub(super) const TIMES: [&str; 5] = [
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:01:00Z",
    "2026-01-01T00:02:00Z",
    "2026-01-01T00:03:00Z",
    "2026-01-01T00:04:00Z",
];

/// One write in a scenario.
pub(super) enum Step {
    /// Server-side apply by a manager, not forced.
    Apply(&'static str, Value),
    /// Server-side apply by a manager with force.
    Force(&'static str, Value),
    /// A non-apply write: the JSON merge patch applied to the object, tracked for a manager
    /// (`kubectl edit`, `kubectl scale`, a client-side apply).
    Update(&'static str, Value),
}

use Step::{Apply, Force, Update};

/// Runs the steps on a Deployment (the first may create it); step i happens at TIMES[i].
pub(super) fn run(steps: Vec<Step>) -> Result<Value, ApplyError> {
    let mut object: Option<Value> = None;
    for (index, step) in steps.into_iter().enumerate() {
        let now = TIMES[index.min(TIMES.len() - 1)];
        let next = match step {
            Apply(manager, config) => deploy_apply(object.as_ref(), &config, manager, false, now)?,
            Force(manager, config) => deploy_apply(object.as_ref(), &config, manager, true, now)?,
            Update(manager, patch) => {
                let mut new = object.clone().unwrap_or_else(|| json!({}));
                json_patch::merge(&mut new, &patch);
                let old = object.as_ref();
                track_update(deployments(), old, &mut new, manager, None, now);
                new
            }
        };
        object = Some(next);
    }
    Ok(object.unwrap_or(Value::Null))
}

pub(super) fn deploy_apply(
    current: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApplyError> {
    let applier = Applier {
        manager,
        force,
        subresource: None,
        now,
    };
    apply(deployments(), current, config, &applier)
}

/// The catalog entry of apps/v1 Deployments.
pub(super) fn deployments() -> &'static crate::catalog::ResourceInfo {
    crate::catalog::by_kind("apps", "Deployment").expect("deployments are served")
}

/// A Deployment configuration `web` with the given spec.
pub(super) fn web(spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": spec,
    })
}

/// A Deployment configuration `web` with labels and no spec.
pub(super) fn web_labels(labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "labels": labels}})
}

pub(super) fn containers(list: Value) -> Value {
    json!({"template": {"spec": {"containers": list}}})
}

/// The fieldsV1 of the entry of (manager, operation), if any.
pub(super) fn fields_of(object: &Value, manager: &str, operation: &str) -> Option<Value> {
    entry_of(object, manager, operation).and_then(|e| e.get("fieldsV1").cloned())
}

pub(super) fn entry_of(object: &Value, manager: &str, operation: &str) -> Option<Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .cloned()
}

/// Whether (manager, operation) owns the FieldsV1 path, given as its keys.
pub(super) fn owns(object: &Value, manager: &str, operation: &str, path: &[&str]) -> bool {
    let Some(mut node) = fields_of(object, manager, operation) else {
        return false;
    };
    for key in path {
        match node.get(*key) {
            Some(next) => node = next.clone(),
            None => return false,
        }
    }
    node.as_object()
        .is_some_and(|m| m.is_empty() || m.contains_key("."))
}

pub(super) fn conflicts(result: Result<Value, ApplyError>) -> Vec<Conflict> {
    match result {
        Err(ApplyError::Conflicts(conflicts)) => conflicts,
        other => panic!("expected conflicts, got {other:?}"),
    }
}

#[test]
fn apply_creates_the_object_with_an_apply_entry() {
    let config = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "nginx", "image": "nginx"},
        ]}}},
    });
    let object = run(vec![Apply("kubectl", config.clone())]).expect("applies");
    let mut expected = config;
    expected["metadata"]["managedFields"] = json!([{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
        "time": TIMES[0], "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {},
            "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}":
                {".": {}, "f:image": {}, "f:name": {}}}}}}},
    }]);
    assert_eq!(object, expected);
}

#[test]
fn reapplying_the_same_configuration_changes_nothing() {
    let config = web(json!({"replicas": 2}));
    let once = run(vec![Apply("kubectl", config.clone())]).expect("applies");
    let twice = run(vec![
        Apply("kubectl", config.clone()),
        Apply("kubectl", config),
    ])
    .expect("applies");
    // Not even the entry's time moves: nothing changed.
    assert_eq!(once, twice);
}

/// Conflicts and forcing: (steps, expected conflicts as (manager, field, message)).
#[test]
fn conflicts_name_the_owner_and_the_field() {
    type Case = (
        &'static str,
        Vec<Step>,
        Vec<(&'static str, &'static str, &'static str)>,
    );
    let cases: Vec<Case> = vec![
        (
            "two appliers, different replicas",
            vec![
                Apply("ci", web(json!({"replicas": 2}))),
                Apply("kubectl", web(json!({"replicas": 3}))),
            ],
            vec![("ci", ".spec.replicas", "conflict with \"ci\"")],
        ),
        (
            "an updater owns replicas",
            vec![
                Update("kubectl-client-side-apply", web(json!({"replicas": 2}))),
                Apply("kubectl", web(json!({"replicas": 3}))),
            ],
            vec![(
                "kubectl-client-side-apply",
                ".spec.replicas",
                "conflict with \"kubectl-client-side-apply\" using apps/v1",
            )],
        ),
        (
            "a container's image",
            vec![
                Apply(
                    "a",
                    web(containers(json!([{"name": "nginx", "image": "nginx:1"}]))),
                ),
                Apply(
                    "b",
                    web(containers(json!([{"name": "nginx", "image": "nginx:2"}]))),
                ),
            ],
            vec![(
                "a",
                ".spec.template.spec.containers[name=\"nginx\"].image",
                "conflict with \"a\"",
            )],
        ),
        (
            "an atomic list differs",
            vec![
                Apply(
                    "a",
                    web(containers(json!([{"name": "c", "args": ["x", "y"]}]))),
                ),
                Apply("b", web(containers(json!([{"name": "c", "args": ["z"]}])))),
            ],
            vec![(
                "a",
                ".spec.template.spec.containers[name=\"c\"].args",
                "conflict with \"a\"",
            )],
        ),
        (
            "an atomic selector differs",
            vec![
                Apply(
                    "a",
                    web(json!({"selector": {"matchLabels": {"app": "web"}}})),
                ),
                Apply(
                    "b",
                    web(json!({"selector": {"matchLabels": {"app": "api"}}})),
                ),
            ],
            vec![("a", ".spec.selector", "conflict with \"a\"")],
        ),
        (
            "the same label key with another value",
            vec![
                Apply("a", web_labels(json!({"tier": "front"}))),
                Apply("b", web_labels(json!({"tier": "back"}))),
            ],
            vec![("a", ".metadata.labels.tier", "conflict with \"a\"")],
        ),
    ];
    for (name, steps, expected) in cases {
        let found = conflicts(run(steps));
        let found: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|c| (c.manager.as_str(), c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(found, expected, "{name}");
    }
}

#[test]
fn the_conflict_message_is_upstreams() {
    let result = run(vec![
        Update(
            "kubectl-client-side-apply",
            web(json!({"replicas": 2, "paused": false})),
        ),
        Apply("kubectl", web(json!({"replicas": 3, "paused": true}))),
    ]);
    let found = conflicts(result);
    assert_eq!(
        conflict_message(&found[..1]),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.paused"
    );
    assert_eq!(
        conflict_message(&found),
        "Apply failed with 2 conflicts: conflicts with \"kubectl-client-side-apply\" using apps/v1:\n- .spec.paused\n- .spec.replicas"
    );
    let error = ApplyError::Conflicts(found);
    assert!(error
        .to_string()
        .starts_with("Apply failed with 2 conflicts"));
}

#[test]
fn applying_the_same_value_shares_ownership() {
    let object = run(vec![
        Apply("a", web(json!({"replicas": 2}))),
        Apply("b", web(json!({"replicas": 2}))),
    ])
    .expect("no conflict");
    assert!(owns(&object, "a", "Apply", &["f:spec", "f:replicas"]));
    assert!(owns(&object, "b", "Apply", &["f:spec", "f:replicas"]));
}

#[test]
fn force_moves_ownership_to_the_applier() {
    let object = run(vec![
        Update(
            "kubectl-client-side-apply",
            web(json!({"replicas": 2, "paused": true})),
        ),
        Force("kubectl", web(json!({"replicas": 3}))),
    ])
    .expect("forced");
    assert_eq!(object["spec"]["replicas"], 3);
    assert!(owns(&object, "kubectl", "Apply", &["f:spec", "f:replicas"]));
    let csa = "kubectl-client-side-apply";
    assert!(!owns(&object, csa, "Update", &["f:spec", "f:replicas"]));
    assert!(owns(&object, csa, "Update", &["f:spec", "f:paused"]));
}

/// Pruning: (steps, the path that is checked, whether it is still set afterwards).
#[test]
fn fields_an_applier_drops_go_unless_someone_else_manages_them() {
    type Case = (&'static str, Vec<Step>, &'static str, bool);
    let cases: Vec<Case> = vec![
        (
            "dropped by its only owner",
            vec![
                Apply("a", web_labels(json!({"x": "1", "y": "2"}))),
                Apply("a", web_labels(json!({"y": "2"}))),
            ],
            "/metadata/labels/x",
            false,
        ),
        (
            "dropped but another applier applies it too",
            vec![
                Apply("a", web_labels(json!({"x": "1"}))),
                Apply("b", web_labels(json!({"x": "1"}))),
                Apply("a", web_labels(json!({"y": "2"}))),
            ],
            "/metadata/labels/x",
            true,
        ),
        (
            "dropped but an updater changed it since",
            vec![
                Apply("a", web(json!({"replicas": 2, "paused": true}))),
                Update("kubectl-scale", json!({"spec": {"replicas": 5}})),
                Apply("a", web(json!({"paused": true}))),
            ],
            "/spec/replicas",
            true,
        ),
        (
            "a dropped field goes, a sibling another manager set stays",
            vec![
                Apply(
                    "a",
                    web(json!({"strategy": {"rollingUpdate": {"maxSurge": 1}}})),
                ),
                Update(
                    "b",
                    json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": 1}}}}),
                ),
                Apply("a", web(json!({"replicas": 1}))),
            ],
            "/spec/strategy/rollingUpdate/maxUnavailable",
            true,
        ),
        (
            "a dropped container goes",
            vec![
                Apply(
                    "a",
                    web(containers(
                        json!([{"name": "x", "image": "x"}, {"name": "y", "image": "y"}]),
                    )),
                ),
                Apply("a", web(containers(json!([{"name": "y", "image": "y"}])))),
            ],
            "/spec/template/spec/containers/1",
            false,
        ),
        (
            "fields nobody applied stay",
            vec![
                Update("kubectl-create", web(json!({"paused": true}))),
                Apply("a", web(json!({"replicas": 1}))),
                Apply("a", web(json!({"minReadySeconds": 1}))),
            ],
            "/spec/paused",
            true,
        ),
    ];
    for (name, steps, path, kept) in cases {
        let object = run(steps).expect(name);
        assert_eq!(object.pointer(path).is_some(), kept, "{name}: {object}");
    }
}

#[test]
fn containers_merge_by_name_across_managers() {
    let object = run(vec![
        Apply(
            "a",
            web(containers(json!([{"name": "app", "image": "app:1"}]))),
        ),
        Apply(
            "b",
            web(containers(json!([{"name": "sidecar", "image": "proxy"}]))),
        ),
        Apply(
            "a",
            web(containers(json!([{"name": "app", "image": "app:2"}]))),
        ),
    ])
    .expect("applies");
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2"}, {"name": "sidecar", "image": "proxy"}])
    );
    let a = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"app\"}",
    ];
    let b = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"sidecar\"}",
    ];
    assert!(owns(&object, "a", "Apply", &a));
    assert!(!owns(&object, "a", "Apply", &b));
    assert!(owns(&object, "b", "Apply", &b));
    // b leaves: only its container goes.
    let mut after = object.clone();
    after = deploy_apply(
        Some(&after),
        &web(json!({"replicas": 1})),
        "b",
        false,
        TIMES[3],
    )
    .expect("applies");
    let names: Vec<&Value> = after["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|list| list.iter().map(|c| &c["name"]).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["app"]);
}

#[test]
fn container_ports_are_keyed_by_port_and_protocol() {
    let config = web(containers(
        json!([{"name": "c", "ports": [{"containerPort": 80}]}]),
    ));
    let object = run(vec![Apply("a", config)]).expect("applies");
    let port = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"c\"}",
        "f:ports",
        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}",
    ];
    assert!(owns(&object, "a", "Apply", &port), "{object}");
}

#[test]
fn atomic_lists_are_replaced_whole() {
    let object = run(vec![
        Apply(
            "a",
            web(containers(json!([{"name": "c", "args": ["x", "y"]}]))),
        ),
        Force("b", web(containers(json!([{"name": "c", "args": ["z"]}])))),
    ])
    .expect("forced");
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["z"])
    );
    let args = [
        "f:spec",
        "f:template",
        "f:spec",
        "f:containers",
        "k:{\"name\":\"c\"}",
        "f:args",
    ];
    assert!(owns(&object, "b", "Apply", &args));
    assert!(!owns(&object, "a", "Apply", &args));
}

#[test]
fn label_maps_are_granular_and_set_lists_are_unions() {
    let object = run(vec![
        Apply(
            "a",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"a": "1"}, "finalizers": ["x"]}}),
        ),
        Apply(
            "b",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"b": "2"}, "finalizers": ["y"]}}),
        ),
    ])
    .expect("applies");
    assert_eq!(object["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(object["metadata"]["finalizers"], json!(["x", "y"]));
    assert!(owns(
        &object,
        "a",
        "Apply",
        &["f:metadata", "f:labels", "f:a"]
    ));
    assert!(!owns(
        &object,
        "a",
        "Apply",
        &["f:metadata", "f:labels", "f:b"]
    ));
    assert!(owns(
        &object,
        "b",
        "Apply",
        &["f:metadata", "f:finalizers", "v:\"y\""]
    ));
}

#[test]
fn a_long_keyed_list_is_applied_in_one_pass() {
    // Items were matched by a scan of the other list: 20k x 20k comparisons.
    let containers: Vec<Value> = (0..20_000)
        .map(|i| json!({"name": format!("c{i}"), "image": "x"}))
        .collect();
    let config = web(json!({"replicas": 2, "template": {"spec": {"containers": containers}}}));
    let object = run(vec![
        Apply("kubectl", config.clone()),
        Apply("kubectl", config),
    ])
    .expect("applies");
    let applied = &object["spec"]["template"]["spec"]["containers"];
    assert_eq!(applied.as_array().map(Vec::len), Some(20_000));
}
