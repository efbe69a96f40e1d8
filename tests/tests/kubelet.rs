//! The node agent inside `rudder server`, as a user drives it with kubectl: real pods on a
//! real containerd (started by scripts/test.sh as scripts/containerd.sh does, socket in
//! `RUDDER_TEST_CONTAINERD`) — Running with a pod IP that answers HTTP, `logs` (and `-f`),
//! `exec` with kubectl 1.27 (SPDY), 1.30 and 1.33, `cp` both ways, `port-forward`,
//! CrashLoopBackOff, a liveness restart, a Job to Completed, a configMap volume that follows
//! updates, and deletion; and hollow nodes (fake runtime) running a Deployment and a Job.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rudder_tests::{Kubectl, RudderServer};

const IMAGE: &str = "localhost/busybox:1.36";

fn containerd_socket() -> Option<String> {
    match std::env::var("RUDDER_TEST_CONTAINERD") {
        Ok(socket) if !socket.is_empty() => Some(socket),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "RUDDER_TEST_CONTAINERD is not set under CI=true: scripts/test.sh starts containerd"
            );
            eprintln!("SKIPPING: RUDDER_TEST_CONTAINERD is not set (scripts/test.sh sets it)");
            None
        }
    }
}

fn sqlite_url(name: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join(format!("{name}.db")).display()
    );
    (dir, url)
}

