//! What the store holds, checked on every driver by reading the raw values behind the API:
//! built-in objects stored as protobuf in the `k8s\0` envelope (decoded here by `protoc` with
//! the upstream `.proto` files, not by Rudder), Secrets encrypted at rest with an
//! EncryptionConfiguration (unreadable raw, readable through kubectl and `rudder storage
//! get`), keys rotated by reordering them and rewriting, Secrets sealed through a KMS v2
//! plugin (`rudder kms-plugin`) across restarts of the server and of the plugin — with
//! upstream's `kms-providers` health check and KMS and storage metrics — and a malformed
//! configuration refused at start with the field and line at fault.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use rudder_tests::{Kubectl, RudderServer};
use serde_json::Value;
use sha2::{Digest, Sha256};

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");
const KEY1: &str = "c2VjcmV0IGlzIHNlY3VyZSwgaXMgaXQgc2VjdXJlPz8=";
const KEY2: &str = "YW5vdGhlciBzZWNyZXQsIGFsc28gMzIgYnl0ZXMhISE=";

fn config(keys: &[(&str, &str)]) -> String {
    let keys: String = keys
        .iter()
        .map(|(name, secret)| {
            format!("            - name: {name}\n              secret: {secret}\n")
        })
        .collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aesgcm:
          keys:
{keys}      - identity: {{}}
"
    )
}

