//! RuntimeClass, as upstream's admission plugin: a new pod naming a
//! `spec.runtimeClassName` gets the class's `overhead.podFixed` as its `spec.overhead` (which
//! the scheduler adds to its requests), the class's `scheduling.nodeSelector` merged into its
//! own (a key the pod sets to another value is refused) and the class's tolerations added to
//! its own. A class that does not exist, an overhead the pod sets that is not its class's,
//! and an overhead without a class are refused, with upstream's messages.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::pod_plugins::is_pod_create;
use crate::{Attributes, Denied, Mutating, ObjectReader, Validating};

/// The plugin; reads RuntimeClasses through `reader`.
pub struct RuntimeClass<R> {
    reader: R,
}

impl<R> RuntimeClass<R> {
    pub fn new(reader: R) -> Self {
        Self { reader }
    }
}

impl<R: ObjectReader> RuntimeClass<R> {
    /// The pod's RuntimeClass, when it names one (a missing one refuses the pod).
    async fn class_of(&self, pod: &Value) -> Result<Option<Value>, Denied> {
        let Some(name) = pod["spec"]["runtimeClassName"]
            .as_str()
            .filter(|n| !n.is_empty())
        else {
            return Ok(None);
        };
        match self
            .reader
            .get_cluster_object("node.k8s.io", "runtimeclasses", name)
            .await?
        {
            Some(class) => Ok(Some(class)),
            None => Err(Denied::forbidden(format!(
                "pod rejected: RuntimeClass \"{name}\" not found"
            ))),
        }
    }
}

/// The class's nodeSelector merged into the pod's.
fn merge_node_selector(pod: &mut Value, class: &Value) -> Result<(), Denied> {
    let Some(wanted) = class["scheduling"]["nodeSelector"].as_object() else {
        return Ok(());
    };
    if !pod["spec"]["nodeSelector"].is_object() {
        pod["spec"]["nodeSelector"] = Value::Object(Map::new());
    }
    let Some(selector) = pod["spec"]["nodeSelector"].as_object_mut() else {
        return Ok(());
    };
    for (key, value) in wanted {
        match selector.get(key) {
            Some(own) if own != value => {
                return Err(Denied::forbidden(format!(
                    "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; pod.spec.nodeSelector[{key}] = {}",
                    value.as_str().unwrap_or(""),
                    own.as_str().unwrap_or("")
                )));
            }
            Some(_) => {}
            None => {
                selector.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(())
}

/// The class's tolerations added to the pod's (those it already has once).
fn merge_tolerations(pod: &mut Value, class: &Value) {
    let Some(wanted) = class["scheduling"]["tolerations"].as_array() else {
        return;
    };
    if !pod["spec"]["tolerations"].is_array() {
        pod["spec"]["tolerations"] = Value::Array(Vec::new());
    }
    if let Some(own) = pod["spec"]["tolerations"].as_array_mut() {
        for toleration in wanted {
            if !own.contains(toleration) {
                own.push(toleration.clone());
            }
        }
    }
}

#[async_trait]
impl<R: ObjectReader> Mutating for RuntimeClass<R> {
    fn name(&self) -> &'static str {
        "RuntimeClass"
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
        let Some(class) = self.class_of(pod).await? else {
            return Ok(());
        };
        let fixed = &class["overhead"]["podFixed"];
        if fixed.is_object() {
            let own = &pod["spec"]["overhead"];
            if !own.is_null() && own != fixed {
                return Err(Denied::forbidden(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                ));
            }
            pod["spec"]["overhead"] = fixed.clone();
        }
        merge_node_selector(pod, &class)?;
        merge_tolerations(pod, &class);
        Ok(())
    }
}

#[async_trait]
impl<R: ObjectReader> Validating for RuntimeClass<R> {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(pod) = object.filter(|_| is_pod_create(attributes)) else {
            return Ok(());
        };
        let overhead = &pod["spec"]["overhead"];
        let Some(class) = self.class_of(pod).await? else {
            if !overhead.is_null() {
                return Err(Denied::forbidden(
                    "pod rejected: Overhead set without corresponding RuntimeClass",
                ));
            }
            return Ok(());
        };
        let fixed = &class["overhead"]["podFixed"];
        if (fixed.is_object() || !overhead.is_null()) && overhead != fixed {
            return Err(Denied::forbidden(
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{pod_create, Classes};
    use serde_json::json;

    fn plugin() -> RuntimeClass<Classes> {
        RuntimeClass::new(Classes(vec![json!({
            "metadata": {"name": "gvisor"}, "handler": "runsc",
            "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
            "scheduling": {"nodeSelector": {"sandbox": "gvisor"},
                "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}})]))
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[tokio::test]
    async fn a_pods_class_gives_it_overhead_placement_and_tolerations() {
        let plugin = plugin();
        let create = pod_create();
        let mut p = pod(
            json!({"runtimeClassName": "gvisor", "nodeSelector": {"zone": "a"},
            "containers": [{"name": "c", "image": "i"}]}),
        );
        Mutating::admit(&plugin, &create, Some(&mut p), None)
            .await
            .expect("admitted");
        assert_eq!(
            p["spec"]["overhead"],
            json!({"cpu": "250m", "memory": "120Mi"})
        );
        assert_eq!(
            p["spec"]["nodeSelector"],
            json!({"zone": "a", "sandbox": "gvisor"})
        );
        assert_eq!(p["spec"]["tolerations"][0]["key"], "sandbox");
        Validating::validate(&plugin, &create, Some(&p), None)
            .await
            .expect("valid");
        // Admitted twice (a reinvocation), nothing doubles.
        Mutating::admit(&plugin, &create, Some(&mut p), None)
            .await
            .expect("again");
        assert_eq!(p["spec"]["tolerations"].as_array().map(Vec::len), Some(1));
    }

    #[tokio::test]
    async fn what_does_not_fit_the_class_is_refused_with_upstreams_messages() {
        let plugin = plugin();
        let create = pod_create();
        let mut missing = pod(json!({"runtimeClassName": "kata"}));
        let denied = Mutating::admit(&plugin, &create, Some(&mut missing), None)
            .await
            .expect_err("no such class");
        assert_eq!(
            denied.message,
            "pod rejected: RuntimeClass \"kata\" not found"
        );
        let mut conflicting =
            pod(json!({"runtimeClassName": "gvisor", "nodeSelector": {"sandbox": "kata"}}));
        let denied = Mutating::admit(&plugin, &create, Some(&mut conflicting), None)
            .await
            .expect_err("conflict");
        assert_eq!(
            denied.message,
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; pod.spec.nodeSelector[sandbox] = kata"
        );
        let mut other = pod(json!({"runtimeClassName": "gvisor", "overhead": {"cpu": "1"}}));
        let denied = Mutating::admit(&plugin, &create, Some(&mut other), None)
            .await
            .expect_err("overhead");
        assert!(denied.message.contains("doesn't match"), "{denied:?}");
        let classless = pod(json!({"overhead": {"cpu": "1"}}));
        let denied = Validating::validate(&plugin, &create, Some(&classless), None)
            .await
            .expect_err("no class");
        assert_eq!(
            denied.message,
            "pod rejected: Overhead set without corresponding RuntimeClass"
        );
        // Other pods and other operations pass untouched.
        let mut plain = pod(json!({"containers": []}));
        Mutating::admit(&plugin, &create, Some(&mut plain), None)
            .await
            .expect("plain");
        assert!(plain["spec"]["overhead"].is_null());
    }
}
