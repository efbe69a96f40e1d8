//! The installed kubectl binaries (1.27, 1.30 and 1.33) against a real `rudder server` on each
//! storage driver, with kubectl's default (strict, OpenAPI-backed) validation: client-side
//! `apply` of a multi-document manifest, server-side apply with conflicts and managedFields,
//! `diff`, `edit`, every `patch` type, `set image`, `rollout restart`, `explain` and bad
//! patches — asserting what kubectl prints and what ends up on the server, as against an
//! upstream apiserver. Then the python `kubernetes` client's `utils.create_from_yaml`.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use rudder_storage::testing;
use rudder_tests::{Kubectl, RudderServer};
use serde_json::Value;

macro_rules! kubectl_apply_session {
    ($($name:ident => $driver:ident, $version:literal;)+) => {
        $(
            #[tokio::test]
            async fn $name() {
                let Some(harness) = testing::$driver().await else {
                    return;
                };
                session(
                    env!("CARGO_BIN_EXE_rudder"),
                    &harness.url(),
                    harness.driver(),
                    $version,
                );
                harness.cleanup().await;
            }
        )+
    };
}

kubectl_apply_session! {
    kubectl_1_27_applies_on_sqlite => sqlite, "1.27";
    kubectl_1_30_applies_on_sqlite => sqlite, "1.30";
    kubectl_1_33_applies_on_sqlite => sqlite, "1.33";
    kubectl_1_27_applies_on_postgres => postgres, "1.27";
    kubectl_1_30_applies_on_postgres => postgres, "1.30";
    kubectl_1_33_applies_on_postgres => postgres, "1.33";
    kubectl_1_27_applies_on_etcd => etcd, "1.27";
    kubectl_1_30_applies_on_etcd => etcd, "1.30";
    kubectl_1_33_applies_on_etcd => etcd, "1.33";
}

fn session(binary: &str, storage_url: &str, driver: &str, version: &'static str) {
    // The apiserver as kubectl sees it: of the controllers, only the namespace controller
    // (namespace deletion is part of the session) and the garbage collector run, so what the
    // session creates stays as it was created (the controllers have tests of their own).
    let server = RudderServer::start_with_args(
        binary,
        storage_url,
        &["--controllers=namespace,garbage-collector"],
    );
    let tag = format!("k{}-{driver}", version.replace('.', ""));
    let k = Kubectl {
        server: &server,
        version,
        namespace: format!("{tag}-apply"),
    };
    assert_eq!(
        k.ok(&["create", "namespace", &k.namespace]),
        format!("namespace/{} created\n", k.namespace)
    );
    client_side_apply(&k);
    server_side_apply(&k);
    edit(&k);
    patches(&k);
    set_image_and_restart(&k);
    explain(&k);
    bad_patches(&k);
}

/// The multi-document manifest `apply -f` works on: a Deployment, a Service and a ConfigMap.
fn app_manifest(ns: &str, image: &str, env_b: bool, metrics_port: bool) -> String {
    let env_b = if env_b {
        "        - name: B\n          value: \"2\"\n"
    } else {
        ""
    };
    let metrics_port = if metrics_port {
        "        - containerPort: 9090\n          name: metrics\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: main
        image: {image}
        env:
        - name: A
          value: \"1\"
{env_b}        ports:
        - containerPort: 80
          name: http
{metrics_port}---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {ns}
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: http
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: {ns}
data:
  key: value
"
    )
}

