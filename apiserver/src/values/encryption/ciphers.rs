//! The ciphers behind upstream's providers, producing the bytes kube-apiserver produces after
//! a provider's prefix:
//!
//! - `aesgcm`: a random 12-byte nonce, then AES-GCM of the value with the storage key as
//!   authenticated data (a value copied under another key does not open);
//! - `aescbc`: a random 16-byte IV, then AES-CBC of the PKCS#7-padded value;
//! - `secretbox`: a random 24-byte nonce, then NaCl's XSalsa20-Poly1305 box (tag first).

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm};
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use crypto_secretbox::XSalsa20Poly1305;
use ring::rand::{SecureRandom, SystemRandom};

type Aes192Gcm = AesGcm<aes::Aes192, U12>;

const GCM_NONCE: usize = 12;
const CBC_IV: usize = 16;
const SECRETBOX_NONCE: usize = 24;

/// Why a value could not be sealed or opened. Deliberately vague: a wrong key and a damaged
/// value look the same.
#[derive(Debug, thiserror::Error)]
pub enum CipherError {
    #[error("the value is too short to hold its nonce")]
    Short,
    #[error("the value does not open with this key (wrong key, or damaged)")]
    Open,
    #[error("sealing failed")]
    Seal,
    #[error("no randomness available: the system random source failed")]
    Random,
}

/// One key of one cipher, ready to use.
pub enum Cipher {
    AesGcm(GcmKey),
    AesCbc(Vec<u8>),
    Secretbox(Box<XSalsa20Poly1305>),
}

/// AES-GCM with a 16-, 24- or 32-byte key.
pub enum GcmKey {
    Aes128(Box<Aes128Gcm>),
    Aes192(Box<Aes192Gcm>),
    Aes256(Box<Aes256Gcm>),
}

impl Cipher {
    /// AES-GCM under `key` (16, 24 or 32 bytes; the config checked the length).
    pub fn aes_gcm(key: &[u8]) -> Option<Self> {
        let key = match key.len() {
            16 => GcmKey::Aes128(Box::new(Aes128Gcm::new_from_slice(key).ok()?)),
            24 => GcmKey::Aes192(Box::new(Aes192Gcm::new_from_slice(key).ok()?)),
            32 => GcmKey::Aes256(Box::new(Aes256Gcm::new_from_slice(key).ok()?)),
            _ => return None,
        };
        Some(Self::AesGcm(key))
    }

    pub fn aes_cbc(key: &[u8]) -> Option<Self> {
        matches!(key.len(), 16 | 24 | 32).then(|| Self::AesCbc(key.to_vec()))
    }

    pub fn secretbox(key: &[u8]) -> Option<Self> {
        Some(Self::Secretbox(Box::new(
            XSalsa20Poly1305::new_from_slice(key).ok()?,
        )))
    }

    /// Seals `plain`, stored under `key`.
    pub fn seal(&self, plain: &[u8], key: &[u8]) -> Result<Vec<u8>, CipherError> {
        match self {
            Self::AesGcm(gcm) => {
                let nonce = random::<GCM_NONCE>()?;
                let payload = Payload {
                    msg: plain,
                    aad: key,
                };
                let sealed = match gcm {
                    GcmKey::Aes128(c) => c.encrypt((&nonce).into(), payload),
                    GcmKey::Aes192(c) => c.encrypt((&nonce).into(), payload),
                    GcmKey::Aes256(c) => c.encrypt((&nonce).into(), payload),
                }
                .map_err(|_| CipherError::Seal)?;
                Ok([nonce.as_slice(), &sealed].concat())
            }
            Self::AesCbc(secret) => {
                let iv = random::<CBC_IV>()?;
                let sealed = match secret.len() {
                    16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(secret, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                    24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(secret, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                    _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(secret, &iv)
                        .map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(plain)),
                }
                .map_err(|_| CipherError::Seal)?;
                Ok([iv.as_slice(), &sealed].concat())
            }
            Self::Secretbox(cipher) => {
                let nonce = random::<SECRETBOX_NONCE>()?;
                let sealed = cipher
                    .encrypt((&nonce).into(), plain)
                    .map_err(|_| CipherError::Seal)?;
                Ok([nonce.as_slice(), &sealed].concat())
            }
        }
    }

    /// Opens what [`Cipher::seal`] made of a value stored under `key`.
    pub fn open(&self, sealed: &[u8], key: &[u8]) -> Result<Vec<u8>, CipherError> {
        match self {
            Self::AesGcm(gcm) => {
                let (nonce, body) = split::<GCM_NONCE>(sealed)?;
                let payload = Payload {
                    msg: body,
                    aad: key,
                };
                match gcm {
                    GcmKey::Aes128(c) => c.decrypt(nonce.into(), payload),
                    GcmKey::Aes192(c) => c.decrypt(nonce.into(), payload),
                    GcmKey::Aes256(c) => c.decrypt(nonce.into(), payload),
                }
                .map_err(|_| CipherError::Open)
            }
            Self::AesCbc(secret) => {
                let (iv, body) = split::<CBC_IV>(sealed)?;
                if body.is_empty() || body.len() % 16 != 0 {
                    return Err(CipherError::Open);
                }
                match secret.len() {
                    16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(secret, iv)
                        .map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(body)),
                    24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(secret, iv)
                        .map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(body)),
                    _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(secret, iv)
                        .map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(body)),
                }
                .map_err(|_| CipherError::Open)?
                .map_err(|_| CipherError::Open)
            }
            Self::Secretbox(cipher) => {
                let (nonce, body) = split::<SECRETBOX_NONCE>(sealed)?;
                cipher
                    .decrypt(nonce.into(), body)
                    .map_err(|_| CipherError::Open)
            }
        }
    }
}

