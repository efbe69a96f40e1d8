//! The installed kubectl binaries (1.27, 1.30 and 1.33) against a real `rudder server` on each
//! storage driver: one session of everyday commands — discovery, the `create` generators,
//! `run`/`expose`, every `get` output format, watch, manifests, label/annotate/scale, describe,
//! wait, RBAC checks and bad input — asserting what kubectl prints and its exit codes, as
//! against an upstream apiserver (with no controllers running).

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rudder_storage::testing;
use rudder_tests::{Kubectl, RudderServer};
use serde_json::Value;

macro_rules! kubectl_session {
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

kubectl_session! {
    kubectl_1_27_drives_rudder_on_sqlite => sqlite, "1.27";
    kubectl_1_30_drives_rudder_on_sqlite => sqlite, "1.30";
    kubectl_1_33_drives_rudder_on_sqlite => sqlite, "1.33";
    kubectl_1_27_drives_rudder_on_postgres => postgres, "1.27";
    kubectl_1_30_drives_rudder_on_postgres => postgres, "1.30";
    kubectl_1_33_drives_rudder_on_postgres => postgres, "1.33";
    kubectl_1_27_drives_rudder_on_etcd => etcd, "1.27";
    kubectl_1_30_drives_rudder_on_etcd => etcd, "1.30";
    kubectl_1_33_drives_rudder_on_etcd => etcd, "1.33";
}

/// A table kubectl printed: its header words and each row's words.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn table(text: &str) -> Table {
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no table in {text:?}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .collect();
    Table { header, rows }
}

impl Table {
    fn assert_header(&self, expected: &str) {
        let expected: Vec<&str> = expected.split_whitespace().collect();
        assert_eq!(self.header, expected, "table header");
    }

    /// The row whose first column is `name`.
    fn row(&self, name: &str) -> &[String] {
        self.rows
            .iter()
            .find(|row| row.first().is_some_and(|first| first == name))
            .unwrap_or_else(|| panic!("no row {name} in {:?}", self.rows))
    }

    /// The first cells of the row named `name`, before the AGE column and anything after it.
    fn assert_row(&self, name: &str, cells: &[&str]) {
        let row = self.row(name);
        assert_eq!(&row[..cells.len()], cells, "row {name}");
    }

    fn names(&self) -> Vec<&str> {
        self.rows.iter().map(|row| row[0].as_str()).collect()
    }
}

/// The labelled field of a `describe` output: the text after `label:` on the first
/// unindented line that starts with it.
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}:");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"))
        .trim()
}

/// `text` without ANSI colour sequences (`ESC [ … m`).
fn strip_colours(text: &str) -> String {
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<usize> = text.split('-').map(str::len).collect();
    groups == [8, 4, 4, 4, 12] && text.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

fn in_service_range(ip: &str) -> bool {
    let ip: Ipv4Addr = ip
        .parse()
        .unwrap_or_else(|_| panic!("{ip:?} is not an IPv4 address"));
    u32::from(ip) & 0xfff0_0000 == u32::from(Ipv4Addr::new(10, 96, 0, 0))
}

/// Polls `check` every 200 ms for up to 30 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
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
        namespace: format!("{tag}-ns"),
    };
    discovery(&k);
    let names = create_everything(&k, &tag);
    get_outputs(&k);
    watch(&k);
    manifests(&k);
    labels_annotations_scale(&k);
    describe(&k, &names);
    wait_for_delete(&k);
    bad_input(&k, &tag);
    deletes(&k);
    cleanup(&k, &names);
}

