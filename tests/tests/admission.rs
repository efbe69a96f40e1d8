//! Admission configured through the API, with real kubectl: a mutating webhook (a small
//! HTTPS server this test runs, trusted through the configuration's `caBundle`) that labels
//! ConfigMaps, a validating one that refuses reserved names, both honouring their
//! `failurePolicy` when the server is gone, and a ValidatingAdmissionPolicy with a param
//! ConfigMap that refuses Deployments over a replica limit with its `messageExpression`.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use base64::Engine;
use rudder_tests::{Kubectl, RudderServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");

/// A webhook server on 127.0.0.1: `/mutate` adds the label `webhook: added`, `/validate`
/// refuses names starting with `reserved-` and warns about the rest. Returns its address, its
/// CA (PEM) and the task serving it.
async fn webhook_server() -> (std::net::SocketAddr, String, tokio::task::JoinHandle<()>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let ca_pem = cert.pem();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                let (head_end, length) = loop {
                    let Ok(n) = tls.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while buffer.len() < head_end + length {
                    let Ok(n) = tls.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                }
                let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
                let review: Value =
                    serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap();
                let request = &review["request"];
                let uid = request["uid"].clone();
                let response = if head.starts_with("POST /mutate") {
                    let labels = &request["object"]["metadata"]["labels"];
                    let patch = if labels.is_object() {
                        json!([{"op": "add", "path": "/metadata/labels/webhook", "value": "added"}])
                    } else {
                        json!([{"op": "add", "path": "/metadata/labels", "value": {"webhook": "added"}}])
                    };
                    let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
                    json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
                } else if request["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("reserved-")
                {
                    json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": "the name is reserved"}})
                } else {
                    json!({"uid": uid, "allowed": true, "warnings": ["checked by the test webhook"]})
                };
                let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}).to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, ca_pem, task)
}

