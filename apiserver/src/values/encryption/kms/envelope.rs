//! What a KMS v2 value holds after its `k8s:enc:kms:v2:<name>:` prefix, as kube-apiserver
//! writes it: an `EncryptedObject` protobuf whose `encryptedDEKSource` the plugin encrypted
//! and whose `encryptedData` is sealed with a data key derived from that source.
//!
//! With `HKDF_SHA256_XNONCE_AES_GCM_SEED` (what upstream writes since 1.29, and what Rudder
//! writes) the source is a 32-byte seed; every write draws 32 random bytes of `info`, expands
//! the seed with HKDF-SHA256 (expand only: the seed is the pseudo-random key) into a fresh
//! AES-256 key, and stores `info ‖ nonce(12) ‖ AES-GCM(value, aad = storage key)`. With
//! `AES_GCM_KEY` (older writers, read only) the source is the AES key itself and the data is
//! `nonce(12) ‖ AES-GCM(value, aad = storage key)`.

use std::collections::BTreeMap;

use hkdf::Hkdf;
use sha2::{Digest, Sha256};

use super::api::{EncryptedDekSourceType, EncryptedObject};
use crate::values::encryption::ciphers::{Cipher, CipherError};

/// Bytes of a seed, of the per-write HKDF `info`, and of the key derived from them.
pub(super) const SEED_LEN: usize = 32;
const INFO_LEN: usize = 32;
const DERIVED_KEY_LEN: usize = 32;

/// Upstream's limits on what an `EncryptedObject` (and a plugin's answers) may carry.
const MAX_KEY_ID: usize = 1024;
const MAX_ENCRYPTED_SOURCE: usize = 1024;
const MAX_ANNOTATIONS: usize = 32 * 1024;

/// The plaintext of an `encryptedDEKSource`, ready to seal and open values.
pub(super) enum DataKey {
    /// A seed: each value has its own key, derived with the `info` stored in front of it.
    Seed(Box<Hkdf<Sha256>>),
    /// The data key itself (`AES_GCM_KEY`).
    Key(Cipher),
}

impl DataKey {
    /// The data key that `source` (a decrypted `encryptedDEKSource`) is under `kind`.
    pub(super) fn new(kind: EncryptedDekSourceType, source: &[u8]) -> Result<Self, String> {
        match kind {
            EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed => {
                if source.len() < SEED_LEN {
                    return Err(format!(
                        "the decrypted DEK seed is {} bytes, at least {SEED_LEN} are needed",
                        source.len()
                    ));
                }
                Hkdf::<Sha256>::from_prk(source)
                    .map(|kdf| Self::Seed(Box::new(kdf)))
                    .map_err(|_| "the decrypted DEK seed is not a usable HKDF key".to_string())
            }
            EncryptedDekSourceType::AesGcmKey => {
                Cipher::aes_gcm(source).map(Self::Key).ok_or_else(|| {
                    format!(
                        "the decrypted DEK is {} bytes, not an AES key (16, 24 or 32)",
                        source.len()
                    )
                })
            }
        }
    }

    /// Seals `plain`, stored under `key`: `info ‖ nonce ‖ ciphertext` for a seed.
    pub(super) fn seal(&self, plain: &[u8], key: &[u8]) -> Result<Vec<u8>, CipherError> {
        match self {
            Self::Seed(kdf) => {
                let info = random_info()?;
                let sealed = derive(kdf, &info)?.seal(plain, key)?;
                Ok([info.as_slice(), &sealed].concat())
            }
            Self::Key(cipher) => cipher.seal(plain, key),
        }
    }

    /// Opens what [`DataKey::seal`] (or kube-apiserver) made of a value stored under `key`.
    pub(super) fn open(&self, sealed: &[u8], key: &[u8]) -> Result<Vec<u8>, CipherError> {
        match self {
            Self::Seed(kdf) => {
                let (info, rest) = sealed
                    .split_first_chunk::<INFO_LEN>()
                    .ok_or(CipherError::Short)?;
                derive(kdf, info)?.open(rest, key)
            }
            Self::Key(cipher) => cipher.open(sealed, key),
        }
    }
}