fn client_side_apply(k: &Kubectl) {
    let ns = k.namespace.as_str();
    let first = k.file("app-1.yaml", &app_manifest(ns, "nginx:1.25", true, true));
    let second = k.file("app-2.yaml", &app_manifest(ns, "nginx:1.26", false, true));
    let third = k.file("app-3.yaml", &app_manifest(ns, "nginx:1.26", false, false));
    let containers = "{.spec.template.spec.containers[0]";

    assert_eq!(
        k.ok(&["apply", "-f", &first]),
        "deployment.apps/web created\nservice/web created\nconfigmap/web-config created\n"
    );
    let created = k.json(&["get", "deploy", "web"]);
    assert_eq!(created["metadata"]["generation"], 1);
    let last_applied: Value = serde_json::from_str(
        created["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        last_applied["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.25"
    );
    assert_eq!(
        k.jsonpath("svc", "web", "{.spec.ports[0].targetPort}"),
        "http"
    );
    assert_eq!(k.jsonpath("cm", "web-config", "{.data.key}"), "value");

    assert_eq!(
        k.ok(&["apply", "-f", &first]),
        "deployment.apps/web unchanged\nservice/web unchanged\nconfigmap/web-config unchanged\n"
    );
    assert_eq!(
        k.json(&["get", "deploy", "web"])["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // diff: a changed file exits 1 and shows the change; the live state exits 0.
    let diff = k.exits_1(&["diff", "-f", &second]);
    let diff = String::from_utf8(diff.stdout).unwrap();
    for line in [
        "-        image: nginx:1.25",
        "+        image: nginx:1.26",
        "-        - name: B",
        "-          value: \"2\"",
        "-  generation: 1",
        "+  generation: 2",
    ] {
        assert!(
            diff.lines().any(|l| l == line),
            "diff lacks {line:?}:\n{diff}"
        );
    }
    assert_eq!(k.ok(&["diff", "-f", &first]), "");
    // diff is a dry run: nothing changed.
    assert_eq!(
        k.json(&["get", "deploy", "web"])["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // A new image and one env var fewer: exactly that changes.
    assert_eq!(
        k.ok(&["apply", "-f", &second]),
        "deployment.apps/web configured\nservice/web unchanged\nconfigmap/web-config unchanged\n"
    );
    assert_eq!(
        k.jsonpath("deploy", "web", &format!("{containers}.image}}")),
        "nginx:1.26"
    );
    assert_eq!(
        k.jsonpath("deploy", "web", &format!("{containers}.env}}")),
        r#"[{"name":"A","value":"1"}]"#
    );
    assert_eq!(
        k.jsonpath(
            "deploy",
            "web",
            &format!("{containers}.ports[*].containerPort}}")
        ),
        "80 9090"
    );
    let changed = k.json(&["get", "deploy", "web"]);
    assert_eq!(changed["metadata"]["generation"], 2);
    assert_eq!(changed["spec"]["replicas"], 2);
    assert_eq!(
        changed["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(k.ok(&["diff", "-f", &second]), "");

    // A container port dropped from the file goes from the server.
    assert_eq!(
        k.ok(&["apply", "-f", &third]),
        "deployment.apps/web configured\nservice/web unchanged\nconfigmap/web-config unchanged\n"
    );
    assert_eq!(
        k.jsonpath("deploy", "web", &format!("{containers}.ports}}")),
        r#"[{"containerPort":80,"name":"http","protocol":"TCP"}]"#
    );
    assert_eq!(
        k.jsonpath("deploy", "web", &format!("{containers}.image}}")),
        "nginx:1.26"
    );
    assert_eq!(
        k.ok(&["apply", "-f", &third]),
        "deployment.apps/web unchanged\nservice/web unchanged\nconfigmap/web-config unchanged\n"
    );
}

/// The managedFields entry of `manager`, if any.
fn managed_by<'a>(object: &'a Value, manager: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["manager"] == manager)
}

fn server_side_apply(k: &Kubectl) {
    let ns = k.namespace.as_str();
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1
kind: Deployment
metadata:
  name: ssa
  namespace: {ns}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: ssa
  template:
    metadata:
      labels:
        app: ssa
    spec:
      containers:
      - name: main
        image: nginx:1.25
"
        )
    };
    let two = k.file("ssa-2.yaml", &deployment(2));
    let five = k.file("ssa-5.yaml", &deployment(5));

    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", &two]),
        "deployment.apps/ssa serverside-applied\n"
    );
    let applied = k.json(&["get", "deploy", "ssa", "--show-managed-fields"]);
    assert_eq!(applied["spec"]["replicas"], 2);
    let kubectl = managed_by(&applied, "kubectl").expect("kubectl's managedFields entry");
    assert_eq!(kubectl["operation"], "Apply");
    assert_eq!(kubectl["fieldsType"], "FieldsV1");
    assert!(
        kubectl["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "{kubectl}"
    );
    // A client-side apply never happened: no last-applied annotation.
    assert!(
        applied["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_null()
    );

    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", &two]),
        "deployment.apps/ssa serverside-applied\n"
    );
    let again = k.json(&["get", "deploy", "ssa"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        applied["metadata"]["resourceVersion"]
    );
    assert_eq!(again["metadata"]["generation"], 1);

    let conflict = k.exits_1(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &five,
    ]);
    let stderr = String::from_utf8(conflict.stderr).unwrap();
    assert!(
        stderr.contains(r#"conflict with "kubectl""#) && stderr.contains(".spec.replicas"),
        "{stderr}"
    );
    assert_eq!(k.jsonpath("deploy", "ssa", "{.spec.replicas}"), "2");

    assert_eq!(
        k.ok(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &five,
        ]),
        "deployment.apps/ssa serverside-applied\n"
    );
    let forced = k.json(&["get", "deploy", "ssa", "--show-managed-fields"]);
    assert_eq!(forced["spec"]["replicas"], 5);
    assert_eq!(forced["metadata"]["generation"], 2);
    let other = managed_by(&forced, "other").expect("other's managedFields entry");
    assert_eq!(other["operation"], "Apply");
    assert!(
        other["fieldsV1"]["f:spec"]["f:replicas"].is_object(),
        "{other}"
    );
    // The forced field moved: kubectl keeps the rest of what it applied, not replicas.
    let kubectl = managed_by(&forced, "kubectl").expect("kubectl's managedFields entry");
    assert!(
        kubectl["fieldsV1"]["f:spec"]["f:replicas"].is_null(),
        "{kubectl}"
    );
    assert!(
        kubectl["fieldsV1"]["f:spec"]["f:template"].is_object(),
        "{kubectl}"
    );
    // managedFields stay out of plain output.
    assert!(k.json(&["get", "deploy", "ssa"])["metadata"]["managedFields"].is_null());
    assert!(!k
        .ok_ns(&["get", "deploy", "ssa", "-o", "yaml"])
        .contains("managedFields"));
    assert!(k
        .ok_ns(&[
            "get",
            "deploy",
            "ssa",
            "-o",
            "yaml",
            "--show-managed-fields"
        ])
        .contains("manager: other"));
}

fn edit(k: &Kubectl) {
    assert_eq!(
        k.ok_ns(&["create", "configmap", "edited", "--from-literal=color=blue"]),
        "configmap/edited created\n"
    );
    assert_eq!(
        k.ok_ns_with_env(
            &["edit", "configmap", "edited"],
            &[("KUBE_EDITOR", "sed -i s/blue/green/")]
        ),
        "configmap/edited edited\n"
    );
    assert_eq!(k.jsonpath("cm", "edited", "{.data.color}"), "green");

    assert_eq!(
        k.ok_ns(&["create", "deployment", "x", "--image=busybox:1.36"]),
        "deployment.apps/x created\n"
    );
    assert_eq!(
        k.ok_ns_with_env(
            &["edit", "deployment", "x"],
            &[("KUBE_EDITOR", "sed -i s/busybox:1.36/busybox:1.37/")]
        ),
        "deployment.apps/x edited\n"
    );
    let edited = k.json(&["get", "deploy", "x"]);
    assert_eq!(
        edited["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1.37"
    );
    assert_eq!(edited["metadata"]["generation"], 2);

    // An editor that changes nothing: no write.
    let output = k.run_with_env(
        &k.in_namespace(&["edit", "configmap", "edited"]),
        &[("KUBE_EDITOR", "true")],
    );
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "Edit cancelled, no changes made.\n"
    );
}

fn patches(k: &Kubectl) {
    assert_eq!(
        k.ok_ns(&[
            "patch",
            "deploy",
            "x",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
        ]),
        "deployment.apps/x patched\n"
    );
    assert_eq!(k.jsonpath("deploy", "x", "{.spec.replicas}"), "3");

    assert_eq!(
        k.ok_ns(&[
            "patch",
            "deploy",
            "x",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"web"}}}"#,
        ]),
        "deployment.apps/x patched\n"
    );
    assert_eq!(
        k.jsonpath("deploy", "x", "{.metadata.labels}"),
        r#"{"app":"x","tier":"web"}"#
    );

    // Strategic merge: containers merge by name. Upstream puts a new item before the
    // server-only ones.
    assert_eq!(
        k.ok_ns(&[
            "patch",
            "deploy",
            "x",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox:1.36"}]}}}}"#,
        ]),
        "deployment.apps/x patched\n"
    );
    let patched = k.json(&["get", "deploy", "x"]);
    let containers = &patched["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_array().unwrap().len(), 2, "{containers}");
    assert_eq!(containers[0]["name"], "side");
    assert_eq!(containers[0]["image"], "busybox:1.36");
    assert_eq!(containers[0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(containers[1]["name"], "busybox");
    assert_eq!(containers[1]["image"], "busybox:1.37");
    assert_eq!(patched["spec"]["replicas"], 3);

    assert_eq!(
        k.ok_ns(&[
            "patch",
            "deploy",
            "x",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"$patch":"delete","name":"side"}]}}}}"#,
        ]),
        "deployment.apps/x patched\n"
    );
    assert_eq!(
        k.jsonpath(
            "deploy",
            "x",
            "{.spec.template.spec.containers[*].name} {.spec.template.spec.containers[*].image}"
        ),
        "busybox busybox:1.37"
    );

    // A patch that changes nothing: `patched (no change)`.
    assert_eq!(
        k.ok_ns(&[
            "patch",
            "deploy",
            "x",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"web"}}}"#,
        ]),
        "deployment.apps/x patched (no change)\n"
    );
}