fn webhook_configurations(addr: std::net::SocketAddr, ca_pem: &str, policy: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: label-configmaps}}
webhooks:
- name: label.rudder.test
  clientConfig: {{url: \"https://{addr}/mutate\", caBundle: {ca}}}
  rules: [{{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}]
  namespaceSelector: {{matchLabels: {{webhooks: \"on\"}}}}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: {policy}
  timeoutSeconds: 5
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: reserved-names}}
webhooks:
- name: reserved.rudder.test
  clientConfig: {{url: \"https://{addr}/validate\", caBundle: {ca}}}
  rules: [{{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}]
  matchConditions:
  - name: not-system
    expression: \"!request.userInfo.username.startsWith('system:serviceaccount:kube-system:')\"
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: {policy}
  timeoutSeconds: 5
"
    )
}

/// A server on a fresh SQLite file in `dir`, with only the apiserver running.
fn start(dir: &tempfile::TempDir) -> RudderServer {
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    RudderServer::start_with_args(
        RUDDER,
        &url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--disable-agent",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_mutate_and_validate_with_their_failure_policies() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "hooked".into(),
    };
    k.ok(&["create", "namespace", "hooked"]);
    k.ok(&["label", "namespace", "hooked", "webhooks=on"]);
    let (addr, ca_pem, task) = webhook_server().await;
    let config = k.file(
        "webhooks.yaml",
        &webhook_configurations(addr, &ca_pem, "Fail"),
    );
    k.ok(&["apply", "-f", &config]);
    let listed = k.ok(&["get", "mutatingwebhookconfigurations"]);
    assert!(
        listed.contains("label-configmaps") && listed.contains("WEBHOOKS"),
        "{listed}"
    );

    // The mutating webhook's label; the validating one's warning.
    let created =
        k.run(&k.in_namespace(&["create", "configmap", "settings", "--from-literal=a=b"]));
    assert!(created.status.success());
    assert!(
        String::from_utf8_lossy(&created.stderr).contains("Warning: checked by the test webhook"),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert_eq!(
        k.jsonpath("configmap", "settings", "{.metadata.labels.webhook}"),
        "added"
    );
    // Outside the selected namespace the mutating webhook is not called.
    k.ok(&["create", "configmap", "plain", "-n", "default"]);
    let labels = k.ok(&[
        "get",
        "configmap",
        "plain",
        "-n",
        "default",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(!labels.contains("webhook"), "{labels}");
    // The validating webhook's refusal, in upstream's words.
    let refused = k.fails_ns(&["create", "configmap", "reserved-x"]);
    assert!(
        refused.contains(
            "admission webhook \"reserved.rudder.test\" denied the request: the name is reserved"
        ),
        "{refused}"
    );

    // With the webhook server gone, Fail refuses and Ignore lets requests through.
    task.abort();
    let _ = task.await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let failed = k.fails_ns(&["create", "configmap", "while-down"]);
    assert!(
        failed.contains("failed calling webhook \"label.rudder.test\""),
        "{failed}"
    );
    let config = k.file(
        "webhooks-ignore.yaml",
        &webhook_configurations(addr, &ca_pem, "Ignore"),
    );
    k.ok(&["apply", "-f", &config]);
    k.ok_ns(&["create", "configmap", "while-down"]);
    let labels = k.jsonpath("configmap", "while-down", "{.metadata.labels}");
    assert!(!labels.contains("webhook"), "{labels}");
}

const POLICY: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments, deployments/scale]}
  variables:
  - {name: limit, expression: \"int(params.data.maxReplicas)\"}
  validations:
  - expression: \"object.spec.replicas <= variables.limit\"
    messageExpression: \"'replicas ' + string(object.spec.replicas) + ' exceed the limit of ' + string(variables.limit)\"
    reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-limited}
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: replica-limits, namespace: limited, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector: {matchLabels: {limits: \"on\"}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validating_admission_policy_with_a_param_limits_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "limited".into(),
    };
    k.ok(&["create", "namespace", "limited"]);
    k.ok(&["label", "namespace", "limited", "limits=on"]);
    k.ok_ns(&[
        "create",
        "configmap",
        "replica-limits",
        "--from-literal=maxReplicas=3",
    ]);
    let policy = k.file("policy.yaml", POLICY);
    k.ok(&["apply", "-f", &policy]);
    assert!(k
        .ok(&["get", "validatingadmissionpolicies"])
        .contains("replica-limit"));

    k.ok_ns(&[
        "create",
        "deployment",
        "small",
        "--image=busybox",
        "--replicas=2",
    ]);
    let refused = k.fails_ns(&[
        "create",
        "deployment",
        "big",
        "--image=busybox",
        "--replicas=5",
    ]);
    assert!(
        refused.contains("ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-limited' denied request: replicas 5 exceed the limit of 3"),
        "{refused}"
    );
    let scaled = k.fails_ns(&["scale", "deployment", "small", "--replicas=4"]);
    assert!(
        scaled.contains("exceed the limit of 3"),
        "the policy covers the scale subresource, which it names: {scaled}"
    );
    // The param is read live; namespaces the binding does not select are left alone.
    k.ok_ns(&[
        "patch",
        "configmap",
        "replica-limits",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"maxReplicas":"10"}}"#,
    ]);
    k.ok_ns(&[
        "create",
        "deployment",
        "big",
        "--image=busybox",
        "--replicas=5",
    ]);
    k.ok(&[
        "create",
        "deployment",
        "free",
        "--image=busybox",
        "--replicas=50",
        "-n",
        "default",
    ]);
    // The `authorizer` variable asks RBAC about the requesting user: only someone who may
    // update the namespace may create a ConfigMap labelled tier=system in it.
    let guarded = k.file(
        "guarded.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: system-tier}\nspec:\n  failurePolicy: Fail\n  matchConstraints: {resourceRules: [{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}]}\n  variables:\n  - name: mayUpdateNamespace\n    expression: \"authorizer.group('').resource('namespaces').name(object.metadata.namespace).check('update')\"\n  validations:\n  - expression: \"!has(object.metadata.labels) || !('tier' in object.metadata.labels) || object.metadata.labels.tier != 'system' || variables.mayUpdateNamespace.allowed()\"\n    messageExpression: \"'user ' + request.userInfo.username + ' may not create tier=system ConfigMaps: ' + (variables.mayUpdateNamespace.allowed() ? 'allowed' : 'denied')\"\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: system-tier}\nspec: {policyName: system-tier, validationActions: [Deny]}\n",
    );
    k.ok(&["apply", "-f", &guarded]);
    k.ok_ns(&[
        "create",
        "role",
        "cm-writer",
        "--verb=create,get",
        "--resource=configmaps",
    ]);
    k.ok_ns(&[
        "create",
        "rolebinding",
        "dev-cm",
        "--role=cm-writer",
        "--user=dev",
    ]);
    let system_cm = |name: &str| {
        k.file(
            &format!("{name}.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: limited, labels: {{tier: system}}}}\ndata: {{a: b}}\n"),
        )
    };
    let plain_cm = k.file(
        "plain-cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: limited}\ndata: {a: b}\n",
    );
    k.ok(&["create", "-f", &plain_cm, "--as=dev"]);
    let refused = k.fails(&["create", "-f", &system_cm("by-dev"), "--as=dev"]);
    assert!(
        refused.contains("ValidatingAdmissionPolicy 'system-tier' with binding 'system-tier' denied request: user dev may not create tier=system ConfigMaps: denied"),
        "{refused}"
    );
    k.ok(&["create", "-f", &system_cm("by-admin")]);

    // The policy's expressions are type-checked against the kinds it matches: a field
    // Deployments do not have is a warning in its status.
    let typo = k.file(
        "typo.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: typo}\nspec:\n  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}\n  validations: [{expression: \"object.spec.replicass > 1\"}]\n",
    );
    k.ok(&["apply", "-f", &typo]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        let policy = k.json(&["get", "validatingadmissionpolicy", "typo"]);
        if policy["status"]["observedGeneration"] == 1 || std::time::Instant::now() > deadline {
            break policy["status"].clone();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        status["typeChecking"]["expressionWarnings"],
        serde_json::json!([{"fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicass'\n | object.spec.replicass > 1\n | ...........^"}]),
        "{status}"
    );
    let clean = k.json(&["get", "validatingadmissionpolicy", "replica-limit"]);
    assert_eq!(
        clean["status"]["typeChecking"],
        serde_json::json!({}),
        "{clean}"
    );

    // A policy whose expression does not compile is refused when written.
    let broken = k.file(
        "broken.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: broken}\nspec:\n  matchConstraints: {resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}\n  validations: [{expression: \"object.spec ==\"}]\n",
    );
    let refused = k.fails(&["apply", "-f", &broken]);
    assert!(
        refused.contains("spec.validations[0].expression"),
        "{refused}"
    );
}

/// The policy plugins: a `restricted` namespace refuses a privileged pod (and warns about a
/// workload), a LimitRange fills in and bounds containers' resources, and a claim without a
/// class gets the default StorageClass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_plugins_apply_to_pods_and_claims() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "secure".into(),
    };
    k.ok(&["create", "namespace", "secure"]);
    k.ok(&[
        "label",
        "namespace",
        "secure",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let privileged = k.file(
        "privileged.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: priv}\nspec:\n  containers:\n  - {name: shell, image: busybox, securityContext: {privileged: true}}\n",
    );
    let refused = k.fails_ns(&["apply", "-f", &privileged]);
    assert!(
        refused.contains("pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"shell\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"),
        "{refused}"
    );
    let hardened = k.file(
        "hardened.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hardened}\nspec:\n  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}\n",
    );
    k.ok_ns(&["apply", "-f", &hardened]);
    let workload = k.run(&k.in_namespace(&["create", "deployment", "web", "--image=busybox"]));
    assert!(workload.status.success(), "workloads are not refused");
    let warned = String::from_utf8_lossy(&workload.stderr).to_string();
    assert!(
        warned.contains("would violate PodSecurity \"restricted:latest\""),
        "{warned}"
    );

    let limits = k.file(
        "limits.yaml",
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: cpu, namespace: default}\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m, memory: 128Mi}\n    defaultRequest: {cpu: 100m}\n    max: {cpu: \"1\"}\n",
    );
    k.ok(&["apply", "-f", &limits]);
    k.ok(&["run", "plain", "--image=busybox", "-n", "default"]);
    let resources = k.ok(&[
        "get",
        "pod",
        "plain",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.containers[0].resources}",
    ]);
    let resources: Value = serde_json::from_str(&resources).unwrap();
    assert_eq!(resources["limits"]["cpu"], "500m");
    assert_eq!(resources["limits"]["memory"], "128Mi");
    assert_eq!(resources["requests"]["cpu"], "100m");
    let big = k.file(
        "big.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: default}\nspec:\n  containers:\n  - {name: app, image: busybox, resources: {limits: {cpu: \"2\"}}}\n",
    );
    let refused = k.fails(&["apply", "-f", &big]);
    assert!(
        refused.contains(
            "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{refused}"
    );
    let class = k.file(
        "class.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: standard\n  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}\nprovisioner: example.com/none\n",
    );
    k.ok(&["apply", "-f", &class]);
    let claim = k.file(
        "claim.yaml",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
    );
    k.ok(&["apply", "-f", &claim]);
    let chosen = k.ok(&[
        "get",
        "pvc",
        "data",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.storageClassName}",
    ]);
    assert_eq!(chosen, "standard");
}

/// PodSecurity beyond labels: defaults and an exempt namespace from
/// `--admission-control-config-file`, a malformed label refused, tightening a namespace warns
/// of the pods it already holds, and a pinned version judges by its release's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_security_defaults_exemptions_versions_and_namespace_checks() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults: {enforce: baseline}\n    exemptions: {namespaces: [ops-tools]}\n",
    )
    .unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let config_arg = config.display().to_string();
    let server = RudderServer::start_with_args(
        RUDDER,
        &url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--disable-agent",
            "--admission-control-config-file",
            &config_arg,
        ],
    );
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "plain".into(),
    };
    let privileged = |name: &str, namespace: &str| {
        k.file(
            &format!("{name}.yaml"),
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  containers:\n  - {{name: shell, image: busybox, securityContext: {{privileged: true}}}}\n"),
        )
    };
    // The configured default (baseline) holds where no label says otherwise …
    k.ok(&["create", "namespace", "plain"]);
    let refused = k.fails(&["apply", "-f", &privileged("priv", "plain")]);
    assert!(
        refused.contains("pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"shell\" must not set securityContext.privileged=true)"),
        "{refused}"
    );
    // … but not in the exempt namespace, whose restricted label is ignored with a warning.
    k.ok(&["create", "namespace", "ops-tools"]);
    let labelled = k.run(&[
        "label",
        "namespace",
        "ops-tools",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    assert!(labelled.status.success());
    let warned = String::from_utf8_lossy(&labelled.stderr).to_string();
    assert!(
        warned.contains("namespace \"ops-tools\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"),
        "{warned}"
    );
    k.ok(&["apply", "-f", &privileged("priv", "ops-tools")]);

    // A label that does not parse is refused with upstream's field error.
    let refused = k.fails(&[
        "label",
        "namespace",
        "plain",
        "pod-security.kubernetes.io/enforce=strict",
    ]);
    assert!(
        refused.contains("metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
        "{refused}"
    );

    // Tightening a namespace warns of the pods that would now be refused.
    k.ok(&["create", "namespace", "legacy"]);
    k.ok(&[
        "label",
        "namespace",
        "legacy",
        "pod-security.kubernetes.io/enforce=privileged",
    ]);
    let root = |name: &str| {
        k.file(
            &format!("{name}.yaml"),
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: legacy}}\nspec:\n  securityContext: {{runAsNonRoot: true, runAsUser: 0, seccompProfile: {{type: RuntimeDefault}}}}\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}\n"),
        )
    };
    k.ok(&["apply", "-f", &root("root")]);
    let tightened = k.run(&[
        "label",
        "namespace",
        "legacy",
        "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    assert!(tightened.status.success());
    let warned = String::from_utf8_lossy(&tightened.stderr).to_string();
    assert!(
        warned.contains("existing pods in namespace \"legacy\" violate the new PodSecurity enforce level \"restricted:latest\"")
            && warned.contains("root: runAsUser=0"),
        "{warned}"
    );
    let refused = k.fails(&["apply", "-f", &root("root-2")]);
    assert!(
        refused.contains("runAsUser=0 (pod must not set runAsUser=0)"),
        "{refused}"
    );
    // Pinned to 1.22, restricted had no runAsUser rule yet.
    k.ok(&[
        "label",
        "namespace",
        "legacy",
        "pod-security.kubernetes.io/enforce-version=v1.22",
    ]);
    k.ok(&["apply", "-f", &root("root-2")]);
}

/// A ResourceQuota of 10 pods holds at exactly 10 when 50 pods are created at once through
/// two apiservers on one store (the controller-manager of one of them counts the quota).
async fn quota_holds_across_servers(url: String) {
    use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
    use kube::api::{Api, PostParams};

    let first =
        RudderServer::start_with_args(RUDDER, &url, &["--disable-scheduler", "--disable-agent"]);
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let second = RudderServer::start_with_args(
        RUDDER,
        &url,
        &[
            "--disable-scheduler",
            "--disable-agent",
            "--token",
            token.trim(),
        ],
    );
    let k = Kubectl {
        server: &first,
        version: "1.33",
        namespace: "quoted".into(),
    };
    k.ok(&["create", "namespace", "quoted"]);
    k.ok_ns(&["create", "quota", "pods", "--hard=pods=10"]);
    let clients = [
        rudder_tests::admin_client(first.kubeconfig()).await,
        rudder_tests::admin_client(second.kubeconfig()).await,
    ];
    let quotas: Api<ResourceQuota> = Api::namespaced(clients[0].clone(), "quoted");
    rudder_tests::eventually(
        "the quota is counted",
        std::time::Duration::from_secs(20),
        || {
            let quotas = quotas.clone();
            async move {
                let quota = quotas.get("pods").await.unwrap();
                quota.status.and_then(|s| s.hard).is_some()
            }
        },
    )
    .await;

    let creates = (0..50).map(|i| {
        let pods: Api<Pod> = Api::namespaced(clients[i % 2].clone(), "quoted");
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("p{i}")},
                "spec": {"containers": [{"name": "app", "image": "busybox"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await
        }
    });
    let outcomes = futures::future::join_all(creates).await;
    let created = outcomes.iter().filter(|o| o.is_ok()).count();
    let refusals: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(created, 10, "{refusals:?}");
    assert!(
        refusals.iter().all(|r| r
            .contains("exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10")),
        "{refusals:?}"
    );
    let pods: Api<Pod> = Api::namespaced(clients[1].clone(), "quoted");
    assert_eq!(
        pods.list(&Default::default()).await.unwrap().items.len(),
        10
    );
    let used = quotas
        .get("pods")
        .await
        .unwrap()
        .status
        .unwrap()
        .used
        .unwrap();
    assert_eq!(used["pods"].0, "10");

    // A deleted pod gives its share back.
    k.ok_ns(&["delete", "pods", "--all", "--wait=false"]);
    rudder_tests::eventually(
        "usage is given back",
        std::time::Duration::from_secs(20),
        || {
            let quotas = quotas.clone();
            async move {
                let used = quotas
                    .get("pods")
                    .await
                    .unwrap()
                    .status
                    .unwrap()
                    .used
                    .unwrap();
                used["pods"].0 == "0"
            }
        },
    )
    .await;
    k.ok_ns(&["run", "again", "--image=busybox"]);
}

rudder_tests::on_every_driver!(quota_holds_across_servers;
    a_quota_holds_across_two_servers_on_postgres => postgres,
    a_quota_holds_across_two_servers_on_etcd => etcd);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_classes_give_pods_overhead_placement_and_tolerations() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    let class = k.file(
        "gvisor.yaml",
        "apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
overhead: {podFixed: {cpu: 250m, memory: 120Mi}}
scheduling:
  nodeSelector: {sandbox: gvisor}
  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]
",
    );
    k.ok(&["apply", "-f", &class]);
    let listed = k.ok(&["get", "runtimeclasses"]);
    assert!(
        listed.contains("HANDLER") && listed.contains("runsc"),
        "{listed}"
    );
    let pod = k.file(
        "sandboxed.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: sandboxed}
spec:
  runtimeClassName: gvisor
  containers: [{name: c, image: localhost/busybox:1.36}]
",
    );
    k.ok_ns(&["create", "-f", &pod]);
    assert_eq!(
        k.jsonpath("pod", "sandboxed", "{.spec.overhead.cpu} {.spec.nodeSelector.sandbox} {.spec.tolerations[?(@.key==\"sandbox\")].operator}"),
        "250m gvisor Exists"
    );
    let missing = k.fails_ns(&[
        "run",
        "nowhere",
        "--image=localhost/busybox:1.36",
        "--overrides={\"spec\":{\"runtimeClassName\":\"kata\"}}",
    ]);
    assert!(
        missing.contains("pod rejected: RuntimeClass \"kata\" not found"),
        "{missing}"
    );
    let conflicting = k.fails_ns(&[
        "run",
        "elsewhere",
        "--image=localhost/busybox:1.36",
        "--overrides={\"spec\":{\"runtimeClassName\":\"gvisor\",\"nodeSelector\":{\"sandbox\":\"kata\"}}}",
    ]);
    assert!(
        conflicting.contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor"),
        "{conflicting}"
    );
}

/// Policies on the subresources a client writes: a binding is admitted as a `v1 Binding`, an
/// eviction as a `policy/v1 Eviction`, a token request as an `authentication.k8s.io/v1
/// TokenRequest`, a scale as an `autoscaling/v1 Scale`, an exec as a CONNECT with its
/// `v1 PodExecOptions` — and, as upstream, the writes they make
/// on their parent (the bound pod's update, the evicted pod's delete, the Deployment's new
/// replicas) are not admitted again as writes of the parent.
const SUBRESOURCE_POLICIES: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: subresource-creates}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods/binding, pods/eviction, serviceaccounts/token]}
    - {apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments/scale]}
  validations:
  - expression: \"(!has(object.metadata.name) || object.metadata.name != 'keep') && (request.kind.kind != 'TokenRequest' || object.spec.expirationSeconds <= 7200) && (request.kind.kind != 'Scale' || object.spec.replicas <= 3)\"
    messageExpression: \"request.subResource + ' ' + request.kind.group + '/' + request.kind.version + ' ' + request.kind.kind + ' of ' + request.name + ' refused'\"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: subresource-creates}