fn http_get(address: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    write!(stream, "GET / HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    // Read until the answer is whole or the peer goes quiet (a tunnel may not pass the close on).
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = stream.read(&mut buffer) {
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

async fn until(what: &str, seconds: u64, check: impl Fn() -> bool) {
    rudder_tests::eventually(what, Duration::from_secs(seconds), || {
        let ok = check();
        async move { ok }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_on_containerd_and_kubectl_reaches_them() {
    let Some(socket) = containerd_socket() else {
        return;
    };
    let (_store, url) = sqlite_url("kubelet");
    let endpoint = format!("unix://{socket}");
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &url,
        &[
            "--container-runtime-endpoint",
            &endpoint,
            "--kubelet-port",
            "0",
            "--node-name",
            "rudder-kubelet-test",
        ],
    );
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    until("the node is Ready", 30, || {
        kubectl
            .run(&[
                "get",
                "node",
                "rudder-kubelet-test",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .stdout
            == b"True"
    })
    .await;

    // A web server: Running and Ready, its IP answers, its logs show the request.
    kubectl.ok(&[
        "run",
        "web",
        &format!("--image={IMAGE}"),
        "--",
        "httpd",
        "-f",
        "-v",
        "-p",
        "8080",
        "-h",
        "/www",
    ]);
    until("web is Ready", 60, || {
        kubectl.jsonpath(
            "pod",
            "web",
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        ) == "True"
    })
    .await;
    let ip = kubectl.jsonpath("pod", "web", "{.status.podIP}");
    assert!(http_get(&format!("{ip}:8080")).contains("hello from localhost/busybox:1.36"));
    until("the request is in the log", 10, || {
        kubectl
            .run(&["logs", "web"])
            .stdout
            .ends_with(b"response:200\n")
    })
    .await;
    let pod = kubectl.json(&["get", "pod", "web"]);
    let status = &pod["status"]["containerStatuses"][0];
    assert!(status["containerID"]
        .as_str()
        .unwrap()
        .starts_with("containerd://"));
    assert!(status["imageID"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(pod["status"]["qosClass"], "BestEffort");
    assert!(pod["status"]["hostIP"]
        .as_str()
        .is_some_and(|ip| !ip.is_empty()));

    // exec over SPDY (1.27) and WebSocket (1.30+), cp both ways.
    for version in ["1.27", "1.30", "1.33"] {
        let kubectl = Kubectl {
            server: &server,
            version,
            namespace: "default".into(),
        };
        let out = kubectl.ok(&[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; hostname",
        ]);
        assert_eq!(out, "out\nweb\n", "kubectl {version} exec");
        let failed = kubectl.run(&["exec", "web", "--", "sh", "-c", "exit 3"]);
        assert_eq!(
            failed.status.code(),
            Some(3),
            "kubectl {version} passes the exit code"
        );
        assert!(kubectl
            .ok(&["logs", "web", "--tail=1"])
            .ends_with("response:200\n"));
    }
    let local = server.write_file("to-pod.txt", "copied in\n");
    kubectl.ok(&["cp", local.to_str().unwrap(), "web:/tmp/in.txt"]);
    assert_eq!(
        kubectl.ok(&["exec", "web", "--", "cat", "/tmp/in.txt"]),
        "copied in\n"
    );
    let back = server.data_dir().join("from-pod.html");
    kubectl.ok(&["cp", "web:/www/index.html", back.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&back)
        .unwrap()
        .contains("hello from"));

    // port-forward: curl through it.
    let mut forward = server
        .kubectl_command("1.33")
        .args(["port-forward", "pod/web", ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut output = BufReader::new(forward.stdout.take().unwrap());
    output.read_line(&mut line).unwrap();
    // Keep reading what kubectl prints, or it dies of a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut output, &mut std::io::sink()));
    let port = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let through = http_get(&format!("127.0.0.1:{port}"));
    assert!(
        through.contains("hello from"),
        "through port-forward ({line:?}): {through:?}"
    );
    let _ = forward.kill();
    let _ = forward.wait();

    // logs -f streams what comes later.
    let mut follow = server
        .kubectl_command("1.33")
        .args(["logs", "-f", "web", "--tail=0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = follow.stdout.take().unwrap();
    let followed = std::thread::spawn(move || {
        let mut line = String::new();
        BufReader::new(reader).read_line(&mut line).unwrap();
        line
    });
    std::thread::sleep(Duration::from_millis(500));
    http_get(&format!("{ip}:8080"));
    let line = followed.join().unwrap();
    assert!(line.contains("response:200"), "followed {line:?}");
    let _ = follow.kill();
    let _ = follow.wait();

    // A crashing container backs off; a liveness failure restarts; a Job completes.
    kubectl.ok(&[
        "run",
        "crash",
        &format!("--image={IMAGE}"),
        "--",
        "sh",
        "-c",
        "echo dying; exit 1",
    ]);
    kubectl.ok(&[
        "create",
        "job",
        "once",
        &format!("--image={IMAGE}"),
        "--",
        "sh",
        "-c",
        "echo done",
    ]);
    kubectl.ok(&[
        "apply",
        "-f",
        &kubectl.file(
            "live.yaml",
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello}
---
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  containers:
  - name: app
    image: localhost/busybox:1.36
    command: [sh, -c, "touch /tmp/healthy; sleep 3; rm /tmp/healthy; sleep 600"]
    livenessProbe:
      exec: {command: [cat, /tmp/healthy]}
      periodSeconds: 1
      failureThreshold: 1
---
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  containers:
  - name: app
    image: localhost/busybox:1.36
    command: [sleep, "600"]
    env:
    - name: GREETING
      valueFrom: {configMapKeyRef: {name: settings, key: greeting}}
    volumeMounts: [{name: config, mountPath: /config}]
  volumes:
  - name: config
    configMap: {name: settings}
"#,
        ),
    ]);
    until("crash is in CrashLoopBackOff", 60, || {
        kubectl.jsonpath(
            "pod",
            "crash",
            "{.status.containerStatuses[0].state.waiting.reason}",
        ) == "CrashLoopBackOff"
    })
    .await;
    let crash = kubectl.json(&["get", "pod", "crash"]);
    let last = &crash["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 1);
    assert_eq!(last["reason"], "Error");
    assert!(kubectl
        .ok(&["logs", "crash", "--previous"])
        .contains("dying"));
    until("the job completes", 60, || {
        kubectl.jsonpath("job", "once", "{.status.succeeded}") == "1"
    })
    .await;
    until("live is restarted by its liveness probe", 60, || {
        kubectl
            .jsonpath("pod", "live", "{.status.containerStatuses[0].restartCount}")
            .parse::<i32>()
            .unwrap_or(0)
            >= 1
    })
    .await;
    until("reader runs", 30, || {
        kubectl.jsonpath("pod", "reader", "{.status.phase}") == "Running"
    })
    .await;
    assert_eq!(
        kubectl.ok(&[
            "exec",
            "reader",
            "--",
            "sh",
            "-c",
            "echo $GREETING; cat /config/greeting"
        ]),
        "hello\nhello"
    );
    kubectl.ok(&[
        "patch",
        "configmap",
        "settings",
        "-p",
        r#"{"data":{"greeting":"updated"}}"#,
    ]);
    until("the volume follows the ConfigMap", 40, || {
        kubectl
            .run(&["exec", "reader", "--", "cat", "/config/greeting"])
            .stdout
            == b"updated"
    })
    .await;

    // Deleting a pod stops its containers and removes it.
    kubectl.ok(&[
        "delete",
        "pod",
        "web",
        "crash",
        "live",
        "reader",
        "--wait=true",
        "--timeout=60s",
    ]);
    assert_eq!(
        kubectl.ok(&["get", "pods", "-l", "run=web", "-o", "name"]),
        ""
    );
    let listed = Command::new("ctr")
        .args([
            "--address",
            &socket,
            "-n",
            "k8s.io",
            "containers",
            "ls",
            "-q",
        ])
        .output()
        .unwrap();
    let remaining = String::from_utf8_lossy(&listed.stdout).lines().count();
    // Only the Job's finished pod (kept for its logs) may still have containers.
    assert!(
        remaining <= 2,
        "containers left after deleting the pods: {remaining}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hollow_nodes_run_a_deployment_and_a_job() {
    let (_store, url) = sqlite_url("hollow");
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &url,
        &["--disable-agent", "--hollow-nodes", "3", "--node-name", "h"],
    );
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    until("three hollow nodes are Ready", 30, || {
        kubectl
            .run(&["get", "nodes", "-o", "name"])
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count()
            == 3
    })
    .await;
    kubectl.ok(&[
        "create",
        "deployment",
        "web",
        "--image=localhost/web:1",
        "--replicas=6",
    ]);
    kubectl.ok(&[
        "create",
        "job",
        "batch",
        "--image=localhost/job:1",
        "--",
        "true",
    ]);
    until("the deployment is available", 60, || {
        kubectl.jsonpath("deployment", "web", "{.status.availableReplicas}") == "6"
    })
    .await;
    until("the job completes", 60, || {
        kubectl.jsonpath("job", "batch", "{.status.succeeded}") == "1"
    })
    .await;
    let nodes = kubectl.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ]);
    let distinct: std::collections::BTreeSet<&str> = nodes.split(' ').collect();
    assert!(distinct.len() >= 2, "spread over the hollow nodes: {nodes}");
    let lease = kubectl.ok(&[
        "get",
        "lease",
        "-n",
        "kube-node-lease",
        "h-0",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(lease, "h-0");
    kubectl.ok(&["delete", "deployment", "web"]);
    until("the deployment's pods are gone", 60, || {
        kubectl
            .run(&["get", "pods", "-l", "app=web", "-o", "name"])
            .stdout
            .is_empty()
    })
    .await;
}
