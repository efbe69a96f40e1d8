//! The Pod Security Standards on the pods of upstream's documentation and the plugin's
//! enforce/warn handling.

use serde_json::{json, Value};

use super::*;
use crate::tests::attributes;

fn spec(containers: Value) -> Value {
    json!({"containers": containers})
}

fn check(level: Level, spec: &Value) -> Vec<String> {
    violations(level, spec, &json!({}))
}

#[test]
fn a_plain_pod_passes_baseline_and_fails_restricted_in_upstreams_words() {
    let plain = spec(json!([{"name": "app", "image": "nginx"}]));
    assert!(check(Level::Baseline, &plain).is_empty());
    assert_eq!(
        check(Level::Restricted, &plain),
        vec![
            "allowPrivilegeEscalation != false (container \"app\" must set securityContext.allowPrivilegeEscalation=false)",
            "unrestricted capabilities (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"])",
            "runAsNonRoot != true (pod or container \"app\" must set securityContext.runAsNonRoot=true)",
            "seccompProfile (pod or container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
        ]
    );
    let hardened = json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
        "volumes": [{"name": "data", "emptyDir": {}}]
    });
    assert!(check(Level::Restricted, &hardened).is_empty());
}

#[test]
fn baseline_refuses_privilege_host_namespaces_ports_paths_and_capabilities() {
    let pod = json!({
        "hostNetwork": true, "hostPID": true,
        "containers": [
            {"name": "a", "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]}},
             "ports": [{"containerPort": 80, "hostPort": 8080}]},
            {"name": "b", "securityContext": {"privileged": true}}
        ],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
    });
    assert_eq!(
        check(Level::Baseline, &pod),
        vec![
            "non-default capabilities (container \"a\" must not include \"NET_ADMIN\" in securityContext.capabilities.add)",
            "host namespaces (hostNetwork=true, hostPID=true)",
            "hostPath volumes (volume \"root\")",
            "hostPort (container \"a\" uses hostPort 8080)",
            "privileged (containers \"a\", \"b\" must not set securityContext.privileged=true)",
            "forbidden sysctls (kernel.msgmax)",
        ]
    );
    assert!(check(Level::Privileged, &pod).is_empty());
}

struct Namespaces(Value);

#[async_trait::async_trait]
impl ObjectReader for Namespaces {
    async fn get_cluster_object(
        &self,
        _group: &str,
        _plural: &str,
        _name: &str,
    ) -> Result<Option<Value>, Denied> {
        Ok(Some(self.0.clone()))
    }

    async fn list_cluster_objects(&self, _: &str, _: &str) -> Result<Vec<Value>, Denied> {
        Ok(Vec::new())
    }
}

fn namespace(labels: Value) -> Namespaces {
    Namespaces(json!({"metadata": {"name": "apps", "labels": labels}}))
}

fn pod_create(resource: &str, group: &str) -> Attributes {
    let mut attributes = attributes(Operation::Create);
    attributes.group = group.into();
    attributes.resource = resource.into();
    attributes.namespace = Some("apps".into());
    attributes.name = "web".into();
    attributes
}

#[tokio::test]
async fn enforce_refuses_pods_warn_warns_and_workloads_only_warn() {
    let privileged_pod =
        json!({"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}});
    let plugin = PodSecurity::new(namespace(json!({
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted"
    })));
    let refused = plugin
        .validate(&pod_create("pods", ""), Some(&privileged_pod), None)
        .await
        .expect_err("a privileged pod under baseline");
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.message,
        "pods \"web\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"app\" must not set securityContext.privileged=true)"
    );

    let plain = json!({"spec": {"containers": [{"name": "app"}]}});
    let attributes = pod_create("pods", "");
    plugin
        .validate(&attributes, Some(&plain), None)
        .await
        .expect("baseline allows it");
    let warnings = attributes.warnings.take();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with(
            "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{warnings:?}"
    );

    let deployment = json!({"spec": {"template": {"spec": privileged_pod["spec"]}}});
    let attributes = pod_create("deployments", "apps");
    plugin
        .validate(&attributes, Some(&deployment), None)
        .await
        .expect("workloads are not refused");
    let warnings = attributes.warnings.take();
    assert!(
        warnings[0].starts_with("would violate PodSecurity \"baseline:latest\": privileged"),
        "{warnings:?}"
    );

    // An update that leaves the spec alone is not judged again.
    let mut update = pod_create("pods", "");
    update.operation = Operation::Update;
    plugin
        .validate(&update, Some(&privileged_pod), Some(&privileged_pod))
        .await
        .expect("unchanged spec");

    // No labels: privileged.
    let open = PodSecurity::new(namespace(json!({})));
    open.validate(&pod_create("pods", ""), Some(&privileged_pod), None)
        .await
        .expect("privileged");
}
