//! The `kms` provider (apiVersion v2), as kube-apiserver's KMS v2 with its KDF (the default
//! since 1.29): envelope encryption whose key-encryption key stays in an external plugin.
//!
//! A 32-byte DEK seed is drawn at start and whenever the plugin's key ID changes; the plugin
//! encrypts it once (`Encrypt`) and the seed is kept, so sealing a value is local: a key
//! derived from the seed for that one write ([`envelope`]), stored as the `EncryptedObject`
//! protobuf after `k8s:enc:kms:v2:<name>:`. Opening a value sealed under another seed (an
//! earlier run, another server, an older key ID) asks the plugin to `Decrypt` its DEK source
//! once; decrypted seeds are cached for a day, keyed by their encrypted form.
//!
//! `Status` is polled every minute (every 10 s while it fails). Each successful check keeps
//! the current seed writable for 3 more minutes; while the plugin is down, writes go on with
//! the cached seed until then and fail after, with the plugin's last error, as upstream
//! ("coasting"). Until the first check succeeds, nothing can be sealed or opened.
//!
//! The same check answers the server's `kms-providers` health check ([`KmsProvider::health`]):
//! a check asks `Status` again when the last answer is older than 20 s (3 s after a failure),
//! as upstream's probe. Every provider of a server counts into one [`KmsMetrics`].

pub mod api;
mod envelope;
pub mod metrics;
mod plugin;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use prost::Message;

use api::{EncryptRequest, EncryptedDekSourceType, EncryptedObject};
use envelope::{key_id_hash, DataKey, SEED_LEN};
pub use metrics::KmsMetrics;
use metrics::Transformation;
pub use plugin::StatusIntervals;

use super::config::Kms;

/// How long after the last successful `Status` the seed may still seal values (upstream's
/// `kmsv2PluginWriteDEKSourceMaxTTL`).
const WRITE_TTL: Duration = Duration::from_secs(3 * 60);
/// How long a decrypted seed stays cached (upstream's `cacheTTL`).
const SEED_CACHE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What every KMS v2 provider of a server shares: the metrics it counts into and how often it
/// asks `Status`.
#[derive(Clone, Default)]
pub struct KmsContext {
    pub metrics: Arc<KmsMetrics>,
    pub intervals: StatusIntervals,
}

/// One configured KMS v2 provider: its plugin connection and its seeds.
pub struct KmsProvider {
    shared: Arc<Shared>,
    plugin: plugin::Handle,
}

/// A value opened by a KMS provider.
pub struct KmsOpened {
    pub plain: Vec<u8>,
    /// Sealed under another key ID (or DEK source type) than the one that writes now: a
    /// rewrite would move it to the current key.
    pub stale: bool,
}

/// What the provider and its plugin thread share.
struct Shared {
    name: String,
    /// The seed that seals, once the plugin has encrypted one.
    writer: RwLock<Option<Arc<WriteSeed>>>,
    /// The last `Status` check: when, and why it failed (for health checks, and the messages
    /// of writes that cannot proceed). `None` until the first one ends.
    last_check: RwLock<Option<LastCheck>>,
    /// The plugin's API version from its first healthy answer; it must not change.
    version: Mutex<Option<String>>,
    /// Decrypted DEK sources by their cache key.
    seeds: Mutex<HashMap<Vec<u8>, CachedKey>>,
    metrics: Arc<KmsMetrics>,
}

/// The outcome of one `Status` check.
#[derive(Clone)]
struct LastCheck {
    at: Instant,
    result: Result<(), String>,
}

/// The seed that seals, with the fields every value it seals carries.
struct WriteSeed {
    key: Arc<DataKey>,
    key_id: String,
    /// `key_id`'s hash, as messages and metrics show it.
    key_id_hash: String,
    encrypted_source: Vec<u8>,
    annotations: BTreeMap<String, Vec<u8>>,
    cache_key: Vec<u8>,
    /// Moved on by every successful `Status` check.
    writable_until: Mutex<Instant>,
}

struct CachedKey {
    key: Arc<DataKey>,
    expires: Instant,
}

