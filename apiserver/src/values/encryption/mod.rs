//! Encryption at rest: the value transformers of an `EncryptionConfiguration`, as
//! kube-apiserver applies them between its codec and the store.
//!
//! Each rule covers some resources with a list of providers; every key of every provider is
//! one transformer with upstream's prefix (`k8s:enc:aesgcm:v1:<key name>:`, none for
//! `identity`). The first transformer of the rule that covers a resource seals what is
//! written; reading tries each transformer whose prefix the value carries, so reordering keys
//! rotates them (new writes use the new first key, old values stay readable until rewritten).
//! A `kms` provider (v2) is one transformer, `k8s:enc:kms:v2:<name>:`, backed by an external
//! plugin ([`kms`]). A resource no rule covers is stored as it is. See docs/storage-layer.md.

mod ciphers;
pub mod config;
pub mod kms;
mod reload;
pub mod shared;

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, RwLock};

pub use config::EncryptionConfiguration;
pub use reload::{spawn_reload, Reload, ReloadMetrics};

use ciphers::Cipher;
use config::{Pattern, Provider};
use kms::{KmsContext, KmsProvider};

/// What every encrypted value starts with.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// Why a value could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum EncryptionError {
    #[error(
        "the stored value is encrypted with {0}, which the encryption configuration does not list"
    )]
    UnknownPrefix(String),
    #[error("the stored value is encrypted, and no encryption configuration covers this resource")]
    NotConfigured,
    #[error("the stored value does not decrypt with {prefix}: {why}")]
    Open { prefix: String, why: String },
    #[error("encrypting with {prefix}: {why}")]
    Seal { prefix: String, why: String },
}

/// One transformer: a prefix and what it does.
struct Transformer {
    /// `k8s:enc:aesgcm:v1:key1:`; empty for identity.
    prefix: String,
    /// The provider's prefix without the key name, as metrics label it (`identity` for none;
    /// a KMS provider's whole prefix, name included, as upstream).
    label: String,
    sealer: Sealer,
}

/// What a transformer does to values.
enum Sealer {
    /// Nothing: values are stored as they are.
    Identity,
    /// A local key.
    Cipher(Cipher),
    /// A KMS v2 plugin's envelope.
    Kms(KmsProvider),
}

/// The transformers of one rule, the writer first.
pub struct Chain {
    transformers: Vec<Transformer>,
}

/// A value read back: its plain bytes, and whether it was sealed by another transformer than
/// the one that writes (a rewrite would re-encrypt it).
pub struct Opened<'a> {
    pub plain: Cow<'a, [u8]>,
    pub stale: bool,
    /// The metrics label of the transformer that opened it.
    pub label: &'a str,
}

impl Chain {
    fn build(providers: &[Provider], kms_context: &KmsContext) -> Result<Self, String> {
        let mut transformers = Vec::new();
        for provider in providers {
            let kind = provider.kind();
            let label = format!("k8s:enc:{kind}:v1:");
            let keys = match provider {
                Provider::Identity => {
                    transformers.push(Transformer {
                        prefix: String::new(),
                        label: "identity".into(),
                        sealer: Sealer::Identity,
                    });
                    continue;
                }
                Provider::Kms(kms) => {
                    let provider = KmsProvider::start(kms, kms_context)
                        .map_err(|why| format!("kms provider {:?}: {why}", kms.name))?;
                    let prefix = format!("k8s:enc:kms:v2:{}:", kms.name);
                    transformers.push(Transformer {
                        label: prefix.clone(),
                        prefix,
                        sealer: Sealer::Kms(provider),
                    });
                    continue;
                }
                Provider::AesGcm(keys) | Provider::AesCbc(keys) | Provider::Secretbox(keys) => keys,
            };
            for key in keys {
                let cipher = match provider {
                    Provider::AesGcm(_) => Cipher::aes_gcm(&key.secret),
                    Provider::AesCbc(_) => Cipher::aes_cbc(&key.secret),
                    _ => Cipher::secretbox(&key.secret),
                }
                .ok_or_else(|| format!("{kind} key {:?}: not a usable key", key.name))?;
                transformers.push(Transformer {
                    prefix: format!("{label}{}:", key.name),
                    label: label.clone(),
                    sealer: Sealer::Cipher(cipher),
                });
            }
        }
        Ok(Self { transformers })
    }

    /// The label of the transformer that writes.
    pub fn writer_label(&self) -> &str {
        self.transformers.first().map_or("identity", |t| &t.label)
    }

    /// Seals a value to be stored under `key` with the first transformer.
    pub fn seal(&self, plain: Vec<u8>, key: &[u8]) -> Result<Vec<u8>, EncryptionError> {
        let Some(writer) = self.transformers.first() else {
            return Ok(plain);
        };
        let sealed = match &writer.sealer {
            Sealer::Identity => return Ok(plain),
            Sealer::Cipher(cipher) => cipher.seal(&plain, key).map_err(|error| error.to_string()),
            Sealer::Kms(kms) => kms.seal(&plain, key),
        }
        .map_err(|why| EncryptionError::Seal {
            prefix: writer.prefix.clone(),
            why,
        })?;
        Ok([writer.prefix.as_bytes(), &sealed].concat())
    }