fn discovery(k: &Kubectl) {
    let version = k.ok(&["version"]);
    if k.version == "1.27" {
        // 1.27 still prints the long form by default.
        let server = version
            .lines()
            .find(|line| line.starts_with("Server Version: "))
            .unwrap();
        assert!(
            server.contains(r#"Major:"1", Minor:"33", GitVersion:"v1.33."#),
            "{server}"
        );
    } else {
        assert!(
            version
                .lines()
                .any(|line| line.starts_with("Server Version: v1.33.")),
            "{version}"
        );
    }
    let json: Value = serde_json::from_str(&k.ok(&["version", "-o", "json"])).unwrap();
    assert_eq!(json["serverVersion"]["major"], "1");
    assert_eq!(json["serverVersion"]["minor"], "33");

    let resources = table(&k.ok(&["api-resources"]));
    resources.assert_header("NAME SHORTNAMES APIVERSION NAMESPACED KIND");
    for row in [
        ["pods", "po", "v1", "true", "Pod"],
        ["namespaces", "ns", "v1", "false", "Namespace"],
        ["nodes", "no", "v1", "false", "Node"],
        ["configmaps", "cm", "v1", "true", "ConfigMap"],
        ["services", "svc", "v1", "true", "Service"],
        ["deployments", "deploy", "apps/v1", "true", "Deployment"],
        ["cronjobs", "cj", "batch/v1", "true", "CronJob"],
        [
            "priorityclasses",
            "pc",
            "scheduling.k8s.io/v1",
            "false",
            "PriorityClass",
        ],
    ] {
        assert!(
            resources.rows.iter().any(|r| r == &row),
            "api-resources lacks {row:?}"
        );
    }
    for row in [
        ["secrets", "v1", "true", "Secret"],
        ["jobs", "batch/v1", "true", "Job"],
        ["roles", "rbac.authorization.k8s.io/v1", "true", "Role"],
        [
            "rolebindings",
            "rbac.authorization.k8s.io/v1",
            "true",
            "RoleBinding",
        ],
        [
            "selfsubjectaccessreviews",
            "authorization.k8s.io/v1",
            "false",
            "SelfSubjectAccessReview",
        ],
    ] {
        assert!(
            resources.rows.iter().any(|r| r == &row),
            "api-resources lacks {row:?}"
        );
    }

    let versions = k.ok(&["api-versions"]);
    let versions: Vec<&str> = versions.lines().collect();
    for expected in [
        "v1",
        "apps/v1",
        "batch/v1",
        "rbac.authorization.k8s.io/v1",
        "scheduling.k8s.io/v1",
        "authorization.k8s.io/v1",
        "coordination.k8s.io/v1",
    ] {
        assert!(
            versions.contains(&expected),
            "api-versions lacks {expected}"
        );
    }

    // 1.27–1.30 colour cluster-info's output even when it is not a terminal.
    let info = strip_colours(&k.ok(&["cluster-info"]));
    let url = std::fs::read_to_string(k.server.kubeconfig())
        .unwrap()
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert!(
        info.contains(&format!("Kubernetes control plane is running at {url}")),
        "{info}"
    );

    assert_eq!(k.ok(&["get", "--raw", "/healthz"]), "ok");
    assert_eq!(k.ok(&["get", "--raw", "/readyz"]), "ok");

    let namespaces = table(&k.ok(&["get", "ns"]));
    namespaces.assert_header("NAME STATUS AGE");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        namespaces.assert_row(name, &[name, "Active"]);
    }
    assert_eq!(k.ok(&["auth", "can-i", "create", "pods"]), "yes\n");
    assert_eq!(
        k.ok(&["auth", "can-i", "delete", "deployments.apps", "-A"]),
        "yes\n"
    );
}

/// Cluster-scoped names this session creates (and must delete).
struct Names {
    node: String,
    priority_class: String,
}

