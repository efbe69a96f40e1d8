//! Table-driven tests of the core kinds' validation (pod.rs, core.rs), of defaulted objects
//! validating cleanly, and of malformed objects never panicking.

use serde_json::{json, Value};

use super::validate_kind as validate;

fn msgs(kind: &str, namespaced: bool, obj: &Value, old: Option<&Value>) -> Vec<String> {
    validate("", kind, namespaced, obj, old)
        .iter()
        .map(|e| e.message())
        .collect()
}

fn container() -> Value {
    json!({"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"})
}

fn pod(spec_patch: &dyn Fn(&mut Value)) -> Value {
    let mut spec = json!({"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "containers": [container()]});
    spec_patch(&mut spec);
    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

#[test]
fn pod_cases() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("a minimal defaulted pod passes", pod(&|_| {}), vec![]),
        ("containers are required", pod(&|s| s["containers"] = json!([])),
            vec!["spec.containers: Required value"]),
        ("a container name must be a label", pod(&|s| s["containers"][0]["name"] = json!("Web_1")),
            vec!["spec.containers[0].name: Invalid value: \"Web_1\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]),
        ("container names are unique", pod(&|s| s["containers"] = json!([container(), container()])),
            vec!["spec.containers[1].name: Duplicate value: \"c\""]),
        ("an image is required", pod(&|s| { s["containers"][0].as_object_mut().map(|c| c.remove("image")); }),
            vec!["spec.containers[0].image: Required value"]),
        ("a port out of range is invalid", pod(&|s| s["containers"][0]["ports"] = json!([{"containerPort": 70000, "protocol": "TCP"}])),
            vec!["spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"]),
        ("an unknown protocol is unsupported", pod(&|s| s["containers"][0]["ports"] = json!([{"containerPort": 80, "protocol": "ICMP"}])),
            vec!["spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""]),
        ("an unknown restart policy is unsupported", pod(&|s| s["restartPolicy"] = json!("Sometimes")),
            vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""]),
        ("requests may not exceed limits", pod(&|s| s["containers"][0]["resources"] = json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "1"}})),
            vec!["spec.containers[0].resources.requests[cpu]: Invalid value: \"1\": must be less than or equal to cpu limit of 500m"]),
        ("a malformed quantity is invalid", pod(&|s| s["containers"][0]["resources"] = json!({"limits": {"memory": "1GB"}})),
            vec!["spec.containers[0].resources.limits[memory]: Invalid value: \"1GB\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"]),
        ("a non-standard resource is invalid", pod(&|s| s["containers"][0]["resources"] = json!({"limits": {"gpu": "1"}})),
            vec!["spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers"]),
        ("mounts must name a volume", pod(&|s| s["containers"][0]["volumeMounts"] = json!([{"name": "v", "mountPath": "/d"}])),
            vec!["spec.containers[0].volumeMounts[0].name: Not found: \"v\""]),
        ("volume names are unique", pod(&|s| s["volumes"] = json!([{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}])),
            vec!["spec.volumes[1].name: Duplicate value: \"v\""]),
        ("a volume has one source", pod(&|s| s["volumes"] = json!([{"name": "v", "emptyDir": {}, "hostPath": {"path": "/"}}])),
            vec!["spec.volumes[0].emptyDir: Forbidden: may not specify more than 1 volume type"]),
        ("containers of the wrong type are reported", pod(&|s| s["containers"] = json!("nginx")),
            vec!["spec.containers: Invalid value: \"nginx\": must be an array", "spec.containers: Required value"]),
        ("a container port of the wrong type is reported", pod(&|s| s["containers"][0]["ports"] = json!([{"containerPort": "80", "protocol": "TCP"}])),
            vec!["spec.containers[0].ports[0].containerPort: Invalid value: \"80\": must be an integer", "spec.containers[0].ports[0].containerPort: Required value"]),
    ];
    for (name, obj, want) in cases {
        assert_eq!(msgs("Pod", true, &obj, None), want, "{name}");
    }
}

#[test]
fn pod_updates_may_change_only_images_and_a_few_fields() {
    let old = pod(&|_| {});
    let image_change = pod(&|s| s["containers"][0]["image"] = json!("nginx:2"));
    assert!(msgs("Pod", true, &image_change, Some(&old)).is_empty());
    let policy_change = pod(&|s| s["restartPolicy"] = json!("Never"));
    let m = msgs("Pod", true, &policy_change, Some(&old));
    assert_eq!(m.len(), 1);
    assert!(
        m[0].starts_with("spec: Forbidden: pod updates may not change fields other than"),
        "{m:?}"
    );
}

#[test]
fn config_map_and_secret_cases() {
    let meta = json!({"name": "c", "namespace": "d"});
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("good keys pass", json!({"metadata": meta, "data": {"a.b": "x", "C_D-e": "y"}}), vec![]),
        ("a bad key is invalid", json!({"metadata": meta, "data": {"a/b": "x"}}),
            vec!["data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"]),
        ("a key in both maps is a duplicate", json!({"metadata": meta, "data": {"a": "x"}, "binaryData": {"a": "eA=="}}),
            vec!["data[a]: Invalid value: \"a\": duplicate of key present in binaryData"]),
        ("more than 1MiB is too long", json!({"metadata": meta, "data": {"a": "x".repeat(1024 * 1024)}}),
            vec![": Too long: may not be more than 1048576 bytes"]),
        ("a non-string value is reported", json!({"metadata": meta, "data": {"a": 1}}),
            vec!["data[a]: Invalid value: 1: must be a string"]),
    ];
    for (name, obj, want) in cases {
        assert_eq!(msgs("ConfigMap", true, &obj, None), want, "{name}");
    }
    let secrets: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "an opaque secret passes",
            json!({"metadata": meta, "type": "Opaque", "data": {"a": "eA=="}}),
            vec![],
        ),
        (
            "tls secrets need a cert and key",
            json!({"metadata": meta, "type": "kubernetes.io/tls", "data": {}}),
            vec![
                "data[tls.crt]: Required value",
                "data[tls.key]: Required value",
            ],
        ),
        (
            "token secrets need the account annotation",
            json!({"metadata": meta, "type": "kubernetes.io/service-account-token"}),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
        ),
        (
            "bad base64 is invalid",
            json!({"metadata": meta, "type": "Opaque", "data": {"a": "!!"}}),
            vec!["data[a]: Invalid value: \"<secret contents redacted>\": illegal base64 data"],
        ),
    ];
    for (name, obj, want) in secrets {
        assert_eq!(msgs("Secret", true, &obj, None), want, "{name}");
    }
}

