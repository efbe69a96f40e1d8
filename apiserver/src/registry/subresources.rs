//! Subresources that are views of their parent: `/scale` (an autoscaling/v1 Scale over the
//! parent's replicas) and `pods/binding` (the scheduler's assignment of a pod to a node).
//! `/status` needs no code here: it is the generic update with the status rule.

use serde_json::{json, Value};

use super::object;
use super::store::{check_preconditions, Preconditions};
use super::{Registry, Write, Written};
use crate::catalog::{ResourceInfo, Subresource};
use crate::error::{ApiError, Cause, Result};
use crate::selectors::LabelSelector;
use rudder_admission::Operation;

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

fn at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, name| v.get(name))
}

/// The Scale view of an object of `info`: a built-in workload's replicas and selector, or
/// where a custom resource's definition says they are.
fn scale_view(info: &ResourceInfo, parent: &Value) -> Value {
    let Some(paths) = info.strategy.scale_paths() else {
        return scale_of(parent);
    };
    let mut scale = scale_of(&Value::Null);
    scale["metadata"] = scale_of(parent)["metadata"].take();
    scale["spec"]["replicas"] = at(parent, &paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .into();
    scale["status"]["replicas"] = at(parent, &paths.status_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0)
        .into();
    scale["status"]["selector"] = paths
        .label_selector
        .as_deref()
        .and_then(|path| at(parent, path))
        .and_then(Value::as_str)
        .unwrap_or("")
        .into();
    scale
}

/// Sets `value` at `path`, making the objects on the way.
fn set_at(target: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = target;
    for name in parents {
        if !node.get(name).is_some_and(Value::is_object) {
            node[name.as_str()] = json!({});
        }
        node = &mut node[name.as_str()];
    }
    node[last.as_str()] = value;
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

/// A Scale's `spec.replicas`, after the checks upstream makes of a Scale body.
fn checked_replicas(scale: &Value, name: &str) -> Result<i64> {
    if !scale.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not a Scale object",
        ));
    }
    if let Some(kind) = scale.get("kind").and_then(Value::as_str) {
        if kind != "Scale" {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind (Scale)"
            )));
        }
    }
    let body_name = object::name(scale);
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
    Ok(replicas)
}

impl Registry {
    /// GET of `/scale`.
    pub async fn get_scale(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        Ok(scale_view(info, &self.get(info, namespace, name).await?))
    }

