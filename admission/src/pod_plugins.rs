//! The pod admission plugins upstream enables by default that fill in a new pod:
//! ServiceAccount (the `default` account when none is named), Priority (the priority and
//! preemption policy of the pod's PriorityClass, or of the global default, or 0) and
//! DefaultTolerationSeconds (tolerate not-ready and unreachable nodes for 300 s).

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::{Attributes, Denied, Mutating, Operation};

/// Reads objects the plugins need (PriorityClasses); the apiserver implements it.
#[async_trait]
pub trait ObjectReader: Send + Sync {
    /// The cluster-scoped object group/plural/name, if it exists.
    async fn get_cluster_object(
        &self,
        group: &str,
        plural: &str,
        name: &str,
    ) -> Result<Option<Value>, Denied>;
    /// Every cluster-scoped object of group/plural.
    async fn list_cluster_objects(&self, group: &str, plural: &str) -> Result<Vec<Value>, Denied>;
    /// Every object of group/plural in `namespace` (LimitRanges).
    async fn list_namespaced_objects(
        &self,
        _group: &str,
        _plural: &str,
        _namespace: &str,
    ) -> Result<Vec<Value>, Denied> {
        Ok(Vec::new())
    }
}

/// Whether the request creates a pod (not one of its subresources).
pub(crate) fn is_pod_create(attributes: &Attributes) -> bool {
    attributes.operation == Operation::Create
        && attributes.group.is_empty()
        && attributes.resource == "pods"
        && attributes.subresource.is_none()
}

/// Sets `spec.serviceAccountName` (and the deprecated `serviceAccount`) to `default` when
/// unset. (Token mounting and the existence check come with the ServiceAccount controller.)
pub struct ServiceAccount;

#[async_trait]
impl Mutating for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(pod) = object.filter(|_| is_pod_create(attributes)) else {
            return Ok(());
        };
        let spec = &mut pod["spec"];
        if !spec.is_object() {
            return Ok(());
        }
        let name = spec["serviceAccountName"]
            .as_str()
            .filter(|name| !name.is_empty())
            .or_else(|| {
                spec["serviceAccount"]
                    .as_str()
                    .filter(|name| !name.is_empty())
            })
            .unwrap_or("default")
            .to_string();
        spec["serviceAccountName"] = json!(name);
        spec["serviceAccount"] = json!(name);
        Ok(())
    }
}

/// The built-in classes upstream creates at start.
pub const SYSTEM_PRIORITY_CLASSES: &[(&str, i64)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// Resolves a pod's priority from PriorityClasses.
pub struct Priority<R> {
    reader: R,
}

impl<R: ObjectReader> Priority<R> {
    pub fn new(reader: R) -> Self {
        Self { reader }
    }
}

#[async_trait]
impl<R: ObjectReader> Mutating for Priority<R> {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(pod) = object.filter(|_| is_pod_create(attributes)) else {
            return Ok(());
        };
        if !pod["spec"].is_object() {
            return Ok(());
        }
        let named = pod["spec"]["priorityClassName"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let class = if named.is_empty() {
            self.reader
                .list_cluster_objects("scheduling.k8s.io", "priorityclasses")
                .await?
                .into_iter()
                .find(|class| class["globalDefault"] == json!(true))
        } else {
            match self
                .reader
                .get_cluster_object("scheduling.k8s.io", "priorityclasses", &named)
                .await?
            {
                Some(class) => Some(class),
                None => {
                    return Err(Denied::forbidden(format!(
                        "pods \"{}\" is forbidden: no PriorityClass with name {named} was found",
                        attributes.name
                    )))
                }
            }
        };
        let (value, policy, class_name) = match &class {
            Some(class) => (
                class["value"].as_i64().unwrap_or(0),
                class["preemptionPolicy"]
                    .as_str()
                    .unwrap_or("PreemptLowerPriority")
                    .to_string(),
                class["metadata"]["name"].as_str().unwrap_or("").to_string(),
            ),
            None => (0, "PreemptLowerPriority".to_string(), String::new()),
        };
        if let Some(given) = pod["spec"]["priority"].as_i64() {
            if given != value {
                return Err(Denied::forbidden(format!(
                    "pods \"{}\" is forbidden: the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name",
                    attributes.name
                )));
            }
        }
        pod["spec"]["priority"] = json!(value);
        pod["spec"]["preemptionPolicy"] = json!(policy);
        if !class_name.is_empty() {
            pod["spec"]["priorityClassName"] = json!(class_name);
        }
        Ok(())
    }
}

/// Adds the not-ready and unreachable NoExecute tolerations (300 s) a pod lacks.
pub struct DefaultTolerationSeconds;

#[async_trait]
impl Mutating for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        object: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(pod) = object.filter(|_| is_pod_create(attributes)) else {
            return Ok(());
        };
        if !pod["spec"].is_object() {
            return Ok(());
        }
        let mut tolerations = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let covered = tolerations.iter().any(|toleration| {
                let effect = toleration["effect"].as_str().unwrap_or("");
                let key_matches = toleration["key"]
                    .as_str()
                    .is_none_or(|k| k.is_empty() || k == key);
                key_matches && (effect.is_empty() || effect == "NoExecute")
            });
            if !covered {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
        pod["spec"]["tolerations"] = Value::Array(tolerations);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{pod_create, Classes};

    #[tokio::test]
    async fn pods_get_the_default_service_account_and_tolerations() {
        let mut pod = json!({"spec": {"containers": [], "tolerations": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]}});
        ServiceAccount
            .admit(&pod_create(), Some(&mut pod), None)
            .await
            .expect("admitted");
        DefaultTolerationSeconds
            .admit(&pod_create(), Some(&mut pod), None)
            .await
            .expect("admitted");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        let tolerations = pod["spec"]["tolerations"].as_array().expect("list");
        assert_eq!(tolerations.len(), 2);
        assert_eq!(tolerations[0]["tolerationSeconds"], 60);
        assert_eq!(tolerations[1]["key"], "node.kubernetes.io/not-ready");
    }

    #[tokio::test]
    async fn priority_comes_from_the_named_class_the_global_default_or_zero() {
        let plugin = Priority::new(Classes(vec![
            json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}),
        ]));
        let mut pod = json!({"spec": {"priorityClassName": "high"}});
        plugin
            .admit(&pod_create(), Some(&mut pod), None)
            .await
            .expect("admitted");
        assert_eq!(
            (
                pod["spec"]["priority"].clone(),
                pod["spec"]["preemptionPolicy"].clone()
            ),
            (json!(1000), json!("Never"))
        );
        let mut plain = json!({"spec": {}});
        plugin
            .admit(&pod_create(), Some(&mut plain), None)
            .await
            .expect("admitted");
        assert_eq!(plain["spec"]["priority"], 0);
        let mut missing = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(
            plugin
                .admit(&pod_create(), Some(&mut missing), None)
                .await
                .err()
                .map(|d| d.code),
            Some(403)
        );
        let defaulting = Priority::new(Classes(vec![
            json!({"metadata": {"name": "base"}, "value": 7, "globalDefault": true}),
        ]));
        let mut pod = json!({"spec": {}});
        defaulting
            .admit(&pod_create(), Some(&mut pod), None)
            .await
            .expect("admitted");
        assert_eq!(
            (
                pod["spec"]["priority"].clone(),
                pod["spec"]["priorityClassName"].clone()
            ),
            (json!(7), json!("base"))
        );
    }
}