#[test]
fn immutable_config_maps_and_secret_types_cannot_change() {
    let old =
        json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "x"}});
    let mut new = old.clone();
    new["data"]["a"] = json!("y");
    assert_eq!(
        msgs("ConfigMap", true, &new, Some(&old)),
        vec!["data: Forbidden: field is immutable when `immutable` is set"]
    );
    let old = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque"});
    let mut new = old.clone();
    new["type"] = json!("x.io/other");
    assert_eq!(
        msgs("Secret", true, &new, Some(&old)),
        vec!["type: Invalid value: \"x.io/other\": field is immutable"]
    );
}

#[test]
fn namespace_and_other_core_cases() {
    assert_eq!(
        msgs(
            "Namespace",
            false,
            &json!({"metadata": {"name": "a.b"}}),
            None
        ),
        vec!["metadata.name: Invalid value: \"a.b\": must not contain dots"]
    );
    assert_eq!(msgs("Namespace", false, &json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["foo"]}}), None),
        vec!["spec.finalizers[0]: Invalid value: \"foo\": name is neither a standard finalizer name nor is it fully qualified"]);
    assert_eq!(msgs("Service", true, &json!({"metadata": {"name": "1abc", "namespace": "d"}, "spec": {"type": "ClusterIP", "sessionAffinity": "None", "clusterIP": "None"}}), None),
        vec!["metadata.name: Invalid value: \"1abc\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]);
    assert_eq!(
        msgs(
            "PersistentVolumeClaim",
            true,
            &json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {}}),
            None
        ),
        vec![
            "spec.accessModes: Required value: at least 1 access mode is required",
            "spec.resources[storage]: Required value"
        ]
    );
    assert_eq!(
        msgs(
            "ResourceQuota",
            true,
            &json!({"metadata": {"name": "q", "namespace": "d"}, "spec": {"hard": {"pods": "-1"}}}),
            None
        ),
        vec!["spec.hard[pods]: Invalid value: \"-1\": must be greater than or equal to 0"]
    );
    assert_eq!(msgs("Endpoints", true, &json!({"metadata": {"name": "e", "namespace": "d"}, "subsets": [{"addresses": [{"ip": "x"}], "ports": [{"port": 1, "protocol": "TCP"}]}]}), None),
        vec!["subsets[0].addresses[0].ip: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]);
}

#[test]
fn defaulted_objects_validate_cleanly() {
    let tmpl = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let cases: Vec<(&str, &str, bool, Value)> = vec![
        (
            "",
            "Pod",
            true,
            json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}),
        ),
        (
            "",
            "Service",
            true,
            json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"selector": {"app": "a"}, "ports": [{"port": 80}]}}),
        ),
        (
            "",
            "Secret",
            true,
            json!({"metadata": {"name": "s", "namespace": "d"}, "stringData": {"k": "v"}}),
        ),
        ("", "Namespace", false, json!({"metadata": {"name": "dev"}})),
        (
            "",
            "ReplicationController",
            true,
            json!({"metadata": {"name": "r", "namespace": "d"}, "spec": {"template": tmpl}}),
        ),
        (
            "apps",
            "Deployment",
            true,
            json!({"metadata": {"name": "d", "namespace": "d"}, "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": tmpl}}),
        ),
        (
            "apps",
            "StatefulSet",
            true,
            json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"serviceName": "s", "selector": {"matchLabels": {"app": "a"}}, "template": tmpl}}),
        ),
        (
            "apps",
            "DaemonSet",
            true,
            json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": tmpl}}),
        ),
        (
            "batch",
            "CronJob",
            true,
            json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
        ),
        (
            "storage.k8s.io",
            "StorageClass",
            false,
            json!({"metadata": {"name": "s"}, "provisioner": "kubernetes.io/no-provisioner"}),
        ),
        (
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            false,
            json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "Group", "name": "g"}]}),
        ),
    ];
    for (group, kind, namespaced, mut obj) in cases {
        crate::defaults::tests::apply(group, kind, &mut obj);
        let errs: Vec<String> = validate(group, kind, namespaced, &obj, None)
            .iter()
            .map(|e| e.message())
            .collect();
        assert!(errs.is_empty(), "{group}/{kind}: {errs:?}");
    }
}