fn create_everything(k: &Kubectl, tag: &str) -> Names {
    let ns = k.namespace.as_str();
    assert_eq!(
        k.ok(&["create", "namespace", ns]),
        format!("namespace/{ns} created\n")
    );
    let created = [
        (
            vec![
                "create",
                "deployment",
                "web",
                "--image=nginx",
                "--replicas=2",
            ],
            "deployment.apps/web created",
        ),
        (
            vec![
                "create",
                "configmap",
                "cfg",
                "--from-literal=a=1",
                "--from-literal=b=2",
            ],
            "configmap/cfg created",
        ),
        (
            vec![
                "create",
                "secret",
                "generic",
                "sec",
                "--from-literal=password=hunter2",
            ],
            "secret/sec created",
        ),
        (
            vec!["create", "service", "clusterip", "svc1", "--tcp=80:8080"],
            "service/svc1 created",
        ),
        (
            vec!["create", "job", "job1", "--image=busybox"],
            "job.batch/job1 created",
        ),
        (
            vec![
                "create",
                "cronjob",
                "cj1",
                "--image=busybox",
                "--schedule=*/5 * * * *",
            ],
            "cronjob.batch/cj1 created",
        ),
        (
            vec![
                "create",
                "role",
                "reader",
                "--verb=get,list",
                "--resource=pods",
            ],
            "role.rbac.authorization.k8s.io/reader created",
        ),
        (
            vec![
                "create",
                "rolebinding",
                "reader-binding",
                "--role=reader",
                "--user=alice",
            ],
            "rolebinding.rbac.authorization.k8s.io/reader-binding created",
        ),
        (
            vec!["create", "serviceaccount", "robot"],
            "serviceaccount/robot created",
        ),
        (
            vec!["create", "quota", "q1", "--hard=pods=10,services=5"],
            "resourcequota/q1 created",
        ),
        (vec!["run", "pod1", "--image=nginx"], "pod/pod1 created"),
        (
            vec![
                "expose",
                "deployment",
                "web",
                "--port=80",
                "--target-port=8080",
            ],
            "service/web exposed",
        ),
    ];
    for (args, message) in created {
        assert_eq!(k.ok_ns(&args), format!("{message}\n"));
    }

    let priority_class = format!("pc-{tag}");
    assert_eq!(
        k.ok(&["create", "priorityclass", &priority_class, "--value=1000"]),
        format!("priorityclass.scheduling.k8s.io/{priority_class} created\n")
    );
    let pc = table(&k.ok(&["get", "pc", &priority_class]));
    pc.assert_header("NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY");
    pc.assert_row(&priority_class, &[&priority_class, "1000", "false"]);

    let node = format!("node-{tag}");
    let manifest = k.server.write_file(
        &format!("{node}.yaml"),
        &format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n  labels:\n    kubernetes.io/hostname: {node}\n"
        ),
    );
    assert_eq!(
        k.ok(&[
            "create",
            "-f",
            manifest.to_str().unwrap(),
            "--validate=false"
        ]),
        format!("node/{node} created\n")
    );

    // The exposed deployment's Service got a ClusterIP from the default range, distinct from
    // the other Service's.
    let web = k.ok_ns(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let svc1 = k.ok_ns(&["get", "svc", "svc1", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(in_service_range(&web), "{web} not in 10.96.0.0/12");
    assert!(in_service_range(&svc1), "{svc1} not in 10.96.0.0/12");
    assert_ne!(web, svc1);
    let services = table(&k.ok_ns(&["get", "svc"]));
    services.assert_header("NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE");
    services.assert_row("web", &["web", "ClusterIP", &web, "<none>", "80/TCP"]);
    services.assert_row("svc1", &["svc1", "ClusterIP", &svc1, "<none>", "80/TCP"]);
    let service = k.json(&["get", "svc", "web"]);
    assert_eq!(service["spec"]["selector"]["app"], "web");
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(service["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(service["spec"]["clusterIPs"][0], web.as_str());

    let secret = k.json(&["get", "secret", "sec"]);
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"]["password"], "aHVudGVyMg==");
    let cronjobs = k.ok_ns(&["get", "cj"]);
    let cronjobs: Vec<&str> = cronjobs.lines().collect();
    assert_eq!(
        cronjobs[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    );
    assert!(
        cronjobs[1].starts_with("cj1    */5 * * * *   <none>     False     0        <none>"),
        "{:?}",
        cronjobs[1]
    );
    let quota = k.json(&["get", "quota", "q1"]);
    assert_eq!(quota["spec"]["hard"]["pods"], "10");
    assert_eq!(quota["spec"]["hard"]["services"], "5");
    let binding = k.json(&["get", "rolebinding", "reader-binding"]);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], "reader");
    assert_eq!(binding["subjects"][0]["kind"], "User");
    assert_eq!(binding["subjects"][0]["name"], "alice");

    Names {
        node,
        priority_class,
    }
}

fn get_outputs(k: &Kubectl) {
    let ns = k.namespace.as_str();
    let pods = table(&k.ok_ns(&["get", "po"]));
    pods.assert_header("NAME READY STATUS RESTARTS AGE");
    assert_eq!(pods.names(), ["pod1"]);
    pods.assert_row("pod1", &["pod1", "0/1", "Pending", "0"]);

    let all = k.ok_ns(&["get", "all"]);
    let sections: Vec<Table> = all.split("\n\n").map(table).collect();
    let section = |first: &str| {
        sections
            .iter()
            .find(|section| section.rows.iter().any(|row| row[0] == first))
            .unwrap_or_else(|| panic!("get all lacks {first}:\n{all}"))
    };
    section("pod/pod1").assert_header("NAME READY STATUS RESTARTS AGE");
    section("pod/pod1").assert_row("pod/pod1", &["pod/pod1", "0/1", "Pending", "0"]);
    section("service/web").assert_header("NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE");
    section("service/svc1");
    section("deployment.apps/web").assert_header("NAME READY UP-TO-DATE AVAILABLE AGE");
    section("deployment.apps/web").assert_row(
        "deployment.apps/web",
        &["deployment.apps/web", "0/2", "0", "0"],
    );
    section("job.batch/job1").assert_header("NAME STATUS COMPLETIONS DURATION AGE");
    section("cronjob.batch/cj1");

    let everywhere = table(&k.ok(&["get", "po", "-A"]));
    everywhere.assert_header("NAMESPACE NAME READY STATUS RESTARTS AGE");
    assert!(
        everywhere
            .rows
            .iter()
            .any(|row| row[..5] == [ns, "pod1", "0/1", "Pending", "0"]),
        "{:?}",
        everywhere.rows
    );

    let yaml = k.ok_ns(&["get", "po", "pod1", "-o", "yaml"]);
    for line in [
        "apiVersion: v1",
        "kind: Pod",
        "  name: pod1",
        &format!("  namespace: {ns}"),
        "    run: pod1",
        "  restartPolicy: Always",
        "  - image: nginx",
        "  phase: Pending",
    ] {
        assert!(yaml.lines().any(|l| l == line), "no {line:?} in:\n{yaml}");
    }
    let list = k.ok_ns(&["get", "po", "-o", "yaml"]);
    assert!(list.lines().any(|l| l == "kind: List"), "{list}");
    assert!(list.lines().any(|l| l == "- apiVersion: v1"), "{list}");

    let pod = k.json(&["get", "po", "pod1"]);
    assert_eq!(pod["apiVersion"], "v1");
    assert_eq!(pod["kind"], "Pod");
    let metadata = &pod["metadata"];
    assert_eq!(metadata["name"], "pod1");
    assert_eq!(metadata["namespace"], ns);
    assert_eq!(metadata["labels"]["run"], "pod1");
    assert!(is_uuid(metadata["uid"].as_str().unwrap()), "{metadata}");
    let revision = metadata["resourceVersion"].as_str().unwrap();
    assert!(
        !revision.is_empty() && revision.bytes().all(|b| b.is_ascii_digit()),
        "{revision}"
    );
    assert!(
        metadata["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z'),
        "{metadata}"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["securityContext"], serde_json::json!({}));
    let container = &spec["containers"][0];
    assert_eq!(container["name"], "pod1");
    assert_eq!(container["image"], "nginx");
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(container["terminationMessagePolicy"], "File");
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["status"]["qosClass"], "BestEffort");

    let deployment = k.json(&["get", "deploy", "web"]);
    assert_eq!(deployment["apiVersion"], "apps/v1");
    assert_eq!(deployment["metadata"]["generation"], 1);
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    assert_eq!(spec["selector"]["matchLabels"]["app"], "web");
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], "25%");
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(spec["template"]["spec"]["dnsPolicy"], "ClusterFirst");

    let wide = table(&k.ok_ns(&["get", "po", "-o", "wide"]));
    wide.assert_header("NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES");
    let row = wide.row("pod1");
    assert_eq!(&row[..4], ["pod1", "0/1", "Pending", "0"]);
    assert_eq!(&row[5..], ["<none>", "<none>", "<none>", "<none>"]);

    assert_eq!(k.ok_ns(&["get", "po", "-o", "name"]), "pod/pod1\n");
    assert_eq!(
        k.ok_ns(&["get", "deploy,svc", "-o", "name"]),
        "deployment.apps/web\nservice/svc1\nservice/web\n"
    );

    assert_eq!(
        table(&k.ok_ns(&["get", "po", "-l", "run=pod1"])).names(),
        ["pod1"]
    );
    assert_eq!(
        table(&k.ok_ns(&["get", "po", "-l", "run in (pod1,other)"])).names(),
        ["pod1"]
    );
    let none = k.run(&k.in_namespace(&["get", "po", "-l", "run=nothing"]));
    assert!(none.status.success());
    assert!(none.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&none.stderr),
        format!("No resources found in {ns} namespace.\n")
    );
    assert_eq!(
        table(&k.ok_ns(&["get", "po", "--field-selector=metadata.name=pod1"])).names(),
        ["pod1"]
    );
    assert_eq!(
        table(&k.ok_ns(&["get", "po", "--field-selector=status.phase=Pending"])).names(),
        ["pod1"]
    );
    let running = k.run(&k.in_namespace(&["get", "po", "--field-selector=status.phase=Running"]));
    assert!(running.status.success());
    assert!(running.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&running.stderr),
        format!("No resources found in {ns} namespace.\n")
    );
    assert_eq!(
        table(&k.ok_ns(&["get", "svc", "--field-selector=metadata.name!=web"])).names(),
        ["svc1"]
    );
}