fn set_image_and_restart(k: &Kubectl) {
    assert_eq!(
        k.ok_ns(&["set", "image", "deploy/x", "busybox=img:2"]),
        "deployment.apps/x image updated\n"
    );
    assert_eq!(
        k.jsonpath("deploy", "x", "{.spec.template.spec.containers[*].image}"),
        "img:2"
    );
    let before = k.json(&["get", "deploy", "x"]);
    assert!(before["spec"]["template"]["metadata"]["annotations"].is_null());

    assert_eq!(
        k.ok_ns(&["rollout", "restart", "deploy/x"]),
        "deployment.apps/x restarted\n"
    );
    let restarted = k.json(&["get", "deploy", "x"]);
    let at = restarted["spec"]["template"]["metadata"]["annotations"]
        ["kubectl.kubernetes.io/restartedAt"]
        .as_str()
        .unwrap_or_else(|| panic!("no restartedAt in {restarted}"));
    // RFC 3339, e.g. 2025-01-02T03:04:05Z (kubectl's local offset may replace the Z).
    assert!(
        at.len() >= 20 && at.as_bytes()[4] == b'-' && at.as_bytes()[10] == b'T',
        "{at}"
    );
    assert_eq!(
        restarted["metadata"]["generation"].as_i64().unwrap(),
        before["metadata"]["generation"].as_i64().unwrap() + 1
    );
}

