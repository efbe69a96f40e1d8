//! Defaulting of the remaining groups: networking (NetworkPolicy), rbac (bindings), storage
//! (StorageClass, CSIDriver), scheduling (PriorityClass), discovery (EndpointSlice) and
//! admissionregistration (webhook configurations).

use serde_json::{json, Value};

use super::{ensure_obj, get_obj, is_empty, objs_mut, set_if_absent, set_str_if_empty};

const RBAC: &str = "rbac.authorization.k8s.io";

/// RoleBinding and ClusterRoleBinding: the API groups of the role and of each subject.
pub fn default_binding(obj: &mut Value) {
    if let Some(rr) = get_obj(obj, "roleRef") {
        set_str_if_empty(rr, "apiGroup", RBAC);
    }
    for s in objs_mut(obj, "subjects") {
        if is_empty(s, "apiGroup") {
            match s.get("kind").and_then(Value::as_str) {
                Some("ServiceAccount") => set_if_absent(s, "apiGroup", json!("")),
                Some("User" | "Group") => s["apiGroup"] = json!(RBAC),
                _ => {}
            }
        }
    }
}

/// StorageClass: reclaim policy and binding mode.
pub fn default_storage_class(obj: &mut Value) {
    set_if_absent(obj, "reclaimPolicy", json!("Delete"));
    set_if_absent(obj, "volumeBindingMode", json!("Immediate"));
}

/// CSIDriver (not served yet): upstream's spec defaults.
pub fn default_csi_driver(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        set_if_absent(spec, "attachRequired", json!(true));
        set_if_absent(spec, "podInfoOnMount", json!(false));
        set_if_absent(spec, "storageCapacity", json!(false));
        set_if_absent(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
        set_if_absent(spec, "requiresRepublish", json!(false));
        if is_empty(spec, "volumeLifecycleModes") {
            spec["volumeLifecycleModes"] = json!(["Persistent"]);
        }
        set_if_absent(spec, "seLinuxMount", json!(false));
    }
}

/// PriorityClass: the preemption policy.
pub fn default_priority_class(obj: &mut Value) {
    set_if_absent(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// EndpointSlice: each port's name and protocol.
pub fn default_endpoint_slice(obj: &mut Value) {
    for p in objs_mut(obj, "ports") {
        set_if_absent(p, "name", json!(""));
        set_if_absent(p, "protocol", json!("TCP"));
    }
}

/// Validating and mutating webhook configurations (not served yet): each webhook's defaults.
pub fn default_webhook_configuration(obj: &mut Value, mutating: bool) {
    for w in objs_mut(obj, "webhooks") {
        default_webhook(w, mutating);
    }
}

pub fn default_network_policy(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    for list in ["ingress", "egress"] {
        if let Some(rules) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter(|r| r.is_object()) {
                for p in objs_mut(rule, "ports") {
                    set_if_absent(p, "protocol", json!("TCP"));
                }
            }
        }
    }
    if is_empty(spec, "policyTypes") {
        let mut types = vec![json!("Ingress")];
        if !is_empty(spec, "egress") {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = Value::Array(types);
    }
}

fn default_webhook(w: &mut Value, mutating: bool) {
    set_if_absent(w, "failurePolicy", json!("Fail"));
    set_if_absent(w, "matchPolicy", json!("Equivalent"));
    set_if_absent(w, "namespaceSelector", json!({}));
    set_if_absent(w, "objectSelector", json!({}));
    set_if_absent(w, "timeoutSeconds", json!(10));
    if mutating {
        set_if_absent(w, "reinvocationPolicy", json!("Never"));
    }
    for r in objs_mut(w, "rules") {
        set_if_absent(r, "scope", json!("*"));
    }
    if let Some(svc) = get_obj(w, "clientConfig").and_then(|c| get_obj(c, "service")) {
        set_if_absent(svc, "port", json!(443));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::apply;
    use serde_json::{json, Value};

    fn defaulted(group: &str, kind: &str, mut v: Value) -> Value {
        apply(group, kind, &mut v);
        v
    }

    #[test]
    fn network_policies_get_policy_types_from_their_rules() {
        let ingress_only = defaulted(
            "networking.k8s.io",
            "NetworkPolicy",
            json!({"spec": {"podSelector": {}}}),
        );
        assert_eq!(ingress_only["spec"]["policyTypes"], json!(["Ingress"]));
        let both = defaulted(
            "networking.k8s.io",
            "NetworkPolicy",
            json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}}),
        );
        assert_eq!(both["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(
            both["spec"]["egress"][0]["ports"][0]["protocol"],
            json!("TCP")
        );
    }

    #[test]
    fn rbac_subjects_get_their_groups() {
        let b = defaulted(
            super::RBAC,
            "RoleBinding",
            json!({
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "a"}, {"kind": "User", "name": "u"}, {"kind": "Group", "name": "g", "apiGroup": ""}]}),
        );
        assert_eq!(b["roleRef"]["apiGroup"], json!(super::RBAC));
        assert_eq!(b["subjects"][0]["apiGroup"], json!(""));
        assert_eq!(b["subjects"][1]["apiGroup"], json!(super::RBAC));
        assert_eq!(b["subjects"][2]["apiGroup"], json!(super::RBAC));
    }

    #[test]
    fn small_kinds_get_their_defaults() {
        let sc = defaulted(
            "storage.k8s.io",
            "StorageClass",
            json!({"provisioner": "x"}),
        );
        assert_eq!(
            sc,
            json!({"provisioner": "x", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
        );
        let pc = defaulted("scheduling.k8s.io", "PriorityClass", json!({"value": 1}));
        assert_eq!(pc["preemptionPolicy"], json!("PreemptLowerPriority"));
        let es = defaulted(
            "discovery.k8s.io",
            "EndpointSlice",
            json!({"ports": [{"port": 80}]}),
        );
        assert_eq!(
            es["ports"],
            json!([{"port": 80, "name": "", "protocol": "TCP"}])
        );
        let mut wh = json!({"webhooks": [{"name": "w", "rules": [{}]}]});
        super::default_webhook_configuration(&mut wh, true);
        assert_eq!(wh["webhooks"][0]["reinvocationPolicy"], json!("Never"));
        assert_eq!(wh["webhooks"][0]["rules"][0]["scope"], json!("*"));
        let lease = defaulted("coordination.k8s.io", "Lease", json!({"spec": {}}));
        assert_eq!(lease, json!({"spec": {}}));
    }
}
