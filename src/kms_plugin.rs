//! `rudder kms-plugin --listen unix:///path/kms.sock --key-file FILE`: a KMS v2 plugin
//! (upstream's `KeyManagementService` over gRPC on a unix socket) whose key-encryption keys
//! are local, for trying the `kms` provider of an EncryptionConfiguration — with Rudder or
//! kube-apiserver — without a cloud KMS. It is as safe as the key file: a test tool.
//!
//! The key file holds base64 AES keys (16, 24 or 32 bytes), one per line: the first encrypts,
//! every one decrypts. A key's ID is the hex SHA-256 of the key. The file is read on every
//! call, so rotating is editing it: put a new key first (keep the old one below it while
//! values sealed under it remain), and the servers see the new key ID at their next `Status`.
//! `Encrypt` returns a 12-byte random nonce followed by AES-GCM of the plaintext.

use std::path::{Path, PathBuf};

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::aes::Aes192;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm};
use anyhow::{bail, Context, Result};
use base64::Engine;
use rudder_apiserver::values::encryption::kms::api::key_management_service_server::{
    KeyManagementService, KeyManagementServiceServer,
};
use rudder_apiserver::values::encryption::kms::api::{
    DecryptRequest, DecryptResponse, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse,
};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

const NONCE_LEN: usize = 12;

type Aes192Gcm = AesGcm<Aes192, U12>;

#[derive(clap::Args)]
pub struct KmsPluginArgs {
    /// Where to serve: unix:///path/kms.sock (a stale socket file there is replaced).
    #[arg(long)]
    listen: String,
    /// Base64 AES keys (16, 24 or 32 bytes), one per line: the first encrypts, all decrypt.
    /// Read on every call.
    #[arg(long)]
    key_file: PathBuf,
}

/// One key of the file.
struct KeyEncryptionKey {
    id: String,
    key: Vec<u8>,
}

/// The keys of `path`, the one that encrypts first.
fn read_keys(path: &Path) -> Result<Vec<KeyEncryptionKey>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the key file {}", path.display()))?;
    let mut keys = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = base64::engine::general_purpose::STANDARD
            .decode(line)
            .with_context(|| format!("{} line {}: not base64", path.display(), index + 1))?;
        if !matches!(key.len(), 16 | 24 | 32) {
            bail!(
                "{} line {}: a key of {} bytes; AES needs 16, 24 or 32",
                path.display(),
                index + 1,
                key.len()
            );
        }
        let id = Sha256::digest(&key)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        keys.push(KeyEncryptionKey { id, key });
    }
    if keys.is_empty() {
        bail!("{}: no key", path.display());
    }
    Ok(keys)
}

fn seal(key: &[u8], plaintext: &[u8]) -> Option<Vec<u8>> {
    let nonce: [u8; NONCE_LEN] = rand::random();
    let sealed = match key.len() {
        16 => Aes128Gcm::new_from_slice(key)
            .ok()?
            .encrypt((&nonce).into(), plaintext),
        24 => Aes192Gcm::new_from_slice(key)
            .ok()?
            .encrypt((&nonce).into(), plaintext),
        _ => Aes256Gcm::new_from_slice(key)
            .ok()?
            .encrypt((&nonce).into(), plaintext),
    }
    .ok()?;
    Some([nonce.as_slice(), &sealed].concat())
}

fn open(key: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    let (nonce, body) = sealed.split_first_chunk::<NONCE_LEN>()?;
    match key.len() {
        16 => Aes128Gcm::new_from_slice(key)
            .ok()?
            .decrypt(nonce.into(), body),
        24 => Aes192Gcm::new_from_slice(key)
            .ok()?
            .decrypt(nonce.into(), body),
        _ => Aes256Gcm::new_from_slice(key)
            .ok()?
            .decrypt(nonce.into(), body),
    }
    .ok()
}

/// The plugin: its key file.
struct LocalKms {
    key_file: PathBuf,
}

impl LocalKms {
    fn keys(&self) -> Result<Vec<KeyEncryptionKey>, Status> {
        read_keys(&self.key_file).map_err(|error| Status::unavailable(format!("{error:#}")))
    }
}

#[tonic::async_trait]
impl KeyManagementService for LocalKms {
    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let (healthz, key_id) = match read_keys(&self.key_file) {
            Ok(keys) => ("ok".to_string(), keys[0].id.clone()),
            Err(error) => (format!("{error:#}"), String::new()),
        };
        Ok(Response::new(StatusResponse {
            version: "v2".into(),
            healthz,
            key_id,
        }))
    }

    async fn encrypt(
        &self,
        request: Request<EncryptRequest>,
    ) -> Result<Response<EncryptResponse>, Status> {
        let keys = self.keys()?;
        let request = request.into_inner();
        let ciphertext = seal(&keys[0].key, &request.plaintext)
            .ok_or_else(|| Status::internal("AES-GCM sealing failed"))?;
        tracing::debug!(uid = request.uid, key_id = keys[0].id, "encrypt");
        Ok(Response::new(EncryptResponse {
            ciphertext,
            key_id: keys[0].id.clone(),
            annotations: Default::default(),
        }))
    }

    async fn decrypt(
        &self,
        request: Request<DecryptRequest>,
    ) -> Result<Response<DecryptResponse>, Status> {
        let keys = self.keys()?;
        let request = request.into_inner();
        let key = keys
            .iter()
            .find(|key| key.id == request.key_id)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no key with ID {:?} in the key file",
                    request.key_id
                ))
            })?;
        let plaintext = open(&key.key, &request.ciphertext).ok_or_else(|| {
            Status::invalid_argument("the ciphertext does not open with the key of its key ID")
        })?;
        tracing::debug!(uid = request.uid, key_id = key.id, "decrypt");
        Ok(Response::new(DecryptResponse { plaintext }))
    }
}

pub async fn run(args: KmsPluginArgs, shutdown: CancellationToken) -> Result<()> {
    let Some(socket) = args
        .listen
        .strip_prefix("unix://")
        .filter(|path| !path.is_empty())
    else {
        bail!(
            "--listen {:?}: only unix:///path sockets are served",
            args.listen
        );
    };
    let keys = read_keys(&args.key_file)?;
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("removing the stale {socket}")),
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(
        listen = args.listen,
        key_id = keys[0].id,
        "serving the KMS v2 plugin"
    );
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    let plugin = LocalKms {
        key_file: args.key_file,
    };
    let served = tonic::transport::Server::builder()
        .add_service(KeyManagementServiceServer::new(plugin))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
        .await;
    let _ = std::fs::remove_file(socket);
    served.context("serving the KMS v2 plugin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_seal_and_open_and_are_named_by_their_hash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keys");
        let new = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let old = base64::engine::general_purpose::STANDARD.encode([8u8; 16]);
        std::fs::write(&path, format!("{new}\n\n{old}\n")).expect("writes");
        let keys = read_keys(&path).expect("valid");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].id.len(), 64);
        assert_ne!(keys[0].id, keys[1].id);
        for key in &keys {
            let sealed = seal(&key.key, b"seed").expect("seals");
            assert_eq!(open(&key.key, &sealed).expect("opens"), b"seed");
        }
        assert!(open(&keys[1].key, &seal(&keys[0].key, b"seed").expect("seals")).is_none());
        std::fs::write(&path, "c2hvcnQ=\n").expect("writes");
        let error = read_keys(&path).err().expect("too short").to_string();
        assert!(error.contains("5 bytes"), "{error}");
    }
}
