//! The audit log with real kubectl: one ResponseComplete event per request with upstream's
//! fields, impersonation recorded under both identities, a Secret's data never logged under
//! the default (Metadata) policy, bodies logged where a policy asks, and an `Audit-Id` header.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use rudder_tests::{Kubectl, RudderServer};
use serde_json::Value;

fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The ResponseComplete events that satisfy `check`, waiting a little for them to be written.
fn completed(path: &std::path::Path, check: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found: Vec<Value> = events(path)
            .into_iter()
            .filter(|event| event["stage"] == "ResponseComplete" && check(event))
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server on a fresh SQLite file in `dir` writing its audit log to `dir/audit.log`, with
/// `extra` flags; and the log's path.
fn audited_server(dir: &tempfile::TempDir, extra: &[&str]) -> (RudderServer, std::path::PathBuf) {
    let log = dir.path().join("audit.log");
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let mut args = vec!["--disable-controller-manager", "--audit-log-path"];
    let log_arg = log.display().to_string();
    args.push(&log_arg);
    args.extend_from_slice(extra);
    let server = RudderServer::start_with_args(env!("CARGO_BIN_EXE_rudder"), &storage, &args);
    (server, log)
}

#[test]
fn requests_are_audited_without_secret_data() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = audited_server(&dir, &[]);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "audited".into(),
    };
    k.ok(&["create", "namespace", "audited"]);
    k.ok_ns(&[
        "create",
        "secret",
        "generic",
        "hush",
        "--from-literal=password=hunter2",
    ]);
    k.ok_ns(&["get", "secret", "hush", "-o", "yaml"]);
    k.run(&["--as", "jane", "-n", "audited", "get", "pods"]);

    let created = completed(&log, |event| {
        event["verb"] == "create" && event["objectRef"]["resource"] == "secrets"
    });
    assert_eq!(created.len(), 1, "{created:?}");
    let event = &created[0];
    assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(event["kind"], "Event");
    assert_eq!(event["level"], "Metadata");
    assert_eq!(event["user"]["username"], "admin");
    assert_eq!(event["objectRef"]["namespace"], "audited");
    assert_eq!(event["objectRef"]["apiVersion"], "v1");
    assert_eq!(event["responseStatus"]["code"], 201);
    assert_eq!(event["sourceIPs"][0], "127.0.0.1");
    assert!(
        event["userAgent"].as_str().unwrap().starts_with("kubectl"),
        "{event}"
    );
    assert!(!event["auditID"].as_str().unwrap().is_empty());
    assert!(event["requestReceivedTimestamp"].is_string() && event["stageTimestamp"].is_string());
    let impersonated = completed(&log, |event| {
        event["impersonatedUser"]["username"] == "jane"
    });
    assert_eq!(impersonated.len(), 1, "{impersonated:?}");
    assert_eq!(impersonated[0]["user"]["username"], "admin");
    assert_eq!(impersonated[0]["responseStatus"]["code"], 403);
    assert_eq!(impersonated[0]["responseStatus"]["reason"], "Forbidden");

    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("hunter2"),
        "a secret's value in the audit log"
    );
    assert!(
        !text.contains("aHVudGVyMg"),
        "a secret's base64 value in the audit log"
    );
    // Each request is one ResponseComplete (and no RequestReceived under the default).
    let ids: Vec<String> = events(&log)
        .iter()
        .filter(|event| event["stage"] == "ResponseComplete")
        .map(|event| event["auditID"].as_str().unwrap().to_string())
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(ids.len(), unique.len(), "an auditID twice");
    assert!(events(&log)
        .iter()
        .all(|event| event["stage"] != "RequestReceived"));

    // Credentials that fail: a 401, written at ResponseComplete with nobody as the user.
    let bogus = server.kubeconfig_with(
        Some(kube::config::AuthInfo {
            token: Some("not-a-token".to_string().into()),
            ..Default::default()
        }),
        None,
    );
    let (code, _, _) = server.kubectl_with("1.33", &bogus, &["get", "pods", "-n", "audited"]);
    assert_ne!(code, 0);
    let refused = completed(&log, |event| event["responseStatus"]["code"] == 401);
    assert!(!refused.is_empty());
    for event in &refused {
        assert_eq!(event["user"], serde_json::json!({}), "{event}");
        assert_eq!(event["responseStatus"]["reason"], "Unauthorized", "{event}");
        assert_eq!(
            event["responseStatus"]["message"], "Authentication failed, attempted: bearer",
            "{event}"
        );
        assert!(!event["auditID"].as_str().unwrap().is_empty());
    }

    // The Audit-Id header names the request's events.
    let output = k.run(&["get", "--raw", "/version", "-v=8"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let id = stderr
        .lines()
        .find_map(|line| line.split("Audit-Id: ").nth(1))
        .unwrap_or_else(|| panic!("no Audit-Id in:\n{stderr}"))
        .trim()
        .to_string();
    let named = completed(&log, |event| event["auditID"] == id.as_str());
    assert_eq!(named.len(), 1);
    assert_eq!(named[0]["requestURI"], "/version");
}

#[test]
fn a_policy_logs_bodies_where_it_asks_and_nothing_where_it_says_none() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: RequestResponse\n    resources:\n      - group: \"\"\n        resources: [configmaps]\n  - level: None\n",
    )
    .unwrap();
    let (server, log) = audited_server(&dir, &["--audit-policy-file", policy.to_str().unwrap()]);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    k.ok_ns(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
    ]);
    k.ok_ns(&["get", "pods"]);
    let created = completed(&log, |event| event["verb"] == "create");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["level"], "RequestResponse");
    assert_eq!(
        created[0]["requestObject"]["data"]["mode"], "fast",
        "{}",
        created[0]
    );
    assert_eq!(created[0]["responseObject"]["metadata"]["name"], "settings");
    assert!(events(&log)
        .iter()
        .all(|event| event["objectRef"]["resource"] == "configmaps"));
}