    /// PUT or PATCH of `/scale`: `change` turns the current Scale into the wanted one; only its
    /// `spec.replicas` reaches the parent. Admitted as upstream's: an UPDATE of the
    /// `scale` subresource whose objects are the wanted and the current `autoscaling/v1 Scale`
    /// (a mutating plugin may change the replicas), judged once on the state the change was
    /// made from; the parent's write is not admitted again as an update of the parent.
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
        let current = scale_view(info, &self.get(info, namespace, name).await?);
        let mut wanted = change(&current)?;
        checked_replicas(&wanted, name)?;
        self.admit_subresource(
            Operation::Update,
            (info, Subresource::Scale),
            (namespace, name),
            (&mut wanted, Some(&current)),
            write,
            |scale| checked_replicas(scale, name).map(drop),
        )
        .await?;
        let replicas = checked_replicas(&wanted, name)?;
        let mut admitted = write.clone();
        admitted.admitted = true;
        let written: Written = self
            .update_with(info, namespace, name, None, &admitted, |latest| {
                // The change made again on the latest state says which revision the write is
                // pinned to (a PUT's own, a PATCH's the latest); the replicas are admission's.
                let again = change(&scale_view(info, latest))?;
                let pinned = object::meta_str(&again, "resourceVersion");
                let mut next = latest.clone();
                match info.strategy.scale_paths() {
                    Some(paths) => set_at(&mut next, &paths.spec_replicas, replicas.into()),
                    None => next["spec"]["replicas"] = replicas.into(),
                }
                object::set_meta(&mut next, "resourceVersion", pinned);
                Ok(next)
            })
            .await?;
        Ok(scale_view(info, &written.object))
    }

    /// POST of `pods/<name>/binding`: assigns the pod to a node, once. Admitted as the
    /// Binding it is; the pod's update is not admitted again. Returns admission's warnings.
    pub async fn bind_pod(
        &self,
        pods: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        binding: &Value,
        write: &Write,
    ) -> Result<Vec<String>> {
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
        let mut binding = binding.clone();
        let (write, warnings) = self
            .admit_subresource_create(
                pods,
                Subresource::Binding,
                namespace,
                name,
                &mut binding,
                write,
                |binding| check_binding_target(binding, name),
            )
            .await?;
        let (binding, write) = (&binding, &write);
        let target = binding["target"]["name"].as_str().unwrap_or("").to_string();
        let preconditions = Preconditions {
            uid: Some(object::meta_str(binding, "uid").to_string()),
            resource_version: Some(object::meta_str(binding, "resourceVersion").to_string()),
        };
        let annotations = binding["metadata"]["annotations"].as_object().cloned();
        // One write, as upstream's: whoever watches the pod sees it bound and scheduled at once.
        self.update_with(
            pods,
            namespace,
            name,
            Some(Subresource::Binding),
            write,
            |current| {
                let revision = object::meta_str(current, "resourceVersion")
                    .parse()
                    .unwrap_or(0);
                check_preconditions(pods, name, current, revision, &preconditions)?;
                let refused = |why: String| Err(ApiError::conflict_on("pods/binding", name, &why));
                if object::is_deleting(current) {
                    return refused(format!(
                        "pod {name} is being deleted, cannot be assigned to a host"
                    ));
                }
                let assigned = current["spec"]["nodeName"].as_str().unwrap_or("");
                if !assigned.is_empty() {
                    return refused(format!(
                        "pod {name} is already assigned to node \"{assigned}\""
                    ));
                }
                let gated = current["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|gates| !gates.is_empty());
                if gated {
                    return refused(format!("pod {name} has non-empty .spec.schedulingGates"));
                }
                let mut next = current.clone();
                next["spec"]["nodeName"] = target.clone().into();
                if let Some(annotations) = &annotations {
                    if !next["metadata"]["annotations"].is_object() {
                        next["metadata"]["annotations"] = json!({});
                    }
                    if let Some(into) = next["metadata"]["annotations"].as_object_mut() {
                        into.extend(annotations.clone());
                    }
                }
                set_scheduled(&mut next);
                Ok(next)
            },
        )
        .await?;
        Ok(warnings)
    }
}

/// A Binding's own validation, as upstream's: the target is a Node (or unnamed kind) and
/// has a name.
fn check_binding_target(binding: &Value, name: &str) -> Result<()> {
    if let Some(kind) = binding["target"]["kind"].as_str() {
        if !kind.is_empty() && kind != "Node" {
            return Err(ApiError::invalid(
                "Binding",
                "",
                name,
                vec![Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!(
                        "Unsupported value: \"{kind}\": supported values: \"Node\", \"<empty>\""
                    ),
                    field: "target.kind".into(),
                }],
            ));
        }
    }
    if binding["target"]["name"].as_str().unwrap_or("").is_empty() {
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
    Ok(())
}

