//! Validation of the apps group: Deployment, ReplicaSet, StatefulSet, DaemonSet and
//! ControllerRevision.

use serde_json::Value;

use super::json::{self, child, Errs};
use super::meta::{selector_is_empty, selector_matches, validate_label_selector};
use super::names::is_valid_percent;
use super::pod::validate_pod_template;
use super::FieldError;

/// The four workload kinds whose specs share a selector, a pod template and rollout fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
}

impl Workload {
    fn kind(self) -> &'static str {
        match self {
            Workload::Deployment => "Deployment",
            Workload::ReplicaSet => "ReplicaSet",
            Workload::StatefulSet => "StatefulSet",
            Workload::DaemonSet => "DaemonSet",
        }
    }
}

/// ControllerRevision: a revision number, and data that never changes.
pub fn validate_controller_revision(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    json::non_negative_at(obj, "", "revision", errs);
    if let Some(old) = old {
        json::immutable(obj, old, "", "data", errs);
    }
}

/// A workload: the fields all four share, then the kind's own, then what an update may not
/// change.
pub fn validate_workload(workload: Workload, obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    if workload != Workload::DaemonSet {
        json::non_negative_at(s, "spec", "replicas", errs);
    }
    json::non_negative_at(s, "spec", "minReadySeconds", errs);
    json::non_negative_at(s, "spec", "revisionHistoryLimit", errs);
    validate_selector_and_template(workload, s, errs);
    match workload {
        Workload::Deployment => validate_deployment(s, errs),
        Workload::StatefulSet => validate_statefulset(s, errs),
        Workload::DaemonSet => validate_daemonset(s, errs),
        Workload::ReplicaSet => {}
    }
    if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
        if s.get("selector") != old_spec.get("selector") {
            errs.push(FieldError::invalid(
                "spec.selector",
                s.get("selector").cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
        if workload == Workload::StatefulSet {
            statefulset_update(s, old_spec, errs);
        }
    }
}

/// A StatefulSet's pod template with a volume for each claim template it does not name.
fn with_claim_volumes(spec: &Value, template: &Value) -> Value {
    let mut template = template.clone();
    let claims: Vec<String> = crate::json::value_at(spec, &["volumeClaimTemplates"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| crate::json::opt_str_at(c, &["metadata", "name"]).map(String::from))
        .collect();
    let Some(pod) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return template;
    };
    let volumes = pod
        .entry("volumes")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(volumes) = volumes.as_array_mut() {
        for claim in claims {
            if !volumes.iter().any(|v| v["name"] == claim.as_str()) {
                volumes.push(serde_json::json!({"name": claim,
                    "persistentVolumeClaim": {"claimName": claim}}));
            }
        }
    }
    template
}

fn validate_selector_and_template(workload: Workload, s: &Value, errs: &mut Errs) {
    let kind = workload.kind();
    let selector = json::obj_at(s, "spec", "selector", errs);
    match selector {
        None => errs.push(FieldError::required("spec.selector", "")),
        Some(sel) => {
            validate_label_selector(sel, "spec.selector", errs);
            if selector_is_empty(sel) {
                errs.push(FieldError::invalid(
                    "spec.selector",
                    sel.clone(),
                    format!("empty selector is invalid for {}", kind.to_lowercase()),
                ));
            }
        }
    }
    let Some(t) = json::obj_at(s, "spec", "template", errs) else {
        errs.push(FieldError::required("spec.template", ""));
        return;
    };
    let labels = crate::json::value_at(t, &["metadata", "labels"])
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(sel) = selector.filter(|s| !selector_is_empty(s)) {
        if !selector_matches(sel, &labels) {
            let shown = if labels.is_null() {
                Value::Object(Default::default())
            } else {
                labels
            };
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                shown,
                "`selector` does not match template `labels`",
            ));
        }
    }
    if workload == Workload::StatefulSet {
        // Containers may mount the claims of `volumeClaimTemplates`: the controller adds one
        // volume per template to each pod, and upstream's validation accepts such mounts.
        validate_pod_template(&with_claim_volumes(s, t), "spec.template", errs);
    } else {
        validate_pod_template(t, "spec.template", errs);
    }
    let policy = crate::json::opt_str_at(t, &["spec", "restartPolicy"]).unwrap_or("");
    if policy != "Always" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            policy,
            &["Always"],
        ));
    }
    if let Some(ads) = crate::json::value_at(t, &["spec", "activeDeadlineSeconds"]) {
        let what = if matches!(workload, Workload::Deployment | Workload::ReplicaSet) {
            "ReplicaSet"
        } else {
            kind
        };
        errs.push(FieldError::invalid(
            "spec.template.spec.activeDeadlineSeconds",
            ads.clone(),
            format!("activeDeadlineSeconds in {what} is not Supported"),
        ));
    }
}

