//! Pods and PodTemplates. A pod starts Pending with its QoS class (and, while it has
//! scheduling gates, the PodScheduled condition False for `SchedulingGated`); a bound pod's
//! delete waits out its grace period (the kubelet finishes it).

use k8s_openapi::api as k8s;
use serde_json::{json, Value};

use super::{Hold, Strategy};
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::{at, at_or, first_of};
use crate::selectors::{FieldSet, Fields, Refusal, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 Pod.
pub const PODS: ResourceInfo = resource!("", "v1", "Pod", "pods", "pod", true, short: &["po"], categories: ALL,
        sub: &[status_of("", "v1", "Pod"), SubresourceInfo { name: Subresource::Binding, kind: GroupVersionKind { group: "", version: "v1", kind: "Binding" }, verbs: CREATE_ONLY },
            SubresourceInfo { name: Subresource::Eviction, kind: GroupVersionKind { group: "policy", version: "v1", kind: "Eviction" }, verbs: CREATE_ONLY },
            // Served by the pod's kubelet, through `http::kubelet_proxy`.
            core_sub(Subresource::Attach, "PodAttachOptions", CONNECT_VERBS),
            core_sub(Subresource::Exec, "PodExecOptions", CONNECT_VERBS),
            core_sub(Subresource::Log, "Pod", &["get"]),
            core_sub(Subresource::PortForward, "PodPortForwardOptions", CONNECT_VERBS)],
        prefix: "/registry/pods", k8s::core::v1::Pod,
        strategy: &PodStrategy, printer: &tables::pod::PodTable);

/// core/v1 PodTemplate.
pub const POD_TEMPLATES: ResourceInfo = resource!("", "v1", "PodTemplate", "podtemplates", "podtemplate", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/podtemplates", k8s::core::v1::PodTemplate,
        strategy: &PodTemplateStrategy, printer: &tables::core::PodTemplateTable);

/// The rules of Pod objects.
pub struct PodStrategy;

impl Strategy for PodStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::pod::default_pod(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_pod(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Pod
    }

    fn fields(&self) -> &'static FieldSet {
        &POD_FIELDS
    }
    fn prepare_for_create(&self, object: &mut Value) {
        let qos = serde_json::from_value::<k8s::core::v1::Pod>(object.clone())
            .map(|pod| rudder_facts::pods::qos_class(&pod).as_str())
            .unwrap_or("BestEffort");
        object["status"] = json!({"phase": "Pending", "qosClass": qos});
        let gated = object["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|gates| !gates.is_empty());
        if gated {
            // Upstream's condition, which its printers show as the pod's status.
            object["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": null, "lastTransitionTime": null}]);
        }
    }

    fn deletion_hold(&self, current: &Value, grace_period_seconds: Option<i64>) -> Option<Hold> {
        let bound = current["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty());
        let grace = grace_period_seconds
            .or_else(|| current["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        let terminal = matches!(
            current["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        (bound && grace > 0 && !terminal).then_some(Hold::Grace(grace))
    }

    fn delete_returns_object(&self) -> bool {
        true
    }
}

/// The rules of PodTemplate objects.
pub struct PodTemplateStrategy;

impl Strategy for PodTemplateStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_pod_template(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_pod_template_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::PodTemplate
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// What pods select by (upstream's pod `GetAttrs` and field label conversion).
static POD_FIELDS: FieldSet = FieldSet {
    accepted: &[
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        // Accepted, but no pod exposes it, so it only ever equals "" (as upstream).
        "status.podIPs",
        "status.nominatedNodeName",
        // Old v1 clients' name for spec.nodeName.
        "spec.host",
    ],
    refusal: Refusal::Plain,
    paths: &[],
    extract: pod_fields,
};

fn pod_fields(obj: &Value, fields: &mut Fields) {
    let mut put = |k: &str, v: String| {
        fields.insert(k.to_string(), v);
    };
    let node = at(obj, "/spec/nodeName");
    put("spec.host", node.clone());
    put("spec.nodeName", node);
    put("spec.restartPolicy", at(obj, "/spec/restartPolicy"));
    put("spec.schedulerName", at(obj, "/spec/schedulerName"));
    put(
        "spec.serviceAccountName",
        at(obj, "/spec/serviceAccountName"),
    );
    put("spec.hostNetwork", at_or(obj, "/spec/hostNetwork", "false"));
    put("status.phase", at(obj, "/status/phase"));
    put(
        "status.podIP",
        first_of(obj, &["/status/podIPs/0/ip", "/status/podIP"]),
    );
    put(
        "status.nominatedNodeName",
        at(obj, "/status/nominatedNodeName"),
    );
}
