//! The Pod Security Standards on the pods of upstream's documentation and the plugin's
//! enforce/warn handling.

use serde_json::{json, Value};

use super::policy::Version;
use super::*;
use crate::tests::attributes;

fn spec(containers: Value) -> Value {
    json!({"containers": containers})
}

fn check(level: Level, spec: &Value) -> Vec<String> {
    violations(LevelVersion::new(level, Version::Latest), spec, &json!({}))
}

fn check_at(level: Level, version: &str, spec: &Value) -> Vec<String> {
    let version = Version::parse(version).expect("a version");
    violations(LevelVersion::new(level, version), spec, &json!({}))
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

struct Namespaces(Value, Vec<Value>);

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

    async fn list_namespaced_objects(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, Denied> {
        assert_eq!((group, plural, namespace), ("", "pods", "apps"));
        Ok(self.1.clone())
    }
}

fn namespace(labels: Value) -> Namespaces {
    Namespaces(
        json!({"metadata": {"name": "apps", "labels": labels}}),
        Vec::new(),
    )
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
        warnings[0].starts_with("would violate PodSecurity \"restricted:latest\": privileged"),
        "{warnings:?}"
    );

    // An update that changes no image is not judged again.
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

#[test]
fn a_pinned_version_applies_the_rules_of_its_release() {
    let root = json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"},
            "sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]},
        "containers": [{"name": "app", "securityContext": {
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
    });
    // runAsUser=0 is refused from 1.23; tcp_rmem is safe from 1.32.
    assert_eq!(
        check_at(Level::Restricted, "v1.33", &root),
        vec!["runAsUser=0 (pod must not set runAsUser=0)"]
    );
    assert_eq!(
        check_at(Level::Restricted, "v1.22", &root),
        vec!["forbidden sysctls (net.ipv4.tcp_rmem)"]
    );
    // Before 1.22 restricted did not ask for capabilities to be dropped; before 1.19 it did
    // not ask for a seccomp profile (baseline's annotation check stands in).
    let plain =
        spec(json!([{"name": "app", "securityContext": {"allowPrivilegeEscalation": false}}]));
    let with_run_as = |mut spec: Value| {
        spec["securityContext"] = json!({"runAsNonRoot": true});
        spec
    };
    assert_eq!(
        check_at(Level::Restricted, "v1.21", &with_run_as(plain.clone())),
        vec!["seccompProfile (pod or container \"app\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"]
    );
    assert!(check_at(Level::Restricted, "v1.18", &with_run_as(plain)).is_empty());
    let annotated = violations(
        LevelVersion::new(Level::Baseline, Version::V1(18)),
        &spec(json!([{"name": "app"}])),
        &json!({"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}),
    );
    assert_eq!(
        annotated,
        vec!["seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\")"]
    );
    // container_engine_t is allowed from 1.31; newer versions than the latest are the latest.
    let engine = json!({"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}},
        "containers": [{"name": "app"}]});
    assert!(check_at(Level::Baseline, "v1.31", &engine).is_empty());
    assert_eq!(
        check_at(Level::Baseline, "v1.30", &engine),
        vec!["seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"container_engine_t\")"]
    );
    assert!(check_at(Level::Baseline, "v1.99", &engine).is_empty());
    // Windows pods skip the Linux-only restricted checks from 1.25.
    let windows = json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true},
        "containers": [{"name": "app"}]});
    assert!(check_at(Level::Restricted, "latest", &windows).is_empty());
    assert_eq!(check_at(Level::Restricted, "v1.24", &windows).len(), 3);
}

#[test]
fn versions_and_levels_parse_as_upstreams() {
    assert_eq!(Version::parse("latest"), Ok(Version::Latest));
    assert_eq!(Version::parse("v1.0"), Ok(Version::V1(0)));
    assert_eq!(Version::parse("v1.25"), Ok(Version::V1(25)));
    for bad in ["v1.025", "v2.0", "1.25", "v1.", "v1.x", "v1.-1", ""] {
        assert_eq!(
            Version::parse(bad),
            Err("must be \"latest\" or \"v1.x\"".to_string()),
            "{bad}"
        );
    }
    let labels = |pairs: &[(&str, &str)]| -> Value {
        pairs
            .iter()
            .map(|(k, v)| (format!("pod-security.kubernetes.io/{k}"), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    // Warn follows a stricter enforce level (and its version) unless set itself.
    let (policy, errors) = Policy::of_labels(
        &labels(&[("enforce", "baseline"), ("enforce-version", "v1.24")]),
        Policy::default(),
    );
    assert!(errors.is_empty());
    assert_eq!(policy.warn.to_string(), "baseline:v1.24");
    assert_eq!(policy.audit.to_string(), "privileged:latest");
    // Malformed: enforce is restricted, warn and audit fail open, each with its field error.
    let (policy, errors) = Policy::of_labels(
        &labels(&[
            ("enforce", "strict"),
            ("warn", "loud"),
            ("audit-version", "v1.x"),
        ]),
        Policy::default(),
    );
    assert_eq!(policy.enforce.level, Level::Restricted);
    assert_eq!(policy.warn.level, Level::Privileged);
    assert_eq!(
        errors,
        vec![
            "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
            "metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: \"v1.x\": must be \"latest\" or \"v1.x\"",
            "metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: \"loud\": must be one of privileged, baseline, restricted",
        ]
    );
}

fn namespace_write(operation: Operation) -> Attributes {
    let mut attributes = attributes(operation);
    attributes.resource = "namespaces".into();
    attributes.name = "apps".into();
    attributes
}

#[tokio::test]
async fn namespaces_with_malformed_labels_are_refused_and_tightening_warns_of_existing_pods() {
    let plugin = PodSecurity::new(namespace(json!({})));
    let bad = json!({"metadata": {"name": "apps", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}});
    let refused = plugin
        .validate(&namespace_write(Operation::Create), Some(&bad), None)
        .await
        .expect_err("a malformed level");
    assert_eq!((refused.code, refused.reason), (422, "Invalid"));
    assert_eq!(
        refused.message,
        "Namespace \"apps\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
    );
    // An update that leaves the same bad labels alone passes (a label fixed elsewhere may follow).
    plugin
        .validate(&namespace_write(Operation::Update), Some(&bad), Some(&bad))
        .await
        .expect("unchanged labels");

    let pod = |name: &str, owner: Option<&str>, security: Value| {
        let mut pod = json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "securityContext": security}]}});
        if let Some(uid) = owner {
            pod["metadata"]["ownerReferences"] = json!([{"uid": uid, "controller": true}]);
        }
        pod
    };
    let plugin = PodSecurity::new(Namespaces(
        json!({}),
        vec![
            pod("web-2", Some("rs-1"), json!({"privileged": true})),
            pod("web-1", Some("rs-1"), json!({"privileged": true})),
            pod("db", None, json!({"privileged": true})),
            pod(
                "tool",
                None,
                json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            ),
            pod("fine", None, json!({})),
        ],
    ));
    let open = json!({"metadata": {"name": "apps"}});
    let baseline = json!({"metadata": {"name": "apps", "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}});
    let update = namespace_write(Operation::Update);
    plugin
        .validate(&update, Some(&baseline), Some(&open))
        .await
        .expect("namespaces are not refused for their pods");
    assert_eq!(
        update.warnings.take(),
        vec![
            "existing pods in namespace \"apps\" violate the new PodSecurity enforce level \"baseline:latest\"",
            "db (and 2 other pods): privileged",
            "tool: non-default capabilities",
        ]
    );
    // Relaxing the level warns of nothing.
    let update = namespace_write(Operation::Update);
    plugin
        .validate(&update, Some(&open), Some(&baseline))
        .await
        .expect("relaxed");
    assert!(update.warnings.take().is_empty());
}

#[tokio::test]
async fn exempt_users_namespaces_and_runtime_classes_skip_the_checks() {
    let config = PodSecurityConfig::from_value(json!({
        "apiVersion": "pod-security.admission.config.k8s.io/v1",
        "kind": "PodSecurityConfiguration",
        "defaults": {"enforce": "baseline", "enforce-version": "latest"},
        "exemptions": {"usernames": ["ops"], "namespaces": ["kube-system"], "runtimeClasses": ["kata"]}
    }))
    .expect("a valid configuration");
    let privileged_pod =
        json!({"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}});
    // The defaults apply to a namespace without labels.
    let plugin = PodSecurity::with_config(namespace(json!({})), config.clone());
    let refused = plugin
        .validate(&pod_create("pods", ""), Some(&privileged_pod), None)
        .await
        .expect_err("the default enforce level");
    assert!(
        refused
            .message
            .contains("violates PodSecurity \"baseline:latest\""),
        "{refused}"
    );

    let mut by_ops = pod_create("pods", "");
    by_ops.user = "ops".into();
    plugin
        .validate(&by_ops, Some(&privileged_pod), None)
        .await
        .expect("an exempt user");
    let mut in_kata = privileged_pod.clone();
    in_kata["spec"]["runtimeClassName"] = json!("kata");
    plugin
        .validate(&pod_create("pods", ""), Some(&in_kata), None)
        .await
        .expect("an exempt RuntimeClass");
    let mut in_system = pod_create("pods", "");
    in_system.namespace = Some("kube-system".into());
    plugin
        .validate(&in_system, Some(&privileged_pod), None)
        .await
        .expect("an exempt namespace");

    // Labelling an exempt namespace warns that its policy is ignored.
    let labelled = json!({"metadata": {"name": "kube-system", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    let create = namespace_write(Operation::Create);
    plugin
        .validate(&create, Some(&labelled), None)
        .await
        .expect("a valid namespace");
    assert_eq!(
        create.warnings.take(),
        vec!["namespace \"kube-system\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"]
    );

    let bad = PodSecurityConfig::from_value(json!({
        "apiVersion": "pod-security.admission.config.k8s.io/v1",
        "kind": "PodSecurityConfiguration",
        "defaults": {"enforce": "strict"},
        "exemptions": {"usernames": ["ops", "ops"]}
    }))
    .expect_err("a bad level and a duplicate");
    assert_eq!(
        bad,
        "PodSecurityConfiguration: defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted, exemptions.usernames[1]: Duplicate value: \"ops\""
    );
}
