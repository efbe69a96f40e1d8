//! Debian's `etcdctl` (3.4) against Rudder's etcd gateway over each driver, exactly as against
//! real etcd: every command runs against both, and the outputs must match once the things that
//! legitimately differ (key prefix, revisions, lease ids, timings) are normalized.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use rudder_etcd_gateway::Gateway;
use rudder_storage::testing::{self, Harness};

/// One etcdctl run: arguments (with `{p}` for the key prefix and `{rN}` for base + N), stdin.
struct Step {
    args: &'static str,
    stdin: Option<&'static str>,
    /// Run under `timeout` (for `watch`, which never ends by itself).
    seconds: Option<u32>,
    /// Sleep before running (lease expiry).
    wait_ms: u64,
}

const fn step(args: &'static str) -> Step {
    Step {
        args,
        stdin: None,
        seconds: None,
        wait_ms: 0,
    }
}

const STEPS: &[Step] = &[
    step("put {p}a 1"),
    step("put {p}b 2"),
    step("put {p}a 3 --prev-kv"),
    step("get {p} --prefix"),
    step("get {p} --prefix --limit 1"),
    step("get {p} --prefix --keys-only"),
    step("get {p}a --rev {r1}"),
    step("get {p} --prefix -w json"),
    step("get {p}a --rev {r999}"),
    Step {
        args: "txn",
        stdin: Some("value(\"{p}a\") = \"3\"\n\nput {p}t yes\nget {p}b\n\nput {p}t no\n\n"),
        seconds: None,
        wait_ms: 0,
    },
    Step {
        args: "txn",
        stdin: Some("mod(\"{p}a\") < \"1\"\n\nput {p}t never\n\nget {p}t\n\n"),
        seconds: None,
        wait_ms: 0,
    },
    step("del {p}b --prev-kv"),
    step("del {p}nothing"),
    Step {
        args: "watch {p} --prefix --rev {r1} --prev-kv",
        stdin: None,
        seconds: Some(2),
        wait_ms: 0,
    },
    step("lease grant 30"),
    step("put {p}leased v --lease {lease}"),
    step("lease timetolive {lease} --keys"),
    step("lease keep-alive --once {lease}"),
    step("lease revoke {lease}"),
    step("get {p}leased"),
    step("lease timetolive {lease}"),
    step("lease grant 2"),
    step("put {p}short v --lease {lease}"),
    Step {
        args: "get {p}short",
        stdin: None,
        seconds: None,
        wait_ms: 4500,
    },
    step("put {p}c 4"),
    step("del {p} --prefix --prev-kv"),
    step("compaction {r3}"),
    step("get {p}a --rev {r1}"),
    Step {
        args: "watch {p} --prefix --rev {r1}",
        stdin: None,
        seconds: Some(2),
        wait_ms: 0,
    },
    step("endpoint health"),
];

/// Runs every step against `endpoint`; returns the normalized transcript.
fn transcript(endpoint: &str, prefix: &str) -> Vec<String> {
    let base = revision(endpoint);
    let mut lease = String::new();
    let mut lines = Vec::new();
    for step in STEPS {
        if step.wait_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(step.wait_ms));
        }
        let fill = |text: &str| {
            let mut text = text.replace("{p}", prefix).replace("{lease}", &lease);
            for n in [999, 3, 1] {
                text = text.replace(&format!("{{r{n}}}"), &(base + n).to_string());
            }
            text
        };
        let args = fill(step.args);
        let mut command = match step.seconds {
            Some(seconds) => {
                let mut command = Command::new("timeout");
                command.arg(seconds.to_string()).arg("etcdctl");
                command
            }
            None => Command::new("etcdctl"),
        };
        command
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(endpoint)
            .args(args.split(' '));
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .expect("etcdctl runs (Debian package etcd-client)");
        if let Some(stdin) = step.stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(fill(stdin).as_bytes())
                .unwrap();
        }
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if let Some(id) = stdout
            .strip_prefix("lease ")
            .and_then(|rest| rest.split(' ').next())
        {
            if stdout.contains("granted with TTL") && args.starts_with("lease grant") {
                lease = id.to_string();
            }
        }
        // etcdctl's own log lines (retry warnings) carry timestamps and client ids; keep only
        // the error it reports.
        let error: Vec<&str> = stderr
            .lines()
            .filter(|line| line.starts_with("Error:"))
            .collect();
        lines.push(format!(
            "$ etcdctl {}\n{}{}",
            step.args,
            normalize(&stdout, prefix, &lease, base),
            normalize(&error.join("\n"), prefix, &lease, base)
        ));
    }
    lines
}

fn revision(endpoint: &str) -> i64 {
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "get", "/", "-w", "json"])
        .output()
        .expect("etcdctl runs");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("etcdctl json");
    json["header"]["revision"]
        .as_i64()
        .expect("header revision")
}

