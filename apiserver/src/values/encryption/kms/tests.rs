//! The KMS v2 provider against a fake plugin served over gRPC on a unix socket in a tempdir,
//! in this process: the real client, thread and waits, a plugin whose key ID the test
//! changes and whose calls it counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use tokio_util::sync::CancellationToken;

use super::api::key_management_service_server::{KeyManagementService, KeyManagementServiceServer};
use super::api::{
    DecryptRequest, DecryptResponse, EncryptRequest, EncryptResponse, EncryptedObject,
    StatusRequest, StatusResponse,
};
use super::*;
use crate::values::encryption::ciphers::Cipher;
use crate::values::encryption::{Encryption, EncryptionError};

const KEY: &[u8] = b"/registry/secrets/ns/s";

/// The fake plugin's state: AES-GCM keys by key ID, the one in use, and call counts.
struct FakeState {
    key_id: String,
    keys: HashMap<String, [u8; 32]>,
    healthz: String,
    statuses: usize,
    encrypts: usize,
    decrypts: usize,
}

#[derive(Clone)]
struct FakePlugin(Arc<Mutex<FakeState>>);

impl FakePlugin {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(FakeState {
            key_id: "key-1".into(),
            keys: HashMap::from([("key-1".to_string(), [1; 32])]),
            healthz: "ok".into(),
            statuses: 0,
            encrypts: 0,
            decrypts: 0,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().expect("fake plugin state")
    }

    fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.encrypts, state.decrypts)
    }

    fn use_key(&self, key_id: &str, key: [u8; 32]) {
        let mut state = self.state();
        state.key_id = key_id.into();
        state.keys.insert(key_id.into(), key);
    }
}

#[tonic::async_trait]
impl KeyManagementService for FakePlugin {
    async fn status(
        &self,
        _: tonic::Request<StatusRequest>,
    ) -> Result<tonic::Response<StatusResponse>, tonic::Status> {
        let mut state = self.state();
        state.statuses += 1;
        Ok(tonic::Response::new(StatusResponse {
            version: "v2".into(),
            healthz: state.healthz.clone(),
            key_id: state.key_id.clone(),
        }))
    }

    async fn encrypt(
        &self,
        request: tonic::Request<EncryptRequest>,
    ) -> Result<tonic::Response<EncryptResponse>, tonic::Status> {
        let mut state = self.state();
        state.encrypts += 1;
        let key = state.keys[&state.key_id];
        let ciphertext = Cipher::aes_gcm(&key)
            .and_then(|cipher| cipher.seal(&request.get_ref().plaintext, b"").ok())
            .ok_or_else(|| tonic::Status::internal("sealing"))?;
        Ok(tonic::Response::new(EncryptResponse {
            ciphertext,
            key_id: state.key_id.clone(),
            annotations: BTreeMap::from([("fake.kms.example.com".into(), b"1".to_vec())]),
        }))
    }

    async fn decrypt(
        &self,
        request: tonic::Request<DecryptRequest>,
    ) -> Result<tonic::Response<DecryptResponse>, tonic::Status> {
        let mut state = self.state();
        state.decrypts += 1;
        let request = request.into_inner();
        let key = state
            .keys
            .get(&request.key_id)
            .ok_or_else(|| tonic::Status::not_found("no such key"))?;
        let plaintext = Cipher::aes_gcm(key)
            .and_then(|cipher| cipher.open(&request.ciphertext, b"").ok())
            .ok_or_else(|| tonic::Status::invalid_argument("does not open"))?;
        Ok(tonic::Response::new(DecryptResponse { plaintext }))
    }
}

/// The fake plugin serving on `kms.sock` in a tempdir until stopped.
struct Served {
    dir: tempfile::TempDir,
    plugin: FakePlugin,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl Served {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let plugin = FakePlugin::new();
        let stop = CancellationToken::new();
        let server = serve(dir.path().join("kms.sock"), plugin.clone(), stop.clone());
        Self {
            dir,
            plugin,
            stop,
            server,
        }
    }

    fn config(&self) -> Kms {
        Kms {
            name: "fake".into(),
            socket: self.socket(),
            timeout: Duration::from_secs(2),
        }
    }

    fn socket(&self) -> String {
        self.dir.path().join("kms.sock").display().to_string()
    }

