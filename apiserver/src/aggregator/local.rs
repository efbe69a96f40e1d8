//! Local APIServices, as upstream's autoregister and CRD registration controllers keep them:
//! one per group-version this server serves itself, built-in (labelled
//! `kube-aggregator.kubernetes.io/automanaged: onstart`) or from a CRD (`"true"`), so that
//! `kubectl get apiservices` lists every API. Missing ones are created; those of CRD
//! group-versions no longer served are deleted; one a user has given a Service (say, to serve
//! metrics.k8s.io from a metrics-server instead) is left alone.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::catalog;
use crate::crd::Served;
use crate::kinds::apiregistration::API_SERVICES;
use crate::registry::{system_write, DeleteOptions, Input, Registry};

/// The label upstream marks the APIServices it manages with.
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// The Local APIServices this server serves: built-in groups in catalog order from
/// upstream's core priority (18000) down, CRD groups at upstream's 1000; the preferred version
/// of each group first.
pub fn wanted(custom: &Served) -> Vec<Value> {
    let mut out = Vec::new();
    for (index, group) in catalog::groups().into_iter().enumerate() {
        let group_priority = 18000 - 100 * index as i64;
        for (rank, version) in catalog::versions_of(group).iter().enumerate() {
            out.push(local(
                group,
                version,
                group_priority,
                15 - rank as i64,
                "onstart",
            ));
        }
    }
    for group in &custom.groups {
        for (rank, version) in group.versions.iter().enumerate() {
            out.push(local(group.name, version, 1000, 100 - rank as i64, "true"));
        }
    }
    out
}

fn local(
    group: &str,
    version: &str,
    group_priority: i64,
    version_priority: i64,
    managed: &str,
) -> Value {
    let mut spec = json!({"version": version, "groupPriorityMinimum": group_priority,
        "versionPriority": version_priority.max(1)});
    if !group.is_empty() {
        spec["group"] = json!(group);
    }
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}"), "labels": {AUTOMANAGED_LABEL: managed}},
        "spec": spec})
}

/// Creates the wanted Local APIServices `current` lacks and deletes the CRD ones no longer
/// wanted; returns how many it created.
pub async fn reconcile(
    registry: &Registry,
    current: &BTreeMap<String, Value>,
    custom: &Served,
) -> usize {
    let wanted = wanted(custom);
    let write = system_write();
    let mut created = 0;
    for object in &wanted {
        let name = crate::json::name(object);
        if current.contains_key(name) {
            continue;
        }
        let input = Input {
            object: object.clone(),
            duplicate_fields: Vec::new(),
        };
        match registry.create(&API_SERVICES, None, input, &write).await {
            Ok(_) => {
                created += 1;
                tracing::debug!(apiservice = name, "registered a Local APIService");
            }
            Err(error) if error.is_already_exists() => {}
            Err(error) => {
                tracing::warn!(apiservice = name, error = %error.message, "registering a Local APIService");
            }
        }
    }
    for (name, object) in current {
        let from_crd = object["metadata"]["labels"][AUTOMANAGED_LABEL] == "true";
        let still_local = !object["spec"]["service"].is_object();
        let still_wanted = wanted.iter().any(|w| crate::json::name(w) == name);
        if from_crd && still_local && !still_wanted {
            let deleted = registry
                .delete(&API_SERVICES, None, name, &DeleteOptions::default(), &write)
                .await;
            if let Err(error) = deleted {
                if !error.is_not_found() {
                    tracing::warn!(apiservice = %name, error = %error.message, "removing a Local APIService");
                }
            }
        }
    }
    created
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_group_version_has_a_valid_local_apiservice() {
        let wanted = wanted(&Served::default());
        let names: Vec<&str> = wanted.iter().map(crate::json::name).collect();
        for name in [
            "v1.",
            "v1.apps",
            "v1.apiregistration.k8s.io",
            "v1beta1.metrics.k8s.io",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        let core = &wanted[0];
        assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
        assert!(core["spec"]["group"].is_null());
        for object in &wanted {
            let mut errors = Vec::new();
            crate::kinds::Strategy::validate(API_SERVICES.strategy, object, None, &mut errors);
            assert!(errors.is_empty(), "{object}: {errors:?}");
        }
    }
}
