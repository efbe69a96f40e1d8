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
        let state = self.state();
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
    let provider = KmsProvider::start(&served.config()).expect("starts");
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
    let first = KmsProvider::start(&served.config()).expect("starts");
    let one = first.seal(b"one", KEY).expect("seals");
    let two = first.seal(b"two", KEY).expect("seals");
    drop(first);

    let second = KmsProvider::start(&served.config()).expect("starts");
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
    let provider = KmsProvider::start(&served.config()).expect("starts");
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
    let provider = KmsProvider::start(&served.config()).expect("starts");
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
    let earlier = KmsProvider::start(&config).expect("starts");
    let from_earlier = earlier.seal(b"earlier", KEY).expect("seals");
    let provider = KmsProvider::start(&config).expect("starts");
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
    let orphan = KmsProvider::start(&config).expect("starts anyway");
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
