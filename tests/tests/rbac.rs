//! RBAC with real kubectl on every driver: a token user bound to `view` in one namespace reads
//! pods there and nothing more; `kubectl auth can-i` answers from the same policy; a binding
//! deleted takes the grant away; the admin (system:masters) is never limited.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rudder_tests::{Kubectl, RudderServer};

const TOKENS: &str = "alice-token,alice,1001,\"dev\"\ndave-token,dave,1002,\"ops\"\n";

/// A kubeconfig for the server's cluster that authenticates with `token`.
fn token_kubeconfig(server: &RudderServer, token: &str) -> PathBuf {
    let auth = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    server.kubeconfig_with(Some(auth), None)
}

/// Runs `kubectl` 1.33 with `kubeconfig` (alice's or dave's); returns (exit code, stdout,
/// stderr).
fn as_alice(server: &RudderServer, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    server.kubectl_with("1.33", kubeconfig, args)
}

/// Runs `kubectl.<version>` with `kubeconfig`; returns (exit code, stdout, stderr).
fn as_user(
    server: &RudderServer,
    version: &str,
    kubeconfig: &Path,
    args: &[&str],
) -> (i32, String, String) {
    server.kubectl_with(version, kubeconfig, args)
}

/// Retries `check` for a few seconds: the policy follows the store by a watch.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn view_in_one_namespace(storage: &str, version: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        storage,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--disable-controller-manager",
        ],
    );
    let admin = Kubectl {
        server: &server,
        version,
        namespace: "a".into(),
    };
    for namespace in ["a", "b"] {
        admin.ok(&["create", "namespace", namespace]);
        admin.ok(&["-n", namespace, "run", "web", "--image=nginx"]);
        admin.ok(&[
            "-n",
            namespace,
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=k=v",
        ]);
    }
    let alice = token_kubeconfig(&server, "alice-token");

    // Before any binding alice is authenticated and may do nothing with resources.
    let (code, _, stderr) = as_user(&server, version, &alice, &["-n", "a", "get", "pods"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"a\""
        ),
        "{stderr}"
    );
    // Discovery and the self-reviews are everyone's (system:discovery, system:basic-user).
    let (code, stdout, _) = as_alice(
        &server,
        &alice,
        &["auth", "can-i", "list", "pods", "-n", "a"],
    );
    assert_eq!((code, stdout.trim()), (1, "no"));

    admin.ok(&[
        "-n",
        "a",
        "create",
        "rolebinding",
        "alice-views",
        "--clusterrole=view",
        "--user=alice",
    ]);
    eventually("alice lists pods in a", || {
        as_user(&server, version, &alice, &["-n", "a", "get", "pods"]).0 == 0
    });
    let (_, stdout, _) = as_user(
        &server,
        version,
        &alice,
        &["-n", "a", "get", "pods", "-o", "name"],
    );
    assert_eq!(stdout.trim(), "pod/web");
    let (code, _, _) = as_alice(
        &server,
        &alice,
        &["-n", "a", "get", "pod", "web", "-o", "yaml"],
    );
    assert_eq!(code, 0);
    let (code, _, stderr) = as_user(
        &server,
        version,
        &alice,
        &["-n", "a", "delete", "pod", "web"],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("cannot delete resource \"pods\""),
        "{stderr}"
    );
    let (code, _, stderr) = as_alice(
        &server,
        &alice,
        &["-n", "a", "run", "other", "--image=nginx"],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("cannot create resource \"pods\""),
        "{stderr}"
    );
    let (code, _, stderr) = as_user(&server, version, &alice, &["-n", "a", "get", "secrets"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("cannot list resource \"secrets\""),
        "{stderr}"
    );
    let (code, _, stderr) = as_user(&server, version, &alice, &["-n", "b", "get", "pods"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("in the namespace \"b\""), "{stderr}");
    for (verb, resource, namespace, answer) in [
        ("list", "pods", "a", "yes"),
        ("watch", "deployments.apps", "a", "yes"),
        ("delete", "pods", "a", "no"),
        ("get", "secrets", "a", "no"),
        ("list", "pods", "b", "no"),
    ] {
        let (_, stdout, _) = as_alice(
            &server,
            &alice,
            &["auth", "can-i", verb, resource, "-n", namespace],
        );
        assert_eq!(
            stdout.trim(),
            answer,
            "can-i {verb} {resource} -n {namespace}"
        );
    }

    // What alice holds here, as `kubectl auth can-i --list` prints it (SelfSubjectRulesReview).
    let (code, stdout, _) = as_user(
        &server,
        version,
        &alice,
        &["auth", "can-i", "--list", "-n", "a"],
    );
    assert_eq!(code, 0);
    let pods = stdout
        .lines()
        .find(|line| line.starts_with("pods ") || line.starts_with("pods\t"))
        .unwrap_or_else(|| panic!("no pods rule in:\n{stdout}"));
    assert!(pods.contains("[get list watch]"), "{pods}");
    assert!(
        stdout.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{stdout}"
    );
    // Who alice is: SelfSubjectReview v1 (1.28+) or v1beta1 (kubectl 1.27 asks for the beta).
    // Each session also asks with 1.27, so the beta is asked on every driver.
    let whoami_versions: &[&str] = if version == "1.27" {
        &["1.27"]
    } else {
        &[version, "1.27"]
    };
    for whoami_version in whoami_versions {
        let output = server
            .kubectl_command(whoami_version)
            .arg("--kubeconfig")
            .arg(&alice)
            .args(["auth", "whoami"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("alice") && stdout.contains("system:authenticated"),
            "{stdout}"
        );
    }
    // Another subject's access, asked by the admin (SubjectAccessReview) and by impersonation.
    let review = admin.file(
        "sar.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: alice\n  resourceAttributes:\n    namespace: a\n    verb: list\n    resource: pods\n",
    );
    let allowed = admin.ok(&["create", "-f", &review, "-o", "jsonpath={.status.allowed}"]);
    assert_eq!(allowed, "true");
    assert_eq!(
        admin
            .ok(&["auth", "can-i", "list", "pods", "-n", "a", "--as", "alice"])
            .trim(),
        "yes"
    );
    assert_eq!(
        admin
            .fails(&["auth", "can-i", "list", "pods", "-n", "b", "--as", "alice"])
            .trim(),
        ""
    );

    // Impersonation needs the `impersonate` verb.
    let (code, _, stderr) = as_user(
        &server,
        version,
        &alice,
        &["--as", "bob", "-n", "a", "get", "pods"],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{stderr}"
    );
    admin.ok(&[
        "create",
        "clusterrole",
        "impersonator",
        "--verb=impersonate",
        "--resource=users",
    ]);
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "alice-impersonates",
        "--clusterrole=impersonator",
        "--user=alice",
    ]);
    eventually("alice acts as bob", || {
        let (_, _, stderr) = as_user(
            &server,
            version,
            &alice,
            &["--as", "bob", "-n", "a", "get", "pods"],
        );
        stderr.contains("User \"bob\" cannot list resource \"pods\"")
    });

    // The grant goes with its binding.
    admin.ok(&["-n", "a", "delete", "rolebinding", "alice-views"]);
    eventually("alice no longer lists pods in a", || {
        as_user(&server, version, &alice, &["-n", "a", "get", "pods"]).0 == 1
    });
    // The admin is system:masters: allowed whatever RBAC holds.
    admin.ok(&["delete", "clusterrolebinding", "cluster-admin"]);
    admin.ok(&["-n", "b", "get", "secrets"]);
}

