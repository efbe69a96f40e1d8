//! Table-driven tests of upstream's documented examples: the sig-api-machinery strategic merge
//! patch doc, the kubectl patch task page, the patches kubectl edit / set image / rollout restart /
//! cordon send, and upstream's own ordering cases.

use serde_json::{json, Value};

use super::{root_of, PatchError};

/// The engine on an object of a served kind.
pub(super) fn apply(
    group: &str,
    kind: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    super::apply(root_of(group, kind), original, patch)
}

struct Case {
    name: &'static str,
    group: &'static str,
    kind: &'static str,
    original: Value,
    patch: Value,
    want: Value,
}

fn deployment(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "patch-demo", "labels": {"app": "nginx"}},
        "spec": {"replicas": 2, "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": containers}
        }}
    })
}

trait Edit {
    fn edit(self, f: impl FnOnce(&mut Value)) -> Value;
}

impl Edit for Value {
    fn edit(mut self, f: impl FnOnce(&mut Value)) -> Value {
        f(&mut self);
        self
    }
}

pub(super) fn pod_spec(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
}

fn template_patch(spec: Value) -> Value {
    json!({"spec": {"template": {"spec": spec}}})
}

fn cases() -> Vec<Case> {
    let nginx = json!({"name": "patch-demo-ctr", "image": "nginx"});
    vec![
        Case {
            name: "kubectl patch task: a container merged by name goes before the others",
            group: "apps",
            kind: "Deployment",
            original: deployment(json!([nginx])),
            patch: template_patch(
                json!({"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}),
            ),
            want: deployment(json!([{"name": "patch-demo-ctr-2", "image": "redis"}, nginx])),
        },
        Case {
            name: "kubectl patch task: tolerations (no strategy) are replaced",
            group: "apps",
            kind: "Deployment",
            original: deployment(json!([nginx])).edit(|d| {
                d["spec"]["template"]["spec"]["tolerations"] =
                    json!([{"effect": "NoSchedule", "key": "dedicated", "value": "test-team"}]);
            }),
            patch: template_patch(
                json!({"tolerations": [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}),
            ),
            want: deployment(json!([nginx])).edit(|d| {
                d["spec"]["template"]["spec"]["tolerations"] =
                    json!([{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]);
            }),
        },
        Case {
            name: "$patch: delete removes one container",
            group: "apps",
            kind: "Deployment",
            original: deployment(
                json!([{"name": "nginx", "image": "nginx"}, {"name": "busybox", "image": "busybox"}]),
            ),
            patch: template_patch(json!({"containers": [{"$patch": "delete", "name": "busybox"}]})),
            want: deployment(json!([{"name": "nginx", "image": "nginx"}])),
        },
        Case {
            name: "kubectl edit: $setElementOrder with a change and a deletion",
            group: "apps",
            kind: "Deployment",
            original: deployment(json!([
                {"name": "nginx", "image": "nginx:1.24", "imagePullPolicy": "IfNotPresent"},
                {"name": "busybox", "image": "busybox"}
            ])),
            patch: json!({"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"nginx"}],"containers":[{"image":"nginx","name":"nginx"},{"$patch":"delete","name":"busybox"}]}}}}),
            want: deployment(
                json!([{"name": "nginx", "image": "nginx", "imagePullPolicy": "IfNotPresent"}]),
            ),
        },
        Case {
            name: "kubectl set image keeps the other containers and their order",
            group: "apps",
            kind: "Deployment",
            original: deployment(
                json!([{"name": "sidecar", "image": "envoy"}, {"name": "nginx", "image": "nginx:1.24", "ports": [{"containerPort": 80}]}]),
            ),
            patch: template_patch(
                json!({"containers": [{"image": "nginx:1.25", "name": "nginx"}]}),
            ),
            want: deployment(
                json!([{"name": "sidecar", "image": "envoy"}, {"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]),
            ),
        },
        Case {
            name: "kubectl rollout restart adds a template annotation",
            group: "apps",
            kind: "Deployment",
            original: deployment(json!([nginx])),
            patch: json!({"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2025-01-01T00:00:00Z"}}}}}),
            want: deployment(json!([nginx])).edit(|d| {
                d["spec"]["template"]["metadata"]["annotations"] =
                    json!({"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"});
            }),
        },
        Case {
            name: "$retainKeys on spec.strategy: RollingUpdate -> Recreate",
            group: "apps",
            kind: "Deployment",
            original: json!({"spec": {"replicas": 1, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}}),
            patch: json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            want: json!({"spec": {"replicas": 1, "strategy": {"type": "Recreate"}}}),
        },
        Case {
            name: "without $retainKeys spec.strategy merges",
            group: "apps",
            kind: "Deployment",
            original: json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            patch: json!({"spec": {"strategy": {"type": "Recreate"}}}),
            want: json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}}),
        },
        Case {
            name: "null deletes a label, and a whole map",
            group: "",
            kind: "ConfigMap",
            original: json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}, "data": {"k": "v"}}),
            patch: json!({"metadata": {"labels": {"a": null}, "annotations": null}, "data": {"k2": "v2"}}),
            want: json!({"metadata": {"name": "c", "labels": {"b": "2"}}, "data": {"k": "v", "k2": "v2"}}),
        },
        Case {
            name: "null for a missing key is ignored, nulls inside new values are dropped",
            group: "",
            kind: "ConfigMap",
            original: json!({"metadata": {"name": "c"}}),
            patch: json!({"metadata": {"labels": {"a": "1", "b": null}}, "nothing": null}),
            want: json!({"metadata": {"name": "c", "labels": {"a": "1"}}}),
        },
        Case {
            name: "finalizers: $deleteFromPrimitiveList",
            group: "",
            kind: "Namespace",
            original: json!({"metadata": {"finalizers": ["a", "b", "c", "b"]}}),
            patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zzz"]}}),
            want: json!({"metadata": {"finalizers": ["a", "c"]}}),
        },
        Case {
            name: "finalizers: merge is a union, new values first",
            group: "batch",
            kind: "Job",
            original: json!({"metadata": {"finalizers": ["a", "b"]}}),
            patch: json!({"metadata": {"finalizers": ["c", "a"]}}),
            want: json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        },
        Case {
            name: "finalizers: $setElementOrder with a server-only value",
            group: "",
            kind: "Pod",
            original: json!({"metadata": {"finalizers": ["1", "2", "4"]}}),
            patch: json!({"metadata": {"$setElementOrder/finalizers": ["1", "2", "3"], "finalizers": ["3"]}}),
            want: json!({"metadata": {"finalizers": ["1", "2", "3", "4"]}}),
        },
        Case {
            name: "$setElementOrder, $deleteFromPrimitiveList and an addition together",
            group: "",
            kind: "Pod",
            original: json!({"metadata": {"finalizers": ["1", "2", "3", "4"]}}),
            patch: json!({"metadata": {"$setElementOrder/finalizers": ["1", "2", "4"], "$deleteFromPrimitiveList/finalizers": ["3"]}}),
            want: json!({"metadata": {"finalizers": ["1", "2", "4"]}}),
        },
        Case {
            name: "$setElementOrder reorders merged items, server-only items keep their place",
            group: "",
            kind: "Pod",
            original: pod_spec(
                json!({"containers": [{"name": "1", "x": "a"}, {"name": "2", "v": 2}, {"name": "7"}, {"name": "9"}, {"name": "8"}, {"name": "3", "v": 3}, {"name": "4", "v": 4}]}),
            ),
            patch: json!({"spec": {"$setElementOrder/containers": [{"name": "2"}, {"name": "1"}, {"name": "4"}, {"name": "3"}]}}),
            want: pod_spec(
                json!({"containers": [{"name": "2", "v": 2}, {"name": "1", "x": "a"}, {"name": "7"}, {"name": "9"}, {"name": "8"}, {"name": "4", "v": 4}, {"name": "3", "v": 3}]}),
            ),
        },
        Case {
            name: "$setElementOrder places a new item among the object's",
            group: "",
            kind: "Pod",
            original: pod_spec(
                json!({"containers": [{"name": "1", "o": "a"}, {"name": "2", "v": 2}]}),
            ),
            patch: json!({"spec": {"$setElementOrder/containers": [{"name": "1"}, {"name": "4"}, {"name": "2"}, {"name": "3"}], "containers": [{"name": "4", "v": 4}, {"name": "3", "v": 3}]}}),
            want: pod_spec(
                json!({"containers": [{"name": "1", "o": "a"}, {"name": "4", "v": 4}, {"name": "2", "v": 2}, {"name": "3", "v": 3}]}),
            ),
        },
        Case {
            name: "$setElementOrder may name items that are not there",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({"containers": [{"name": "1"}, {"name": "3"}]})),
            patch: json!({"spec": {"$setElementOrder/containers": [{"name": "3"}, {"name": "2"}, {"name": "1"}], "containers": [{"name": "3", "v": 3}, {"name": "1", "v": 1}]}}),
            want: pod_spec(json!({"containers": [{"name": "3", "v": 3}, {"name": "1", "v": 1}]})),
        },
        Case {
            name: "upstream: $setElementOrder over a list with duplicate keys",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({"containers": [
                {"name": "1"}, {"name": "2", "v": "dup1"}, {"name": "3"},
                {"name": "2", "v": "dup2"}, {"name": "4"}
            ]})),
            patch: json!({"spec": {"$setElementOrder/containers": [
                {"name": "2"}, {"name": "1"}, {"name": "4"}, {"name": "3"}, {"name": "2"}
            ]}}),
            want: pod_spec(json!({"containers": [
                {"name": "2", "v": "dup1"}, {"name": "2", "v": "dup2"}, {"name": "1"},
                {"name": "4"}, {"name": "3"}
            ]})),
        },
        Case {
            name: "upstream: $setElementOrder naming a deleted item, server-only item last",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({"containers": [{"name": "hello2"}]})),
            patch: json!({"spec": {
                "$setElementOrder/containers": [{"name": "hello"}, {"name": "doesntexist"}],
                "containers": [{"name": "hello"}]
            }}),
            want: pod_spec(json!({"containers": [{"name": "hello"}, {"name": "hello2"}]})),
        },
        Case {
            name: "env by name, ports by containerPort, volumeMounts by mountPath",
            group: "",
            kind: "Pod",
            original: pod_spec(
                json!({"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80, "protocol": "TCP"}], "volumeMounts": [{"name": "v", "mountPath": "/a"}], "args": ["x", "y"]}]}),
            ),
            patch: pod_spec(
                json!({"containers": [{"name": "c", "env": [{"name": "A", "value": "2"}], "ports": [{"containerPort": 80, "name": "http"}], "volumeMounts": [{"name": "w", "mountPath": "/b"}], "args": ["z"]}]}),
            ),
            want: pod_spec(
                json!({"containers": [{"name": "c", "env": [{"name": "A", "value": "2"}], "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}], "volumeMounts": [{"name": "w", "mountPath": "/b"}, {"name": "v", "mountPath": "/a"}], "args": ["z"]}]}),
            ),
        },
        Case {
            name: "volumes merge by name and honour $retainKeys per item",
            group: "",
            kind: "Pod",
            original: pod_spec(
                json!({"volumes": [{"name": "v", "configMap": {"name": "c"}}, {"name": "w", "emptyDir": {}}]}),
            ),
            patch: pod_spec(
                json!({"volumes": [{"$retainKeys": ["name", "secret"], "name": "v", "secret": {"secretName": "s"}}]}),
            ),
            want: pod_spec(
                json!({"volumes": [{"name": "v", "secret": {"secretName": "s"}}, {"name": "w", "emptyDir": {}}]}),
            ),
        },
        Case {
            name: "$patch: replace as a list item replaces the list",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
            patch: pod_spec(
                json!({"containers": [{"$patch": "replace"}, {"name": "c", "image": "i"}]}),
            ),
            want: pod_spec(json!({"containers": [{"name": "c", "image": "i"}]})),
        },
        Case {
            name: "$patch: replace in a map replaces it, $patch: delete empties it",
            group: "",
            kind: "Secret",
            original: json!({"metadata": {"labels": {"a": "1"}, "annotations": {"x": "y"}}}),
            patch: json!({"metadata": {"labels": {"$patch": "replace", "b": "2"}, "annotations": {"$patch": "delete"}}}),
            want: json!({"metadata": {"labels": {"b": "2"}, "annotations": {}}}),
        },
        Case {
            name: "$patch: delete items remove every duplicate; unknown names are ignored",
            group: "",
            kind: "Node",
            original: json!({"status": {"conditions": [{"type": "Ready"}, {"type": "Ready"}, {"type": "DiskPressure", "status": "False"}]}}),
            patch: json!({"status": {"conditions": [{"$patch": "delete", "type": "Ready"}, {"$patch": "delete", "type": "Nope"}]}}),
            want: json!({"status": {"conditions": [{"type": "DiskPressure", "status": "False"}]}}),
        },
        Case {
            name: "node status: conditions and addresses by type; spec.taints replaced",
            group: "",
            kind: "Node",
            original: json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}], "conditions": [{"type": "Ready", "status": "False"}]}}),
            patch: json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}], "conditions": [{"type": "Ready", "status": "True"}]}}),
            want: json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"}], "conditions": [{"type": "Ready", "status": "True"}]}}),
        },
        Case {
            name: "kubectl cordon",
            group: "",
            kind: "Node",
            original: json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.0/24"}}),
            patch: json!({"spec": {"unschedulable": true}}),
            want: json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": true}}),
        },
        Case {
            name: "service ports merge by port",
            group: "",
            kind: "Service",
            original: json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}], "selector": {"a": "b"}}}),
            patch: json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}], "selector": {"c": "d"}}}),
            want: json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}], "selector": {"a": "b", "c": "d"}}}),
        },
        Case {
            name: "ownerReferences merge by uid",
            group: "",
            kind: "ConfigMap",
            original: json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}),
            patch: json!({"metadata": {"ownerReferences": [{"uid": "1", "controller": true}, {"uid": "2", "name": "b"}]}}),
            want: json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a", "controller": true}, {"uid": "2", "name": "b"}]}}),
        },
        Case {
            name: "CronJob: containers of the job template's pod template merge by name",
            group: "batch",
            kind: "CronJob",
            original: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}}}}}),
            patch: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "2"}]}}}}}}),
            want: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}}}}}),
        },
        Case {
            name: "PodDisruptionBudget selector is replaced",
            group: "policy",
            kind: "PodDisruptionBudget",
            original: json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "1"}}}}),
            patch: json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}}),
            want: json!({"spec": {"minAvailable": 1, "selector": {"matchLabels": {"b": "2"}}}}),
        },
        Case {
            name: "lists of kinds without metadata are replaced (RBAC rules)",
            group: "rbac.authorization.k8s.io",
            kind: "Role",
            original: json!({"rules": [{"verbs": ["get"], "resources": ["pods"]}]}),
            patch: json!({"rules": [{"verbs": ["list"], "resources": ["secrets"]}]}),
            want: json!({"rules": [{"verbs": ["list"], "resources": ["secrets"]}]}),
        },
        Case {
            name: "directives in an added subtree are dropped",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({})),
            patch: pod_spec(
                json!({"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}, {"name": "Y", "value": null}]}, {"$patch": "delete", "name": "zz"}], "affinity": {"$patch": "replace"}}),
            ),
            want: pod_spec(json!({"containers": [{"name": "a", "env": [{"name": "Y"}]}]})),
        },
        Case {
            name: "a value of another type replaces the object's",
            group: "",
            kind: "ConfigMap",
            original: json!({"data": {"a": "b"}, "x": [1, 2]}),
            patch: json!({"data": "oops", "x": {"y": 1}}),
            want: json!({"data": "oops", "x": {"y": 1}}),
        },
        Case {
            name: "a null patch changes nothing",
            group: "",
            kind: "ConfigMap",
            original: json!({"data": {"a": "b"}}),
            patch: Value::Null,
            want: json!({"data": {"a": "b"}}),
        },
        Case {
            name: "an empty patch changes nothing",
            group: "",
            kind: "Pod",
            original: pod_spec(json!({"containers": [{"name": "a"}]})),
            patch: json!({}),
            want: pod_spec(json!({"containers": [{"name": "a"}]})),
        },
    ]
}