async fn raw(url: &str, key: &str) -> Vec<u8> {
    let store = rudder_storage::open(url).await.unwrap();
    let kv = store.get(key.as_bytes(), 0).await.unwrap();
    store.close().await;
    kv.unwrap_or_else(|| panic!("{key} is not in the store"))
        .value
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `raw` field (2) of the `runtime.Unknown` after the `k8s\0` magic.
fn unknown_raw(value: &[u8]) -> Vec<u8> {
    let mut rest = value.strip_prefix(b"k8s\0").expect("protobuf magic");
    let varint = |bytes: &mut &[u8]| {
        let (mut n, mut shift) = (0usize, 0);
        loop {
            let b = bytes[0];
            *bytes = &bytes[1..];
            n |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    };
    while !rest.is_empty() {
        let tag = varint(&mut rest);
        assert_eq!(
            tag & 7,
            2,
            "runtime.Unknown has only length-delimited fields"
        );
        let len = varint(&mut rest);
        let (field, tail) = rest.split_at(len);
        if tag >> 3 == 2 {
            return field.to_vec();
        }
        rest = tail;
    }
    panic!("no raw field in the envelope")
}

/// `protoc --decode` of `bytes` as `message` with the upstream `.proto` files.
fn protoc_decode(message: &str, proto: &str, bytes: &[u8]) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/apiserver/proto");
    let mut child = Command::new("protoc")
        .args([&format!("--decode={message}"), "-I", root, proto])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc (protobuf-compiler) is installed by scripts/test.sh");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "protoc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `rudder storage get ARGS --storage URL`'s JSON output.
fn storage_get(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["storage", "get", "--storage", url];
    all.extend_from_slice(args);
    let shown = rudder_tests::run(RUDDER, &all);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    serde_json::from_slice(&shown.stdout).unwrap()
}

/// `kubectl get secrets -A -o json | kubectl replace -f -`: upstream's way to rewrite every
/// Secret with the key that writes now.
fn rewrite_secrets(server: &RudderServer) {
    let listed = server.kubectl("1.33", &["get", "secrets", "-A", "-o", "json"]);
    assert!(listed.status.success());
    let mut replace = server
        .kubectl_command("1.33")
        .args(["replace", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    replace
        .stdin
        .take()
        .unwrap()
        .write_all(&listed.stdout)
        .unwrap();
    let output = replace.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn stored_values(storage: String) {
    let url = storage.as_str();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("encryption.yaml");
    std::fs::write(&config_path, config(&[("key1", KEY1)])).unwrap();
    let config_arg = config_path.to_str().unwrap();
    let server = RudderServer::start_with_args(
        RUDDER,
        url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--encryption-provider-config",
            config_arg,
            "--encryption-provider-config-automatic-reload",
            "--encryption-provider-config-reload-interval",
            "1s",
        ],
    );
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "vault".into(),
    };
    k.ok(&["create", "namespace", "vault"]);
    k.ok_ns(&[
        "create",
        "secret",
        "generic",
        "db",
        "--from-literal=password=hunter2",
    ]);
    k.ok_ns(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
    ]);

    // The Secret is sealed with the first key; neither its value nor its base64 shows.
    let sealed = raw(url, "/registry/secrets/vault/db").await;
    assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:key1:"), "{sealed:?}");
    assert!(!contains(&sealed, b"hunter2") && !contains(&sealed, b"aHVudGVyMg=="));
    assert!(!contains(&sealed, b"password"));
    let secret = k.json(&["get", "secret", "db", "-o", "json"]);
    assert_eq!(secret["data"]["password"], "aHVudGVyMg==");

    // The ConfigMap is protobuf that upstream's .proto files decode to what kubectl shows.
    let stored = raw(url, "/registry/configmaps/vault/settings").await;
    assert!(stored.starts_with(b"k8s\0"), "{stored:?}");
    let text = protoc_decode(
        "k8s.io.api.core.v1.ConfigMap",
        "k8s.io/api/core/v1/generated.proto",
        &unknown_raw(&stored),
    );
    let served = k.json(&["get", "configmap", "settings", "-o", "json"]);
    assert!(text.contains("name: \"settings\""), "{text}");
    assert!(text.contains("namespace: \"vault\""), "{text}");
    let uid = served["metadata"]["uid"].as_str().unwrap();
    assert!(text.contains(&format!("uid: \"{uid}\"")), "{text}");
    assert!(
        text.contains("key: \"mode\"") && text.contains("value: \"fast\""),
        "{text}"
    );
    let envelope = protoc_decode(
        "k8s.io.apimachinery.pkg.runtime.Unknown",
        "k8s.io/apimachinery/pkg/runtime/generated.proto",
        &stored[4..],
    );
    assert!(envelope.contains("apiVersion: \"v1\"") && envelope.contains("kind: \"ConfigMap\""));

    // `rudder storage get` decodes and decrypts what is stored.
    let object = storage_get(
        url,
        &[
            "/registry/secrets/vault/db",
            "-o",
            "json",
            "--encryption-provider-config",
            config_arg,
        ],
    );
    assert_eq!(object["data"]["password"], "aHVudGVyMg==");
    let object = storage_get(url, &["/registry/secrets/vault/db", "-o", "json"]);
    assert!(
        object["error"].as_str().unwrap().contains("encrypted"),
        "{object}"
    );
    let listed = rudder_tests::run(
        RUDDER,
        &[
            "storage",
            "get",
            "/registry/configmaps/vault/",
            "--storage",
            url,
            "-o",
            "yaml",
        ],
    );
    let yaml = String::from_utf8_lossy(&listed.stdout);
    assert!(
        yaml.contains("# /registry/configmaps/vault/settings (protobuf)"),
        "{yaml}"
    );
    assert!(yaml.contains("mode: fast"), "{yaml}");

    // Rotation: key2 first (reloaded without a restart), rewrite, then key1 can go.
    std::fs::write(&config_path, config(&[("key2", KEY2), ("key1", KEY1)])).unwrap();
    let mut rotated = false;
    for _ in 0..50 {
        k.ok_ns(&["create", "secret", "generic", "probe", "--from-literal=a=b"]);
        let probe = raw(url, "/registry/secrets/vault/probe").await;
        k.ok_ns(&["delete", "secret", "probe"]);
        if probe.starts_with(b"k8s:enc:aesgcm:v1:key2:") {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rotated, "the reordered configuration was not reloaded");
    let before = raw(url, "/registry/secrets/vault/db").await;
    assert!(
        before.starts_with(b"k8s:enc:aesgcm:v1:key1:"),
        "not rewritten yet"
    );
    assert_eq!(
        k.json(&["get", "secret", "db", "-o", "json"])["data"]["password"],
        "aHVudGVyMg=="
    );
    rewrite_secrets(&server);
    let after = raw(url, "/registry/secrets/vault/db").await;
    assert!(after.starts_with(b"k8s:enc:aesgcm:v1:key2:"), "{after:?}");
    std::fs::write(&config_path, config(&[("key2", KEY2)])).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        k.json(&["get", "secret", "db", "-o", "json"])["data"]["password"],
        "aHVudGVyMg=="
    );
    let metrics = k.ok(&["get", "--raw", "/metrics"]);
    assert!(
        metrics.contains("apiserver_encryption_config_controller_automatic_reloads_total{")
            && metrics.contains("status=\"success\""),
        "{metrics}"
    );
    assert!(metrics.contains("apiserver_storage_transformation_operations_total{"));
}

rudder_tests::on_every_driver!(stored_values;
    stored_values_on_sqlite => sqlite,
    stored_values_on_postgres => postgres,
    stored_values_on_etcd => etcd);

/// One cluster, one encryption configuration: a server started without
/// `--encryption-provider-config` beside one started with it takes the configuration the
/// other published (sealed with the cluster token) and follows its rotation, so Secrets
/// written through either server are sealed with the key in force.
async fn shared_encryption(url: String) {
    let url = url.as_str();
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("encryption.yaml");
    std::fs::write(&config_path, config(&[("key1", KEY1)])).unwrap();
    let first = RudderServer::start_with_args(
        RUDDER,
        url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--encryption-provider-config",
            config_path.to_str().unwrap(),
            "--encryption-provider-config-automatic-reload",
            "--encryption-provider-config-reload-interval",
            "1s",
        ],
    );
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let second = RudderServer::start_with_args(
        RUDDER,
        url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--token",
            token.trim(),
            "--encryption-provider-config-reload-interval",
            "1s",
        ],
    );
    assert!(
        second
            .log()
            .contains("took the cluster's encryption configuration from the store"),
        "{}",
        second.log()
    );
    let through_second = Kubectl {
        server: &second,
        version: "1.33",
        namespace: "shared".into(),
    };
    through_second.ok(&["create", "namespace", "shared"]);
    through_second.ok_ns(&[
        "create",
        "secret",
        "generic",
        "s1",
        "--from-literal=a=hunter2",
    ]);
    let sealed = raw(url, "/registry/secrets/shared/s1").await;
    assert!(sealed.starts_with(b"k8s:enc:aesgcm:v1:key1:"), "{sealed:?}");
    let through_first = Kubectl {
        server: &first,
        version: "1.33",
        namespace: "shared".into(),
    };
    assert_eq!(
        through_first.json(&["get", "secret", "s1", "-o", "json"])["data"]["a"],
        "aHVudGVyMg=="
    );

    // Rotation on the first server's file reaches the second through the store.
    std::fs::write(&config_path, config(&[("key2", KEY2), ("key1", KEY1)])).unwrap();
    let mut prefix = Vec::new();
    for attempt in 0..20 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let name = format!("s2-{attempt}");
        through_second.ok_ns(&["create", "secret", "generic", &name, "--from-literal=a=b"]);
        prefix = raw(url, &format!("/registry/secrets/shared/{name}")).await;
        if prefix.starts_with(b"k8s:enc:aesgcm:v1:key2:") {
            break;
        }
    }
    assert!(prefix.starts_with(b"k8s:enc:aesgcm:v1:key2:"), "{prefix:?}");
    // Both keys still read, through either server.
    assert_eq!(
        through_second.json(&["get", "secret", "s1", "-o", "json"])["data"]["a"],
        "aHVudGVyMg=="
    );
    // The store holds the configuration sealed: no key in the clear.
    let published = raw(url, "/registry/rudder/cluster/encryption-config").await;
    assert!(!contains(&published, KEY1.as_bytes()) && !contains(&published, b"aesgcm"));
}