#[test]
fn malformed_objects_of_every_kind_give_errors_not_panics() {
    let shapes = vec![
        json!({}),
        json!({"metadata": [], "spec": "x"}),
        json!({"metadata": {"name": 1, "labels": [], "annotations": {"a": []}, "finalizers": "x", "ownerReferences": [1, {"controller": "yes"}]}}),
        json!({"spec": {"containers": [null, 1, {"ports": "x", "env": [1], "resources": {"limits": {"cpu": []}}}], "volumes": [{"secret": 1}]}}),
        json!({"spec": {"selector": "x", "template": {"metadata": {"labels": 3}, "spec": []}, "strategy": {"rollingUpdate": {"maxSurge": []}}}}),
        json!({"spec": {"ports": [{"port": "x", "targetPort": {}}], "clusterIPs": [1], "jobTemplate": 1, "rules": [{"http": {"paths": 1}}]}}),
        json!({"rules": [{"verbs": "get"}], "roleRef": [], "subjects": [{"kind": 1}], "data": [], "endpoints": [{"addresses": 1}], "ports": [1]}),
    ];
    let kinds = [
        ("", "Pod", true),
        ("", "Service", true),
        ("", "ConfigMap", true),
        ("", "Secret", true),
        ("", "Namespace", false),
        ("", "Endpoints", true),
        ("", "ResourceQuota", true),
        ("", "LimitRange", true),
        ("", "PersistentVolume", false),
        ("", "PersistentVolumeClaim", true),
        ("", "ReplicationController", true),
        ("", "PodTemplate", true),
        ("", "ServiceAccount", true),
        ("apps", "Deployment", true),
        ("apps", "StatefulSet", true),
        ("apps", "DaemonSet", true),
        ("apps", "ReplicaSet", true),
        ("apps", "ControllerRevision", true),
        ("batch", "Job", true),
        ("batch", "CronJob", true),
        ("rbac.authorization.k8s.io", "Role", true),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding", false),
        ("networking.k8s.io", "Ingress", true),
        ("networking.k8s.io", "NetworkPolicy", true),
        ("networking.k8s.io", "IngressClass", false),
        ("policy", "PodDisruptionBudget", true),
        ("scheduling.k8s.io", "PriorityClass", false),
        ("storage.k8s.io", "StorageClass", false),
        ("coordination.k8s.io", "Lease", true),
        ("discovery.k8s.io", "EndpointSlice", true),
    ];
    for (g, k, ns) in kinds {
        for s in &shapes {
            validate(g, k, ns, s, Some(s));
            assert!(!validate(g, k, ns, s, None).is_empty(), "{g}/{k} {s}");
        }
    }
}