#[test]
fn applies_documented_examples() {
    for case in cases() {
        let got = apply(case.group, case.kind, &case.original, &case.patch)
            .unwrap_or_else(|err| panic!("{}: {err}", case.name));
        assert_eq!(got, case.want, "{}", case.name);
    }
}

#[test]
fn long_lists_merge_in_one_pass() {
    // A scan per item made these quadratic: 20k x 20k comparisons per list.
    const ITEMS: usize = 20_000;
    let finalizers = |from: usize| -> Vec<Value> {
        (from..from + ITEMS)
            .map(|i| json!(format!("f/{i}")))
            .collect()
    };
    let containers = |from: usize| -> Vec<Value> {
        (from..from + ITEMS)
            .map(|i| json!({"name": format!("c{i}"), "image": "x"}))
            .collect()
    };
    let original = json!({"metadata": {"finalizers": finalizers(0)},
        "spec": {"containers": containers(0)}});
    let patch = json!({"metadata": {"finalizers": finalizers(ITEMS / 2)},
        "spec": {"containers": containers(ITEMS / 2)}});
    let merged = apply("", "Pod", &original, &patch).expect("merges");
    let count = |value: &Value| value.as_array().map_or(0, Vec::len);
    assert_eq!(count(&merged["metadata"]["finalizers"]), ITEMS + ITEMS / 2);
    assert_eq!(count(&merged["spec"]["containers"]), ITEMS + ITEMS / 2);
}