rudder_tests::on_every_driver!(shared_encryption;
    shared_encryption_on_postgres => postgres,
    shared_encryption_on_etcd => etcd);

/// Values written as JSON (before protobuf was the default, or with
/// `--storage-media-type application/json`) stay readable, and are rewritten as protobuf by
/// their next update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_values_from_before_stay_readable_and_become_protobuf_on_update() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let json_server = RudderServer::start_with_args(
        RUDDER,
        &url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--storage-media-type",
            "application/json",
        ],
    );
    let k = Kubectl {
        server: &json_server,
        version: "1.33",
        namespace: "default".into(),
    };
    k.ok_ns(&["create", "configmap", "old", "--from-literal=a=1"]);
    let token = std::fs::read_to_string(json_server.data_dir().join("token")).unwrap();
    drop(json_server);
    assert!(raw(&url, "/registry/configmaps/default/old")
        .await
        .starts_with(b"{"));

    let server = RudderServer::start_with_args(
        RUDDER,
        &url,
        &[
            "--disable-controller-manager",
            "--disable-scheduler",
            "--token",
            token.trim(),
        ],
    );
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    assert_eq!(k.jsonpath("configmap", "old", "{.data.a}"), "1");
    k.ok_ns(&["label", "configmap", "old", "touched=yes"]);
    assert!(raw(&url, "/registry/configmaps/default/old")
        .await
        .starts_with(b"k8s\0"));
    assert_eq!(
        k.jsonpath("configmap", "old", "{.metadata.labels.touched}"),
        "yes"
    );
    assert_eq!(k.jsonpath("configmap", "old", "{.data.a}"), "1");
}

