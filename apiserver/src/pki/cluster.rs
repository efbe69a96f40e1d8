//! One cluster across servers: the secrets that make a cluster — its CA (certificate and
//! key) and the ServiceAccount signing key — kept in the store, sealed with the cluster token,
//! as k3s keeps its bootstrap data in its datastore. The first server on a store publishes its
//! own; every later one (given the same `--token`) takes them, so one kubeconfig and one
//! ServiceAccount token work against any of them. A server with another token cannot open
//! them and refuses to start.
//!
//! Sealing: AES-256-GCM under a key derived from the token with PBKDF2-HMAC-SHA256 (a fresh
//! salt and nonce each time the secrets are published). The store holds only the sealed form.

use std::num::NonZeroU32;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rudder_storage::{CreateOutcome, Storage};
use serde::{Deserialize, Serialize};

use super::{read_optional, write_private_file, write_public_file, PkiError};
use super::{CA_CERT_FILE, CA_KEY_FILE, SA_KEY_FILE};

/// Where the sealed secrets live in the store.
pub const KEY: &str = "/registry/rudder/cluster/secrets";

/// The token file a server writes in its data dir when it made the token itself.
pub const TOKEN_FILE: &str = "token";

const PBKDF2_ITERATIONS: u32 = 100_000;
const SALT_LEN: usize = 16;

/// Why the cluster's secrets could not be shared.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("this store belongs to a cluster created with another token: start this server with that cluster's token (--token, or the `token` file in the data dir of one of its servers)")]
    WrongToken,
    #[error("the cluster secrets in the store are damaged: {0}")]
    Damaged(String),
    #[error("the store: {0}")]
    Storage(#[from] rudder_storage::Error),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("{0}")]
    Random(String),
}

/// The secrets a cluster's servers share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub service_account_key_pem: String,
}

/// What the store holds: the sealed secrets and what opens them with the token.
#[derive(Serialize, Deserialize)]
struct Sealed {
    version: u32,
    salt: String,
    nonce: String,
    sealed: String,
}

fn key_for(token: &str, salt: &[u8]) -> Result<LessSafeKey, ClusterError> {
    let mut key = [0u8; 32];
    let iterations = NonZeroU32::new(PBKDF2_ITERATIONS).unwrap_or(NonZeroU32::MIN);
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        token.as_bytes(),
        &mut key,
    );
    let unbound = UnboundKey::new(&AES_256_GCM, &key)
        .map_err(|_| ClusterError::Random("cannot make a sealing key".into()))?;
    Ok(LessSafeKey::new(unbound))
}

fn random<const N: usize>() -> Result<[u8; N], ClusterError> {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ClusterError::Random("the system's random source failed".into()))?;
    Ok(bytes)
}

/// `data` sealed with `token` for the store key `aad` (the key is authenticated with it, so a
/// sealed value moved to another key does not open).
pub(crate) fn seal(data: &[u8], token: &str, aad: &str) -> Result<Vec<u8>, ClusterError> {
    let salt = random::<SALT_LEN>()?;
    let nonce = random::<NONCE_LEN>()?;
    let key = key_for(token, &salt)?;
    let mut data = data.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad.as_bytes()),
        &mut data,
    )
    .map_err(|_| ClusterError::Random("sealing failed".into()))?;
    let sealed = Sealed {
        version: 1,
        salt: STANDARD.encode(salt),
        nonce: STANDARD.encode(nonce),
        sealed: STANDARD.encode(data),
    };
    serde_json::to_vec(&sealed).map_err(|error| ClusterError::Damaged(error.to_string()))
}

/// What [`seal`] sealed, opened with `token`; a wrong token is [`ClusterError::WrongToken`].
pub(crate) fn open(bytes: &[u8], token: &str, aad: &str) -> Result<Vec<u8>, ClusterError> {
    let damaged = |what: &str| ClusterError::Damaged(what.to_string());
    let sealed: Sealed = serde_json::from_slice(bytes).map_err(|e| damaged(&e.to_string()))?;
    if sealed.version != 1 {
        return Err(damaged(&format!("version {} is not known", sealed.version)));
    }
    let decode = |text: &str| STANDARD.decode(text).map_err(|e| damaged(&e.to_string()));
    let salt = decode(&sealed.salt)?;
    let nonce: [u8; NONCE_LEN] = decode(&sealed.nonce)?
        .try_into()
        .map_err(|_| damaged("a nonce of the wrong length"))?;
    let mut data = decode(&sealed.sealed)?;
    let key = key_for(token, &salt)?;
    let opened = key
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut data,
        )
        .map_err(|_| ClusterError::WrongToken)?;
    Ok(opened.to_vec())
}

impl Secrets {
    /// Sealed with `token`.
    fn seal(&self, token: &str) -> Result<Vec<u8>, ClusterError> {
        let data =
            serde_json::to_vec(self).map_err(|error| ClusterError::Damaged(error.to_string()))?;
        seal(&data, token, KEY)
    }

    /// Opened with `token`; a wrong token is [`ClusterError::WrongToken`].
    fn open(bytes: &[u8], token: &str) -> Result<Self, ClusterError> {
        let opened = open(bytes, token, KEY)?;
        serde_json::from_slice(&opened).map_err(|e| ClusterError::Damaged(e.to_string()))
    }

