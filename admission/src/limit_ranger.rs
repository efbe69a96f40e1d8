//! LimitRanger: the LimitRanges of a namespace applied to its new pods and claims, as
//! upstream's plugin applies them. As a mutating plugin it fills each container's missing
//! limits from a `Container` limit's `default` and missing requests from its
//! `defaultRequest`; as a validating plugin it refuses what falls outside `min` / `max` /
//! `maxLimitRequestRatio`, per container, per pod (the containers' sums) and per claim,
//! with upstream's messages:
//!
//! ```text
//! pods "web" is forbidden: maximum cpu usage per Container is 1, but limit is 2
//! ```

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use rudder_facts::quantity::milli_value;

use crate::{Attributes, Denied, Mutating, ObjectReader, Operation, Validating};

/// The plugin; reads LimitRanges through `reader`.
pub struct LimitRanger<R> {
    reader: R,
}

impl<R> LimitRanger<R> {
    pub fn new(reader: R) -> Self {
        Self { reader }
    }
}

fn is_create_of(attributes: &Attributes, resource: &str) -> bool {
    attributes.operation == Operation::Create
        && attributes.group.is_empty()
        && attributes.resource == resource
        && attributes.subresource.is_none()
}

impl<R: ObjectReader> LimitRanger<R> {
    /// The `spec.limits` items of `type_` of every LimitRange in the namespace.
    async fn limits(&self, attributes: &Attributes, type_: &str) -> Result<Vec<Value>, Denied> {
        let Some(namespace) = attributes.namespace.as_deref() else {
            return Ok(Vec::new());
        };
        let ranges = self
            .reader
            .list_namespaced_objects("", "limitranges", namespace)
            .await?;
        Ok(ranges
            .iter()
            .flat_map(|range| {
                range["spec"]["limits"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|limit| limit["type"] == type_)
            .collect())
    }
}

fn containers_mut(pod: &mut Value) -> Vec<&mut Value> {
    let spec = &mut pod["spec"];
    let Some(map) = spec.as_object_mut() else {
        return Vec::new();
    };
    map.iter_mut()
        .filter(|(field, _)| *field == "containers" || *field == "initContainers")
        .flat_map(|(_, list)| list.as_array_mut().into_iter().flatten())
        .collect()
}

fn fill(resources: &mut Value, field: &str, defaults: &Value) {
    let Some(defaults) = defaults.as_object() else {
        return;
    };
    if !resources[field].is_object() {
        resources[field] = json!({});
    }
    for (name, quantity) in defaults {
        if resources[field].get(name).is_none() {
            resources[field][name] = quantity.clone();
        }
    }
    if resources[field].as_object().is_some_and(Map::is_empty) {
        if let Some(map) = resources.as_object_mut() {
            map.remove(field);
        }
    }
}

#[async_trait]
impl<R: ObjectReader> Mutating for LimitRanger<R> {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(pod) = object.filter(|_| is_create_of(attributes, "pods")) else {
            return Ok(());
        };
        let limits = self.limits(attributes, "Container").await?;
        for limit in &limits {
            for container in containers_mut(pod) {
                if !container["resources"].is_object() {
                    container["resources"] = json!({});
                }
                let resources = &mut container["resources"];
                fill(resources, "limits", &limit["default"]);
                fill(resources, "requests", &limit["defaultRequest"]);
                if resources.as_object().is_some_and(Map::is_empty) {
                    if let Some(map) = container.as_object_mut() {
                        map.remove("resources");
                    }
                }
            }
        }
        Ok(())
    }
}

/// One quantity of a resources map, in milli-units.
fn amount(map: &Value, name: &str) -> Option<(i64, String)> {
    let text = match &map[name] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some((milli_value(&text), text))
}

/// Checks one set of requests and limits against one limit item.
fn check(requests: &Value, limits: &Value, limit: &Value, what: &str, errors: &mut Vec<String>) {
    for (name, min) in limit["min"].as_object().into_iter().flatten() {
        let Some(min_text) = min
            .as_str()
            .map(str::to_string)
            .or_else(|| min.as_i64().map(|n| n.to_string()))
        else {
            continue;
        };
        let min_milli = milli_value(&min_text);
        match amount(requests, name) {
            None => errors.push(format!(
                "minimum {name} usage per {what} is {min_text}.  No request is specified"
            )),
            Some((request, text)) if request < min_milli => errors.push(format!(
                "minimum {name} usage per {what} is {min_text}, but request is {text}"
            )),
            _ => {}
        }
        if let Some((limit_value, text)) = amount(limits, name) {
            if limit_value < min_milli {
                errors.push(format!(
                    "minimum {name} usage per {what} is {min_text}, but limit is {text}"
                ));
            }
        }
    }
    for (name, max) in limit["max"].as_object().into_iter().flatten() {
        let Some(max_text) = max
            .as_str()
            .map(str::to_string)
            .or_else(|| max.as_i64().map(|n| n.to_string()))
        else {
            continue;
        };
        let max_milli = milli_value(&max_text);
        match amount(limits, name) {
            None => errors.push(format!(
                "maximum {name} usage per {what} is {max_text}.  No limit is specified"
            )),
            Some((value, text)) if value > max_milli => errors.push(format!(
                "maximum {name} usage per {what} is {max_text}, but limit is {text}"
            )),
            _ => {}
        }
    }
    for (name, ratio) in limit["maxLimitRequestRatio"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let Some(ratio_text) = ratio
            .as_str()
            .map(str::to_string)
            .or_else(|| ratio.as_i64().map(|n| n.to_string()))
        else {
            continue;
        };
        let (Some((limit_value, _)), Some((request, _))) =
            (amount(limits, name), amount(requests, name))
        else {
            continue;
        };
        if request <= 0 {
            continue;
        }
        let actual = limit_value as f64 / request as f64;
        if actual > milli_value(&ratio_text) as f64 / 1000.0 {
            errors.push(format!(
                "{name} max limit to request ratio per {what} is {ratio_text}, but provided ratio is {actual:.6}"
            ));
        }
    }
}

/// The pod's containers' requests and limits summed, per resource (as quantity strings in
/// milli-units, for the `Pod` type).
fn pod_totals(pod: &Value) -> (Value, Value) {
    let mut requests = Map::new();
    let mut limits = Map::new();
    for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (field, totals) in [("requests", &mut requests), ("limits", &mut limits)] {
            for (name, _) in container["resources"][field]
                .as_object()
                .into_iter()
                .flatten()
            {
                let (milli, _) =
                    amount(&container["resources"][field], name).unwrap_or((0, String::new()));
                let sum = totals
                    .get(name)
                    .and_then(|v| v.as_str())
                    .map_or(0, milli_value)
                    + milli;
                totals.insert(name.clone(), json!(format!("{sum}m")));
            }
        }
    }
    (Value::Object(requests), Value::Object(limits))
}