/// Admission's audit annotations reach the event: PodSecurity's enforce policy and audit-mode
/// violations (on a created pod and on one the enforce level refuses), and a
/// ValidatingAdmissionPolicy's `auditAnnotations` and `Audit` failures.
#[test]
fn admission_annotates_the_audit_event() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = audited_server(&dir, &["--disable-scheduler", "--disable-agent"]);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "annotated".into(),
    };
    k.ok(&["create", "namespace", "annotated"]);
    k.ok(&[
        "label",
        "namespace",
        "annotated",
        "pod-security.kubernetes.io/enforce=baseline",
        "pod-security.kubernetes.io/audit=restricted",
    ]);
    k.ok_ns(&["run", "plain", "--image=busybox"]);
    let privileged = k.file(
        "privileged.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: priv, namespace: annotated}\nspec:\n  containers:\n  - {name: shell, image: busybox, securityContext: {privileged: true}}\n",
    );
    k.fails(&["apply", "-f", &privileged]);
    let created = completed(&log, |event| {
        event["verb"] == "create"
            && event["objectRef"]["resource"] == "pods"
            && event["responseStatus"]["code"] == 201
    });
    let annotations = &created[0]["annotations"];
    assert_eq!(
        annotations["pod-security.kubernetes.io/enforce-policy"],
        "baseline:latest"
    );
    assert!(
        annotations["pod-security.kubernetes.io/audit-violations"]
            .as_str()
            .unwrap()
            .starts_with("would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"),
        "{annotations}"
    );
    let refused = completed(&log, |event| {
        event["verb"] == "create"
            && event["objectRef"]["resource"] == "pods"
            && event["responseStatus"]["code"] == 403
    });
    assert_eq!(
        refused[0]["annotations"]["pod-security.kubernetes.io/enforce-policy"], "baseline:latest",
        "{:?}",
        refused[0]
    );

    let policy = k.file(
        "policy.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: small-configmaps}\nspec:\n  matchConstraints: {resourceRules: [{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]}\n  validations:\n  - expression: \"!has(object.data) || size(object.data) <= 1\"\n    message: at most one key\n  auditAnnotations:\n  - key: keys\n    valueExpression: \"'keys: ' + string(has(object.data) ? size(object.data) : 0)\"\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: small-configmaps}\nspec: {policyName: small-configmaps, validationActions: [Audit]}\n",
    );
    k.ok(&["apply", "-f", &policy]);
    k.ok_ns(&[
        "create",
        "configmap",
        "big",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ]);
    let created = completed(&log, |event| {
        event["verb"] == "create"
            && event["objectRef"]["resource"] == "configmaps"
            && event["responseStatus"]["code"] == 201
    });
    let annotations = &created[0]["annotations"];
    assert_eq!(
        annotations["small-configmaps/keys"], "keys: 2",
        "{annotations}"
    );
    let failures: Value = serde_json::from_str(
        annotations["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        failures,
        serde_json::json!([{"message": "at most one key", "policy": "small-configmaps",
            "binding": "small-configmaps", "expressionIndex": 0, "validationActions": ["Audit"]}])
    );
}
