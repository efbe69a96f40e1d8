//! Service networking end to end on this machine: a node of the test's own (a network
//! namespace with its agent, containerd, bridge and nftables rules inside; the server on the
//! host), real kubectl, and pods reaching Services by name through the agent's proxy and
//! cluster DNS — ClusterIP spread over the pods, scale down and up, hairpin traffic, a
//! NodePort from the host, headless StatefulSet names, ExternalName, an immediate refusal for
//! a Service without endpoints, the `kubernetes` Service from a pod, and `--cleanup`. Then
//! the same node's agent restarted with `--proxy-mode iptables` (the pods outlive it) routes
//! the same Services with iptables chains instead. Under `CI=true` a missing piece
//! (namespaces, nftables, iptables, containerd) fails the test.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rudder_tests::{Kubectl, NodeNetns, RudderServer};

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");

const MANIFEST: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: httpd
        image: localhost/busybox:1.36
        command: ["sh", "-c", "mkdir -p /w && hostname > /w/index.html && exec httpd -f -p 8080 -h /w"]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: tcp, port: 7000}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: localhost/busybox:1.36
        command: ["sleep", "3600"]
---
apiVersion: v1
kind: Service
metadata: {name: empty}
spec:
  selector: {app: nothing-has-this}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: ext}
spec:
  type: ExternalName
  externalName: example.com
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers:
  - name: c
    image: localhost/busybox:1.36
    command: ["sleep", "3600"]
"#;

/// What `count` HTTP requests to `url-host:port` from inside `pod` answered (one line each:
/// the serving pod's hostname, or empty for a failure).
fn answers(kubectl: &Kubectl, pod: &str, host: &str, port: u16, count: usize) -> Vec<String> {
    let script = format!(
        "for i in $(seq {count}); do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {host} {port} | tail -1; echo; done"
    );
    let output = kubectl.run(&["exec", pod, "--", "sh", "-c", &script]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn ready_web_pods(kubectl: &Kubectl) -> BTreeSet<String> {
    let output = kubectl.run(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.len() == 2 && words[1] == "True").then(|| words[0].to_owned())
        })
        .collect()
}

async fn until(what: &str, seconds: u64, check: impl Fn() -> bool) {
    rudder_tests::eventually(what, Duration::from_secs(seconds), || {
        let ok = check();
        async move { ok }
    })
    .await;
}

