//! The node agent inside `rudder server`, as a user drives it with kubectl: real pods on a
//! real containerd (started by scripts/test.sh as scripts/containerd.sh does, socket in
//! `RUDDER_TEST_CONTAINERD`) — Running with a pod IP that answers HTTP, `logs` (and `-f`),
//! `exec` with kubectl 1.27 (SPDY), 1.30 and 1.33, `cp` both ways, `port-forward`,
//! CrashLoopBackOff, a liveness restart, a Job to Completed, a configMap volume that follows
//! updates, the Summary API and resource metrics through nodes/proxy, `kubectl top` (1.27
//! and 1.33), eviction of a pod over
//! its emptyDir sizeLimit, and deletion; and hollow nodes (fake runtime) running a Deployment and a Job.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use rudder_tests::{Kubectl, RudderServer};

const IMAGE: &str = "localhost/busybox:1.36";

fn containerd_socket() -> Option<String> {
    socket_from("RUDDER_TEST_CONTAINERD")
}

/// The containerd socket `variable` names; under `CI=true` its absence fails the test.
fn socket_from(variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(socket) if !socket.is_empty() => Some(socket),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{variable} is not set under CI=true: scripts/test.sh starts containerd"
            );
            eprintln!("SKIPPING: {variable} is not set (scripts/test.sh sets it)");
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

    // The node's images, as the CRI sees them.
    let images = rudder_tests::run(
        env!("CARGO_BIN_EXE_rudder"),
        &["image", "ls", "--container-runtime-endpoint", &endpoint],
    );
    let listed = String::from_utf8_lossy(&images.stdout);
    assert!(
        listed.contains(IMAGE) && listed.contains("localhost/pause:3.9"),
        "{listed}"
    );

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

    // The node's and the pod's usage through the apiserver's nodes/proxy: the Summary API
    // and the Prometheus resource metrics metrics-server scrapes.
    let node_proxy = "/api/v1/nodes/rudder-kubelet-test/proxy";
    let summary: serde_json::Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "--raw",
        &format!("{node_proxy}/stats/summary"),
    ]))
    .unwrap();
    assert_eq!(summary["node"]["nodeName"], "rudder-kubelet-test");
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert!(
        summary["node"]["runtime"]["imageFs"]["usedBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let web_stats = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "web")
        .unwrap_or_else(|| panic!("web is not in the summary: {summary}"));
    let web_container = &web_stats["containers"][0];
    assert_eq!(web_container["name"], "web");
    assert!(web_container["memory"]["workingSetBytes"].as_u64().unwrap() > 0);
    assert!(
        web_container["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(web_stats["ephemeral-storage"]["usedBytes"]
        .as_u64()
        .is_some());
    assert!(
        web_stats["process_stats"]["process_count"]
            .as_u64()
            .is_some_and(|count| count >= 1),
        "{web_stats}"
    );
    let metrics = kubectl.ok(&["get", "--raw", &format!("{node_proxy}/metrics/resource")]);
    for family in [
        "container_memory_working_set_bytes{container=\"web\",namespace=\"default\",pod=\"web\"}",
        "container_cpu_usage_seconds_total{container=\"web\",namespace=\"default\",pod=\"web\"}",
        "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"}",
        "node_memory_working_set_bytes ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(family)),
            "{family} missing from\n{metrics}"
        );
    }

    // `kubectl top` (metrics.k8s.io, answered from the kubelet's summary) with the oldest
    // and newest kubectl; a CPU rate needs two samples, so the first answers may be empty.
    for version in ["1.27", "1.33"] {
        let top = Kubectl {
            server: &server,
            version,
            namespace: "default".into(),
        };
        until("kubectl top pod web", 60, || {
            top.run(&["top", "pod", "web", "--no-headers"])
                .status
                .success()
        })
        .await;
        let pods = top.ok(&["top", "pod", "web", "--containers", "--no-headers"]);
        assert!(pods.starts_with("web ") && pods.contains(" web "), "{pods}");
        let nodes = top.ok(&["top", "node", "--no-headers"]);
        assert!(nodes.starts_with("rudder-kubelet-test "), "{nodes}");
    }
    let missing = kubectl.run(&["top", "pod", "no-such-pod"]);
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("pods.metrics.k8s.io \"no-such-pod\" not found"),
        "{missing:?}"
    );
    let listed: serde_json::Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=run%3Dweb",
    ]))
    .unwrap();
    assert_eq!(listed["kind"], "PodMetricsList");
    assert_eq!(listed["items"][0]["metadata"]["name"], "web", "{listed}");
    assert!(listed["items"][0]["containers"][0]["usage"]["cpu"]
        .as_str()
        .is_some_and(|cpu| cpu.ends_with('n')));

    // A pod that outgrows its emptyDir's sizeLimit is evicted: Failed, reason Evicted, with
    // upstream's message and a DisruptionTarget condition; its containers are gone.
    kubectl.ok(&[
        "apply",
        "-f",
        &kubectl.file(
            "filler.yaml",
            &format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: filler}}
spec:
  containers:
  - name: fill
    image: {IMAGE}
    command: [sh, -c, "dd if=/dev/zero of=/data/blob bs=1024 count=3072 && sleep 3600"]
    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - name: data
    emptyDir: {{sizeLimit: 1Mi}}
"#
            ),
        ),
    ]);
    until("filler is evicted", 60, || {
        kubectl.jsonpath("pod", "filler", "{.status.reason}") == "Evicted"
    })
    .await;
    let filler = kubectl.json(&["get", "pod", "filler"]);
    assert_eq!(filler["status"]["phase"], "Failed", "{filler}");
    assert_eq!(
        filler["status"]["message"],
        "Usage of EmptyDir volume \"data\" exceeds the limit \"1Mi\". "
    );
    let disruption = filler["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .unwrap_or_else(|| panic!("no DisruptionTarget: {filler}"));
    assert_eq!(disruption["reason"], "TerminationByKubelet");
    assert_eq!(
        filler["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137,
        "{filler}"
    );
    // Events are recorded apart from the status (best effort, as upstream's recorder): the
    // kubelet sends this one first, but its create may still be on its way.
    let evicted = || {
        kubectl.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=filler,reason=Evicted",
            "-o",
            "jsonpath={.items[*].message}",
        ])
    };
    until("the Evicted event is listed", 30, || {
        evicted().contains("Usage of EmptyDir volume")
    })
    .await;
    // Its container stays until the pod is deleted: its logs can still be read.
    let logs = kubectl.ok(&["logs", "filler"]);
    assert!(logs.contains("records out"), "{logs}");
    kubectl.ok(&["delete", "pod", "filler", "--wait=false"]);

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

    // exec -it: a TTY, and what is typed reaches the shell (through a pseudo-terminal).
    for version in ["1.27", "1.33"] {
        let typed = typed_through_a_tty(&server, version, &["exec", "-it", "web", "--", "sh"]);
        assert!(
            typed.contains("typed-42"),
            "kubectl {version} exec -it: {typed:?}"
        );
    }
    // attach: the container's output as it comes.
    let mut attach = server
        .kubectl_command("1.33")
        .args(["attach", "web"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let attached = attach.stderr.take().unwrap();
    let seen = std::thread::spawn(move || {
        let mut reader = BufReader::new(attached);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains("response:200") {
                return true;
            }
            line.clear();
        }
        false
    });
    std::thread::sleep(Duration::from_secs(2));
    http_get(&format!("{ip}:8080"));
    std::thread::sleep(Duration::from_millis(500));
    let _ = attach.kill();
    let _ = attach.wait();
    assert!(
        seen.join().unwrap(),
        "kubectl attach showed the container's output"
    );

    // A Deployment's rollout is gated by readiness: a version that never becomes Ready stalls
    // with the old pods serving; a fixed one rolls out.
    kubectl.ok(&[
        "apply",
        "-f",
        &kubectl.file(
            "deploy.yaml",
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: site}
spec:
  replicas: 3
  selector: {matchLabels: {app: site}}
  template:
    metadata: {labels: {app: site}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: localhost/busybox:1.36
        command: [httpd, -f, -p, "8080", -h, /www]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
"#,
        ),
    ]);
    kubectl.ok(&["rollout", "status", "deployment/site", "--timeout=90s"]);
    kubectl.ok(&["patch", "deployment", "site", "--type=json", "-p",
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/readinessProbe/tcpSocket/port","value":9999}]"#]);
    std::thread::sleep(Duration::from_secs(8));
    let stalled = kubectl.json(&["get", "deployment", "site"]);
    assert_eq!(
        stalled["status"]["availableReplicas"], 3,
        "the old pods keep serving"
    );
    assert_eq!(
        stalled["status"]["updatedReplicas"], 1,
        "one surge pod, never Ready"
    );
    let failed = kubectl.run(&["rollout", "status", "deployment/site", "--timeout=3s"]);
    assert!(
        !failed.status.success(),
        "the rollout does not finish while the new pods are unready"
    );
    kubectl.ok(&["patch", "deployment", "site", "--type=json", "-p",
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/readinessProbe/tcpSocket/port","value":8080}]"#]);
    kubectl.ok(&["rollout", "status", "deployment/site", "--timeout=120s"]);
    kubectl.ok(&["delete", "deployment", "site"]);

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

    // A RuntimeClass's handler reaches containerd: `runc` (its configured runtime) runs the
    // pod; a handler containerd lacks fails the sandbox, with the runtime's reason.
    let classes = kubectl.file(
        "runtimeclasses.yaml",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: plain}\nhandler: runc\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: missing}\nhandler: nope\n",
    );
    kubectl.ok(&["apply", "-f", &classes]);
    for (pod, class) in [("classed", "plain"), ("unrunnable", "missing")] {
        kubectl.ok(&[
            "run",
            pod,
            &format!("--image={IMAGE}"),
            &format!("--overrides={{\"spec\":{{\"runtimeClassName\":\"{class}\"}}}}"),
            "--",
            "sleep",
            "3600",
        ]);
    }
    until("the classed pod runs", 60, || {
        kubectl.jsonpath("pod", "classed", "{.status.phase}") == "Running"
    })
    .await;
    until("the unrunnable pod's sandbox fails", 60, || {
        let events = kubectl.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=unrunnable,reason=FailedCreatePodSandBox",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        events.contains("nope")
    })
    .await;
    assert_ne!(
        kubectl.jsonpath("pod", "unrunnable", "{.status.phase}"),
        "Running"
    );
    kubectl.ok(&["delete", "pod", "classed", "unrunnable", "--wait=false"]);
}

/// Runs kubectl in a pseudo-terminal, types into it, and returns what the terminal showed.
fn typed_through_a_tty(server: &RudderServer, version: &str, args: &[&str]) -> String {
    let command = server.kubectl_command(version);
    let program = command.get_program().to_string_lossy().into_owned();
    let envs: Vec<(String, String)> = command
        .get_envs()
        .filter_map(|(k, v)| {
            Some((
                k.to_string_lossy().into_owned(),
                v?.to_string_lossy().into_owned(),
            ))
        })
        .collect();
    let script = r#"
import os, pty, sys, time, select
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
def drain(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                out += os.read(fd, 4096)
            except OSError:
                return
drain(3)
os.write(fd, b"echo typed-$((6*7))\r")
drain(2)
os.write(fd, b"exit\r")
drain(2)
sys.stdout.write(out.decode(errors="replace"))
"#;
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(program)
        .args(args)
        .envs(envs)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A second machine's agent, joined with a bootstrap token, runs pods of its own on its own
/// containerd (`RUDDER_TEST_CONTAINERD_2`), and kubectl reaches them through its kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_joined_with_a_bootstrap_token_runs_pods() {
    let Some(socket) = socket_from("RUDDER_TEST_CONTAINERD_2") else {
        return;
    };
    let (_store, url) = sqlite_url("joined");
    let server =
        RudderServer::start_with_args(env!("CARGO_BIN_EXE_rudder"), &url, &["--disable-agent"]);
    let data_dir = server.data_dir();
    let join = rudder_tests::run(
        env!("CARGO_BIN_EXE_rudder"),
        &[
            "token",
            "join-command",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ],
    );
    assert!(
        join.status.success(),
        "{}",
        String::from_utf8_lossy(&join.stderr)
    );
    let line = String::from_utf8(join.stdout).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["rudder", "agent"], "{line}");
    let agent_dir = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(agent_dir.path().join("agent.log")).unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_rudder"))
        .args(&words[1..])
        .args(["--node-name", "second", "--kubelet-port", "0"])
        .args(["--disable-kube-proxy", "--disable-cluster-dns"])
        .arg("--container-runtime-endpoint")
        .arg(format!("unix://{socket}"))
        .arg("--data-dir")
        .arg(agent_dir.path().join("data"))
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    let agent_log =
        || std::fs::read_to_string(agent_dir.path().join("agent.log")).unwrap_or_default();
    rudder_tests::eventually("the joined node is Ready", Duration::from_secs(60), || {
        let ready = kubectl
            .run(&[
                "get",
                "node",
                "second",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .stdout
            == b"True";
        async move { ready }
    })
    .await;
    let csrs = kubectl.ok(&["get", "csr"]);
    assert!(
        csrs.contains("kubernetes.io/kube-apiserver-client-kubelet")
            && csrs.contains("Approved,Issued"),
        "{csrs}"
    );
    kubectl.ok(&[
        "run",
        "there",
        &format!("--image={IMAGE}"),
        "--overrides",
        r#"{"spec":{"nodeSelector":{"kubernetes.io/hostname":"second"}}}"#,
        "--",
        "sh",
        "-c",
        "echo on the second node; sleep 600",
    ]);
    until("the pod runs on the joined node", 60, || {
        kubectl.jsonpath("pod", "there", "{.status.phase}") == "Running"
    })
    .await;
    assert_eq!(
        kubectl.jsonpath("pod", "there", "{.spec.nodeName}"),
        "second"
    );
    until("its log comes through the joined kubelet", 10, || {
        kubectl.run(&["logs", "there"]).stdout == b"on the second node\n"
    })
    .await;
    assert_eq!(kubectl.ok(&["exec", "there", "--", "echo", "hi"]), "hi\n");
    kubectl.ok(&["delete", "pod", "there", "--timeout=60s"]);
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(!agent_log().contains("panicked"), "{}", agent_log());
}

/// `rudder server` without a runtime endpoint starts a containerd of its own (as
/// scripts/run.sh relies on), whose pod network is the range node IPAM gives the node (handed
/// over through CRI `UpdateRuntimeConfig`), runs a pod on it, and stops it when the server
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_a_containerd_of_its_own() {
    // Only where the packages are (scripts/test.sh installs them; the other tests' containerd
    // says they are).
    let Some(_) = containerd_socket() else {
        return;
    };
    let (_store, url) = sqlite_url("managed");
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &url,
        &[
            "--kubelet-port",
            "0",
            "--node-name",
            "managed",
            "--cluster-cidr",
            "10.244.80.0/20",
            "--disable-kube-proxy",
            "--disable-cluster-dns",
        ],
    );
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    until("the node is Ready", 60, || {
        kubectl
            .run(&[
                "get",
                "node",
                "managed",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .stdout
            == b"True"
    })
    .await;
    kubectl.ok(&[
        "run",
        "own",
        &format!("--image={IMAGE}"),
        "--",
        "sh",
        "-c",
        "echo from our own containerd; sleep 600",
    ]);
    until("own runs", 60, || {
        kubectl.jsonpath("pod", "own", "{.status.phase}") == "Running"
    })
    .await;
    // The node's first block of the cluster range, and the pod's address in it.
    assert_eq!(
        kubectl.jsonpath("node", "managed", "{.spec.podCIDR}"),
        "10.244.80.0/24"
    );
    let ip = kubectl.jsonpath("pod", "own", "{.status.podIP}");
    assert!(ip.starts_with("10.244.80."), "{ip}");
    until("its log", 10, || {
        kubectl.run(&["logs", "own"]).stdout == b"from our own containerd\n"
    })
    .await;
    kubectl.ok(&["delete", "pod", "own", "--timeout=60s"]);
    let pid_of_containerd = || {
        Command::new("pgrep")
            .args([
                "-f",
                &format!(
                    "containerd --config {}",
                    server.data_dir().join("containerd").display()
                ),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    assert!(
        !pid_of_containerd().is_empty(),
        "the server's containerd runs"
    );
    let data_dir = server.data_dir();
    let mut server = server;
    assert!(server.terminate(), "the server stops on SIGTERM");
    let still = Command::new("pgrep")
        .args([
            "-f",
            &format!(
                "containerd --config {}",
                data_dir.join("containerd").display()
            ),
        ])
        .output()
        .unwrap();
    assert!(still.stdout.is_empty(), "the server stopped its containerd");
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