/// `kubectl get cm -w` prints the existing rows, then a row per change.
fn watch(k: &Kubectl) {
    let mut child = k
        .server
        .kubectl_command(k.version)
        .args([
            "-n",
            &k.namespace,
            "get",
            "cm",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut expect = |wanted: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = received
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("watch never printed {wanted:?}; it printed {seen:?}"));
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            seen.push(line);
            if words.len() >= wanted.len() && words[..wanted.len()] == *wanted {
                return;
            }
        }
    };
    expect(&["EVENT", "NAME", "DATA", "AGE"]);
    expect(&["ADDED", "cfg", "2"]);
    k.ok_ns(&["create", "configmap", "watched", "--from-literal=x=1"]);
    expect(&["ADDED", "watched", "1"]);
    k.ok_ns(&["label", "configmap", "watched", "seen=yes"]);
    expect(&["MODIFIED", "watched", "1"]);
    k.ok_ns(&["delete", "configmap", "watched"]);
    expect(&["DELETED", "watched", "1"]);
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap();
}

fn manifests(k: &Kubectl) {
    let ns = k.namespace.as_str();
    let configmap = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: filecm\n  namespace: {ns}\n  labels:\n    from: file\ndata:\n  key: {value}\n"
        )
    };
    let first = k
        .server
        .write_file(&format!("{ns}-cm-1.yaml"), &configmap("one"));
    let second = k
        .server
        .write_file(&format!("{ns}-cm-2.yaml"), &configmap("two"));
    let first = first.to_str().unwrap();
    let second = second.to_str().unwrap();
    assert_eq!(
        k.ok(&["create", "-f", first, "--validate=false"]),
        "configmap/filecm created\n"
    );
    let error = k.fails(&["create", "-f", first, "--validate=false"]);
    assert_eq!(
        error,
        format!(
            "Error from server (AlreadyExists): error when creating \"{first}\": configmaps \"filecm\" already exists\n"
        )
    );
    let before = k.json(&["get", "cm", "filecm"]);
    assert_eq!(
        k.ok(&["replace", "-f", second, "--validate=false"]),
        "configmap/filecm replaced\n"
    );
    let after = k.json(&["get", "cm", "filecm"]);
    assert_eq!(after["data"]["key"], "two");
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_ne!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        k.ok(&["delete", "-f", first]),
        "configmap \"filecm\" deleted\n"
    );
    assert_eq!(
        k.fails_ns(&["get", "cm", "filecm"]),
        "Error from server (NotFound): configmaps \"filecm\" not found\n"
    );

    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: applied\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: applied\n  template:\n    metadata:\n      labels:\n        app: applied\n    spec:\n      containers:\n      - name: main\n        image: nginx:1.27\n"
        )
    };
    let applied = k
        .server
        .write_file(&format!("{ns}-deploy-1.yaml"), &deployment(1));
    let changed = k
        .server
        .write_file(&format!("{ns}-deploy-2.yaml"), &deployment(3));
    let applied = applied.to_str().unwrap();
    let changed = changed.to_str().unwrap();
    assert_eq!(
        k.ok(&["apply", "-f", applied, "--validate=false"]),
        "deployment.apps/applied created\n"
    );
    let object = k.json(&["get", "deploy", "applied"]);
    let last_applied = object["metadata"]["annotations"]
        ["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    let last_applied: Value = serde_json::from_str(last_applied).unwrap();
    assert_eq!(last_applied["spec"]["replicas"], 1);
    assert_eq!(
        k.ok(&["apply", "-f", applied, "--validate=false"]),
        "deployment.apps/applied unchanged\n"
    );
    assert_eq!(
        k.json(&["get", "deploy", "applied"])["metadata"]["resourceVersion"],
        object["metadata"]["resourceVersion"]
    );
    assert_eq!(
        k.ok(&["apply", "-f", changed, "--validate=false"]),
        "deployment.apps/applied configured\n"
    );
    let object = k.json(&["get", "deploy", "applied"]);
    assert_eq!(object["spec"]["replicas"], 3);
    assert_eq!(object["metadata"]["generation"], 2);
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(
        k.ok(&["delete", "-f", changed]),
        "deployment.apps \"applied\" deleted\n"
    );
}