fn http_get(address: &str) -> String {
    let mut stream =
        std::net::TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("connecting to {address}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Agent {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node's agent, joined with `join` (`rudder agent --server … --token …`'s words), with
/// its data under `dir` and `extra` flags, logging to `dir/<log>`.
fn start_agent(
    node: &NodeNetns,
    join: &[&str],
    dir: &std::path::Path,
    log: &str,
    extra: &[&str],
) -> Agent {
    let log = dir.join(log);
    let log_file = std::fs::File::create(&log).unwrap();
    let child = node
        .command(RUDDER)
        .args(&join[1..])
        .args(["--node-name", "netnode", "--node-ip", &node.node_ip])
        .args([
            "--pod-cidr",
            &node.pod_cidr,
            "--cluster-cidr",
            "10.244.0.0/16",
        ])
        .args(extra)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    Agent { child, log }
}

/// A connection from the client pod to the Service without endpoints is refused at once,
/// not left to time out.
fn assert_refused_at_once(kubectl: &Kubectl) {
    let started = Instant::now();
    let refused = kubectl.run(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        "nc -w 8 empty 80 </dev/null",
    ]);
    let took = started.elapsed();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("refused"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        took < Duration::from_secs(4),
        "refused after {took:?}, not at once"
    );
}

/// `rudder agent --cleanup` on the node.
fn cleanup(node: &NodeNetns) -> String {
    let cleanup = node
        .command(RUDDER)
        .args(["agent", "--cleanup"])
        .output()
        .unwrap();
    assert!(
        cleanup.status.success(),
        "{}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    String::from_utf8_lossy(&cleanup.stdout).into_owned()
}

/// What `program args…` prints on the node.
fn on_node(node: &NodeNetns, program: &str, args: &[&str]) -> String {
    let out = node.command(program).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_services_by_name_through_the_agents_proxy_and_dns() {
    let Some(node) = NodeNetns::create(61, "10.244.61.0/24") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("network.db").display());
    let listen = format!("{}:0", node.host_ip);
    let server =
        RudderServer::start_with_args(RUDDER, &url, &["--listen", &listen, "--disable-agent"]);
    let join = rudder_tests::run(
        RUDDER,
        &[
            "token",
            "join-command",
            "--data-dir",
            server.data_dir().to_str().unwrap(),
        ],
    );
    let line = String::from_utf8_lossy(&join.stdout).trim().to_owned();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["rudder", "agent"], "{line}");
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let agent = start_agent(&node, &words, &agent_dir, "agent.log", &[]);
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    rudder_tests::eventually("the node is Ready", Duration::from_secs(90), || {
        let ready = kubectl
            .run(&[
                "get",
                "node",
                "netnode",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .stdout
            == b"True";
        let log = agent.log();
        assert!(
            !log.contains("nftables is missing"),
            "the agent cannot program nftables:\n{log}"
        );
        async move { ready }
    })
    .await;
    // The node serves cluster DNS and the controller-manager points kube-dns at it.
    until("kube-dns has the node as its endpoint", 30, || {
        kubectl
            .run(&[
                "get",
                "endpoints",
                "-n",
                "kube-system",
                "kube-dns",
                "-o",
                "jsonpath={.subsets[0].addresses[0].ip}",
            ])
            .stdout
            == node.node_ip.as_bytes()
    })
    .await;

    let manifest = server.write_file("network.yaml", MANIFEST);
    kubectl.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    until("3 web pods are Ready", 120, || {
        ready_web_pods(&kubectl).len() == 3
    })
    .await;
    until("client and the StatefulSet run", 120, || {
        ["client", "db-0", "db-1"]
            .iter()
            .all(|pod| kubectl.jsonpath("pod", pod, "{.status.phase}") == "Running")
    })
    .await;
    let resolv = kubectl.ok(&["exec", "client", "--", "cat", "/etc/resolv.conf"]);
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );

    // ClusterIP by short name and by FQDN, spread over all three pods.
    // A pod that has just turned Ready reaches the proxy's rules through its EndpointSlice
    // a moment later; one exec is one try.
    let pods = ready_web_pods(&kubectl);
    until("30 requests to http://web reach every pod", 30, || {
        let seen: BTreeSet<String> = answers(&kubectl, "client", "web", 80, 30)
            .into_iter()
            .collect();
        seen == pods
    })
    .await;
    let fqdn = answers(&kubectl, "client", "web.default.svc.cluster.local", 80, 3);
    assert_eq!(fqdn.len(), 3, "{fqdn:?}");
    assert!(fqdn.iter().all(|a| pods.contains(a)), "{fqdn:?}");
    // Hairpin: a pod reaching the Service it backs (itself among the choices), every
    // request of one try answered.
    let some_pod = pods.iter().next().unwrap().clone();
    until("every hairpin request is answered", 30, || {
        let hairpin = answers(&kubectl, &some_pod, "web", 80, 12);
        hairpin.len() == 12 && hairpin.iter().all(|a| pods.contains(a))
    })
    .await;

    // Scale to 1: only the one left answers; back to 3: all again.
    kubectl.ok(&["scale", "deployment", "web", "--replicas=1"]);
    until("one web pod is Ready", 60, || {
        ready_web_pods(&kubectl).len() == 1
    })
    .await;
    let remaining = ready_web_pods(&kubectl);
    until("only the remaining pod answers", 20, || {
        let seen: BTreeSet<String> = answers(&kubectl, "client", "web", 80, 10)
            .into_iter()
            .collect();
        seen == remaining
    })
    .await;
    kubectl.ok(&["scale", "deployment", "web", "--replicas=3"]);
    until("3 web pods are Ready again", 120, || {
        ready_web_pods(&kubectl).len() == 3
    })
    .await;
    let pods = ready_web_pods(&kubectl);
    until("all three answer again", 30, || {
        let seen: BTreeSet<String> = answers(&kubectl, "client", "web", 80, 30)
            .into_iter()
            .collect();
        seen == pods
    })
    .await;

    // A NodePort answers on the node's address, from outside the node.
    kubectl.ok(&[
        "patch",
        "service",
        "web",
        "-p",
        r#"{"spec":{"type":"NodePort"}}"#,
    ]);
    let node_port = kubectl.jsonpath("service", "web", "{.spec.ports[0].nodePort}");
    let address = format!("{}:{node_port}", node.node_ip);
    until("the NodePort answers from the host", 10, || {
        let body = std::panic::catch_unwind(|| http_get(&address)).unwrap_or_default();
        pods.iter().any(|pod| body.contains(pod.as_str()))
    })
    .await;

    // Headless: one name per StatefulSet pod, and the Service name lists them all.
    let db0 = kubectl.jsonpath("pod", "db-0", "{.status.podIP}");
    let db1 = kubectl.jsonpath("pod", "db-1", "{.status.podIP}");
    until("db-0.db resolves to db-0", 20, || {
        let out = kubectl.run(&[
            "exec",
            "client",
            "--",
            "nslookup",
            "db-0.db.default.svc.cluster.local",
        ]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("Address: {db0}"))
    })
    .await;
    let both = kubectl.ok(&[
        "exec",
        "client",
        "--",
        "nslookup",
        "db.default.svc.cluster.local",
    ]);
    assert!(both.contains(&db0) && both.contains(&db1), "{both}");
    // ExternalName: a CNAME.
    let ext = kubectl.ok(&[
        "exec",
        "client",
        "--",
        "nslookup",
        "ext.default.svc.cluster.local",
    ]);
    assert!(ext.contains("canonical name = example.com"), "{ext}");

    // No endpoints: refused at once, not a timeout.
    assert_refused_at_once(&kubectl);

    // The API from a pod, through the `kubernetes` Service.
    let api = kubectl.run(&[
        "exec",
        "client",
        "--",
        "sh",
        "-c",
        "nc -w 3 kubernetes.default 443 </dev/null",
    ]);
    assert!(
        api.status.success(),
        "{}",
        String::from_utf8_lossy(&api.stderr)
    );

    // The proxy's metrics, under upstream's names, on the node's 127.0.0.1:10249.
    let metrics = on_node(
        &node,
        "curl",
        &["-s", "-m", "5", "http://127.0.0.1:10249/metrics"],
    );
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_network_programming_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }

    assert!(
        agent.log().contains("service proxy mode: nftables"),
        "auto picks nftables when nft works:\n{}",
        agent.log()
    );

    // Stopped, the agent leaves its rules (and its pods, whose shims outlive containerd);
    // --cleanup removes the table.
    let agent_log = agent.log();
    drop(agent);
    let tables = |node: &NodeNetns| on_node(node, "nft", &["list", "tables"]);
    assert!(
        tables(&node).contains("table ip rudder"),
        "rules stay when the agent stops:\n{agent_log}"
    );
    cleanup(&node);
    assert!(
        !tables(&node).contains("table ip rudder"),
        "{}",
        tables(&node)
    );

    // The same node in iptables mode: the pods, by name, ClusterIP and NodePort, through
    // iptables chains (and no nftables table).
    let agent = start_agent(
        &node,
        &words,
        &agent_dir,
        "agent-iptables.log",
        &["--proxy-mode", "iptables"],
    );
    // Its containerd restarts over the running pods' shims, which can take a while.
    until(
        "the agent chose iptables and its kubelet is back",
        150,
        || {
            let log = agent.log();
            assert!(!log.contains("iptables is missing"), "{log}");
            assert!(!log.contains("error:"), "the agent failed:\n{log}");
            log.contains("service proxy mode: iptables") && log.contains("node registered")
        },
    )
    .await;
    until("every web pod answers through iptables", 60, || {
        let seen: BTreeSet<String> = answers(&kubectl, "client", "web", 80, 30)
            .into_iter()
            .collect();
        seen == ready_web_pods(&kubectl)
    })
    .await;
    let pods = ready_web_pods(&kubectl);
    let cluster_ip = kubectl.jsonpath("service", "web", "{.spec.clusterIP}");
    // One exec is one try: a kubectl exec that fails on its way (not the route) is tried again.
    until("the cluster IP answers through iptables", 30, || {
        let by_ip = answers(&kubectl, "client", &cluster_ip, 80, 5);
        by_ip.len() == 5 && by_ip.iter().all(|a| pods.contains(a))
    })
    .await;
    let body = http_get(&address);
    assert!(pods.iter().any(|pod| body.contains(pod.as_str())), "{body}");
    assert_refused_at_once(&kubectl);
    let saved = |node: &NodeNetns| on_node(node, "iptables-save", &[]);
    assert!(saved(&node).contains(":RUDDER-SVC-"), "{}", saved(&node));
    assert!(
        !tables(&node).contains("table ip rudder"),
        "{}",
        tables(&node)
    );
    let metrics = on_node(
        &node,
        "curl",
        &["-s", "-m", "5", "http://127.0.0.1:10249/metrics"],
    );
    assert!(
        metrics.contains("kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"}"),
        "{metrics}"
    );

    // --cleanup removes the chains too (only after the agent stops).
    kubectl.ok(&["delete", "-f", manifest.to_str().unwrap(), "--wait=false"]);
    until("the pods are gone", 60, || {
        kubectl.ok(&["get", "pods", "-o", "name"]).trim().is_empty()
    })
    .await;
    let agent_log = agent.log();
    drop(agent);
    assert!(
        saved(&node).contains(":RUDDER-SERVICES"),
        "rules stay when the agent stops:\n{agent_log}"
    );
    let said = cleanup(&node);
    assert!(said.contains("deleted the iptables chains"), "{said}");
    assert!(!saved(&node).contains("RUDDER"), "{}", saved(&node));
    // The agent's containerd went with it.
    let leftover = Command::new("pgrep")
        .args([
            "-f",
            &agent_dir
                .join("data")
                .join("containerd")
                .display()
                .to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        leftover.stdout.is_empty(),
        "processes of the agent's containerd are left: {}",
        String::from_utf8_lossy(&leftover.stdout)
    );
}
