//! Subresources that are views of their parent: `/scale` (an autoscaling/v1 Scale over the
//! parent's replicas) and `pods/binding` (the scheduler's assignment of a pod to a node).
//! `/status` needs no code here: it is the generic update with the status rule.

use serde_json::{json, Value};

use super::object;
use super::{Registry, Write, Written};
use crate::catalog::{ResourceInfo, Subresource};
use crate::error::{ApiError, Cause, Result};
use crate::selectors::LabelSelector;

/// A workload's `spec.selector` (a LabelSelector, or an RC's plain map) as the string form
/// Scale's `status.selector` carries.
fn selector_string(selector: &Value) -> String {
    let is_label_selector =
        selector.get("matchLabels").is_some() || selector.get("matchExpressions").is_some();
    if is_label_selector {
        LabelSelector::from_object(selector)
            .map(|selector| selector.to_string())
            .unwrap_or_default()
    } else {
        LabelSelector::from_set(selector).to_string()
    }
}

/// The Scale view of a workload.
pub fn scale_of(parent: &Value) -> Value {
    let metadata = &parent["metadata"];
    let mut scale_meta = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = metadata.get(field) {
            scale_meta[field] = value.clone();
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": parent["spec"]["replicas"].as_i64().unwrap_or(0)},
        "status": {
            "replicas": parent["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector_string(&parent["spec"]["selector"]),
        }
    })
}

impl Registry {
    /// GET of `/scale`.
    pub async fn get_scale(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        Ok(scale_of(&self.get(info, namespace, name).await?))
    }

    /// PUT or PATCH of `/scale`: `change` turns the current Scale into the wanted one; only its
    /// `spec.replicas` reaches the parent.
    pub async fn update_scale<F>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        write: &Write,
        mut change: F,
    ) -> Result<Value>
    where
        F: FnMut(&Value) -> Result<Value> + Send,
    {
        let written: Written = self
            .update_with(info, namespace, name, None, write, |current| {
                let scale = change(&scale_of(current))?;
                if !scale.is_object() {
                    return Err(ApiError::bad_request("the body of the request is not a Scale object"));
                }
                if let Some(kind) = scale.get("kind").and_then(Value::as_str) {
                    if kind != "Scale" {
                        return Err(ApiError::bad_request(format!(
                            "the kind in the data ({kind}) does not match the expected kind (Scale)"
                        )));
                    }
                }
                let body_name = object::name(&scale);
                if !body_name.is_empty() && body_name != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                let replicas = match &scale["spec"]["replicas"] {
                    Value::Null => 0,
                    value => value.as_i64().ok_or_else(|| {
                        ApiError::bad_request("Scale in version \"v1\" cannot be handled as a Scale: spec.replicas must be an integer")
                    })?,
                };
                if replicas < 0 {
                    return Err(ApiError::invalid(
                        "Scale",
                        "autoscaling",
                        name,
                        vec![Cause {
                            reason: "FieldValueInvalid".into(),
                            message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                            field: "spec.replicas".into(),
                        }],
                    ));
                }
                let mut next = current.clone();
                next["spec"]["replicas"] = replicas.into();
                let pinned = object::meta_str(&scale, "resourceVersion");
                object::set_meta(&mut next, "resourceVersion", pinned);
                Ok(next)
            })
            .await?;
        Ok(scale_of(&written.object))
    }

    /// POST of `pods/<name>/binding`: assigns the pod to a node, once.
    pub async fn bind_pod(
        &self,
        pods: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        binding: &Value,
        write: &Write,
    ) -> Result<()> {
        match binding.get("kind").and_then(Value::as_str) {
            None | Some("") | Some("Binding") => {}
            Some(kind) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({kind}) does not match the expected kind (Binding)"
                )))
            }
        }
        let binding_name = object::name(binding);
        if !binding_name.is_empty() && binding_name != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Binding object",
            ));
        }
        if let Some(kind) = binding["target"]["kind"].as_str() {
            if !kind.is_empty() && kind != "Node" {
                return Err(ApiError::invalid(
                    "Binding",
                    "",
                    name,
                    vec![Cause {
                        reason: "FieldValueNotSupported".into(),
                        message: format!("Unsupported value: \"{kind}\": supported values: \"Node\", \"<empty>\""),
                        field: "target.kind".into(),
                    }],
                ));
            }
        }
        let target = binding["target"]["name"].as_str().unwrap_or("").to_string();
        if target.is_empty() {
            return Err(ApiError::invalid(
                "Binding",
                "",
                name,
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: "target.name".into(),
                }],
            ));
        }
        self.update_with(
            pods,
            namespace,
            name,
            Some(Subresource::Binding),
            write,
            |current| {
                if object::is_deleting(current) {
                    return Err(ApiError::conflict(
                        pods,
                        name,
                        "pod is being deleted, cannot be assigned to a host",
                    ));
                }
                let assigned = current["spec"]["nodeName"].as_str().unwrap_or("");
                if !assigned.is_empty() {
                    return Err(ApiError::conflict(
                        pods,
                        name,
                        &format!("pod {name} is already assigned to node \"{assigned}\""),
                    ));
                }
                let mut next = current.clone();
                next["spec"]["nodeName"] = target.clone().into();
                Ok(next)
            },
        )
        .await?;
        // The PodScheduled condition is status, which the main resource does not write.
        self.update_with(
            pods,
            namespace,
            name,
            Some(Subresource::Status),
            write,
            |current| {
                let mut next = current.clone();
                let mut conditions: Vec<Value> = current["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                conditions.retain(|condition| condition["type"] != "PodScheduled");
                conditions.push(json!({"type": "PodScheduled", "status": "True",
                "lastProbeTime": null, "lastTransitionTime": object::now()}));
                next["status"]["conditions"] = Value::Array(conditions);
                Ok(next)
            },
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_carries_replicas_and_the_selector_as_a_string() {
        let deployment = json!({"metadata": {"name": "web", "namespace": "d", "resourceVersion": "5"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
            "status": {"replicas": 2}});
        let scale = scale_of(&deployment);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(scale["status"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=web,tier in (a,b)");
        assert_eq!(scale["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn replication_controller_selectors_are_plain_maps() {
        let rc = json!({"spec": {"replicas": 1, "selector": {"app": "x"}}});
        assert_eq!(scale_of(&rc)["status"]["selector"], "app=x");
    }
}