fn labels_annotations_scale(k: &Kubectl) {
    // kubectl 1.27 says "annotate" where later versions say "annotated".
    let annotated = if k.version == "1.27" {
        "pod/pod1 annotate\n"
    } else {
        "pod/pod1 annotated\n"
    };
    assert_eq!(
        k.ok_ns(&["label", "pod", "pod1", "tier=web"]),
        "pod/pod1 labeled\n"
    );
    assert_eq!(
        k.fails_ns(&["label", "pod", "pod1", "tier=db"]),
        "error: 'tier' already has a value (web), and --overwrite is false\n"
    );
    assert_eq!(
        k.ok_ns(&["label", "pod", "pod1", "tier=db", "--overwrite"]),
        "pod/pod1 labeled\n"
    );
    assert_eq!(
        k.ok_ns(&[
            "get",
            "pod",
            "pod1",
            "-o",
            "jsonpath={.metadata.labels.tier}"
        ]),
        "db"
    );
    assert_eq!(
        k.ok_ns(&["annotate", "pod", "pod1", "note=hello"]),
        annotated
    );
    assert_eq!(
        k.fails_ns(&["annotate", "pod", "pod1", "note=bye"]),
        "error: --overwrite is false but found the following declared annotation(s): 'note' already has a value (hello)\n"
    );
    assert_eq!(
        k.ok_ns(&["annotate", "pod", "pod1", "note=bye", "--overwrite"]),
        annotated
    );
    assert_eq!(
        k.ok_ns(&[
            "get",
            "pod",
            "pod1",
            "-o",
            "jsonpath={.metadata.annotations.note}"
        ]),
        "bye"
    );
    assert_eq!(
        k.ok_ns(&["label", "pod", "pod1", "tier-"]),
        "pod/pod1 unlabeled\n"
    );
    let labels = k.json(&["get", "pod", "pod1"])["metadata"]["labels"].clone();
    assert_eq!(labels, serde_json::json!({"run": "pod1"}));
    // Selecting by the label on a list of kinds.
    assert_eq!(
        k.ok_ns(&["label", "deploy,svc", "-l", "app=web", "team=blue"]),
        "deployment.apps/web labeled\nservice/web labeled\n"
    );

    assert_eq!(
        k.ok_ns(&["scale", "deployment", "web", "--replicas=5"]),
        "deployment.apps/web scaled\n"
    );
    let deployments = table(&k.ok_ns(&["get", "deploy", "web"]));
    deployments.assert_header("NAME READY UP-TO-DATE AVAILABLE AGE");
    deployments.assert_row("web", &["web", "0/5", "0", "0"]);
    assert_eq!(
        k.ok_ns(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]),
        "5"
    );
    assert_eq!(
        k.ok_ns(&["scale", "deployment", "web", "--replicas=0"]),
        "deployment.apps/web scaled\n"
    );
    table(&k.ok_ns(&["get", "deploy", "web"])).assert_row("web", &["web", "0/0", "0", "0"]);
    assert_eq!(
        k.fails_ns(&[
            "scale",
            "deployment",
            "web",
            "--current-replicas=3",
            "--replicas=1"
        ]),
        "error: Expected replicas to be 3, was 0\n"
    );
}