spec: {policyName: subresource-creates, validationActions: [Deny]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-rm}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CONNECT], resources: [pods/exec, pods/attach]}
  validations:
  - expression: \"request.kind.kind != 'PodExecOptions' || object.command[0] != 'rm'\"
    messageExpression: \"'exec of ' + object.command[0] + ' in ' + request.name + ' refused'\"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-rm}
spec: {policyName: no-rm, validationActions: [Deny]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-parent-writes}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [\"\"], apiVersions: [v1], operations: [UPDATE, DELETE], resources: [pods, pods/*]}
    - {apiGroups: [apps], apiVersions: [v1], operations: [UPDATE], resources: [deployments]}
  validations:
  - expression: \"false\"
    messageExpression: \"'not written here: ' + request.operation + ' ' + request.resource.resource + '/' + (has(request.subResource) ? request.subResource : '')\"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-parent-writes}
spec: {policyName: no-parent-writes, validationActions: [Deny]}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_evictions_token_requests_and_scales_are_admitted_as_their_own_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "subs".into(),
    };
    k.ok(&["create", "namespace", "subs"]);
    for pod in ["p", "keep", "go"] {
        k.ok_ns(&["run", pod, "--image=localhost/busybox:1.36"]);
    }
    k.ok_ns(&["create", "serviceaccount", "robot"]);
    k.ok_ns(&[
        "create",
        "deployment",
        "web",
        "--image=localhost/busybox:1.36",
    ]);
    let policies = k.file("policies.yaml", SUBRESOURCE_POLICIES);
    k.ok(&["apply", "-f", &policies]);

    let binding = |pod: &str| {
        k.file(
            &format!("binding-{pod}.json"),
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                    "target": {"kind": "Node", "name": "n1"}})
            .to_string(),
        )
    };
    let (bind_p, bind_keep) = (binding("p"), binding("keep"));
    k.ok(&[
        "create",
        "--raw",
        "/api/v1/namespaces/subs/pods/p/binding",
        "-f",
        &bind_p,
    ]);
    assert_eq!(k.jsonpath("pod", "p", "{.spec.nodeName}"), "n1");
    let refused = k.fails(&[
        "create",
        "--raw",
        "/api/v1/namespaces/subs/pods/keep/binding",
        "-f",
        &bind_keep,
    ]);
    assert!(
        refused.contains("binding /v1 Binding of keep refused"),
        "{refused}"
    );
    assert_eq!(k.jsonpath("pod", "keep", "{.spec.nodeName}"), "");

    let eviction = |pod: &str| {
        k.file(
            &format!("eviction-{pod}.json"),
            &json!({"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod, "namespace": "subs"}})
            .to_string(),
        )
    };
    let evict_keep = eviction("keep");
    let refused = k.fails(&[
        "create",
        "--raw",
        "/api/v1/namespaces/subs/pods/keep/eviction",
        "-f",
        &evict_keep,
    ]);
    assert!(
        refused.contains("eviction policy/v1 Eviction of keep refused"),
        "{refused}"
    );
    let evict_go = eviction("go");
    k.ok(&[
        "create",
        "--raw",
        "/api/v1/namespaces/subs/pods/go/eviction",
        "-f",
        &evict_go,
    ]);
    let gone = k.fails_ns(&["get", "pod", "go"]);
    assert!(gone.contains("not found"), "{gone}");

    assert!(!k.ok_ns(&["create", "token", "robot"]).trim().is_empty());
    let refused = k.fails_ns(&["create", "token", "robot", "--duration=10h"]);
    assert!(
        refused.contains("token authentication.k8s.io/v1 TokenRequest of robot refused"),
        "{refused}"
    );
    // A scale is admitted as an autoscaling/v1 Scale, not as an update of its Deployment.
    k.ok_ns(&["scale", "deployment", "web", "--replicas=2"]);
    assert_eq!(k.jsonpath("deployment", "web", "{.spec.replicas}"), "2");
    let refused = k.fails_ns(&["scale", "deployment", "web", "--replicas=5"]);
    assert!(
        refused.contains("scale autoscaling/v1 Scale of web refused"),
        "{refused}"
    );
    // An exec is a CONNECT with its PodExecOptions, judged before any kubelet is sought.
    let refused = k.fails_ns(&["exec", "keep", "--", "rm", "-rf", "/"]);
    assert!(refused.contains("exec of rm in keep refused"), "{refused}");
    let unbound = k.fails_ns(&["exec", "keep", "--", "ls"]);
    assert!(
        unbound.contains("does not have a host assigned") && !unbound.contains("refused"),
        "{unbound}"
    );
    // A client's own writes of the parents still meet the policy.
    let refused = k.fails_ns(&["label", "pod", "p", "x=y"]);
    assert!(
        refused.contains("not written here: UPDATE pods/"),
        "{refused}"
    );
    let refused = k.fails_ns(&["label", "deployment", "web", "x=y"]);
    assert!(
        refused.contains("not written here: UPDATE deployments/"),
        "{refused}"
    );
}