/// The AES-256-GCM key of one value: the first 32 bytes of HKDF-Expand(seed, info).
fn derive(kdf: &Hkdf<Sha256>, info: &[u8]) -> Result<Cipher, CipherError> {
    let mut derived = [0u8; DERIVED_KEY_LEN];
    kdf.expand(info, &mut derived)
        .map_err(|_| CipherError::Seal)?;
    Cipher::aes_gcm(&derived).ok_or(CipherError::Seal)
}

fn random_info() -> Result<[u8; INFO_LEN], CipherError> {
    random_bytes::<INFO_LEN>()
}

/// `N` bytes from the system's random source.
pub(super) fn random_bytes<const N: usize>() -> Result<[u8; N], CipherError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CipherError::Random)?;
    Ok(bytes)
}

/// Checks an `EncryptedObject` read from the store as upstream does before using it.
pub(super) fn validate(object: &EncryptedObject) -> Result<EncryptedDekSourceType, String> {
    let kind =
        EncryptedDekSourceType::try_from(object.encrypted_dek_source_type).map_err(|_| {
            format!(
                "unknown encryptedDEKSourceType {}",
                object.encrypted_dek_source_type
            )
        })?;
    if object.encrypted_data.is_empty() {
        return Err("the encrypted data is empty".into());
    }
    validate_source(&object.encrypted_dek_source)?;
    validate_key_id(&object.key_id)?;
    validate_annotations(&object.annotations)?;
    Ok(kind)
}

/// A plugin's `encryptedDEKSource`: present, at most 1 kB.
pub(super) fn validate_source(source: &[u8]) -> Result<(), String> {
    if source.is_empty() {
        return Err("the encrypted DEK source is empty".into());
    }
    if source.len() > MAX_ENCRYPTED_SOURCE {
        return Err(format!(
            "the encrypted DEK source is {} bytes, more than the {MAX_ENCRYPTED_SOURCE} allowed",
            source.len()
        ));
    }
    Ok(())
}

/// A key ID: present, at most 1 kB.
pub(super) fn validate_key_id(key_id: &str) -> Result<(), String> {
    check_key_id(key_id).map_err(|error| error.to_string())
}

/// Why a key ID is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum KeyIdError {
    /// No key ID at all.
    #[error("the key ID is empty")]
    Empty,
    /// A key ID of this many bytes, over 1 kB.
    #[error("the key ID is {0} bytes, more than the {MAX_KEY_ID} allowed")]
    TooLong(usize),
}

impl KeyIdError {
    /// Upstream's code for it in `apiserver_envelope_encryption_invalid_key_id_from_status_total`.
    pub(super) fn code(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong(_) => "too_long",
        }
    }
}

/// [`validate_key_id`], with the reason as a value.
pub(super) fn check_key_id(key_id: &str) -> Result<(), KeyIdError> {
    if key_id.is_empty() {
        return Err(KeyIdError::Empty);
    }
    if key_id.len() > MAX_KEY_ID {
        return Err(KeyIdError::TooLong(key_id.len()));
    }
    Ok(())
}

/// A plugin's annotations: keys are fully qualified domain names, keys and values together
/// at most 32 kB.
pub(super) fn validate_annotations(annotations: &BTreeMap<String, Vec<u8>>) -> Result<(), String> {
    let mut total = 0;
    for (key, value) in annotations {
        if !is_fully_qualified_domain_name(key) {
            return Err(format!(
                "annotation key {key:?} is not a fully qualified domain name"
            ));
        }
        total += key.len() + value.len();
    }
    if total > MAX_ANNOTATIONS {
        return Err(format!(
            "the annotations take {total} bytes, more than the {MAX_ANNOTATIONS} allowed"
        ));
    }
    Ok(())
}

/// At least two dot-separated labels, each lower-case alphanumerics and inner dashes, 253
/// bytes at most (upstream's `IsFullyQualifiedDomainName`).
fn is_fully_qualified_domain_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels: Vec<&str> = name.split('.').collect();
    name.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What identifies a decrypted data key: the source's type, ciphertext, key ID and