fn describe(k: &Kubectl, names: &Names) {
    let ns = k.namespace.as_str();
    let pod = k.ok_ns(&["describe", "pod", "pod1"]);
    assert_eq!(field(&pod, "Name"), "pod1");
    assert_eq!(field(&pod, "Namespace"), ns);
    assert_eq!(field(&pod, "Node"), "<none>");
    assert_eq!(field(&pod, "Labels"), "run=pod1");
    assert_eq!(field(&pod, "Annotations"), "note: bye");
    assert_eq!(field(&pod, "Status"), "Pending");
    assert_eq!(field(&pod, "QoS Class"), "BestEffort");
    // No node exists: the scheduler's FailedScheduling event says so, once it is written.
    let events = pod.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.trim() == "<none>"
            || (events.contains("FailedScheduling")
                && events.contains("default-scheduler")
                && events.contains("no nodes available to schedule pods")),
        "{pod}"
    );
    assert!(
        pod.contains("Containers:\n  pod1:\n    Image:        nginx\n"),
        "{pod}"
    );

    let deployment = k.ok_ns(&["describe", "deployment", "web"]);
    assert_eq!(field(&deployment, "Name"), "web");
    assert_eq!(field(&deployment, "Namespace"), ns);
    assert_eq!(field(&deployment, "Selector"), "app=web");
    assert_eq!(
        field(&deployment, "Replicas"),
        "0 desired | 0 updated | 0 total | 0 available | 0 unavailable"
    );
    assert_eq!(field(&deployment, "StrategyType"), "RollingUpdate");
    assert_eq!(
        field(&deployment, "RollingUpdateStrategy"),
        "25% max unavailable, 25% max surge"
    );
    assert!(
        deployment.contains("Pod Template:\n  Labels:  app=web\n"),
        "{deployment}"
    );

    let node = k.ok(&["describe", "node", &names.node]);
    assert_eq!(field(&node, "Name"), names.node);
    assert_eq!(field(&node, "Roles"), "<none>");
    assert_eq!(
        field(&node, "Labels"),
        format!("kubernetes.io/hostname={}", names.node)
    );
    assert_eq!(field(&node, "Taints"), "<none>");
    assert_eq!(field(&node, "Unschedulable"), "false");
    assert!(
        node.contains("Non-terminated Pods:          (0 in total)"),
        "{node}"
    );
    let nodes = table(&k.ok(&["get", "nodes", &names.node]));
    nodes.assert_header("NAME STATUS ROLES AGE VERSION");
    nodes.assert_row(&names.node, &[&names.node, "Unknown", "<none>"]);

    let namespace = k.ok(&["describe", "namespace", ns]);
    assert_eq!(field(&namespace, "Name"), ns);
    assert_eq!(
        field(&namespace, "Labels"),
        format!("kubernetes.io/metadata.name={ns}")
    );
    assert_eq!(field(&namespace, "Status"), "Active");
    assert!(
        namespace.contains("Resource Quotas\n  Name:"),
        "{namespace}"
    );
    assert!(namespace.contains("No LimitRange resource."), "{namespace}");
}