    /// Opens a value stored under `key` with the transformer whose prefix it carries.
    pub fn open<'a>(&'a self, stored: &'a [u8], key: &[u8]) -> Result<Opened<'a>, EncryptionError> {
        let encrypted = stored.starts_with(ENCRYPTED_PREFIX);
        for (index, transformer) in self.transformers.iter().enumerate() {
            if let Sealer::Identity = transformer.sealer {
                if !encrypted {
                    return Ok(Opened {
                        plain: Cow::Borrowed(stored),
                        stale: index != 0,
                        label: &transformer.label,
                    });
                }
                continue;
            }
            let Some(sealed) = stored.strip_prefix(transformer.prefix.as_bytes()) else {
                continue;
            };
            let opened = match &transformer.sealer {
                Sealer::Cipher(cipher) => cipher
                    .open(sealed, key)
                    .map(|plain| (plain, false))
                    .map_err(|error| error.to_string()),
                Sealer::Kms(kms) => kms
                    .open(sealed, key)
                    .map(|opened| (opened.plain, opened.stale)),
                Sealer::Identity => continue,
            };
            let (plain, stale) = opened.map_err(|why| EncryptionError::Open {
                prefix: transformer.prefix.clone(),
                why,
            })?;
            return Ok(Opened {
                plain: Cow::Owned(plain),
                stale: stale || index != 0,
                label: &transformer.label,
            });
        }
        Err(EncryptionError::UnknownPrefix(describe_prefix(stored)))
    }
}

/// `k8s:enc:aesgcm:v1:key1:` of an encrypted value, for messages and tools (at most 100
/// bytes of it).
pub fn describe_prefix(stored: &[u8]) -> String {
    let head = &stored[..stored.len().min(100)];
    let end = head
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b':')
        .nth(4)
        .map_or(head.len(), |(i, _)| i + 1);
    String::from_utf8_lossy(&head[..end]).into_owned()
}

/// A loaded configuration: which chain covers which resources.
pub struct Encryption {
    rules: Vec<(Vec<Pattern>, Arc<Chain>)>,
}

impl Encryption {
    /// No encryption: every resource is stored as it is.
    pub fn none() -> Self {
        Self { rules: Vec::new() }
    }

    /// Builds the transformers of `config`; its KMS providers count into `kms_context`'s
    /// metrics.
    pub fn build(
        config: &EncryptionConfiguration,
        kms_context: &KmsContext,
    ) -> Result<Self, String> {
        let mut rules = Vec::with_capacity(config.resources.len());
        for (index, rule) in config.resources.iter().enumerate() {
            let chain = Chain::build(&rule.providers, kms_context)
                .map_err(|why| format!("resources[{index}]: {why}"))?;
            rules.push((rule.resources.clone(), Arc::new(chain)));
        }
        Ok(Self { rules })
    }

    /// Parses and builds a configuration file's text (KMS providers count into metrics no
    /// server serves: for tools and tests).
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_with(text, &KmsContext::default())
    }

    /// Parses and builds a configuration file's text for a server.
    pub fn parse_with(text: &str, kms_context: &KmsContext) -> Result<Self, String> {
        Self::build(&config::parse(text)?, kms_context)
    }

    /// Reads, parses and builds a configuration file; the error names the file.
    pub fn load(path: &Path, kms_context: &KmsContext) -> Result<(Self, String), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("reading {}: {error}", path.display()))?;
        let encryption = Self::parse_with(&text, kms_context)
            .map_err(|why| format!("{}: {why}", path.display()))?;
        Ok((encryption, text))
    }

    /// The KMS v2 providers, in the order the configuration names them.
    pub fn kms_providers(&self) -> impl Iterator<Item = &KmsProvider> {
        self.rules
            .iter()
            .flat_map(|(_, chain)| chain.transformers.iter())
            .filter_map(|transformer| match &transformer.sealer {
                Sealer::Kms(provider) => Some(provider),
                _ => None,
            })
    }

    /// Upstream's `kms-providers` health check: every KMS v2 provider's
    /// [`KmsProvider::health`], one after the other; the error names each failing one as
    /// upstream does (`kms-provider-0: …`). Healthy when there is none.
    pub async fn check_kms_providers(&self) -> Result<(), String> {
        let providers: Vec<&KmsProvider> = self.kms_providers().collect();
        let mut failures = Vec::new();
        for (index, provider) in providers.into_iter().enumerate() {
            if let Err(why) = provider.health().await {
                failures.push(format!("kms-provider-{index}: {why}"));
            }
        }
        match failures.len() {
            0 => Ok(()),
            1 => Err(failures.remove(0)),
            _ => Err(format!("[{}]", failures.join(", "))),
        }
    }

    /// The chain of the first rule that covers `resource` in `group`, or `None`.
    pub fn chain_for(&self, group: &str, resource: &str) -> Option<Arc<Chain>> {
        self.rules
            .iter()
            .find(|(patterns, _)| patterns.iter().any(|p| p.covers(group, resource)))
            .map(|(_, chain)| chain.clone())
    }
}

/// The configuration in force, swapped whole when the file is reloaded.
pub struct Current {
    active: RwLock<Arc<Encryption>>,
}

impl Current {
    pub fn new(encryption: Encryption) -> Self {
        Self {
            active: RwLock::new(Arc::new(encryption)),
        }
    }

    pub fn none() -> Self {
        Self::new(Encryption::none())
    }

    pub fn get(&self) -> Arc<Encryption> {
        match self.active.read() {
            Ok(active) => active.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn replace(&self, encryption: Encryption) {
        let encryption = Arc::new(encryption);
        match self.active.write() {
            Ok(mut active) => *active = encryption,
            Err(poisoned) => *poisoned.into_inner() = encryption,
        }
    }
}

/// How a resource's values are opened when no rule covers it: plain values as they are, an
/// encrypted one is an error (its configuration was removed before the data was rewritten).
pub fn open_uncovered(stored: &[u8]) -> Result<&[u8], EncryptionError> {
    if stored.starts_with(ENCRYPTED_PREFIX) {
        return Err(EncryptionError::NotConfigured);
    }
    Ok(stored)
}

#[cfg(test)]
mod tests;