    async fn stop(self) -> tempfile::TempDir {
        self.stop.cancel();
        let _ = self.server.await;
        let _ = std::fs::remove_file(self.dir.path().join("kms.sock"));
        self.dir
    }
}

fn serve(
    socket: std::path::PathBuf,
    plugin: FakePlugin,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).expect("binds the socket");
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(KeyManagementServiceServer::new(plugin))
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await
            .expect("the fake plugin serves");
    })
}

fn decode(sealed: &[u8]) -> EncryptedObject {
    EncryptedObject::decode(sealed).expect("an EncryptedObject")
}

#[tokio::test(flavor = "multi_thread")]
async fn values_round_trip_in_upstreams_layout_without_calling_decrypt() {
    let served = Served::start().await;
    let provider = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    assert_eq!(
        served.plugin.counts(),
        (1, 0),
        "one seed encrypted at start"
    );

    let sealed = provider.seal(b"hunter2", KEY).expect("seals");
    let object = decode(&sealed);
    assert_eq!(
        object.encrypted_dek_source_type,
        EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32
    );
    assert_eq!(object.key_id, "key-1");
    assert_eq!(object.annotations["fake.kms.example.com"], b"1");
    // 32 bytes of HKDF info, a 12-byte nonce, the value and a 16-byte tag.
    assert_eq!(object.encrypted_data.len(), 32 + 12 + 7 + 16);
    assert!(!sealed.windows(7).any(|w| w == b"hunter2"));

    let opened = provider.open(&sealed, KEY).expect("opens");
    assert_eq!(opened.plain, b"hunter2");
    assert!(!opened.stale);
    let error = provider
        .open(&sealed, b"/registry/secrets/ns/other")
        .err()
        .expect("bound to its storage key");
    assert!(error.contains("does not open"), "{error}");
    assert_eq!(
        served.plugin.counts(),
        (1, 0),
        "its own seed is never decrypted"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_run_decrypts_a_seed_once_and_then_uses_its_cache() {
    let served = Served::start().await;
    let first = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    let one = first.seal(b"one", KEY).expect("seals");
    let two = first.seal(b"two", KEY).expect("seals");
    drop(first);

    let second = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    assert_eq!(served.plugin.counts(), (2, 0), "a new seed per run");
    assert_eq!(second.open(&one, KEY).expect("opens").plain, b"one");
    assert_eq!(served.plugin.counts(), (2, 1));
    assert_eq!(second.open(&two, KEY).expect("opens").plain, b"two");
    assert_eq!(second.open(&one, KEY).expect("opens").plain, b"one");
    assert_eq!(
        served.plugin.counts(),
        (2, 1),
        "the seed came from the cache"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_key_id_rotates_the_seed_and_old_values_read_as_stale() {
    let served = Served::start().await;
    let provider = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    let old = provider.seal(b"old", KEY).expect("seals");

    provider.refresh().expect("healthy");
    assert_eq!(served.plugin.counts(), (1, 0), "same key ID: no new seed");

    served.plugin.use_key("key-2", [2; 32]);
    provider.refresh().expect("healthy");
    assert_eq!(
        served.plugin.counts(),
        (2, 0),
        "a new seed for the new key ID"
    );
    let new = provider.seal(b"new", KEY).expect("seals");
    assert_eq!(decode(&new).key_id, "key-2");
    assert_ne!(
        decode(&new).encrypted_dek_source,
        decode(&old).encrypted_dek_source
    );

    let opened = provider.open(&old, KEY).expect("opens");
    assert_eq!(opened.plain, b"old");
    assert!(opened.stale, "sealed under the old key ID");
    assert!(!provider.open(&new, KEY).expect("opens").stale);
    assert_eq!(served.plugin.counts(), (2, 0), "both seeds were this run's");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unhealthy_plugin_is_reported_and_an_expired_seed_stops_writes() {
    let served = Served::start().await;
    let provider = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    served.plugin.state().healthz = "disk full".into();
    let error = provider.refresh().expect_err("unhealthy");
    assert!(error.contains("healthz \"disk full\""), "{error}");
    // Writes coast on the seed until its time is up, then fail with the last error.
    provider.seal(b"v", KEY).expect("still writable");
    let writer = provider.shared.writer().expect("a seed");
    *lock(&writer.writable_until) = Instant::now() - Duration::from_secs(1);
    let error = provider.seal(b"v", KEY).expect_err("expired");
    assert!(
        error.contains("expired") && error.contains("disk full"),
        "{error}"
    );
    served.plugin.state().healthz = "ok".into();
    provider.refresh().expect("healthy again");
    provider.seal(b"v", KEY).expect("writable again");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_plugin_down_writes_coast_and_unknown_seeds_fail_fast_and_clearly() {
    let served = Served::start().await;
    let config = served.config();
    let earlier = KmsProvider::start(&config, &KmsContext::default()).expect("starts");
    let from_earlier = earlier.seal(b"earlier", KEY).expect("seals");
    let provider = KmsProvider::start(&config, &KmsContext::default()).expect("starts");
    let dir = served.stop().await;

    // The cached seed still seals and opens this run's values.
    let sealed = provider.seal(b"v", KEY).expect("coasts on the cached seed");
    assert_eq!(provider.open(&sealed, KEY).expect("opens").plain, b"v");
    // Another seed needs the plugin: a clear error, well within the timeout.
    let started = Instant::now();
    let error = provider
        .open(&from_earlier, KEY)
        .err()
        .expect("needs Decrypt");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        error.contains("failed to decrypt the DEK")
            && error.contains(&format!("unix://{}", config.socket))
            && error.contains("Decrypt"),
        "{error}"
    );
    // A provider started while the plugin is down has no seed: nothing seals.
    let orphan = KmsProvider::start(&config, &KmsContext::default()).expect("starts anyway");
    let error = orphan.seal(b"v", KEY).expect_err("no seed");
    assert!(
        error.contains("has not provided a DEK seed yet") && error.contains("Status"),
        "{error}"
    );
    drop(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chain_writes_the_providers_prefix_and_refuses_another_providers_values() {
    let served = Served::start().await;
    let config = format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - kms: {{apiVersion: v2, name: fake, endpoint: 'unix://{}', timeout: 2s}}
      - identity: {{}}
",
        served.socket()
    );
    let encryption = Encryption::parse(&config).expect("valid");
    let chain = encryption.chain_for("", "secrets").expect("covered");
    assert_eq!(chain.writer_label(), "k8s:enc:kms:v2:fake:");
    let sealed = chain.seal(b"hello".to_vec(), KEY).expect("seals");
    assert!(sealed.starts_with(b"k8s:enc:kms:v2:fake:"));
    assert_eq!(&*chain.open(&sealed, KEY).expect("opens").plain, b"hello");
    assert_eq!(
        &*chain.open(b"plain", KEY).expect("identity").plain,
        b"plain"
    );

    let mut foreign = b"k8s:enc:kms:v2:other:".to_vec();
    foreign.extend_from_slice(&sealed[b"k8s:enc:kms:v2:fake:".len()..]);
    match chain.open(&foreign, KEY) {
        Err(error @ EncryptionError::UnknownPrefix(_)) => assert_eq!(
            error.to_string(),
            "the stored value is encrypted with k8s:enc:kms:v2:other:, which the encryption configuration does not list"
        ),
        other => panic!("{:?}", other.map(|opened| opened.plain.into_owned())),
    }
    served.stop().await;
}

fn encode(metrics: &KmsMetrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    text
}

/// The value of the series `series` (name and labels) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_health_check_reuses_a_recent_answer_and_asks_status_when_it_is_old() {
    let served = Served::start().await;
    let ttl = Duration::from_millis(300);
    let context = KmsContext {
        metrics: Arc::new(KmsMetrics::default()),
        intervals: StatusIntervals {
            healthy_poll: Duration::from_secs(3600),
            failing_poll: Duration::from_secs(3600),
            healthy_ttl: ttl,
            failing_ttl: ttl,
        },
    };
    let provider = KmsProvider::start(&served.config(), &context).expect("starts");
    let statuses = || served.plugin.state().statuses;
    assert_eq!(statuses(), 1, "the first check");
    provider.health().await.expect("healthy");
    assert_eq!(statuses(), 1, "the first check is recent");

    served.plugin.state().healthz = "disk full".into();
    provider.health().await.expect("the recent answer still");
    tokio::time::sleep(ttl).await;
    let error = provider.health().await.expect_err("asked again");
    assert!(error.contains("healthz \"disk full\""), "{error}");
    assert_eq!(statuses(), 2);
    provider.health().await.expect_err("the recent failure");
    assert_eq!(statuses(), 2);

    // Back, with an invalid key ID: unhealthy, and counted by upstream's code for it.
    {
        let mut state = served.plugin.state();
        state.healthz = "ok".into();
        state.key_id = String::new();
    }
    tokio::time::sleep(ttl).await;
    let error = provider.health().await.expect_err("no key ID");
    assert!(error.contains("key ID is empty"), "{error}");
    let text = encode(&context.metrics);
    assert_eq!(
        sample(&text, "apiserver_envelope_encryption_invalid_key_id_from_status_total{error=\"empty\",provider_name=\"fake\"}"),
        Some(1.0),
        "{text}"
    );
    served.plugin.state().key_id = "key-1".into();
    tokio::time::sleep(ttl).await;
    provider.health().await.expect("healthy again");

    // A plugin that is gone fails the check once the last answer is old.
    let dir = served.stop().await;
    tokio::time::sleep(ttl).await;
    let error = provider.health().await.expect_err("gone");
    assert!(error.contains("Status"), "{error}");
    drop(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn key_ids_calls_and_cached_seeds_are_counted_as_upstream_counts_them() {
    let served = Served::start().await;
    let context = KmsContext {
        metrics: Arc::new(KmsMetrics::new("server-1")),
        intervals: StatusIntervals::default(),
    };
    let earlier = KmsProvider::start(&served.config(), &KmsContext::default()).expect("starts");
    let from_earlier = earlier.seal(b"earlier", KEY).expect("seals");
    drop(earlier);
    let provider = KmsProvider::start(&served.config(), &context).expect("starts");
    let sealed = provider.seal(b"v", KEY).expect("seals");
    provider.seal(b"w", KEY).expect("seals");
    provider.open(&sealed, KEY).expect("opens");
    provider
        .open(&from_earlier, KEY)
        .expect("opens through Decrypt");
    let text = encode(&context.metrics);

    let key = key_id_hash("key-1");
    let server = key_id_hash("server-1");
    let used = |transformation: &str| {
        format!("apiserver_envelope_encryption_key_id_hash_total{{apiserver_id_hash=\"{server}\",key_id_hash=\"{key}\",provider_name=\"fake\",transformation_type=\"{transformation}\"}}")
    };
    assert_eq!(sample(&text, &used("to_storage")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &used("from_storage")), Some(2.0), "{text}");
    let reported = sample(
        &text,
        &format!("apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds{{apiserver_id_hash=\"{server}\",key_id_hash=\"{key}\",provider_name=\"fake\"}}"),
    )
    .expect("the Status key ID's time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!((now - reported).abs() < 60.0, "{reported}");
    // This run's seed and the earlier run's, decrypted once.
    assert_eq!(
        sample(
            &text,
            "apiserver_envelope_encryption_dek_source_cache_size{provider_name=\"fake\"}"
        ),
        Some(2.0),
        "{text}"
    );
    for (method, calls) in [("Status", 1.0), ("Encrypt", 1.0), ("Decrypt", 1.0)] {
        let series = format!("apiserver_envelope_encryption_kms_operations_latency_seconds_count{{grpc_status_code=\"OK\",method_name=\"/v2.KeyManagementService/{method}\",provider_name=\"fake\"}}");
        assert_eq!(sample(&text, &series), Some(calls), "{series} in\n{text}");
    }

    // A call that fails is labelled with its gRPC code.
    let dir = served.stop().await;
    provider.refresh().expect_err("the plugin is gone");
    let text = encode(&context.metrics);
    let failed: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.starts_with("apiserver_envelope_encryption_kms_operations_latency_seconds_count{")
                && line.contains("/Status")
                && !line.contains("grpc_status_code=\"OK\"")
        })
        .collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("grpc_status_code=\"Unavailable\"")
            || failed[0].contains("grpc_status_code=\"Unknown\""),
        "{}",
        failed[0]
    );
    drop(dir);
}