impl KmsProvider {
    /// Connects to the plugin `config` names and primes the first seed (a failure is
    /// logged, not fatal: the plugin may start after the server).
    pub fn start(config: &Kms, context: &KmsContext) -> Result<Self, String> {
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            writer: RwLock::new(None),
            last_check: RwLock::new(None),
            version: Mutex::new(None),
            seeds: Mutex::new(HashMap::new()),
            metrics: context.metrics.clone(),
        });
        let plugin = plugin::Handle::start(
            PathBuf::from(&config.socket),
            config.timeout,
            context.intervals,
            shared.clone(),
        )?;
        Ok(Self { shared, plugin })
    }

    /// The health check: the last `Status` check's outcome, or a new check when that one is
    /// older than 20 s (3 s when it failed). Healthy: the plugin answered `ok`, API version
    /// v2 and a valid key ID, and a seed for that key ID is in place.
    pub async fn health(&self) -> Result<(), String> {
        self.plugin.health().await
    }

    /// Seals `plain`, stored under `key`, into an `EncryptedObject` (without the prefix).
    pub fn seal(&self, plain: &[u8], key: &[u8]) -> Result<Vec<u8>, String> {
        let writer = self.shared.writer()?;
        let until = *lock(&writer.writable_until);
        if Instant::now() > until {
            return Err(format!(
                "the DEK seed of key ID hash {:?} expired {}s ago: the KMS v2 plugin has not passed a health check for over {}s ({})",
                writer.key_id_hash,
                until.elapsed().as_secs(),
                WRITE_TTL.as_secs(),
                self.shared.last_error().unwrap_or_else(|| "no error recorded".into())
            ));
        }
        self.shared.metrics.key_id_used(
            Transformation::ToStorage,
            &self.shared.name,
            &writer.key_id_hash,
        );
        let encrypted_data = writer
            .key
            .seal(plain, key)
            .map_err(|error| error.to_string())?;
        let object = EncryptedObject {
            encrypted_data,
            key_id: writer.key_id.clone(),
            encrypted_dek_source: writer.encrypted_source.clone(),
            annotations: writer.annotations.clone(),
            encrypted_dek_source_type: EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed as i32,
        };
        Ok(object.encode_to_vec())
    }

    /// Opens an `EncryptedObject` (without the prefix) stored under `key`; asks the plugin
    /// to decrypt its DEK source when it is not cached.
    pub fn open(&self, sealed: &[u8], key: &[u8]) -> Result<KmsOpened, String> {
        let object = EncryptedObject::decode(sealed)
            .map_err(|error| format!("not an EncryptedObject: {error}"))?;
        let kind = envelope::validate(&object)?;
        self.shared.metrics.key_id_used(
            Transformation::FromStorage,
            &self.shared.name,
            &key_id_hash(&object.key_id),
        );
        // As upstream, reads too wait for the first successful check.
        let writer = self.shared.writer()?;
        let cache_key = envelope::cache_key(
            kind,
            &object.encrypted_dek_source,
            &object.key_id,
            &object.annotations,
        );
        let data_key = match self.cached(&writer, &cache_key) {
            Some(data_key) => data_key,
            None => {
                let source = self
                    .plugin
                    .decrypt(api::DecryptRequest {
                        ciphertext: object.encrypted_dek_source.clone(),
                        uid: uuid::Uuid::new_v4().to_string(),
                        key_id: object.key_id.clone(),
                        annotations: object.annotations.clone(),
                    })
                    .map_err(|error| format!("failed to decrypt the DEK: {error}"))?;
                let data_key = Arc::new(DataKey::new(kind, &source)?);
                self.shared.remember(cache_key, data_key.clone());
                data_key
            }
        };
        let plain = data_key
            .open(&object.encrypted_data, key)
            .map_err(|error| error.to_string())?;
        Ok(KmsOpened {
            plain,
            stale: object.key_id != writer.key_id
                || kind != EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed,
        })
    }

    /// Asks the plugin's `Status` now instead of at the next poll (rotating the seed if the
    /// key ID changed).
    pub fn refresh(&self) -> Result<(), String> {
        self.plugin.refresh()
    }

    fn cached(&self, writer: &WriteSeed, cache_key: &[u8]) -> Option<Arc<DataKey>> {
        if writer.cache_key == cache_key {
            return Some(writer.key.clone());
        }
        let seeds = lock(&self.shared.seeds);
        seeds
            .get(cache_key)
            .filter(|cached| cached.expires > Instant::now())
            .map(|cached| cached.key.clone())
    }
}