/// Sets the PodScheduled condition True, as upstream's `UpdatePodCondition` does: the
/// transition time moves only when the status changes.
fn set_scheduled(pod: &mut Value) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else {
        return;
    };
    let scheduled = json!({"type": "PodScheduled", "status": "True",
        "lastProbeTime": null, "lastTransitionTime": object::now()});
    match conditions
        .iter_mut()
        .find(|condition| condition["type"] == "PodScheduled")
    {
        Some(condition) if condition["status"] == "True" => {}
        Some(condition) => *condition = scheduled,
        None => conditions.push(scheduled),
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

    async fn registry() -> (Registry, tempfile::TempDir) {
        registry_admitting(rudder_admission::Chain::new()).await
    }

    async fn registry_admitting(chain: rudder_admission::Chain) -> (Registry, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite opens");
        let cidr = super::super::allocator::Cidr::parse("10.96.0.0/12").expect("cidr");
        let allocators = super::super::Allocators::new(storage.clone(), cidr, 30000..=32767);
        (
            Registry::new(storage, std::sync::Arc::new(chain), allocators),
            dir,
        )
    }

    /// A validating plugin that writes down what it is asked about.
    #[derive(Clone, Default)]
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Recorder {
        fn seen(&self) -> Vec<String> {
            self.0.lock().expect("not poisoned").clone()
        }
    }

    #[async_trait::async_trait]
    impl rudder_admission::Validating for Recorder {
        fn name(&self) -> &'static str {
            "Recorder"
        }

        async fn validate(
            &self,
            asked: &rudder_admission::Attributes,
            object: Option<&Value>,
            _old: Option<&Value>,
        ) -> std::result::Result<(), rudder_admission::Denied> {
            let object_kind = object.map_or("-", |object| object["kind"].as_str().unwrap_or(""));
            self.0.lock().expect("not poisoned").push(format!(
                "{:?} {}/{} {}/{} {} {}/{} {object_kind}",
                asked.operation,
                asked.resource,
                asked.subresource.as_deref().unwrap_or(""),
                asked.namespace.as_deref().unwrap_or(""),
                asked.name,
                asked.kind,
                asked.kind_group,
                asked.kind_version,
            ));
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_binding_is_admitted_as_a_binding_and_its_pod_update_is_not_admitted() {
        let recorder = Recorder::default();
        let (registry, _dir) =
            registry_admitting(rudder_admission::Chain::new().with_validating(recorder.clone()))
                .await;
        create_pod(&registry, json!({})).await;
        let mut binding = to("n1");
        binding["kind"] = json!("Binding");
        bind(&registry, binding).await.expect("the pod binds");
        assert_eq!(
            recorder.seen(),
            vec![
                "Create pods/ d/p Pod /v1 Pod".to_string(),
                "Create pods/binding d/p Binding /v1 Binding".to_string(),
            ]
        );
        let bound = registry.get(pods(), Some("d"), "p").await.expect("the pod");
        assert_eq!(bound["spec"]["nodeName"], "n1");
    }

    #[tokio::test]
    async fn an_invalid_binding_is_refused_before_the_validating_plugins_see_it() {
        let recorder = Recorder::default();
        let (registry, _dir) =
            registry_admitting(rudder_admission::Chain::new().with_validating(recorder.clone()))
                .await;
        create_pod(&registry, json!({})).await;
        let refused = bind(&registry, json!({"metadata": {"name": "p"}, "target": {}}))
            .await
            .expect_err("no target");
        assert_eq!(refused.code, 422, "{refused:?}");
        assert_eq!(
            recorder.seen(),
            vec!["Create pods/ d/p Pod /v1 Pod".to_string()]
        );
    }

    fn write() -> Write {
        Write {
            caller: Default::default(),
            dry_run: false,
            field_validation: crate::request::FieldValidation::Strict,
            field_manager: None,
            managed_fields_set: false,
            admitted: false,
        }
    }

    fn pods() -> &'static ResourceInfo {
        crate::catalog::find("", "v1", "pods").expect("pods")
    }

    async fn create_pod(registry: &Registry, spec_patch: Value) -> Value {
        let mut pod = json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), spec_patch.as_object()) {
            spec.extend(extra.clone());
        }
        let input = super::super::store::Input {
            object: pod,
            duplicate_fields: Vec::new(),
        };
        registry
            .create(pods(), Some("d"), input, &write())
            .await
            .expect("the pod is created")
            .object
    }

    async fn bind(registry: &Registry, binding: Value) -> Result<Vec<String>> {
        registry
            .bind_pod(pods(), Some("d"), "p", &binding, &write())
            .await
    }

    fn to(node: &str) -> Value {
        json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": node}})
    }

    fn revision(object: &Value) -> i64 {
        object::meta_str(object, "resourceVersion")
            .parse()
            .expect("a numeric resourceVersion")
    }

    #[tokio::test]
    async fn binding_sets_the_node_and_the_scheduled_condition_in_one_write() {
        let (registry, _dir) = registry().await;
        let created = create_pod(&registry, json!({})).await;
        let mut binding = to("n1");
        binding["metadata"]["annotations"] = json!({"scheduled-by": "test"});
        bind(&registry, binding).await.expect("the pod binds");
        let bound = registry.get(pods(), Some("d"), "p").await.expect("the pod");
        assert_eq!(bound["spec"]["nodeName"], "n1");
        assert_eq!(bound["metadata"]["annotations"]["scheduled-by"], "test");
        let conditions = bound["status"]["conditions"]
            .as_array()
            .expect("conditions");
        assert_eq!(conditions.len(), 1, "{conditions:?}");
        assert_eq!(conditions[0]["type"], "PodScheduled");
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(revision(&bound), revision(&created) + 1, "one write");
        assert_eq!(
            bound["metadata"]["managedFields"], created["metadata"]["managedFields"],
            "as upstream, a binding adds no managedFields entry"
        );
    }

    #[tokio::test]
    async fn binding_a_bound_pod_conflicts_as_upstream_says() {
        let (registry, _dir) = registry().await;
        create_pod(&registry, json!({})).await;
        bind(&registry, to("n1")).await.expect("the pod binds");
        let refused = bind(&registry, to("n2")).await.expect_err("bound once");
        assert_eq!(refused.code, 409, "{refused:?}");
        assert_eq!(
            refused.message,
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"n1\""
        );
        let details = refused.details.expect("details");
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("p", "pods/binding")
        );
    }

    #[tokio::test]
    async fn a_gated_pod_cannot_be_bound() {
        let (registry, _dir) = registry().await;
        create_pod(&registry, json!({"schedulingGates": [{"name": "wait"}]})).await;
        let refused = bind(&registry, to("n1")).await.expect_err("gated");
        assert_eq!(refused.code, 409, "{refused:?}");
        assert_eq!(
            refused.message,
            "Operation cannot be fulfilled on pods/binding \"p\": pod p has non-empty .spec.schedulingGates"
        );
    }

    #[tokio::test]
    async fn a_pod_being_deleted_cannot_be_bound() {
        let (registry, _dir) = registry().await;
        let created = create_pod(&registry, json!({})).await;
        let mut held = created.clone();
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        registry
            .update_with(pods(), Some("d"), "p", None, &write(), |_| Ok(held.clone()))
            .await
            .expect("a finalizer");
        registry
            .delete(pods(), Some("d"), "p", &Default::default(), &write())
            .await
            .expect("the delete is accepted");
        let refused = bind(&registry, to("n1")).await.expect_err("deleting");
        assert_eq!(refused.code, 409, "{refused:?}");
        assert_eq!(
            refused.message,
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is being deleted, cannot be assigned to a host"
        );
    }

    #[tokio::test]
    async fn the_bindings_uid_must_be_the_pods() {
        let (registry, _dir) = registry().await;
        let created = create_pod(&registry, json!({})).await;
        let mut stale = to("n1");
        stale["metadata"]["uid"] = json!("another-pod");
        let refused = bind(&registry, stale)
            .await
            .expect_err("another pod's binding");
        assert_eq!(refused.code, 409, "{refused:?}");
        assert!(
            refused
                .message
                .contains("Precondition failed: UID in precondition: another-pod"),
            "{refused:?}"
        );
        let mut matching = to("n1");
        matching["metadata"]["uid"] = created["metadata"]["uid"].clone();
        bind(&registry, matching).await.expect("this pod's binding");
    }

    #[tokio::test]
    async fn the_status_takes_a_nominated_node() {
        let (registry, _dir) = registry().await;
        create_pod(&registry, json!({})).await;
        registry
            .update_with(
                pods(),
                Some("d"),
                "p",
                Some(Subresource::Status),
                &write(),
                |current| {
                    let mut next = current.clone();
                    next["status"]["nominatedNodeName"] = json!("n2");
                    Ok(next)
                },
            )
            .await
            .expect("the status is written");
        let pod = registry.get(pods(), Some("d"), "p").await.expect("the pod");
        assert_eq!(pod["status"]["nominatedNodeName"], "n2");
    }

    #[test]
    fn replication_controller_selectors_are_plain_maps() {
        let rc = json!({"spec": {"replicas": 1, "selector": {"app": "x"}}});
        assert_eq!(scale_of(&rc)["status"]["selector"], "app=x");
    }
}