/// `kubectl wait --for=delete` times out while a finalizer holds a deleted pod, and returns
/// once the finalizer goes.
fn wait_for_delete(k: &Kubectl) {
    let ns = k.namespace.as_str();
    let manifest = k.server.write_file(
        &format!("{ns}-held.yaml"),
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: held\n  namespace: {ns}\n  finalizers:\n  - example.com/hold\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
        ),
    );
    assert_eq!(
        k.ok(&[
            "create",
            "-f",
            manifest.to_str().unwrap(),
            "--validate=false"
        ]),
        "pod/held created\n"
    );
    assert_eq!(
        k.ok_ns(&["delete", "pod", "held", "--wait=false"]),
        "pod \"held\" deleted\n"
    );
    table(&k.ok_ns(&["get", "pod", "held"])).assert_row("held", &["held", "0/1", "Terminating"]);
    assert!(k.json(&["get", "pod", "held"])["metadata"]["deletionTimestamp"].is_string());
    // client-go may also log that its watch ended when the 1 s deadline cut it short.
    let timed_out = k.fails_ns(&["wait", "--for=delete", "pod/held", "--timeout=1s"]);
    assert!(
        timed_out.ends_with("error: timed out waiting for the condition on pods/held\n"),
        "{timed_out}"
    );

    let waiter = k
        .server
        .kubectl_command(k.version)
        .args([
            "-n",
            ns,
            "wait",
            "--for=delete",
            "pod/held",
            "--timeout=30s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        k.ok_ns(&[
            "patch",
            "pod",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]),
        "pod/held patched\n"
    );
    let output = waiter.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "pod/held condition met\n"
    );
    assert_eq!(
        k.fails_ns(&["get", "pod", "held"]),
        "Error from server (NotFound): pods \"held\" not found\n"
    );
}

fn bad_input(k: &Kubectl, tag: &str) {
    let ns = k.namespace.as_str();
    let bad = k.server.write_file(
        &format!("{ns}-bad.yaml"),
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n  namespace: {ns}\n"
        ),
    );
    let error = k.fails(&["create", "-f", bad.to_str().unwrap(), "--validate=false"]);
    assert!(
        error.starts_with(
            "The ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
        ),
        "{error}"
    );

    assert_eq!(
        k.fails_ns(&["get", "pods", "--field-selector=foo=bar"]),
        "Error from server (BadRequest): Unable to find \"/v1, Resource=pods\" that match label selector \"\", field selector \"foo=bar\": field label not supported: foo\n"
    );
    assert_eq!(
        k.fails_ns(&["get", "po", "-l", "a in (b"]),
        "Error from server (BadRequest): Unable to find \"/v1, Resource=pods\" that match label selector \"a in (b\", field selector \"\": unable to parse requirement: found '', expected: ',' or ')'\n"
    );

    let missing = format!("{tag}-missing");
    assert_eq!(
        k.fails(&["-n", &missing, "create", "configmap", "x"]),
        format!("error: failed to create configmap: namespaces \"{missing}\" not found\n")
    );
    assert_eq!(
        k.fails(&["-n", &missing, "run", "x", "--image=nginx"]),
        format!("Error from server (NotFound): namespaces \"{missing}\" not found\n")
    );
    assert_eq!(
        k.fails_ns(&["create", "configmap", "cfg"]),
        "error: failed to create configmap: configmaps \"cfg\" already exists\n"
    );
    assert_eq!(
        k.fails_ns(&["get", "deploy", "nope"]),
        "Error from server (NotFound): deployments.apps \"nope\" not found\n"
    );
    assert_eq!(
        k.fails_ns(&["delete", "secret", "nope"]),
        "Error from server (NotFound): secrets \"nope\" not found\n"
    );
}