impl Shared {
    fn writer(&self) -> Result<Arc<WriteSeed>, String> {
        let writer = match self.writer.read() {
            Ok(writer) => writer.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        writer.ok_or_else(|| {
            format!(
                "the KMS v2 plugin has not provided a DEK seed yet: {}",
                self.last_error()
                    .unwrap_or_else(|| "its first health check has not finished".into())
            )
        })
    }

    fn last_check(&self) -> Option<LastCheck> {
        match self.last_check.read() {
            Ok(last) => last.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn last_error(&self) -> Option<String> {
        self.last_check().and_then(|last| last.result.err())
    }

    fn remember(&self, cache_key: Vec<u8>, key: Arc<DataKey>) {
        let now = Instant::now();
        let mut seeds = lock(&self.seeds);
        seeds.retain(|_, cached| cached.expires > now);
        seeds.insert(
            cache_key,
            CachedKey {
                key,
                expires: now + SEED_CACHE_TTL,
            },
        );
        self.metrics.dek_source_cache_size(&self.name, seeds.len());
    }

    /// One health check: `Status` must say `ok`, `v2` (or `v2beta1`, not changing) and a
    /// valid key ID; a key ID other than the seed's gets a new seed. The outcome is recorded
    /// for later messages.
    async fn refresh(&self, plugin: &plugin::Plugin) -> Result<(), String> {
        let result = self.check(plugin).await;
        let last = Some(LastCheck {
            at: Instant::now(),
            result: result.clone(),
        });
        match self.last_check.write() {
            Ok(mut slot) => *slot = last,
            Err(poisoned) => *poisoned.into_inner() = last,
        }
        result
    }

    async fn check(&self, plugin: &plugin::Plugin) -> Result<(), String> {
        // Counted from before the calls: the bound is on how long a seed outlives a check.
        let writable_until = Instant::now() + WRITE_TTL;
        let status = plugin.status().await?;
        let mut problems = Vec::new();
        if status.healthz != "ok" {
            problems.push(format!("the plugin reports healthz {:?}", status.healthz));
        }
        if status.version != "v2" && status.version != "v2beta1" {
            problems.push(format!(
                "the plugin speaks KMS API version {:?}, not \"v2\"",
                status.version
            ));
        } else {
            let mut version = lock(&self.version);
            match version.as_deref() {
                None => *version = Some(status.version.clone()),
                Some(first) if first != status.version => problems.push(format!(
                    "the plugin's API version changed from {first:?} to {:?}",
                    status.version
                )),
                Some(_) => {}
            }
        }
        match envelope::check_key_id(&status.key_id) {
            Err(error) => {
                self.metrics.invalid_status_key_id(&self.name, error.code());
                problems.push(format!("its Status: {error}"));
            }
            Ok(()) => {
                self.metrics
                    .status_key_id(&self.name, &key_id_hash(&status.key_id));
                if let Err(error) = self.rotate(plugin, &status.key_id, writable_until).await {
                    problems.push(error);
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the KMS v2 provider {:?} is not healthy: {}",
                self.name,
                problems.join("; ")
            ))
        }
    }

    /// Keeps the seed writable when the plugin's key ID is the seed's; draws a new seed and
    /// has the plugin encrypt it when the key ID changed (or there is none yet). On failure
    /// the seed in force stays, writable until its time runs out.
    async fn rotate(
        &self,
        plugin: &plugin::Plugin,
        status_key_id: &str,
        writable_until: Instant,
    ) -> Result<(), String> {
        let current = self.writer().ok();
        if let Some(current) = current.as_ref().filter(|seed| seed.key_id == status_key_id) {
            *lock(&current.writable_until) = writable_until;
            return Ok(());
        }
        let seed = envelope::random_bytes::<SEED_LEN>().map_err(|error| error.to_string())?;
        let uid = uuid::Uuid::new_v4().to_string();
        let response = plugin
            .encrypt(EncryptRequest {
                plaintext: seed.to_vec(),
                uid: uid.clone(),
            })
            .await
            .map_err(|error| format!("failed to encrypt a new DEK seed (uid {uid}): {error}"))?;
        envelope::validate_source(&response.ciphertext)
            .and_then(|()| envelope::validate_key_id(&response.key_id))
            .and_then(|()| envelope::validate_annotations(&response.annotations))
            .map_err(|error| format!("the plugin's Encrypt answer (uid {uid}): {error}"))?;
        if response.key_id != status_key_id {
            return Err(format!(
                "the plugin encrypted the new DEK seed (uid {uid}) with key ID hash {:?}, but its Status reports key ID hash {:?}",
                key_id_hash(&response.key_id),
                key_id_hash(status_key_id)
            ));
        }
        let kind = EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed;
        let key = Arc::new(DataKey::new(kind, &seed)?);
        let cache_key = envelope::cache_key(
            kind,
            &response.ciphertext,
            &response.key_id,
            &response.annotations,
        );
        self.remember(cache_key.clone(), key.clone());
        let fresh = Arc::new(WriteSeed {
            key,
            key_id_hash: key_id_hash(&response.key_id),
            key_id: response.key_id,
            encrypted_source: response.ciphertext,
            annotations: response.annotations,
            cache_key,
            writable_until: Mutex::new(writable_until),
        });
        tracing::info!(
            kms = %self.name,
            uid,
            new_key_id_hash = fresh.key_id_hash,
            old_key_id_hash = current.map(|seed| seed.key_id_hash.clone()).unwrap_or_default(),
            "a new DEK seed seals values"
        );
        match self.writer.write() {
            Ok(mut writer) => *writer = Some(fresh),
            Err(poisoned) => *poisoned.into_inner() = Some(fresh),
        }
        Ok(())
    }
}

/// Locks a mutex, taking the data of a poisoned one (each holder leaves it consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests;
