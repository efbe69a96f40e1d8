//! Defaulting of the apps (Deployment, ReplicaSet, StatefulSet, DaemonSet) and batch (Job,
//! CronJob) kinds, including their pod templates.

use serde_json::{json, Value};

use super::core::default_pvc;
use super::pod::default_template;
use super::{ensure_obj, is_empty, objs_mut, set_if_absent, set_str_if_empty};

/// ReplicaSet: one replica and its pod template.
pub fn default_replicaset(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        set_if_absent(spec, "replicas", json!(1));
        default_template(spec, "template");
    }
}

pub fn default_deployment(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_if_absent(spec, "replicas", json!(1));
    if let Some(strategy) = ensure_obj(spec, "strategy") {
        set_str_if_empty(strategy, "type", "RollingUpdate");
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(strategy, "rollingUpdate") {
                set_if_absent(ru, "maxUnavailable", json!("25%"));
                set_if_absent(ru, "maxSurge", json!("25%"));
            }
        }
    }
    set_if_absent(spec, "revisionHistoryLimit", json!(10));
    set_if_absent(spec, "progressDeadlineSeconds", json!(600));
    default_template(spec, "template");
}

pub fn default_statefulset(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_str_if_empty(spec, "podManagementPolicy", "OrderedReady");
    if let Some(us) = ensure_obj(spec, "updateStrategy") {
        set_str_if_empty(us, "type", "RollingUpdate");
        if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(us, "rollingUpdate") {
                set_if_absent(ru, "partition", json!(0));
            }
        }
    }
    if let Some(policy) = ensure_obj(spec, "persistentVolumeClaimRetentionPolicy") {
        set_str_if_empty(policy, "whenDeleted", "Retain");
        set_str_if_empty(policy, "whenScaled", "Retain");
    }
    set_if_absent(spec, "replicas", json!(1));
    set_if_absent(spec, "revisionHistoryLimit", json!(10));
    for claim in objs_mut(spec, "volumeClaimTemplates") {
        default_pvc(claim);
    }
    default_template(spec, "template");
}

pub fn default_daemonset(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    if let Some(us) = ensure_obj(spec, "updateStrategy") {
        set_str_if_empty(us, "type", "RollingUpdate");
        if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            if let Some(ru) = ensure_obj(us, "rollingUpdate") {
                set_if_absent(ru, "maxUnavailable", json!(1));
                set_if_absent(ru, "maxSurge", json!(0));
            }
        }
    }
    set_if_absent(spec, "revisionHistoryLimit", json!(10));
    default_template(spec, "template");
}

pub fn default_job(obj: &mut Value) {
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    if is_empty(spec, "completions") && is_empty(spec, "parallelism") {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set_if_absent(spec, "parallelism", json!(1));
    let per_index = !is_empty(spec, "backoffLimitPerIndex");
    set_if_absent(
        spec,
        "backoffLimit",
        json!(if per_index { i64::from(i32::MAX) } else { 6 }),
    );
    set_if_absent(spec, "completionMode", json!("NonIndexed"));
    set_if_absent(spec, "suspend", json!(false));
    let with_failure_policy = !is_empty(spec, "podFailurePolicy");
    set_if_absent(
        spec,
        "podReplacementPolicy",
        json!(if with_failure_policy {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    if let Some(pfp) = spec.get_mut("podFailurePolicy").filter(|p| p.is_object()) {
        for rule in objs_mut(pfp, "rules") {
            for cond in objs_mut(rule, "onPodConditions") {
                set_str_if_empty(cond, "status", "True");
            }
        }
    }
    default_template(spec, "template");
    if let Some(labels) = labels {
        if let Some(meta) = ensure_obj(obj, "metadata") {
            if is_empty(meta, "labels") {
                meta["labels"] = labels;
            }
        }
    }
}

pub fn default_cronjob(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_str_if_empty(spec, "concurrencyPolicy", "Allow");
    set_if_absent(spec, "suspend", json!(false));
    set_if_absent(spec, "successfulJobsHistoryLimit", json!(3));
    set_if_absent(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(job_spec) = ensure_obj(spec, "jobTemplate").and_then(|jt| ensure_obj(jt, "spec")) {
        default_template(job_spec, "template");
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
    fn deployments_get_strategy_limits_and_template_defaults() {
        let d = defaulted(
            "apps",
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        );
        assert_eq!(d["spec"]["replicas"], json!(1));
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], json!(10));
        assert_eq!(d["spec"]["progressDeadlineSeconds"], json!(600));
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            json!("Always")
        );
        assert!(
            d.get("metadata").is_none(),
            "apps/v1 does not copy template labels"
        );
        let recreate = defaulted(
            "apps",
            "Deployment",
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn statefulsets_and_daemonsets_get_update_strategies() {
        let s = defaulted(
            "apps",
            "StatefulSet",
            json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {}}]}}),
        );
        assert_eq!(s["spec"]["podManagementPolicy"], json!("OrderedReady"));
        assert_eq!(
            s["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(
            s["spec"]["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(
            s["spec"]["volumeClaimTemplates"][0]["status"],
            json!({"phase": "Pending"})
        );
        let d = defaulted("apps", "DaemonSet", json!({}));
        assert_eq!(
            d["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], json!(10));
    }

    #[test]
    fn jobs_get_counts_modes_and_labels() {
        let j = defaulted(
            "batch",
            "Job",
            json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"restartPolicy": "Never"}}}}),
        );
        let spec = &j["spec"];
        assert_eq!(
            (spec["completions"].clone(), spec["parallelism"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(spec["backoffLimit"], json!(6));
        assert_eq!(spec["completionMode"], json!("NonIndexed"));
        assert_eq!(spec["suspend"], json!(false));
        assert_eq!(spec["podReplacementPolicy"], json!("TerminatingOrFailed"));
        assert_eq!(spec["template"]["spec"]["restartPolicy"], json!("Never"));
        assert_eq!(j["metadata"]["labels"], json!({"a": "b"}));
        let parallel = defaulted("batch", "Job", json!({"spec": {"parallelism": 3}}));
        assert!(parallel["spec"].get("completions").is_none());
    }

    #[test]
    fn cronjobs_get_policy_and_history_limits() {
        let c = defaulted("batch", "CronJob", json!({"spec": {"schedule": "@daily"}}));
        assert_eq!(c["spec"]["concurrencyPolicy"], json!("Allow"));
        assert_eq!(c["spec"]["suspend"], json!(false));
        assert_eq!(c["spec"]["successfulJobsHistoryLimit"], json!(3));
        assert_eq!(c["spec"]["failedJobsHistoryLimit"], json!(1));
        assert_eq!(
            c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
            json!("ClusterFirst")
        );
        assert!(c["spec"]["jobTemplate"]["spec"]
            .get("backoffLimit")
            .is_none());
    }
}