fn explain(k: &Kubectl) {
    let spec = k.ok(&["explain", "deployment.spec"]);
    assert!(spec.contains("KIND:       Deployment"), "{spec}");
    assert!(spec.contains("FIELDS:"), "{spec}");
    assert!(
        spec.contains("  replicas\t<integer>\n    Number of desired pods."),
        "{spec}"
    );
    assert!(
        spec.contains("  template\t<PodTemplateSpec> -required-"),
        "{spec}"
    );

    let containers = k.ok(&["explain", "pod.spec.containers", "--recursive"]);
    assert!(containers.contains("KIND:       Pod"), "{containers}");
    for field in [
        "  imagePullPolicy\t<string>",
        "  name\t<string> -required-",
        "  livenessProbe\t<Probe>",
    ] {
        assert!(containers.contains(field), "no {field:?} in:\n{containers}");
    }
}

fn bad_patches(k: &Kubectl) {
    let before = k.json(&["get", "deploy", "x"]);

    let invalid = k.fails_ns(&["patch", "deploy", "x", "--type=merge", "-p", "{"]);
    assert!(
        invalid.starts_with("Error from server (BadRequest): "),
        "{invalid}"
    );

    let failed_test = k.fails_ns(&[
        "patch",
        "deploy",
        "x",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":7},{"op":"replace","path":"/spec/replicas","value":8}]"#,
    ]);
    assert!(
        failed_test.starts_with("The request is invalid: ")
            && failed_test.contains("/spec/replicas"),
        "{failed_test}"
    );

    for (kind, patch) in [
        ("--type=merge", r#"{"metadata":{"name":"y"}}"#),
        (
            "--type=json",
            r#"[{"op":"replace","path":"/metadata/name","value":"y"}]"#,
        ),
        ("--type=strategic", r#"{"metadata":{"name":"y"}}"#),
    ] {
        assert_eq!(
            k.fails_ns(&["patch", "deploy", "x", kind, "-p", patch]),
            "Error from server (BadRequest): the name of the object (y) does not match the name on the URL (x)\n"
        );
    }

    let after = k.json(&["get", "deploy", "x"]);
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(after["spec"]["replicas"], 3);
    let missing = k.fails_ns(&["get", "deploy", "y"]);
    assert_eq!(
        missing,
        "Error from server (NotFound): deployments.apps \"y\" not found\n"
    );
}

/// Whether `python3` can import the `kubernetes` package; outside CI a missing one skips the
/// test loudly, under `CI=true` it fails (scripts/test.sh installs it).
fn python_kubernetes() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|output| output.status.success());
    if found {
        return true;
    }
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        panic!(
            "python3 cannot import the kubernetes package but CI=true: this test needs it; run scripts/test.sh"
        );
    }
    eprintln!(
        "SKIPPED: python3 cannot import the kubernetes package; run scripts/test.sh to install it"
    );
    false
}