fn random<const N: usize>() -> Result<[u8; N], CipherError> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CipherError::Random)?;
    Ok(bytes)
}

fn split<const N: usize>(sealed: &[u8]) -> Result<(&[u8; N], &[u8]), CipherError> {
    let (head, rest) = sealed.split_first_chunk::<N>().ok_or(CipherError::Short)?;
    Ok((head, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<(&'static str, Cipher)> {
        vec![
            ("aesgcm-16", Cipher::aes_gcm(&[1; 16]).expect("key")),
            ("aesgcm-24", Cipher::aes_gcm(&[2; 24]).expect("key")),
            ("aesgcm-32", Cipher::aes_gcm(&[3; 32]).expect("key")),
            ("aescbc-16", Cipher::aes_cbc(&[4; 16]).expect("key")),
            ("aescbc-32", Cipher::aes_cbc(&[5; 32]).expect("key")),
            ("secretbox", Cipher::secretbox(&[6; 32]).expect("key")),
        ]
    }

    #[test]
    fn every_cipher_round_trips_and_hides_the_value() {
        let plain = b"{\"data\":{\"password\":\"hunter2\"}}";
        for (name, cipher) in all() {
            let sealed = cipher.seal(plain, b"/registry/secrets/ns/s").expect(name);
            assert!(
                !sealed.windows(7).any(|w| w == b"hunter2"),
                "{name} leaks the value"
            );
            let again = cipher.seal(plain, b"/registry/secrets/ns/s").expect(name);
            assert_ne!(sealed, again, "{name}: the nonce must be fresh");
            let opened = cipher.open(&sealed, b"/registry/secrets/ns/s").expect(name);
            assert_eq!(opened, plain, "{name}");
            assert!(cipher.open(&sealed[..5], b"/k").is_err(), "{name}: short");
            let mut damaged = sealed.clone();
            if let Some(last) = damaged.last_mut() {
                *last ^= 0x55;
            }
            assert!(
                cipher.open(&damaged, b"/registry/secrets/ns/s").is_err()
                    || name.starts_with("aescbc"),
                "{name}: a damaged value must not open"
            );
        }
    }

    #[test]
    fn gcm_binds_the_value_to_its_key_and_other_keys_do_not_open_it() {
        let cipher = Cipher::aes_gcm(&[7; 32]).expect("key");
        let sealed = cipher
            .seal(b"v", b"/registry/secrets/a/one")
            .expect("seals");
        assert!(cipher.open(&sealed, b"/registry/secrets/a/two").is_err());
        let other = Cipher::aes_gcm(&[8; 32]).expect("key");
        assert!(other.open(&sealed, b"/registry/secrets/a/one").is_err());
        let box_a = Cipher::secretbox(&[1; 32]).expect("key");
        let box_b = Cipher::secretbox(&[2; 32]).expect("key");
        let sealed = box_a.seal(b"v", b"/k").expect("seals");
        assert!(box_b.open(&sealed, b"/k").is_err());
    }

    /// Values sealed by independent implementations (PyNaCl's `SecretBox`, pyca's AES-GCM
    /// and AES-CBC, which share their layouts with Go's nacl/secretbox and crypto/cipher that
    /// kube-apiserver uses) with fixed keys and nonces: each must open to `hello`.
    #[test]
    fn values_sealed_elsewhere_open() {
        let hex = |text: &str| -> Vec<u8> {
            (0..text.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
                .collect()
        };
        let cases = [
            (
                Cipher::secretbox(&[9; 32]).expect("key"),
                "000102030405060708090a0b0c0d0e0f1011121314151617c860ad55379814e462e6101a9abf9b8e39b91c29be",
                &b""[..],
            ),
            (
                Cipher::aes_gcm(&[3; 32]).expect("key"),
                "000102030405060708090a0b2fd41a20a0beb84c73e8f00800a35291b044cfad81",
                &b"/registry/secrets/ns/s"[..],
            ),
            (
                Cipher::aes_cbc(&[5; 32]).expect("key"),
                "000102030405060708090a0b0c0d0e0f1bec5d76b93bd1ee3d905e4b279f49c7",
                &b""[..],
            ),
        ];
        for (cipher, sealed, key) in cases {
            assert_eq!(cipher.open(&hex(sealed), key).expect(sealed), b"hello");
        }
    }
}
