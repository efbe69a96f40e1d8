//! Upstream Kubernetes defaulting (the v1 `SetDefaults_*` functions, `+default` markers and
//! the few create-time fills clients rely on) for the built-in kinds, done on their API JSON.
//!
//! Defaulting never fails: a field of the wrong JSON type is left alone for validation to
//! report.

use serde_json::{Map, Value};

pub mod core;
pub mod other;
pub mod pod;
pub mod workloads;

/// The object at `parent[key]`, created when absent or null; None when it has another type.
fn ensure_obj<'a>(parent: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let m = parent.as_object_mut()?;
    let slot = m.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.is_object().then_some(slot)
}

/// The existing object at `parent[key]`, if it is one.
fn get_obj<'a>(parent: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    parent.get_mut(key).filter(|v| v.is_object())
}

/// The objects in the array at `parent[key]` (others skipped).
fn objs_mut<'a>(parent: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    parent
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|a| a.iter_mut())
        .filter(|v| v.is_object())
}

/// Sets `obj[key]` when absent or null (a Go pointer or slice left nil).
fn set_if_absent(obj: &mut Value, key: &str, value: Value) {
    if let Some(m) = obj.as_object_mut() {
        let slot = m.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() {
            *slot = value;
        }
    }
}

/// Sets `obj[key]` when absent, null or "" (a Go string left empty).
fn set_str_if_empty(obj: &mut Value, key: &str, value: &str) {
    if let Some(m) = obj.as_object_mut() {
        let slot = m.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() || slot.as_str() == Some("") {
            *slot = Value::from(value);
        }
    }
}

/// Sets `obj[key]` when absent, null or 0 (a Go number left zero).
fn set_int_if_zero(obj: &mut Value, key: &str, value: i64) {
    if let Some(m) = obj.as_object_mut() {
        let slot = m.entry(key.to_string()).or_insert(Value::Null);
        if slot.is_null() || slot.as_i64() == Some(0) {
            *slot = Value::from(value);
        }
    }
}

/// Whether `obj[key]` is absent, null, or an empty string/array/object.
fn is_empty(obj: &Value, key: &str) -> bool {
    match obj.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        Some(_) => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Defaults an object of a served kind as the store does.
    pub(crate) fn apply(group: &str, kind: &str, obj: &mut Value) {
        let info = crate::catalog::by_kind(group, kind).expect("a served kind");
        if obj.is_object() {
            info.strategy.default(obj);
        }
    }

    #[test]
    fn helpers_treat_go_zero_values_as_unset() {
        let mut o = json!({"a": "", "b": 0, "c": null, "d": "x", "e": 5, "f": 1});
        set_str_if_empty(&mut o, "a", "A");
        set_int_if_zero(&mut o, "b", 7);
        set_if_absent(&mut o, "c", json!(true));
        set_str_if_empty(&mut o, "d", "D");
        set_int_if_zero(&mut o, "e", 9);
        set_if_absent(&mut o, "g", json!([]));
        assert_eq!(
            o,
            json!({"a": "A", "b": 7, "c": true, "d": "x", "e": 5, "f": 1, "g": []})
        );
    }

    #[test]
    fn ensure_obj_leaves_wrong_types_alone() {
        let mut o = json!({"s": 1});
        assert!(ensure_obj(&mut o, "s").is_none());
        assert!(ensure_obj(&mut o, "t").is_some());
        assert_eq!(o, json!({"s": 1, "t": {}}));
    }

    #[test]
    fn malformed_objects_never_panic() {
        let shapes = [
            json!(null),
            json!([]),
            json!({"spec": 1}),
            json!({"spec": {"template": "x", "containers": 3, "ports": {}}}),
            json!({"spec": {"template": {"spec": {"containers": [1, "x", {"ports": [2]}]}}}}),
            json!({"spec": {"jobTemplate": {"spec": {"template": []}}}, "metadata": 4}),
            json!({"subjects": [1], "roleRef": "x", "data": 3, "stringData": {"a": 1}}),
        ];
        let kinds = [
            ("", "Pod"),
            ("", "Service"),
            ("", "Secret"),
            ("", "Namespace"),
            ("", "PodTemplate"),
            ("", "ReplicationController"),
            ("", "PersistentVolume"),
            ("", "PersistentVolumeClaim"),
            ("", "Endpoints"),
            ("", "LimitRange"),
            ("", "Node"),
            ("apps", "Deployment"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("apps", "ReplicaSet"),
            ("batch", "Job"),
            ("batch", "CronJob"),
            ("networking.k8s.io", "NetworkPolicy"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("storage.k8s.io", "StorageClass"),
            ("discovery.k8s.io", "EndpointSlice"),
        ];
        for (g, k) in kinds {
            for s in &shapes {
                let mut v = s.clone();
                apply(g, k, &mut v);
            }
        }
    }
}