const PYTHON_MANIFEST: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: py-web
  labels:
    app: py-web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: py-web
  template:
    metadata:
      labels:
        app: py-web
    spec:
      containers:
      - name: main
        image: nginx:1.27
---
apiVersion: v1
kind: Service
metadata:
  name: py-web
spec:
  selector:
    app: py-web
  ports:
  - port: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: py-config
data:
  greeting: hello
";

#[tokio::test]
async fn python_kubernetes_client_creates_from_yaml_on_sqlite() {
    if !python_kubernetes() {
        return;
    }
    let Some(harness) = testing::sqlite().await else {
        return;
    };
    let server = RudderServer::start(env!("CARGO_BIN_EXE_rudder"), &harness.url());
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "python".to_string(),
    };
    k.ok(&["create", "namespace", "python"]);
    let manifest = k.file("manifest.yaml", PYTHON_MANIFEST);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/create_from_yaml.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(server.kubeconfig())
        .arg(&manifest)
        .arg("python")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} failed:\n{stdout}{}\nserver log:\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["created"],
        serde_json::json!(["ConfigMap", "Deployment", "Service"])
    );
    assert_eq!(
        report["deployment"],
        serde_json::json!({
            "replicas": 2,
            "image": "nginx:1.27",
            "imagePullPolicy": "IfNotPresent",
            "generation": 1,
        })
    );
    assert_eq!(report["service"]["type"], "ClusterIP");
    assert_eq!(report["service"]["ports"], serde_json::json!([[80, "TCP"]]));
    assert_eq!(
        report["configMap"],
        serde_json::json!({"greeting": "hello"})
    );
    assert_eq!(report["listed"], serde_json::json!(["py-web"]));

    // What the python client created is what kubectl sees.
    assert_eq!(
        k.ok_ns(&["get", "deploy,svc,cm", "-l", "app=py-web", "-o", "name"]),
        "deployment.apps/py-web\n"
    );
    assert_eq!(
        k.jsonpath("svc", "py-web", "{.spec.clusterIP}"),
        report["service"]["clusterIP"].as_str().unwrap()
    );
    harness.cleanup().await;
}