fn deletes(k: &Kubectl) {
    for name in ["grouped-a", "grouped-b", "single"] {
        k.ok_ns(&["create", "configmap", name]);
    }
    k.ok_ns(&["label", "configmap", "grouped-a", "grouped-b", "group=x"]);
    assert_eq!(
        k.ok_ns(&["delete", "configmap", "single"]),
        "configmap \"single\" deleted\n"
    );
    assert_eq!(
        k.ok_ns(&["delete", "configmap", "-l", "group=x"]),
        "configmap \"grouped-a\" deleted\nconfigmap \"grouped-b\" deleted\n"
    );
    assert_eq!(table(&k.ok_ns(&["get", "configmap"])).names(), ["cfg"]);
    assert_eq!(
        k.ok_ns(&["delete", "configmap", "--all"]),
        "configmap \"cfg\" deleted\n"
    );
    let left = k.run(&k.in_namespace(&["get", "configmap"]));
    assert!(left.status.success());
    assert_eq!(
        String::from_utf8_lossy(&left.stderr),
        format!("No resources found in {} namespace.\n", k.namespace)
    );
    assert_eq!(
        k.ok_ns(&["delete", "job", "job1", "--wait=false"]),
        "job.batch \"job1\" deleted\n"
    );
}

fn cleanup(k: &Kubectl, names: &Names) {
    let ns = k.namespace.as_str();
    assert_eq!(
        k.ok(&["delete", "node", &names.node]),
        format!("node \"{}\" deleted\n", names.node)
    );
    assert_eq!(
        k.ok(&["delete", "priorityclass", &names.priority_class]),
        format!(
            "priorityclass.scheduling.k8s.io \"{}\" deleted\n",
            names.priority_class
        )
    );
    // A pod held by a finalizer keeps the namespace Terminating, so that state can be seen.
    let manifest = k.server.write_file(
        &format!("{ns}-last.yaml"),
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: last\n  namespace: {ns}\n  finalizers:\n  - example.com/hold\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
        ),
    );
    k.ok(&[
        "create",
        "-f",
        manifest.to_str().unwrap(),
        "--validate=false",
    ]);
    assert_eq!(
        k.ok(&["delete", "namespace", ns, "--wait=false"]),
        format!("namespace \"{ns}\" deleted\n")
    );
    assert_eq!(
        k.ok(&["get", "namespace", ns, "-o", "jsonpath={.status.phase}"]),
        "Terminating"
    );
    table(&k.ok(&["get", "namespace", ns])).assert_row(ns, &[ns, "Terminating"]);
    assert_eq!(
        k.fails_ns(&["create", "configmap", "late"]),
        format!(
            "error: failed to create configmap: configmaps \"late\" is forbidden: unable to create new content in namespace {ns} because it is being terminated\n"
        )
    );
    // Everything else goes in the background; the held pod is marked for deletion.
    eventually("the namespace's other content to be deleted", || {
        k.ok_ns(&[
            "get",
            "all,configmaps,secrets,serviceaccounts,roles,rolebindings,resourcequotas",
            "-o",
            "name",
        ]) == "pod/last\n"
    });
    assert!(k.json(&["get", "pod", "last"])["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        k.ok(&["get", "namespace", ns, "-o", "jsonpath={.status.phase}"]),
        "Terminating"
    );
    k.ok_ns(&[
        "patch",
        "pod",
        "last",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    let gone = format!("Error from server (NotFound): namespaces \"{ns}\" not found\n");
    eventually("the namespace to go away", || {
        let output = k.run(&["get", "namespace", ns]);
        !output.status.success() && String::from_utf8_lossy(&output.stderr) == gone
    });
    let left = k.run(&k.in_namespace(&["get", "all"]));
    assert!(left.status.success());
    assert_eq!(
        String::from_utf8_lossy(&left.stderr),
        format!("No resources found in {ns} namespace.\n")
    );
}