#[async_trait]
impl<R: ObjectReader> Validating for LimitRanger<R> {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(object) = object else {
            return Ok(());
        };
        let mut errors = Vec::new();
        if is_create_of(attributes, "pods") {
            for limit in self.limits(attributes, "Container").await? {
                for field in ["initContainers", "containers"] {
                    for container in object["spec"][field].as_array().into_iter().flatten() {
                        let resources = &container["resources"];
                        check(
                            &resources["requests"],
                            &resources["limits"],
                            &limit,
                            "Container",
                            &mut errors,
                        );
                    }
                }
            }
            let pod_limits = self.limits(attributes, "Pod").await?;
            if !pod_limits.is_empty() {
                let (requests, limits) = pod_totals(object);
                for limit in pod_limits {
                    check(&requests, &limits, &limit, "Pod", &mut errors);
                }
            }
        } else if is_create_of(attributes, "persistentvolumeclaims") {
            for limit in self.limits(attributes, "PersistentVolumeClaim").await? {
                let resources = &object["spec"]["resources"];
                let mut claim_limit = limit.clone();
                // A claim has no limits to bound; its request is what max bounds.
                if let Some(max) = limit.get("max") {
                    claim_limit["max"] = Value::Null;
                    for (name, value) in max.as_object().into_iter().flatten() {
                        if let (Some((request, text)), Some(bound)) =
                            (amount(&resources["requests"], name), value.as_str())
                        {
                            if request > milli_value(bound) {
                                errors.push(format!(
                                    "maximum {name} usage per PersistentVolumeClaim is {bound}, but request is {text}"
                                ));
                            }
                        }
                    }
                }
                check(
                    &resources["requests"],
                    &resources["limits"],
                    &claim_limit,
                    "PersistentVolumeClaim",
                    &mut errors,
                );
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        let detail = if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        };
        Err(Denied::forbidden(format!(
            "{} \"{}\" is forbidden: {detail}",
            attributes.resource, attributes.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::attributes;

    struct Ranges(Vec<Value>);

    #[async_trait]
    impl ObjectReader for Ranges {
        async fn get_cluster_object(
            &self,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<Option<Value>, Denied> {
            Ok(None)
        }
        async fn list_cluster_objects(&self, _: &str, _: &str) -> Result<Vec<Value>, Denied> {
            Ok(Vec::new())
        }
        async fn list_namespaced_objects(
            &self,
            _: &str,
            plural: &str,
            _: &str,
        ) -> Result<Vec<Value>, Denied> {
            assert_eq!(plural, "limitranges");
            Ok(self.0.clone())
        }
    }

    fn pod_create() -> Attributes {
        let mut attributes = attributes(Operation::Create);
        attributes.resource = "pods".into();
        attributes.name = "web".into();
        attributes
    }

    #[tokio::test]
    async fn defaults_fill_containers_and_bounds_refuse_with_upstreams_messages() {
        let ranger = LimitRanger::new(Ranges(vec![json!({"spec": {"limits": [{
            "type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m"},
            "max": {"cpu": "1"},
            "min": {"cpu": "50m"},
            "maxLimitRequestRatio": {"cpu": "5"}
        }]}})]));
        let mut pod = json!({"spec": {"containers": [
            {"name": "a"},
            {"name": "b", "resources": {"limits": {"cpu": "200m"}, "requests": {"cpu": "150m"}}}
        ]}});
        ranger
            .admit(&pod_create(), Some(&mut pod), None)
            .await
            .expect("admitted");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({
            "limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"],
            json!({"cpu": "200m", "memory": "256Mi"})
        );
        Validating::validate(&ranger, &pod_create(), Some(&pod), None)
            .await
            .expect("within bounds");

        let too_big = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "10m"}}}]}});
        let refused = Validating::validate(&ranger, &pod_create(), Some(&too_big), None)
            .await
            .expect_err("over max");
        assert_eq!(
            refused.message,
            "pods \"web\" is forbidden: [minimum cpu usage per Container is 50m, but request is 10m, maximum cpu usage per Container is 1, but limit is 2, cpu max limit to request ratio per Container is 5, but provided ratio is 200.000000]"
        );
        let unlimited = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}});
        let refused = Validating::validate(&ranger, &pod_create(), Some(&unlimited), None)
            .await
            .expect_err("no limit under a max");
        assert_eq!(refused.message, "pods \"web\" is forbidden: maximum cpu usage per Container is 1.  No limit is specified");
    }
}