    fn read_from(pki_dir: &Path) -> Result<Option<Self>, PkiError> {
        let read = |name: &str| read_optional(&pki_dir.join(name));
        match (read(CA_CERT_FILE)?, read(CA_KEY_FILE)?, read(SA_KEY_FILE)?) {
            (Some(ca_cert_pem), Some(ca_key_pem), Some(service_account_key_pem)) => {
                Ok(Some(Self {
                    ca_cert_pem,
                    ca_key_pem,
                    service_account_key_pem,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Writes the secrets into `pki_dir`, where [`super::Pki::load_or_create`] finds them (it
    /// re-issues leaf certificates another CA signed).
    fn write_into(&self, pki_dir: &Path) -> Result<(), PkiError> {
        std::fs::create_dir_all(pki_dir).map_err(super::io_err(pki_dir))?;
        if Self::read_from(pki_dir)?.as_ref() == Some(self) {
            return Ok(());
        }
        write_private_file(&pki_dir.join(CA_KEY_FILE), &self.ca_key_pem)?;
        write_public_file(&pki_dir.join(CA_CERT_FILE), &self.ca_cert_pem)?;
        write_private_file(&pki_dir.join(SA_KEY_FILE), &self.service_account_key_pem)?;
        // The public half follows the key; load_or_create writes it anew.
        let _ = std::fs::remove_file(pki_dir.join(super::SA_PUB_FILE));
        tracing::info!(dir = %pki_dir.display(), "took the cluster's CA and ServiceAccount key from the store");
        Ok(())
    }
}

/// How this server came by the cluster's secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Joined {
    /// It published its own: the first server of this cluster.
    Created,
    /// It took those another server published.
    Joined,
}

/// Makes `pki_dir` hold the cluster's secrets: those in the store when there are any (opened
/// with `token`), else this server's own (created by `create_local`), published for the next.
pub async fn share(
    storage: &dyn Storage,
    token: &str,
    pki_dir: &Path,
    create_local: impl FnOnce() -> Result<(), PkiError>,
) -> Result<Joined, ClusterError> {
    if let Some(kv) = storage.get(KEY.as_bytes(), 0).await? {
        Secrets::open(&kv.value, token)?.write_into(pki_dir)?;
        return Ok(Joined::Joined);
    }
    create_local()?;
    let own = Secrets::read_from(pki_dir)?
        .ok_or_else(|| ClusterError::Damaged("the local CA was not created".into()))?;
    match storage.create(KEY.as_bytes(), &own.seal(token)?, 0).await? {
        CreateOutcome::Created { .. } => {
            tracing::info!("published the cluster's CA and ServiceAccount key to the store");
            Ok(Joined::Created)
        }
        // Another server published first: theirs is the cluster's.
        CreateOutcome::AlreadyExists { current } => {
            Secrets::open(&current.value, token)?.write_into(pki_dir)?;
            Ok(Joined::Joined)
        }
    }
}

/// The cluster token: the one given, else the data dir's token file, else a new random one
/// written there (0600).
pub fn token(given: Option<&str>, data_dir: &Path) -> Result<String, PkiError> {
    if let Some(token) = given.filter(|token| !token.is_empty()) {
        return Ok(token.to_string());
    }
    let path = data_dir.join(TOKEN_FILE);
    if let Some(text) = read_optional(&path)? {
        let token = text.trim().to_string();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    let bytes: [u8; 32] = random::<32>().map_err(|error| PkiError::Generate(error.to_string()))?;
    let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    write_private_file(&path, &format!("{token}\n"))?;
    tracing::info!(path = %path.display(), "created the cluster token (give it to other servers with --token)");
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets {
            ca_cert_pem: "cert".into(),
            ca_key_pem: "key".into(),
            service_account_key_pem: "sa".into(),
        }
    }

    #[test]
    fn sealed_secrets_open_with_their_token_only() {
        let sealed = secrets().seal("right").expect("sealed");
        assert!(!String::from_utf8_lossy(&sealed).contains("key"));
        assert_eq!(Secrets::open(&sealed, "right").expect("opened"), secrets());
        assert!(matches!(
            Secrets::open(&sealed, "wrong"),
            Err(ClusterError::WrongToken)
        ));
        // A changed byte is caught, not handed out.
        let mut value: serde_json::Value = serde_json::from_slice(&sealed).expect("json");
        let text = value["sealed"].as_str().expect("text").to_string();
        let flipped = if text.starts_with('A') { "B" } else { "A" };
        value["sealed"] = serde_json::json!(format!("{flipped}{}", &text[1..]));
        let tampered = serde_json::to_vec(&value).expect("json");
        assert!(Secrets::open(&tampered, "right").is_err());
    }

    #[tokio::test]
    async fn the_first_server_publishes_and_the_next_takes_or_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite");
        let first = dir.path().join("first");
        let second = dir.path().join("second");
        let create = |pki: &Path| {
            let pki = pki.to_path_buf();
            move || secrets().write_into(&pki)
        };
        assert_eq!(
            share(storage.as_ref(), "t", &first, create(&first))
                .await
                .expect("first"),
            Joined::Created
        );
        let never = || -> Result<(), PkiError> { panic!("a joining server makes no CA") };
        assert_eq!(
            share(storage.as_ref(), "t", &second, never)
                .await
                .expect("second"),
            Joined::Joined
        );
        assert_eq!(Secrets::read_from(&second).expect("read"), Some(secrets()));
        let third = dir.path().join("third");
        assert!(matches!(
            share(storage.as_ref(), "other", &third, never).await,
            Err(ClusterError::WrongToken)
        ));
        storage.close().await;
    }
}