/// annotations (each length-prefixed, annotations in key order): the fields of upstream's
/// cache key.
pub(super) fn cache_key(
    kind: EncryptedDekSourceType,
    source: &[u8],
    key_id: &str,
    annotations: &BTreeMap<String, Vec<u8>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + source.len() + key_id.len());
    out.extend_from_slice(&(kind as u32).to_be_bytes());
    let mut field = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    field(source);
    field(key_id.as_bytes());
    for (key, value) in annotations {
        field(key.as_bytes());
        field(value);
    }
    out
}

/// `sha256:<hex>` of a key ID, as upstream names key IDs in messages (empty stays empty).
pub(super) fn key_id_hash(key_id: &str) -> String {
    if key_id.is_empty() {
        return String::new();
    }
    let digest = Sha256::digest(key_id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn a_seed_seals_every_value_with_its_own_derived_key() {
        let seed = DataKey::new(EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed, &[7; 32])
            .expect("a seed");
        let key = b"/registry/secrets/ns/s";
        let one = seed.seal(b"hello", key).expect("seals");
        let two = seed.seal(b"hello", key).expect("seals");
        // info (32) + nonce (12) + value + tag (16)
        assert_eq!(one.len(), 32 + 12 + 5 + 16);
        assert_ne!(one[..32], two[..32], "fresh info per write");
        assert_eq!(seed.open(&one, key).expect("opens"), b"hello");
        assert!(seed.open(&one, b"/registry/secrets/ns/t").is_err());
        assert!(seed.open(&one[..20], key).is_err());
    }

    /// A value sealed by an independent implementation (pyca's HKDFExpand and AESGCM, the
    /// same primitives as Go's x/crypto/hkdf and crypto/cipher that kube-apiserver uses) with
    /// the seed [9; 32], info 0x00..0x1f and nonce 0x20..0x2b: it must open to `hello`.
    #[test]
    fn a_value_sealed_elsewhere_with_a_seed_opens() {
        let seed = DataKey::new(EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed, &[9; 32])
            .expect("a seed");
        let sealed = hex(SEALED_ELSEWHERE);
        assert_eq!(
            seed.open(&sealed, b"/registry/secrets/ns/s")
                .expect("opens"),
            b"hello"
        );
    }

    const SEALED_ELSEWHERE: &str =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
        202122232425262728292a2b60ff168c4befb11f96f7745b1c9feaa38353783e63";

    #[test]
    fn objects_are_checked_as_upstream_checks_them() {
        let good = EncryptedObject {
            encrypted_data: vec![1],
            key_id: "k".into(),
            encrypted_dek_source: vec![2],
            annotations: BTreeMap::from([("kms.example.com".into(), b"x".to_vec())]),
            encrypted_dek_source_type: 1,
        };
        assert!(validate(&good).is_ok());
        let mut bad = good.clone();
        bad.encrypted_dek_source_type = 7;
        assert!(validate(&bad)
            .unwrap_err()
            .contains("encryptedDEKSourceType"));
        let mut bad = good.clone();
        bad.key_id.clear();
        assert!(validate(&bad).unwrap_err().contains("key ID is empty"));
        let mut bad = good.clone();
        bad.encrypted_dek_source = vec![0; 1025];
        assert!(validate(&bad).unwrap_err().contains("1025 bytes"));
        let mut bad = good.clone();
        bad.annotations = BTreeMap::from([("nodots".into(), vec![])]);
        assert!(validate(&bad).unwrap_err().contains("fully qualified"));
        let mut bad = good;
        bad.encrypted_data.clear();
        assert!(validate(&bad).unwrap_err().contains("empty"));
    }

    #[test]
    fn cache_keys_differ_by_every_field() {
        let none = BTreeMap::new();
        let base = cache_key(
            EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed,
            b"src",
            "k",
            &none,
        );
        assert_ne!(
            base,
            cache_key(EncryptedDekSourceType::AesGcmKey, b"src", "k", &none)
        );
        assert_ne!(
            base,
            cache_key(
                EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed,
                b"sr",
                "ck",
                &none
            )
        );
        let annotated = BTreeMap::from([("a.b".to_string(), vec![1])]);
        assert_ne!(
            base,
            cache_key(
                EncryptedDekSourceType::HkdfSha256XnonceAesGcmSeed,
                b"src",
                "k",
                &annotated
            )
        );
    }
}
