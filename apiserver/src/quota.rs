//! ResourceQuota admission: a create in a namespace with quotas is charged against each quota
//! that counts it, by a compare-and-swap of the quota's `status.used` in the store before the
//! object is written — so concurrent creates through any number of apiservers are serialized
//! on the quota and can never take it past `hard` (a create that fails after being charged
//! is given back by the quota controller's next count). Pods are charged what
//! `rudder_facts::quota` says; every kind counts as `count/<resource>[.<group>]` (and the
//! legacy names: `configmaps`, `secrets`, `services`, `persistentvolumeclaims`, …), a claim
//! its `requests.storage` too. Refusals are upstream's:
//!
//! ```text
//! pods "web-11" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10
//! ```
//!
//! A quota the controller has not counted yet (its `status.hard` lacks a resource the spec
//! limits) is counted here first, from a consistent list of what it limits, and that count
//! is written with the charge — so quotas hold without the controller-manager too (which then
//! only never gives usage back).

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Value};

use rudder_admission::{Attributes, Denied, Operation, Validating};
use rudder_facts::quantity::milli_value;
use rudder_facts::quota::{format_milli, pod_counts, pod_usage, quota_counts_pod};

use crate::catalog::Subresource;
use crate::registry::{system_write, Registry};
use crate::request::ListOptions;

/// The plugin; reads and charges quotas through `reader` (a registry without admission).
pub struct ResourceQuota {
    reader: Registry,
}

impl ResourceQuota {
    pub fn new(reader: Registry) -> Self {
        Self { reader }
    }

    /// What the namespace uses now of each resource `quota` limits (a consistent read).
    async fn count(&self, namespace: &str, quota: &Value) -> Result<BTreeMap<String, i64>, Denied> {
        let failed = |what: &str, error: crate::error::ApiError| {
            error.into_denied(&format!("counting {what} for resource quota"))
        };
        let spec = &quota["spec"];
        let mut used: BTreeMap<String, i64> = spec["hard"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, _)| (name.clone(), 0))
            .collect();
        let mut kinds: Vec<(&'static crate::catalog::ResourceInfo, Attributes)> = Vec::new();
        for name in used.keys() {
            let (group, plural) = match name.strip_prefix("count/") {
                Some(rest) => {
                    let (plural, group) = rest.split_once('.').unwrap_or((rest, ""));
                    (group.to_string(), plural.to_string())
                }
                None if legacy_count_name("", name).is_some() => (String::new(), name.clone()),
                None if name == "requests.storage" => {
                    (String::new(), "persistentvolumeclaims".into())
                }
                None => (String::new(), "pods".to_string()),
            };
            let version = crate::catalog::version_of(&group).unwrap_or("v1");
            let Some(info) = self.reader.resource(&group, version, &plural) else {
                continue;
            };
            if kinds.iter().any(|(known, _)| std::ptr::eq(*known, info)) {
                continue;
            }
            let attributes = Attributes {
                operation: Operation::Create,
                group: info.group.to_string(),
                version: info.version.to_string(),
                kind: info.kind.to_string(),
                kind_group: info.group.to_string(),
                kind_version: info.version.to_string(),
                resource: info.plural.to_string(),
                subresource: None,
                namespace: Some(namespace.to_string()),
                name: String::new(),
                user: String::new(),
                groups: Vec::new(),
                dry_run: false,
                uid: String::new(),
                extra: Default::default(),
                warnings: Default::default(),
            };
            kinds.push((info, attributes));
        }
        for (info, attributes) in kinds {
            let listed = self
                .reader
                .list(info, Some(namespace), &ListOptions::everything())
                .await
                .map_err(|error| failed(info.plural, error))?;
            for item in listed.items {
                for (resource, amount) in usage_of(&attributes, &item, spec) {
                    if let Some(total) = used.get_mut(&resource) {
                        *total += amount;
                    }
                }
            }
        }
        Ok(used)
    }
}