/// dave administers namespace `a` (the `admin` role there): he may hand out what he holds and
/// nothing more, with upstream's message naming what he lacks.
#[test]
fn roles_and_bindings_grant_only_what_the_writer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--disable-controller-manager",
        ],
    );
    let admin = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "a".into(),
    };
    admin.ok(&["create", "namespace", "a"]);
    admin.ok(&[
        "-n",
        "a",
        "create",
        "rolebinding",
        "dave-admin",
        "--clusterrole=admin",
        "--user=dave",
    ]);
    let dave = token_kubeconfig(&server, "dave-token");
    eventually("dave administers a", || {
        as_alice(&server, &dave, &["-n", "a", "get", "rolebindings"]).0 == 0
    });

    // What admin holds, dave may bind and put in a Role.
    let (code, _, stderr) = as_alice(
        &server,
        &dave,
        &[
            "-n",
            "a",
            "create",
            "rolebinding",
            "alice-views",
            "--clusterrole=view",
            "--user=alice",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = as_alice(
        &server,
        &dave,
        &[
            "-n",
            "a",
            "create",
            "role",
            "secret-reader",
            "--verb=get",
            "--resource=secrets",
        ],
    );
    assert_eq!(code, 0, "{stderr}");

    // More than he holds: refused, naming what is missing.
    let (code, _, stderr) = as_alice(
        &server,
        &dave,
        &[
            "-n",
            "a",
            "create",
            "rolebinding",
            "dave-root",
            "--clusterrole=cluster-admin",
            "--user=dave",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains(
            "rolebindings.rbac.authorization.k8s.io \"dave-root\" is forbidden: user \"dave\" (groups=[\"ops\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = as_alice(
        &server,
        &dave,
        &[
            "-n",
            "a",
            "create",
            "role",
            "node-reader",
            "--verb=get",
            "--resource=nodes",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\"]}"),
        "{stderr}"
    );
    // Allowed to bind that role (the `bind` verb), he may.
    admin.ok(&[
        "-n",
        "a",
        "create",
        "role",
        "node-reader",
        "--verb=get",
        "--resource=nodes",
    ]);
    let (code, _, _) = as_alice(
        &server,
        &dave,
        &[
            "-n",
            "a",
            "create",
            "rolebinding",
            "alice-nodes",
            "--role=node-reader",
            "--user=alice",
        ],
    );
    assert_eq!(code, 1);
    admin.ok(&[
        "-n",
        "a",
        "create",
        "role",
        "binder",
        "--verb=bind",
        "--resource=roles",
        "--resource-name=node-reader",
    ]);
    admin.ok(&[
        "-n",
        "a",
        "create",
        "rolebinding",
        "dave-binds",
        "--role=binder",
        "--user=dave",
    ]);
    eventually("dave binds node-reader", || {
        as_alice(
            &server,
            &dave,
            &[
                "-n",
                "a",
                "create",
                "rolebinding",
                "alice-nodes",
                "--role=node-reader",
                "--user=alice",
            ],
        )
        .0 == 0
    });
}

#[test]
fn view_in_one_namespace_on_sqlite_with_kubectl_1_27() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    view_in_one_namespace(&storage, "1.27");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_in_one_namespace_on_postgres_with_kubectl_1_30() {
    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let url = harness.url();
    tokio::task::spawn_blocking(move || view_in_one_namespace(&url, "1.30"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_in_one_namespace_on_etcd_with_kubectl_1_33() {
    let Some(harness) = rudder_storage::testing::etcd().await else {
        return;
    };
    let url = harness.url();
    tokio::task::spawn_blocking(move || view_in_one_namespace(&url, "1.33"))
        .await
        .unwrap();
}

/// ServiceAccount tokens: `kubectl create token` issues one that authenticates as the account
/// (and RBAC then judges it), a pod-bound one stops working when its pod goes, a token for a
/// deleted account or one tampered with is a plain 401, and the published JWKS verifies them.
#[test]
fn service_account_tokens_authenticate_until_what_they_are_bound_to_goes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--disable-controller-manager"],
    );
    let admin = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "a".into(),
    };
    admin.ok(&["create", "namespace", "a"]);
    admin.ok(&["-n", "a", "create", "serviceaccount", "robot"]);
    admin.ok(&[
        "-n",
        "a",
        "run",
        "web",
        "--image=nginx",
        "--overrides",
        r#"{"spec":{"serviceAccountName":"robot"}}"#,
    ]);
    admin.ok(&[
        "-n",
        "a",
        "create",
        "rolebinding",
        "robot-views",
        "--clusterrole=view",
        "--serviceaccount=a:robot",
    ]);

    let token = admin
        .ok(&["-n", "a", "create", "token", "robot"])
        .trim()
        .to_string();
    let robot = token_kubeconfig(&server, &token);
    let (code, stdout, stderr) = as_alice(&server, &robot, &["auth", "whoami", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let whoami: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        whoami["status"]["userInfo"]["username"],
        "system:serviceaccount:a:robot"
    );
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        serde_json::json!([
            "system:serviceaccounts",
            "system:serviceaccounts:a",
            "system:authenticated"
        ])
    );
    eventually("robot lists pods", || {
        as_alice(&server, &robot, &["-n", "a", "get", "pods"]).0 == 0
    });
    let (code, _, stderr) = as_alice(&server, &robot, &["-n", "a", "get", "secrets"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("User \"system:serviceaccount:a:robot\" cannot list resource \"secrets\""),
        "{stderr}"
    );

    // The JWKS the server publishes verifies the token, as an outside verifier would.
    let jwks: serde_json::Value =
        serde_json::from_str(&admin.ok(&["get", "--raw", "/openid/v1/jwks"])).unwrap();
    let key = &jwks["keys"][0];
    let decoding = jsonwebtoken::DecodingKey::from_ec_components(
        key["x"].as_str().unwrap(),
        key["y"].as_str().unwrap(),
    )
    .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&["https://kubernetes.default.svc.cluster.local"]);
    validation.set_issuer(&["https://kubernetes.default.svc.cluster.local"]);
    let claims = jsonwebtoken::decode::<serde_json::Value>(&token, &decoding, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["sub"], "system:serviceaccount:a:robot");
    assert_eq!(claims["kubernetes.io"]["namespace"], "a");
    let discovery: serde_json::Value =
        serde_json::from_str(&admin.ok(&["get", "--raw", "/.well-known/openid-configuration"]))
            .unwrap();
    assert_eq!(
        discovery["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );

    // TokenReview answers for it (what a webhook or a proxy in front of the API asks).
    let review = |token: &str| -> serde_json::Value {
        let file = admin.file(
            "token-review.json",
            &serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                "spec": {"token": token}})
            .to_string(),
        );
        serde_json::from_str(&admin.ok(&["create", "-f", &file, "-o", "json"])).unwrap()
    };
    let answer = review(&token);
    assert_eq!(answer["status"]["authenticated"], true, "{answer}");
    assert_eq!(
        answer["status"]["user"]["username"],
        "system:serviceaccount:a:robot"
    );
    assert_eq!(
        answer["spec"]["token"], "",
        "the answer does not echo the token"
    );

    // A changed signature, and too short a life, are refused.
    let mut tampered = token.clone();
    tampered.pop();
    tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
    let (code, _, stderr) = as_alice(
        &server,
        &token_kubeconfig(&server, &tampered),
        &["-n", "a", "get", "pods"],
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("Unauthorized"), "{stderr}");
    let answer = review(&tampered);
    assert_eq!(
        answer["status"]["authenticated"],
        serde_json::Value::Null,
        "{answer}"
    );
    assert_eq!(answer["status"]["error"], "invalid bearer token");
    let stderr = admin.fails(&["-n", "a", "create", "token", "robot", "--duration=5m"]);
    assert!(
        stderr.contains("may not specify a duration less than 10 minutes"),
        "{stderr}"
    );

    // Bound to the pod: valid while the pod is, refused once it is deleted.
    let bound = admin
        .ok(&[
            "-n",
            "a",
            "create",
            "token",
            "robot",
            "--bound-object-kind=Pod",
            "--bound-object-name=web",
        ])
        .trim()
        .to_string();
    let bound_kubeconfig = token_kubeconfig(&server, &bound);
    let (code, stdout, _) = as_alice(
        &server,
        &bound_kubeconfig,
        &["auth", "whoami", "-o", "json"],
    );
    assert_eq!(code, 0);
    assert!(
        stdout.contains("authentication.kubernetes.io/pod-name"),
        "{stdout}"
    );
    admin.ok(&[
        "-n",
        "a",
        "delete",
        "pod",
        "web",
        "--grace-period=0",
        "--force",
    ]);
    let (code, _, stderr) = as_alice(&server, &bound_kubeconfig, &["-n", "a", "get", "pods"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("Unauthorized"), "{stderr}");
    // The unbound token goes with its account.
    admin.ok(&["-n", "a", "delete", "serviceaccount", "robot"]);
    let (code, _, stderr) = as_alice(&server, &robot, &["-n", "a", "get", "pods"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("Unauthorized"), "{stderr}");
}

/// Bootstrap tokens: a `bootstrap-token-<id>` Secret in kube-system makes `<id>.<secret>` a
/// bearer token of `system:bootstrap:<id>` in `system:bootstrappers`, until it expires or goes.
#[test]
fn bootstrap_tokens_authenticate_while_their_secret_allows() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--disable-controller-manager"],
    );
    let admin = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "kube-system".into(),
    };
    let secret = |id: &str, expiration: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bootstrap-token-{id}\n  namespace: kube-system\ntype: bootstrap.kubernetes.io/token\nstringData:\n  token-id: {id}\n  token-secret: 0123456789abcdef\n  usage-bootstrap-authentication: \"true\"\n  auth-extra-groups: system:bootstrappers:worker\n  expiration: \"{expiration}\"\n"
        )
    };
    let live = admin.file("live.yaml", &secret("abcdef", "2999-01-01T00:00:00Z"));
    let expired = admin.file("expired.yaml", &secret("zyxwvu", "2000-01-01T00:00:00Z"));
    admin.ok(&["apply", "-f", &live]);
    admin.ok(&["apply", "-f", &expired]);

    let joining = token_kubeconfig(&server, "abcdef.0123456789abcdef");
    let (code, stdout, stderr) = as_alice(&server, &joining, &["auth", "whoami", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let whoami: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        whoami["status"]["userInfo"]["username"],
        "system:bootstrap:abcdef"
    );
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        serde_json::json!([
            "system:bootstrappers",
            "system:bootstrappers:worker",
            "system:authenticated"
        ])
    );
    for token in ["zyxwvu.0123456789abcdef", "abcdef.0123456789abcdee"] {
        let (code, _, stderr) = as_alice(
            &server,
            &token_kubeconfig(&server, token),
            &["auth", "whoami"],
        );
        assert_eq!(code, 1, "{token}");
        assert!(stderr.contains("Unauthorized"), "{token}: {stderr}");
    }
    admin.ok_ns(&["delete", "secret", "bootstrap-token-abcdef"]);
    let (code, _, _) = as_alice(&server, &joining, &["auth", "whoami"]);
    assert_eq!(code, 1, "a revoked bootstrap token still works");
}
