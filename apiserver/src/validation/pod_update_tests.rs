//! Tests of what a pod create and update may say about scheduling: the gates (valid names,
//! never beside a node name, only removed later), the tolerations (only added), a gated pod's
//! node selector and required node affinity (only narrowed), and `status.nominatedNodeName`.

use serde_json::{json, Value};

use super::validate_kind as validate;

fn msgs(obj: &Value, old: Option<&Value>) -> Vec<String> {
    validate("", "Pod", true, obj, old)
        .iter()
        .map(|e| e.message())
        .collect()
}

fn pod(spec_patch: &dyn Fn(&mut Value)) -> Value {
    let mut spec = json!({"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "containers": [
        {"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"}]});
    spec_patch(&mut spec);
    json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

fn gated(gates: &[&str]) -> Value {
    let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
    pod(&|s| s["schedulingGates"] = json!(gates))
}

const FORBIDDEN_SPEC: &str = "spec: Forbidden: pod updates may not change fields other than";

#[test]
fn scheduling_gate_names_are_qualified_and_unique() {
    assert!(msgs(&gated(&["example.com/wait", "quota"]), None).is_empty());
    assert_eq!(
        msgs(&gated(&["a", "a"]), None),
        vec!["spec.schedulingGates[1]: Duplicate value: \"a\""]
    );
    let bad = msgs(&gated(&["-bad"]), None);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("spec.schedulingGates[0]: Invalid value: \"-bad\": name part must consist of alphanumeric characters"),
        "{bad:?}"
    );
}

#[test]
fn a_gated_pod_may_not_be_created_on_a_node() {
    let mut on_node = gated(&["wait"]);
    on_node["spec"]["nodeName"] = json!("n1");
    assert_eq!(
        msgs(&on_node, None),
        vec!["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"]
    );
}

#[test]
fn scheduling_gates_may_be_removed_one_or_all() {
    let old = gated(&["a", "b"]);
    assert!(msgs(&gated(&["b"]), Some(&old)).is_empty());
    assert!(msgs(&gated(&[]), Some(&old)).is_empty());
    assert!(msgs(&pod(&|_| {}), Some(&old)).is_empty());
}

#[test]
fn scheduling_gates_may_not_be_added() {
    let old = gated(&["a"]);
    assert_eq!(
        msgs(&gated(&["a", "b"]), Some(&old)),
        vec!["spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'b'"]
    );
    // Nor put back once gone.
    let ungated = pod(&|_| {});
    assert_eq!(
        msgs(&gated(&["a"]), Some(&ungated)),
        vec!["spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'a'"]
    );
}

#[test]
fn tolerations_may_be_added_but_not_changed_or_removed() {
    let toleration = json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 60});
    let old = pod(&|s| s["tolerations"] = json!([toleration]));
    let added = pod(&|s| {
        s["tolerations"] = json!([toleration, {"key": "other", "operator": "Exists"}]);
    });
    assert!(msgs(&added, Some(&old)).is_empty());
    let shorter = pod(&|s| {
        s["tolerations"] = json!([toleration]);
        s["tolerations"][0]["tolerationSeconds"] = json!(10);
    });
    assert!(
        msgs(&shorter, Some(&old)).is_empty(),
        "tolerationSeconds may change"
    );
    let changed = pod(&|s| {
        s["tolerations"] = json!([toleration]);
        s["tolerations"][0]["value"] = json!("w");
    });
    assert_eq!(
        msgs(&changed, Some(&old)),
        vec!["spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]
    );
    let removed = pod(&|_| {});
    assert_eq!(
        msgs(&removed, Some(&old)),
        vec!["spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]
    );
}

#[test]
fn a_gated_pods_node_selector_may_only_gain_entries() {
    let old = pod(&|s| {
        s["schedulingGates"] = json!([{"name": "wait"}]);
        s["nodeSelector"] = json!({"zone": "a"});
    });
    let more = pod(&|s| {
        s["schedulingGates"] = json!([{"name": "wait"}]);
        s["nodeSelector"] = json!({"zone": "a", "disk": "ssd"});
    });
    assert!(msgs(&more, Some(&old)).is_empty());
    // Gaining an entry while the last gate goes is one update of a gated pod.
    let released = pod(&|s| s["nodeSelector"] = json!({"zone": "a", "disk": "ssd"}));
    assert!(msgs(&released, Some(&old)).is_empty());
    let changed = pod(&|s| {
        s["schedulingGates"] = json!([{"name": "wait"}]);
        s["nodeSelector"] = json!({"zone": "b"});
    });
    assert_eq!(
        msgs(&changed, Some(&old)),
        vec!["spec.nodeSelector: Invalid value: map[string]string{\"zone\":\"b\"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"]
    );
    let dropped = gated(&["wait"]);
    assert_eq!(msgs(&dropped, Some(&old)).len(), 1);
}

#[test]
fn an_ungated_pods_node_selector_is_immutable() {
    let old = pod(&|s| s["nodeSelector"] = json!({"zone": "a"}));
    let more = pod(&|s| s["nodeSelector"] = json!({"zone": "a", "disk": "ssd"}));
    let m = msgs(&more, Some(&old));
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].starts_with(FORBIDDEN_SPEC), "{m:?}");
}

fn required(terms: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
}

fn with_affinity(gates: bool, affinity: Value) -> Value {
    pod(&|s| {
        if gates {
            s["schedulingGates"] = json!([{"name": "wait"}]);
        }
        if !affinity.is_null() {
            s["affinity"] = affinity.clone();
        }
    })
}