/// The legacy names of some kinds' object counts.
fn legacy_count_name(group: &str, resource: &str) -> Option<&'static str> {
    if !group.is_empty() {
        return None;
    }
    Some(match resource {
        "configmaps" => "configmaps",
        "secrets" => "secrets",
        "services" => "services",
        "persistentvolumeclaims" => "persistentvolumeclaims",
        "replicationcontrollers" => "replicationcontrollers",
        "resourcequotas" => "resourcequotas",
        _ => return None,
    })
}

/// What creating `object` charges a quota with these `scopes`, by resource (milli-units);
/// empty when the quota does not count it.
pub fn usage_of(
    attributes: &Attributes,
    object: &Value,
    quota_spec: &Value,
) -> BTreeMap<String, i64> {
    let mut usage = BTreeMap::new();
    let count = if attributes.group.is_empty() {
        format!("count/{}", attributes.resource)
    } else {
        format!("count/{}.{}", attributes.resource, attributes.group)
    };
    if attributes.group.is_empty() && attributes.resource == "pods" {
        let Ok(pod) = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(object.clone())
        else {
            return usage;
        };
        let Ok(spec) = serde_json::from_value::<k8s_openapi::api::core::v1::ResourceQuotaSpec>(
            quota_spec.clone(),
        ) else {
            return usage;
        };
        if pod_counts(&pod) && quota_counts_pod(&spec, &pod) {
            usage = pod_usage(&pod);
        }
        return usage;
    }
    if quota_spec["scopes"]
        .as_array()
        .is_some_and(|s| !s.is_empty())
        || quota_spec["scopeSelector"].is_object()
    {
        // Scopes select pods only.
        return usage;
    }
    usage.insert(count, 1000);
    if let Some(legacy) = legacy_count_name(&attributes.group, &attributes.resource) {
        usage.insert(legacy.to_string(), 1000);
    }
    if attributes.group.is_empty() && attributes.resource == "services" {
        match object["spec"]["type"].as_str() {
            Some("NodePort") => {
                usage.insert("services.nodeports".into(), 1000);
            }
            Some("LoadBalancer") => {
                usage.insert("services.loadbalancers".into(), 1000);
                usage.insert("services.nodeports".into(), 1000);
            }
            _ => {}
        }
    }
    if attributes.group.is_empty() && attributes.resource == "persistentvolumeclaims" {
        if let Some(storage) = object["spec"]["resources"]["requests"]["storage"].as_str() {
            usage.insert("requests.storage".into(), milli_value(storage));
        }
    }
    usage
}

fn quantity_milli(value: &Value) -> i64 {
    match value {
        Value::String(s) => milli_value(s),
        Value::Number(n) => n.as_i64().map_or(0, |n| n * 1000),
        _ => 0,
    }
}