/// Rewrites what differs between two correct servers: prefix, lease id, revisions, timings,
/// and the JSON header's cluster identity.
fn normalize(text: &str, prefix: &str, lease: &str, base: i64) -> String {
    let mut text = text.replace(prefix, "P/");
    if !lease.is_empty() {
        text = text.replace(lease, "LEASE");
    }
    if let Ok(mut json) = serde_json::from_str::<serde_json::Value>(&text) {
        if let Some(header) = json.get_mut("header") {
            *header = serde_json::Value::Null;
        }
        if let Some(kvs) = json.get_mut("kvs").and_then(|k| k.as_array_mut()) {
            for kv in kvs {
                for field in ["create_revision", "mod_revision"] {
                    if let Some(revision) = kv.get(field).and_then(|r| r.as_i64()) {
                        kv[field] = serde_json::json!(revision - base);
                    }
                }
                if let Some(key) = kv.get("key").and_then(|k| k.as_str()) {
                    let decoded = base64_decode(key);
                    kv["key"] =
                        serde_json::json!(String::from_utf8_lossy(&decoded).replace(prefix, "P/"));
                }
            }
        }
        return json.to_string();
    }
    text.lines()
        .map(|line| {
            let mut line = line.to_string();
            if let Some(at) = line.find("took = ") {
                line.truncate(at + 7);
            }
            if let Some(at) = line.find("remaining(") {
                let end = line[at..].find(')').map_or(line.len(), |e| at + e);
                line.replace_range(at..end, "remaining(R");
            }
            if let Some(number) = line
                .strip_prefix("compacted revision ")
                .and_then(|n| n.parse::<i64>().ok())
            {
                line = format!("compacted revision base+{}", number - base);
            }
            line + "\n"
        })
        .collect()
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text.bytes().filter(|b| *b != b'=') {
        let Some(value) = ALPHABET.iter().position(|c| *c == byte) else {
            continue;
        };
        bits = (bits << 6) | value as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

async fn compare(harness: Box<dyn Harness>) {
    let reference = testing::service(testing::ETCD_ENV).expect("the reference etcd");
    let _exclusive = if harness.driver() == "etcd" {
        None
    } else {
        Some(testing::etcd_lock().await)
    };
    let prefix = format!("/etcdctl-{:08x}/", rand::random::<u32>());
    let expected = tokio::task::spawn_blocking(move || transcript(&reference, &prefix))
        .await
        .unwrap();

    let store = harness.open().await;
    let gateway = Gateway::spawn(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let endpoint = gateway.local_addr.to_string();
    let observed = tokio::task::spawn_blocking(move || transcript(&endpoint, "/gw/"))
        .await
        .unwrap();

    let status = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &gateway.local_addr.to_string(),
            "endpoint",
            "status",
            "member",
            "list",
        ])
        .output()
        .unwrap();
    let members = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &gateway.local_addr.to_string(),
            "member",
            "list",
        ])
        .output()
        .unwrap();
    gateway.shutdown().await;
    store.close().await;
    harness.cleanup().await;

    for (want, got) in expected.iter().zip(&observed) {
        assert_eq!(
            got,
            want,
            "etcdctl over the {} gateway differs from real etcd",
            harness.driver()
        );
    }
    assert_eq!(observed.len(), expected.len());
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("3.5.17") && status.contains("true"),
        "endpoint status: {status}"
    );
    let members = String::from_utf8_lossy(&members.stdout);
    assert!(
        members.contains("started, rudder"),
        "member list: {members}"
    );
}

rudder_tests::on_every_driver_beside_real_etcd!(compare;
    etcdctl_over_the_sqlite_gateway_behaves_like_real_etcd => sqlite,
    etcdctl_over_the_postgres_gateway_behaves_like_real_etcd => postgres,
    etcdctl_over_the_etcd_gateway_behaves_like_real_etcd => etcd,
);

/// `etcdctl snapshot save` against the gateway keeps a Rudder snapshot of the store (not a
/// bbolt file: `rudder storage snapshot restore` loads it into any driver), taken at one
/// revision, with every key's revisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_snapshot_save_keeps_a_rudder_snapshot_that_restores_anywhere() {
    use rudder_storage::copy::{self, snapshot::SnapshotFile, StoreSink};
    let harness = testing::sqlite().await.unwrap();
    let store = harness.open().await;
    for index in 0..5 {
        let key = format!("/snap/k{index}");
        store.put(key.as_bytes(), b"first", 0).await.unwrap();
        store.put(key.as_bytes(), b"second", 0).await.unwrap();
    }
    let gateway = Gateway::spawn(store.clone(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let endpoint = gateway.local_addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    let saved = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || {
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoint, "snapshot", "save"])
                .arg(&file)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    gateway.shutdown().await;
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let snapshot = SnapshotFile::open(&file).unwrap();
    let revision = store.status().await.unwrap().revision;
    assert_eq!(snapshot.header.plan.revision, revision);
    let other = testing::sqlite().await.unwrap();
    let target = other.open().await;
    snapshot
        .restore(&mut StoreSink(target.as_ref()), &mut |_| {})
        .await
        .unwrap();
    let totals = copy::verify(store.as_ref(), target.as_ref(), revision)
        .await
        .unwrap();
    assert_eq!(totals.keys, 5);
    let copied = target.get(b"/snap/k3", 0).await.unwrap().unwrap();
    assert_eq!(
        (copied.version, copied.value.as_slice()),
        (2, &b"second"[..])
    );
}