/// A malformed configuration stops the server at start, naming the field and line.
#[test]
fn a_malformed_encryption_configuration_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("encryption.yaml");
    std::fs::write(&path, config(&[("key1", "c2hvcnQ=")])).unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let data = dir.path().join("data");
    let output = rudder_tests::run(
        RUDDER,
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--disable-agent",
            "--data-dir",
            data.to_str().unwrap(),
            "--storage",
            &storage,
            "--encryption-provider-config",
            path.to_str().unwrap(),
        ],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("resources[0].providers[0].aesgcm.keys[0].secret"),
        "{stderr}"
    );
    assert!(stderr.contains("line 8"), "{stderr}");
    assert!(stderr.contains("expected one of [16, 24, 32]"), "{stderr}");
    assert!(!stderr.contains("c2hvcnQ="), "{stderr}");
}

/// `rudder kms-plugin` on a socket in `dir`, stopped (SIGTERM) by [`KmsPlugin::stop`] or
/// killed when dropped.
struct KmsPlugin {
    child: std::process::Child,
}

impl KmsPlugin {
    async fn start(dir: &std::path::Path) -> Self {
        let socket = dir.join("kms.sock");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("kms-plugin.log"))
            .unwrap();
        let child = Command::new(RUDDER)
            .args(["kms-plugin", "--listen"])
            .arg(format!("unix://{}", socket.display()))
            .arg("--key-file")
            .arg(dir.join("kek"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut plugin = Self { child };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            let exited = plugin.child.try_wait().unwrap();
            if exited.is_some() || std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("kms-plugin.log")).unwrap_or_default();
                panic!("the KMS plugin did not serve ({exited:?}):\n{log}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        plugin
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for KmsPlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/metrics` of `server`.
fn metrics(server: &RudderServer) -> String {
    server.kubectl_ok("1.33", &["get", "--raw", "/metrics"])
}

/// The value of `series` (a metric's name and labels, as printed) in a `/metrics` text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

/// `sha256:` and the hex SHA-256 of `text`: how upstream's metrics show key IDs.
fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A health path: its body when it answers 200, kubectl's error when it does not.
fn health(server: &RudderServer, path: &str) -> Result<String, String> {
    let output = server.kubectl("1.33", &["get", "--raw", path]);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The KMS metrics of `server` for the provider `local`, whose key ID is `key_id`: the key ID
/// counted (by its hash) for `transformation`, its `Status` time recent, each plugin method
/// in `methods` called with `OK`, the DEK source cache holding at least `seeds`.
fn assert_kms_metrics(
    server: &RudderServer,
    key_id: &str,
    transformation: &str,
    methods: &[&str],
    seeds: f64,
) {
    let text = metrics(server);
    let key = hash(key_id);
    let series = |name: &str, labels: &str| {
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(labels))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .next()
            .unwrap_or_else(|| panic!("no {name} with {labels} in:\n{text}"))
    };
    let used = series(
        "apiserver_envelope_encryption_key_id_hash_total",
        &format!("key_id_hash=\"{key}\",provider_name=\"local\",transformation_type=\"{transformation}\""),
    );
    assert!(used >= 1.0, "{transformation}: {used}");
    let reported = series(
        "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds",
        &format!("key_id_hash=\"{key}\",provider_name=\"local\""),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - reported).abs() < 120.0,
        "status at {reported}, now {now}"
    );
    for method in methods {
        let calls = sample(
            &text,
            &format!("apiserver_envelope_encryption_kms_operations_latency_seconds_count{{grpc_status_code=\"OK\",method_name=\"/v2.KeyManagementService/{method}\",provider_name=\"local\"}}"),
        )
        .unwrap_or_else(|| panic!("no {method} latency in:\n{text}"));
        assert!(calls >= 1.0, "{method}: {calls}");
    }
    let cached = sample(
        &text,
        "apiserver_envelope_encryption_dek_source_cache_size{provider_name=\"local\"}",
    )
    .unwrap_or_else(|| panic!("no DEK source cache size in:\n{text}"));
    assert!(cached >= seeds, "{cached} cached seeds");
}

/// Secrets sealed through a KMS v2 plugin, as kube-apiserver seals them: the stored value is
/// `k8s:enc:kms:v2:<name>:` and upstream's `EncryptedObject` (decoded here by `protoc` with
/// the vendored upstream `.proto`), readable through the API and `rudder storage get`; after
/// a restart the plugin decrypts the earlier DEK seed. With the plugin stopped, writes go on
/// with the cached seed (as upstream, for up to 3 minutes); a server started while it is down
/// answers reads and writes of Secrets with a 500 that names the plugin, and recovers once
/// the plugin is back. Upstream's `kms-providers` check (in `/healthz`, `/livez` and
/// `/readyz`) follows the plugin; `/metrics` shows the key ID's use, the plugin's calls, the
/// Secrets in the store and the store's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_through_a_kms_v2_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    std::fs::write(dir.path().join("kek"), format!("{KEY1}\n")).unwrap();
    let socket = dir.path().join("kms.sock");
    let config_path = dir.path().join("encryption.yaml");
    std::fs::write(
        &config_path,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms:
          apiVersion: v2
          name: local
          endpoint: unix://{}
          timeout: 3s
      - identity: {{}}
",
            socket.display()
        ),
    )
    .unwrap();
    let config_arg = config_path.to_str().unwrap();
    let args = [
        "--disable-controller-manager",
        "--disable-scheduler",
        "--encryption-provider-config",
        config_arg,
        // The plugin's Status at least every second (upstream: every minute, and the health
        // check reuses an answer for 20 s), the store's objects counted every second.
        "--kms-status-interval=1s",
        "--etcd-count-metric-poll-period=1s",
    ];
    let plugin = KmsPlugin::start(dir.path()).await;
    let server = RudderServer::start_with_args(RUDDER, &url, &args);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "vault".into(),
    };
    k.ok(&["create", "namespace", "vault"]);
    k.ok_ns(&[
        "create",
        "secret",
        "generic",
        "db",
        "--from-literal=password=hunter2",
    ]);

    let sealed = raw(&url, "/registry/secrets/vault/db").await;
    let prefix = b"k8s:enc:kms:v2:local:";
    assert!(sealed.starts_with(prefix), "{sealed:?}");
    assert!(!contains(&sealed, b"hunter2") && !contains(&sealed, b"aHVudGVyMg=="));
    assert!(!contains(&sealed, b"password"));
    let object = protoc_decode(
        "v2.EncryptedObject",
        "k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2/api.proto",
        &sealed[prefix.len()..],
    );
    // The plugin's key ID: the SHA-256 of its key (KEY1).
    let key_id = "def37a51ea22b624997d81b72cd98229c1fb73dfb826ed7a29edfcf2c54af92a";
    assert!(object.contains(&format!("keyID: \"{key_id}\"")), "{object}");
    assert!(object.contains("encryptedData: "), "{object}");
    assert!(object.contains("encryptedDEKSource: "), "{object}");
    assert!(
        object.contains("encryptedDEKSourceType: HKDF_SHA256_XNONCE_AES_GCM_SEED"),
        "{object}"
    );
    assert_eq!(
        k.json(&["get", "secret", "db"])["data"]["password"],
        "aHVudGVyMg=="
    );
    let shown = storage_get(
        &url,
        &[
            "/registry/secrets/vault/db",
            "-o",
            "json",
            "--encryption-provider-config",
            config_arg,
        ],
    );
    assert_eq!(shown["data"]["password"], "aHVudGVyMg==");

    // Healthy: upstream's check, after etcd's, in every health endpoint.
    assert_eq!(health(&server, "/healthz/kms-providers"), Ok("ok".into()));
    assert_eq!(health(&server, "/livez/kms-providers"), Ok("ok".into()));
    let verbose = health(&server, "/readyz?verbose").unwrap();
    assert!(
        verbose.contains("[+]etcd-readiness ok\n[+]kms-providers ok\n"),
        "{verbose}"
    );
    assert!(health(&server, "/healthz?verbose")
        .unwrap()
        .contains("[+]etcd ok\n[+]kms-providers ok\n"));
    assert_kms_metrics(&server, key_id, "to_storage", &["Status", "Encrypt"], 1.0);
    // Every resource is counted in the store (Secrets were never listed, so the watch cache
    // does not hold them), and the store's size is reported.
    rudder_tests::eventually(
        "apiserver_storage_objects of the Secret",
        Duration::from_secs(20),
        || {
            let text = metrics(&server);
            async move {
                sample(&text, "apiserver_storage_objects{resource=\"secrets\"}") == Some(1.0)
                    && sample(&text, "apiserver_storage_objects{resource=\"namespaces\"}")
                        .is_some_and(|n| n >= 5.0)
            }
        },
    )
    .await;
    let text = metrics(&server);
    let size = sample(
        &text,
        "apiserver_storage_size_bytes{storage_cluster_id=\"etcd-0\"}",
    )
    .unwrap_or_else(|| panic!("no apiserver_storage_size_bytes in:\n{text}"));
    let file = std::fs::metadata(dir.path().join("state.db"))
        .unwrap()
        .len();
    assert!(
        size >= 4096.0 && size <= 2.0 * file as f64 + 1e6,
        "{size} bytes reported, the file has {file}"
    );

    // A restarted server has a new seed; the plugin decrypts the old one.
    let server = server.kill_and_restart(RUDDER, &url, &args);
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "vault".into(),
    };
    assert_eq!(
        k.json(&["get", "secret", "db"])["data"]["password"],
        "aHVudGVyMg=="
    );
    assert_kms_metrics(
        &server,
        key_id,
        "from_storage",
        &["Status", "Encrypt", "Decrypt"],
        2.0,
    );

    // The plugin stops: writes coast on the cached seed, as upstream.
    plugin.stop();
    k.ok_ns(&["create", "secret", "generic", "later", "--from-literal=a=b"]);
    assert!(raw(&url, "/registry/secrets/vault/later")
        .await
        .starts_with(prefix));
    assert_eq!(k.jsonpath("secret", "later", "{.data.a}"), "Yg==");
    // … while the health check fails once its last answer is old (here 1 s), as upstream.
    rudder_tests::eventually(
        "/healthz/kms-providers to fail",
        Duration::from_secs(20),
        || {
            let answer = health(&server, "/healthz/kms-providers");
            async move { answer.is_err() }
        },
    )
    .await;
    let error = health(&server, "/healthz/kms-providers").unwrap_err();
    assert!(error.contains("kms-providers failed"), "{error}");
    for path in ["/healthz?verbose", "/livez?verbose", "/readyz?verbose"] {
        let error = health(&server, path).unwrap_err();
        assert!(
            error.contains("[-]kms-providers failed: reason withheld")
                && !error.contains("kms.sock"),
            "{path}: {error}"
        );
    }
    assert_eq!(
        health(&server, "/readyz?exclude=kms-providers"),
        Ok("ok".into())
    );
    let text = metrics(&server);
    assert!(
        text.lines().any(|line| line
            .starts_with("apiserver_envelope_encryption_kms_operations_latency_seconds_count{")
            && line.contains("method_name=\"/v2.KeyManagementService/Status\"")
            && !line.contains("grpc_status_code=\"OK\"")),
        "a failed Status call in:\n{text}"
    );
    rudder_tests::eventually(
        "apiserver_storage_objects of both Secrets",
        Duration::from_secs(20),
        || {
            let text = metrics(&server);
            async move { sample(&text, "apiserver_storage_objects{resource=\"secrets\"}") == Some(2.0) }
        },
    )
    .await;

    // A server started while the plugin is down has no seed: a 500 naming the plugin; it is
    // neither ready nor live.
    let server =
        server.kill_and_restart_until(RUDDER, &url, &args, "/readyz?exclude=kms-providers");
    assert!(health(&server, "/readyz").is_err());
    assert!(health(&server, "/livez/kms-providers").is_err());
    let k = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "vault".into(),
    };
    let endpoint = format!("unix://{}", socket.display());
    let error = k.fails_ns(&["get", "secret", "db"]);
    assert!(
        error.contains("InternalError")
            && error.contains("k8s:enc:kms:v2:local:")
            && error.contains("has not provided a DEK seed yet")
            && error.contains(&endpoint),
        "{error}"
    );
    let error = k.fails_ns(&["create", "secret", "generic", "more", "--from-literal=a=b"]);
    assert!(
        error.contains("has not provided a DEK seed yet") && error.contains(&endpoint),
        "{error}"
    );
    // Back: the server's next check (every 10 s while failing, here 1 s) primes a seed.
    let _plugin = KmsPlugin::start(dir.path()).await;
    rudder_tests::eventually(
        "/readyz with the plugin back",
        Duration::from_secs(40),
        || {
            let answer = health(&server, "/readyz");
            async move { answer == Ok("ok".into()) }
        },
    )
    .await;
    assert_eq!(health(&server, "/healthz/kms-providers"), Ok("ok".into()));
    rudder_tests::eventually(
        "reads through the restarted plugin",
        Duration::from_secs(40),
        || {
            let read = k.run(&[
                "-n",
                "vault",
                "get",
                "secret",
                "db",
                "-o",
                "jsonpath={.data.password}",
            ]);
            async move { read.status.success() && read.stdout == b"aHVudGVyMg==" }
        },
    )
    .await;
    k.ok_ns(&["create", "secret", "generic", "more", "--from-literal=a=b"]);
}