/// `pods=1` lists in upstream's form (resources in name order).
fn listing(amounts: &BTreeMap<String, i64>) -> String {
    amounts
        .iter()
        .map(|(name, value)| format!("{name}={}", format_milli(*value)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether the quota's status knows every resource its spec limits.
fn is_counted(quota: &Value) -> bool {
    let status_hard = quota["status"]["hard"].as_object();
    quota["spec"]["hard"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(resource, _)| status_hard.is_some_and(|hard| hard.contains_key(resource)))
}

/// `quota` with `status.hard` from its spec and `status.used` as `counted`, when its status
/// does not know its spec yet.
fn with_count(quota: &Value, counted: Option<&BTreeMap<String, i64>>) -> Value {
    let mut quota = quota.clone();
    if let (false, Some(counted)) = (is_counted(&quota), counted) {
        let used: serde_json::Map<String, Value> = counted
            .iter()
            .map(|(name, milli)| (name.clone(), json!(format_milli(*milli))))
            .collect();
        quota["status"] = json!({"hard": quota["spec"]["hard"].clone(), "used": used});
    }
    quota
}

/// The charge of `usage` on `quota`: its new `status.used`, or the refusal.
fn charge(
    quota: &Value,
    usage: &BTreeMap<String, i64>,
    attributes: &Attributes,
) -> Result<Value, Denied> {
    let name = crate::json::name(quota);
    let hard_spec = quota["spec"]["hard"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let limited: Vec<&String> = usage
        .keys()
        .filter(|r| hard_spec.contains_key(*r))
        .collect();
    let status_hard = quota["status"]["hard"].as_object();
    let unknown: Vec<&str> = limited
        .iter()
        .filter(|r| !status_hard.is_some_and(|h| h.contains_key(r.as_str())))
        .map(|r| r.as_str())
        .collect();
    if !unknown.is_empty() {
        return Err(Denied::forbidden(format!(
            "{} \"{}\" is forbidden: status unknown for quota: {name}, resources: {}",
            attributes.resource,
            attributes.name,
            unknown.join(",")
        )));
    }
    let used = quota["status"]["used"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut requested = BTreeMap::new();
    let mut now_used = BTreeMap::new();
    let mut limits = BTreeMap::new();
    let mut exceeded = false;
    let mut next = used.clone();
    for resource in &limited {
        let hard = status_hard
            .and_then(|h| h.get(resource.as_str()))
            .map_or(0, quantity_milli);
        let current = used.get(resource.as_str()).map_or(0, quantity_milli);
        let delta = usage[resource.as_str()];
        if current + delta > hard {
            exceeded = true;
            requested.insert((*resource).clone(), delta);
            now_used.insert((*resource).clone(), current);
            limits.insert((*resource).clone(), hard);
        }
        next.insert((*resource).clone(), json!(format_milli(current + delta)));
    }
    if exceeded {
        return Err(Denied::forbidden(format!(
            "{} \"{}\" is forbidden: exceeded quota: {name}, requested: {}, used: {}, limited: {}",
            attributes.resource,
            attributes.name,
            listing(&requested),
            listing(&now_used),
            listing(&limits)
        )));
    }
    Ok(Value::Object(next))
}

#[async_trait]
impl Validating for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        if attributes.operation != Operation::Create || attributes.subresource.is_some() {
            return Ok(());
        }
        let (Some(object), Some(namespace)) = (object, attributes.namespace.as_deref()) else {
            return Ok(());
        };
        let Some(quotas_info) = crate::catalog::find("", "v1", "resourcequotas") else {
            return Ok(());
        };
        let quotas = self
            .reader
            .list_cached(quotas_info, Some(namespace), "", "")
            .await
            .map_err(|error| error.into_denied("reading resource quotas"))?;
        for quota in &quotas {
            let name = crate::json::name(quota).to_string();
            let usage = usage_of(attributes, object, &quota["spec"]);
            let hard = &quota["spec"]["hard"];
            if !usage.keys().any(|r| hard.get(r).is_some()) {
                continue;
            }
            let counted = if is_counted(quota) {
                None
            } else {
                Some(self.count(namespace, quota).await?)
            };
            if attributes.dry_run {
                charge(&with_count(quota, counted.as_ref()), &usage, attributes)?;
                continue;
            }
            // Charged by compare-and-swap against the latest quota, retried on conflict.
            let mut refusal = None;
            let written = self
                .reader
                .update_with(
                    quotas_info,
                    Some(namespace),
                    &name,
                    Some(Subresource::Status),
                    &system_write(),
                    |current| {
                        let current = with_count(current, counted.as_ref());
                        match charge(&current, &usage, attributes) {
                            Ok(used) => {
                                let mut next = current.clone();
                                next["status"]["used"] = used;
                                crate::registry::object::remove_meta(&mut next, "resourceVersion");
                                Ok(next)
                            }
                            Err(denied) => {
                                refusal = Some(denied);
                                Err(crate::error::ApiError::forbidden("quota exceeded"))
                            }
                        }
                    },
                )
                .await;
            if let Some(denied) = refusal {
                return Err(denied);
            }
            if let Err(error) = written {
                if !error.is_not_found() {
                    return Err(error.into_denied(&format!("charging resource quota {name}")));
                }
            }
        }
        Ok(())
    }
}
