//! What the patch targets share: the objects a patch is applied to, picked by the input's
//! first byte, so the fuzzer explores patches against real shapes (lists with merge keys,
//! nested maps, status) rather than only against `{}`.

use serde_json::{json, Value};

/// (group, kind, object) triples the patch targets patch.
pub fn base(selector: u8) -> (&'static str, &'static str, Value) {
    match selector % 4 {
        0 => ("", "ConfigMap", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d", "labels": {"a": "b"}},
            "data": {"k": "v", "list": "[1,2]"}})),
        1 => ("", "Pod", json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "finalizers": ["x/y"]},
            "spec": {"containers": [
                {"name": "a", "image": "i", "env": [{"name": "E", "value": "1"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "b", "image": "j", "args": ["x", "y"]}],
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending"}})),
        2 => ("apps", "Deployment", json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "d"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                        "volumes": [{"name": "v", "emptyDir": {}}]}}}})),
        _ => ("", "Service", json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "d"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                "selector": {"app": "web"}}})),
    }
}