#[test]
fn a_gated_pods_required_node_affinity_may_only_narrow() {
    let zone_a = json!({"key": "zone", "operator": "In", "values": ["a"]});
    let ssd = json!({"key": "disk", "operator": "In", "values": ["ssd"]});
    let old = with_affinity(true, required(json!([{"matchExpressions": [zone_a]}])));
    let narrower = with_affinity(true, required(json!([{"matchExpressions": [zone_a, ssd]}])));
    assert!(msgs(&narrower, Some(&old)).is_empty());
    let another_term = with_affinity(
        true,
        required(json!([{"matchExpressions": [zone_a]}, {"matchExpressions": [ssd]}])),
    );
    let m = msgs(&another_term, Some(&old));
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].starts_with("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Invalid value: ")
            && m[0].ends_with(": no additions/deletions to non-empty NodeSelectorTerms list are allowed"),
        "{m:?}"
    );
    let changed = with_affinity(true, required(json!([{"matchExpressions": [ssd]}])));
    let m = msgs(&changed, Some(&old));
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].starts_with("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]: Invalid value: ")
            && m[0].ends_with(": only additions are allowed (no mutations or deletions)"),
        "{m:?}"
    );
    // Without an old requirement anything may be set, and preferences may change freely.
    let none = with_affinity(true, Value::Null);
    assert!(msgs(&narrower, Some(&none)).is_empty());
    let preferred = with_affinity(
        true,
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [ssd]}}]}}),
    );
    assert!(msgs(&preferred, Some(&none)).is_empty());
    // An ungated pod's affinity is immutable.
    let old = with_affinity(false, required(json!([{"matchExpressions": [zone_a]}])));
    let narrower = with_affinity(
        false,
        required(json!([{"matchExpressions": [zone_a, ssd]}])),
    );
    let m = msgs(&narrower, Some(&old));
    assert!(m.len() == 1 && m[0].starts_with(FORBIDDEN_SPEC), "{m:?}");
}

#[test]
fn the_nominated_node_must_be_a_node_name() {
    let old = pod(&|_| {});
    let mut nominated = old.clone();
    nominated["status"] = json!({"nominatedNodeName": "node-1"});
    assert!(msgs(&nominated, Some(&old)).is_empty());
    nominated["status"]["nominatedNodeName"] = json!("Not_A_Node");
    let m = msgs(&nominated, Some(&old));
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].starts_with("status.nominatedNodeName: Invalid value: \"Not_A_Node\": a lowercase RFC 1123 subdomain"),
        "{m:?}"
    );
}

/// A pod with `statuses` as its status's `field` (containerStatuses or initContainerStatuses).
fn with_statuses(mut pod: Value, field: &str, statuses: Value) -> Value {
    pod["status"] = json!({ field: statuses });
    pod
}

fn state(name: &str, state: Value) -> Value {
    json!({"name": name, "image": "nginx", "imageID": "", "ready": false, "restartCount": 0,
        "state": state})
}

#[test]
fn a_terminated_container_stays_terminated_unless_the_pod_always_restarts() {
    // upstream's ValidateContainerStateTransition: with restartPolicy Never (or OnFailure,
    // for a container that succeeded), a status update may not take a terminated container
    // back to running or waiting; with Always it may (the kubelet restarts it), and with
    // OnFailure a failed container may. Restartable init containers (sidecars) restart.
    let terminated = json!({"terminated": {"exitCode": 0}});
    let running = json!({"running": {}});
    for (policy, allowed) in [("Never", false), ("OnFailure", false), ("Always", true)] {
        let stored = pod(&|s| s["restartPolicy"] = json!(policy));
        let old = with_statuses(
            stored.clone(),
            "containerStatuses",
            json!([state("c", terminated.clone())]),
        );
        let new = with_statuses(
            stored.clone(),
            "containerStatuses",
            json!([state("c", running.clone())]),
        );
        let got = msgs(&new, Some(&old));
        if allowed {
            assert!(got.is_empty(), "{policy}: {got:?}");
        } else {
            assert_eq!(
                got,
                vec!["status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state"],
                "{policy}"
            );
        }
        // Staying terminated (a new exit code recorded) is fine under every policy.
        let again = with_statuses(
            stored.clone(),
            "containerStatuses",
            json!([state("c", json!({"terminated": {"exitCode": 1}}))]),
        );
        assert!(msgs(&again, Some(&old)).is_empty(), "{policy}");
        // A failed container restarts under OnFailure (and Always), not under Never.
        let failed = with_statuses(
            stored,
            "containerStatuses",
            json!([state("c", json!({"terminated": {"exitCode": 2}}))]),
        );
        let restarted = msgs(&new, Some(&failed));
        assert_eq!(
            restarted.is_empty(),
            policy != "Never",
            "{policy}: {restarted:?}"
        );
    }
    let with_init = pod(&|s| {
        s["restartPolicy"] = json!("Never");
        s["initContainers"] = json!([
            {"name": "setup", "image": "nginx", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"},
            {"name": "sidecar", "image": "nginx", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File", "restartPolicy": "Always"}]);
    });
    let old = with_statuses(
        with_init.clone(),
        "initContainerStatuses",
        json!([
            state("setup", terminated.clone()),
            state("sidecar", terminated.clone())
        ]),
    );
    let new = with_statuses(
        with_init,
        "initContainerStatuses",
        json!([
            state("setup", running.clone()),
            state("sidecar", running.clone())
        ]),
    );
    assert_eq!(
        msgs(&new, Some(&old)),
        vec!["status.initContainerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state"]
    );
}
