//! What an object charges against a ResourceQuota, as upstream's quota evaluators count it:
//! a pod that is not terminal counts as one `pods` (`count/pods`) and its effective
//! requests and limits (the containers' sum or the largest init container's, whichever is
//! more) as `requests.cpu` (also plain `cpu`), `requests.memory` (`memory`),
//! `requests.ephemeral-storage`, `limits.cpu`, `limits.memory`, `limits.ephemeral-storage`;
//! quota scopes (`Terminating`, `NotTerminating`, `BestEffort`, `NotBestEffort`,
//! `PriorityClass` through a scope selector) pick the pods a quota counts. Amounts are in
//! milli-units, so one scale serves every resource.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceQuotaSpec};

use crate::quantity::milli_value;

/// Whether a pod still counts (it has not finished).
pub fn pod_counts(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

fn amounts(
    containers: &[Container],
    field: fn(
        &k8s_openapi::api::core::v1::ResourceRequirements,
    )
        -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Vec<BTreeMap<String, i64>> {
    containers
        .iter()
        .map(|container| {
            container
                .resources
                .as_ref()
                .and_then(field)
                .map(|map| {
                    map.iter()
                        .map(|(name, quantity)| (name.clone(), milli_value(&quantity.0)))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The pod's effective requests or limits: per resource, the containers' sum or the largest
/// init container's, whichever is more.
fn effective(
    pod: &Pod,
    field: fn(
        &k8s_openapi::api::core::v1::ResourceRequirements,
    )
        -> Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, i64> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for amounts in amounts(&spec.containers, field) {
        for (name, value) in amounts {
            *total.entry(name).or_default() += value;
        }
    }
    for amounts in amounts(spec.init_containers.as_deref().unwrap_or_default(), field) {
        for (name, value) in amounts {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(value);
        }
    }
    total
}

/// Whether the pod asks for no compute resources at all (QoS BestEffort).
pub fn is_best_effort(pod: &Pod) -> bool {
    effective(pod, |r| r.requests.as_ref()).is_empty()
        && effective(pod, |r| r.limits.as_ref()).is_empty()
}

/// What a counted pod charges, by quota resource name.
pub fn pod_usage(pod: &Pod) -> BTreeMap<String, i64> {
    let mut usage = BTreeMap::new();
    usage.insert("pods".to_string(), 1000);
    usage.insert("count/pods".to_string(), 1000);
    for (name, value) in effective(pod, |r| r.requests.as_ref()) {
        if matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            usage.insert(format!("requests.{name}"), value);
            if name != "ephemeral-storage" {
                usage.insert(name.clone(), value);
            }
        } else {
            usage.insert(format!("requests.{name}"), value);
        }
    }
    for (name, value) in effective(pod, |r| r.limits.as_ref()) {
        usage.insert(format!("limits.{name}"), value);
    }
    usage
}

/// Whether a quota with `spec`'s scopes counts `pod`.
pub fn quota_counts_pod(spec: &ResourceQuotaSpec, pod: &Pod) -> bool {
    let terminating = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.active_deadline_seconds.is_some());
    let scope_holds = |scope: &str| match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        _ => true,
    };
    if !spec.scopes.iter().flatten().all(|scope| scope_holds(scope)) {
        return false;
    }
    let priority_class = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .unwrap_or("");
    let selector = spec
        .scope_selector
        .as_ref()
        .and_then(|s| s.match_expressions.as_ref());
    selector.into_iter().flatten().all(|expression| {
        if expression.scope_name != "PriorityClass" {
            return scope_holds(&expression.scope_name);
        }
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" => values.iter().any(|v| v == priority_class),
            "NotIn" => !values.iter().any(|v| v == priority_class),
            "Exists" => !priority_class.is_empty(),
            "DoesNotExist" => priority_class.is_empty(),
            _ => false,
        }
    })
}

/// A milli-unit amount as a quantity string (`3`, `500m`).
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ScopeSelector, ScopedResourceSelectorRequirement};

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("a pod")
    }

    #[test]
    fn a_pod_charges_its_effective_requests_and_limits() {
        let web = pod(serde_json::json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2"}}}]
        }}));
        let usage = pod_usage(&web);
        assert_eq!(usage["pods"], 1000);
        assert_eq!(
            usage["requests.cpu"], 2000,
            "the init container's is larger"
        );
        assert_eq!(usage["cpu"], 2000);
        assert_eq!(usage["requests.memory"], 64 * 1024 * 1024 * 1000);
        assert_eq!(usage["limits.cpu"], 500);
        assert!(!is_best_effort(&web));
        assert_eq!(format_milli(usage["limits.cpu"]), "500m");
        assert_eq!(format_milli(usage["pods"]), "1");
    }

    #[test]
    fn scopes_pick_the_pods_a_quota_counts() {
        let best_effort = pod(
            serde_json::json!({"spec": {"containers": [{"name": "a"}], "priorityClassName": "high"}}),
        );
        let deadline = pod(
            serde_json::json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "activeDeadlineSeconds": 60}}),
        );
        let scoped = |scopes: &[&str]| ResourceQuotaSpec {
            scopes: Some(scopes.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        assert!(quota_counts_pod(&scoped(&["BestEffort"]), &best_effort));
        assert!(!quota_counts_pod(&scoped(&["BestEffort"]), &deadline));
        assert!(quota_counts_pod(
            &scoped(&["Terminating", "NotBestEffort"]),
            &deadline
        ));
        assert!(!quota_counts_pod(&scoped(&["NotTerminating"]), &deadline));
        let by_priority = ResourceQuotaSpec {
            scope_selector: Some(ScopeSelector {
                match_expressions: Some(vec![ScopedResourceSelectorRequirement {
                    scope_name: "PriorityClass".into(),
                    operator: "In".into(),
                    values: Some(vec!["high".into()]),
                }]),
            }),
            ..Default::default()
        };
        assert!(quota_counts_pod(&by_priority, &best_effort));
        assert!(!quota_counts_pod(&by_priority, &deadline));
        let finished = pod(serde_json::json!({"status": {"phase": "Succeeded"}}));
        assert!(!pod_counts(&finished));
    }
}