/// Validates an int-or-percent field; returns its value as a percent (if a string) or int.
fn int_or_percent(obj: &Value, path: &str, name: &str, errs: &mut Errs) -> Option<(i64, bool)> {
    let p = child(path, name);
    match obj.get(name)? {
        Value::String(s) => {
            let msgs = is_valid_percent(s);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(&p, s.as_str(), msg));
                }
                return None;
            }
            let n: i64 = s.trim_end_matches('%').parse().unwrap_or(i64::MAX);
            if n > 100 {
                errs.push(FieldError::invalid(
                    &p,
                    s.as_str(),
                    "must not be greater than 100%",
                ));
            }
            Some((n, true))
        }
        v @ Value::Number(_) => {
            let n = json::as_int(v, &p, errs)?;
            json::non_negative(n, &p, errs);
            Some((n, false))
        }
        Value::Null => None,
        v => {
            errs.push(FieldError::invalid(
                &p,
                v.clone(),
                "must be an integer or a percentage",
            ));
            None
        }
    }
}

fn validate_rolling(ru: &Value, path: &str, errs: &mut Errs) {
    let unavailable = int_or_percent(ru, path, "maxUnavailable", errs);
    let surge = int_or_percent(ru, path, "maxSurge", errs);
    if unavailable.is_some_and(|(n, _)| n == 0) && surge.is_none_or(|(n, _)| n == 0) {
        errs.push(FieldError::invalid(
            child(path, "maxUnavailable"),
            ru.get("maxUnavailable").cloned().unwrap_or(Value::Null),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
}

/// A DaemonSet surges or leaves nodes short, never both: exactly one of the two is non-zero.
fn validate_daemon_rolling(ru: &Value, path: &str, errs: &mut Errs) {
    let unavailable = int_or_percent(ru, path, "maxUnavailable", errs);
    let surge = int_or_percent(ru, path, "maxSurge", errs);
    let non_zero = |value: Option<(i64, bool)>| value.is_some_and(|(n, _)| n != 0);
    match (non_zero(unavailable), non_zero(surge)) {
        (true, true) => errs.push(FieldError::invalid(
            child(path, "maxSurge"),
            ru.get("maxSurge").cloned().unwrap_or(Value::Null),
            "may not be set when maxUnavailable is non-zero",
        )),
        (false, false) => errs.push(FieldError::required(
            child(path, "maxUnavailable"),
            "cannot be 0 when maxSurge is 0",
        )),
        _ => {}
    }
}

fn validate_deployment(s: &Value, errs: &mut Errs) {
    if let Some(st) = json::obj_at(s, "spec", "strategy", errs) {
        let p = "spec.strategy";
        match json::str_or_empty(st, p, "type", errs) {
            "Recreate" => {
                if json::has(st, "rollingUpdate") {
                    errs.push(FieldError::forbidden(
                        "spec.strategy.rollingUpdate",
                        "may not be specified when strategy `type` is 'Recreate'",
                    ));
                }
            }
            "RollingUpdate" => match json::obj_at(st, p, "rollingUpdate", errs) {
                Some(ru) => validate_rolling(ru, "spec.strategy.rollingUpdate", errs),
                None => errs.push(FieldError::required(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                )),
            },
            other => errs.push(FieldError::not_supported(
                "spec.strategy.type",
                other,
                &["Recreate", "RollingUpdate"],
            )),
        }
    }
    let min_ready = crate::json::value_at(s, &["minReadySeconds"])
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(pds) = json::non_negative_at(s, "spec", "progressDeadlineSeconds", errs) {
        if pds <= min_ready {
            errs.push(FieldError::invalid(
                "spec.progressDeadlineSeconds",
                pds,
                "must be greater than minReadySeconds",
            ));
        }
    }
    json::bool_at(s, "spec", "paused", errs);
}

fn validate_statefulset(s: &Value, errs: &mut Errs) {
    if let Some(p) = json::str_at(s, "spec", "podManagementPolicy", errs) {
        if p != "OrderedReady" && p != "Parallel" {
            errs.push(FieldError::not_supported(
                "spec.podManagementPolicy",
                p,
                &["OrderedReady", "Parallel"],
            ));
        }
    } else {
        errs.push(FieldError::required("spec.podManagementPolicy", ""));
    }
    if let Some(us) = json::obj_at(s, "spec", "updateStrategy", errs) {
        let p = "spec.updateStrategy";
        match json::str_or_empty(us, p, "type", errs) {
            "OnDelete" => {
                if json::has(us, "rollingUpdate") {
                    errs.push(FieldError::invalid(
                        "spec.updateStrategy.rollingUpdate",
                        us["rollingUpdate"].clone(),
                        "only allowed for updateStrategy 'RollingUpdate'",
                    ));
                }
            }
            "RollingUpdate" => {
                if let Some(ru) = json::obj_at(us, p, "rollingUpdate", errs) {
                    json::non_negative_at(
                        ru,
                        "spec.updateStrategy.rollingUpdate",
                        "partition",
                        errs,
                    );
                    if let Some((n, _)) = int_or_percent(
                        ru,
                        "spec.updateStrategy.rollingUpdate",
                        "maxUnavailable",
                        errs,
                    ) {
                        if n == 0 {
                            errs.push(FieldError::invalid(
                                "spec.updateStrategy.rollingUpdate.maxUnavailable",
                                ru["maxUnavailable"].clone(),
                                "must be greater than 0",
                            ));
                        }
                    }
                }
            }
            "" => errs.push(FieldError::required("spec.updateStrategy", "")),
            other => errs.push(FieldError::not_supported(
                "spec.updateStrategy.type",
                other,
                &["OnDelete", "RollingUpdate"],
            )),
        }
    }
    if let Some(r) = json::obj_at(s, "spec", "persistentVolumeClaimRetentionPolicy", errs) {
        let p = "spec.persistentVolumeClaimRetentionPolicy";
        for f in ["whenDeleted", "whenScaled"] {
            if let Some(v) = json::str_at(r, p, f, errs) {
                if v != "Retain" && v != "Delete" {
                    errs.push(FieldError::not_supported(
                        child(p, f),
                        v,
                        &["Retain", "Delete"],
                    ));
                }
            }
        }
    }
    if let Some(o) = json::obj_at(s, "spec", "ordinals", errs) {
        json::non_negative_at(o, "spec.ordinals", "start", errs);
    }
    for (p, claim) in json::objs_at(s, "spec", "volumeClaimTemplates", errs) {
        let name = crate::json::opt_str_at(claim, &["metadata", "name"]).unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(
                child(&p, "metadata.name"),
                "name or generateName is required",
            ));
        }
    }
}

fn statefulset_update(s: &Value, old_spec: &Value, errs: &mut Errs) {
    const MUTABLE: &[&str] = &[
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            for f in MUTABLE {
                m.remove(*f);
            }
        }
        v
    };
    if strip(s) != strip(old_spec) {
        errs.push(FieldError::forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"));
    }
}

fn validate_daemonset(s: &Value, errs: &mut Errs) {
    if let Some(us) = json::obj_at(s, "spec", "updateStrategy", errs) {
        let p = "spec.updateStrategy";
        match json::str_or_empty(us, p, "type", errs) {
            "OnDelete" => {}
            "RollingUpdate" => match json::obj_at(us, p, "rollingUpdate", errs) {
                Some(ru) => validate_daemon_rolling(ru, "spec.updateStrategy.rollingUpdate", errs),
                None => errs.push(FieldError::required(
                    "spec.updateStrategy.rollingUpdate",
                    "",
                )),
            },
            "" => errs.push(FieldError::required("spec.updateStrategy.type", "")),
            other => errs.push(FieldError::not_supported(
                "spec.updateStrategy.type",
                other,
                &["OnDelete", "RollingUpdate"],
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn deployment(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                    "containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"}]
                }
            }
        })
    }

    fn msgs(kind: &str, obj: &Value, old: Option<&Value>) -> Vec<String> {
        validate("apps", kind, true, obj, old)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    #[test]
    fn deployment_cases() {
        let with = |f: &dyn Fn(&mut Value)| {
            let mut s = good_spec();
            f(&mut s);
            s
        };
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a good deployment passes", good_spec(), vec![]),
            ("negative replicas are invalid", with(&|s| s["replicas"] = json!(-1)),
                vec!["spec.replicas: Invalid value: -1: must be greater than or equal to 0"]),
            ("a selector that misses the template is invalid", with(&|s| s["selector"]["matchLabels"]["app"] = json!("db")),
                vec!["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"]),
            ("the selector is required", with(&|s| { s.as_object_mut().map(|m| m.remove("selector")); }),
                vec!["spec.selector: Required value"]),
            ("the template must restart always", with(&|s| s["template"]["spec"]["restartPolicy"] = json!("Never")),
                vec!["spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""]),
            ("both rolling limits zero is invalid", with(&|s| s["strategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 0})),
                vec!["spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"]),
            ("a bad percent is invalid", with(&|s| s["strategy"]["rollingUpdate"]["maxSurge"] = json!("x")),
                vec!["spec.strategy.rollingUpdate.maxSurge: Invalid value: \"x\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"]),
            ("containers are required", with(&|s| s["template"]["spec"]["containers"] = json!([])),
                vec!["spec.template.spec.containers: Required value"]),
            ("a replicas string is a type error", with(&|s| s["replicas"] = json!("3")),
                vec!["spec.replicas: Invalid value: \"3\": must be an integer"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs("Deployment", &deployment(spec), None), want, "{name}");
        }
    }

    #[test]
    fn the_selector_may_not_change() {
        let old = deployment(good_spec());
        let mut new = old.clone();
        new["spec"]["selector"]["matchLabels"]["x"] = json!("y");
        new["spec"]["template"]["metadata"]["labels"]["x"] = json!("y");
        let m = msgs("Deployment", &new, Some(&old));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("spec.selector: Invalid value: "), "{m:?}");
    }

    #[test]
    fn statefulset_spec_is_mostly_immutable() {
        let mut spec = good_spec();
        let m = spec.as_object_mut().expect("object");
        m.remove("strategy");
        m.remove("progressDeadlineSeconds");
        m.insert("podManagementPolicy".into(), json!("OrderedReady"));
        m.insert("serviceName".into(), json!("web"));
        m.insert(
            "updateStrategy".into(),
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        );
        let old = deployment(spec);
        assert_eq!(msgs("StatefulSet", &old, None), Vec::<String>::new());
        let mut new = old.clone();
        new["spec"]["serviceName"] = json!("other");
        assert_eq!(msgs("StatefulSet", &new, Some(&old)), vec!["spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"]);
    }

    #[test]
    fn statefulset_containers_may_mount_claim_templates() {
        let mut spec = good_spec();
        let m = spec.as_object_mut().expect("object");
        m.remove("strategy");
        m.remove("progressDeadlineSeconds");
        m.insert("serviceName".into(), json!("web"));
        m.insert("podManagementPolicy".into(), json!("Parallel"));
        m.insert(
            "updateStrategy".into(),
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        );
        spec["template"]["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        let without = deployment(spec.clone());
        assert_eq!(
            msgs("StatefulSet", &without, None),
            vec!["spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"data\""]
        );
        spec["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
        assert_eq!(
            msgs("StatefulSet", &deployment(spec), None),
            Vec::<String>::new()
        );
    }

    #[test]
    fn daemonset_update_strategy_is_checked() {
        let mut spec = good_spec();
        let m = spec.as_object_mut().expect("object");
        m.remove("strategy");
        m.remove("replicas");
        m.remove("progressDeadlineSeconds");
        m.insert("updateStrategy".into(), json!({"type": "Foo"}));
        assert_eq!(msgs("DaemonSet", &deployment(spec.clone()), None), vec![
            "spec.updateStrategy.type: Unsupported value: \"Foo\": supported values: \"OnDelete\", \"RollingUpdate\""
        ]);
        let rolling = |bounds: Value| {
            let mut spec = spec.clone();
            spec["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": bounds});
            msgs("DaemonSet", &deployment(spec), None)
        };
        assert_eq!(
            rolling(json!({"maxUnavailable": 0, "maxSurge": 1})),
            Vec::<String>::new()
        );
        assert_eq!(
            rolling(json!({"maxUnavailable": "10%", "maxSurge": 0})),
            Vec::<String>::new()
        );
        assert_eq!(rolling(json!({"maxUnavailable": 1, "maxSurge": "20%"})), vec![
            "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"20%\": may not be set when maxUnavailable is non-zero"
        ]);
        assert_eq!(rolling(json!({"maxUnavailable": "0%", "maxSurge": 0})), vec![
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
        ]);
    }
}
