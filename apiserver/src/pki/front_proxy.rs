//! The front proxy's identity: what the apiserver presents to the extension apiservers it
//! proxies aggregated APIs to (upstream's `--proxy-client-cert-file`), and what they check it
//! against (upstream's `--requestheader-client-ca-file`).
//!
//! The front-proxy CA is a CA of its own, apart from the cluster CA, as kubeadm makes it: the
//! cluster CA signs client certificates for anyone a CertificateSigningRequest is approved
//! for, and an extension apiserver must believe the `X-Remote-User` headers only of the
//! proxy. Like the cluster CA it is shared by every server on a store (sealed with the cluster
//! token under [`KEY`]; a store from before it existed gets the first server's), so an
//! extension apiserver trusts every server of the cluster. Each server issues its own client
//! certificate (CN [`CLIENT_NAME`]) from it.

use std::path::Path;

use rudder_storage::{CreateOutcome, Storage};
use serde::{Deserialize, Serialize};

use super::cluster::{open, seal, ClusterError};
use super::{issue, load_or_create_ca, load_or_issue_leaf, read_optional};
use super::{write_private_file, write_public_file, PkiError};

/// Where the sealed front-proxy CA lives in the store.
pub const KEY: &str = "/registry/rudder/cluster/front-proxy";

/// The common name of the proxy's client certificate: upstream's
/// `--requestheader-allowed-names` value that kubeadm sets.
pub const CLIENT_NAME: &str = "front-proxy-client";

/// The front-proxy CA's common name (kubeadm's).
const CA_NAME: &str = "front-proxy-ca";

pub const CA_CERT_FILE: &str = "front-proxy-ca.crt";
pub const CA_KEY_FILE: &str = "front-proxy-ca.key";
pub const CLIENT_CERT_FILE: &str = "front-proxy-client.crt";
pub const CLIENT_KEY_FILE: &str = "front-proxy-client.key";

/// The proxy's identity (PEM).
#[derive(Clone)]
pub struct FrontProxy {
    /// What extension apiservers verify the proxy's certificate with.
    pub ca_cert_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontProxy").finish_non_exhaustive()
    }
}

/// The sealed form's content.
#[derive(Serialize, Deserialize, PartialEq, Eq)]
struct SharedCa {
    ca_cert_pem: String,
    ca_key_pem: String,
}

impl SharedCa {
    fn read_from(pki_dir: &Path) -> Result<Option<Self>, PkiError> {
        let read = |name: &str| read_optional(&pki_dir.join(name));
        Ok(match (read(CA_CERT_FILE)?, read(CA_KEY_FILE)?) {
            (Some(ca_cert_pem), Some(ca_key_pem)) => Some(Self {
                ca_cert_pem,
                ca_key_pem,
            }),
            _ => None,
        })
    }

    fn write_into(&self, pki_dir: &Path) -> Result<(), PkiError> {
        if Self::read_from(pki_dir)?.as_ref() == Some(self) {
            return Ok(());
        }
        write_private_file(&pki_dir.join(CA_KEY_FILE), &self.ca_key_pem)?;
        write_public_file(&pki_dir.join(CA_CERT_FILE), &self.ca_cert_pem)?;
        tracing::info!(dir = %pki_dir.display(), "took the cluster's front-proxy CA from the store");
        Ok(())
    }

    fn open(bytes: &[u8], token: &str) -> Result<Self, ClusterError> {
        let opened = open(bytes, token, KEY)?;
        serde_json::from_slice(&opened).map_err(|e| ClusterError::Damaged(e.to_string()))
    }
}

impl FrontProxy {
    /// The identity given by files (`--requestheader-client-ca-file`,
    /// `--proxy-client-cert-file`, `--proxy-client-key-file`), as a cluster with its own PKI
    /// has them.
    pub fn from_files(ca: &Path, cert: &Path, key: &Path) -> Result<Self, PkiError> {
        let read = |path: &Path| {
            read_optional(path)?
                .ok_or_else(|| PkiError::Invalid(format!("{}: not found", path.display())))
        };
        Ok(Self {
            ca_cert_pem: read(ca)?,
            client_cert_pem: read(cert)?,
            client_key_pem: read(key)?,
        })
    }
}

/// Makes `pki_dir` hold the cluster's front-proxy CA (the store's, else this server's own,
/// published for the next) and this server's client certificate from it.
pub async fn share_and_load(
    storage: &dyn Storage,
    token: &str,
    pki_dir: &Path,
) -> Result<FrontProxy, ClusterError> {
    std::fs::create_dir_all(pki_dir).map_err(super::io_err(pki_dir))?;
    if let Some(kv) = storage.get(KEY.as_bytes(), 0).await? {
        SharedCa::open(&kv.value, token)?.write_into(pki_dir)?;
    } else {
        load_or_create_ca_named(pki_dir)?;
        let own = SharedCa::read_from(pki_dir)?
            .ok_or_else(|| ClusterError::Damaged("the front-proxy CA was not created".into()))?;
        let data =
            serde_json::to_vec(&own).map_err(|error| ClusterError::Damaged(error.to_string()))?;
        match storage
            .create(KEY.as_bytes(), &seal(&data, token, KEY)?, 0)
            .await?
        {
            CreateOutcome::Created { .. } => {
                tracing::info!("published the cluster's front-proxy CA to the store");
            }
            CreateOutcome::AlreadyExists { current } => {
                SharedCa::open(&current.value, token)?.write_into(pki_dir)?;
            }
        }
    }
    Ok(load(pki_dir)?)
}

fn load_or_create_ca_named(pki_dir: &Path) -> Result<(issue::CaSigner, String), PkiError> {
    load_or_create_ca(
        &pki_dir.join(CA_CERT_FILE),
        &pki_dir.join(CA_KEY_FILE),
        CA_NAME,
    )
}

/// The CA in `pki_dir` and this server's client certificate, issued when missing, expiring
/// or signed by another CA.
fn load(pki_dir: &Path) -> Result<FrontProxy, PkiError> {
    let (ca, ca_cert_pem) = load_or_create_ca_named(pki_dir)?;
    let ca_info = issue::ca_info(&ca_cert_pem)?;
    let (client_cert_pem, client_key_pem) = load_or_issue_leaf(
        &pki_dir.join(CLIENT_CERT_FILE),
        &pki_dir.join(CLIENT_KEY_FILE),
        |_| None,
        &ca_info,
        || {
            ca.issue(
                &issue::client_params(),
                &issue::client_subject(CLIENT_NAME, &[]),
            )
        },
    )?;
    Ok(FrontProxy {
        ca_cert_pem,
        client_cert_pem,
        client_key_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn servers_on_one_store_share_the_front_proxy_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let storage = rudder_storage::open(&url).await.expect("sqlite");
        let first = share_and_load(storage.as_ref(), "t", &dir.path().join("a"))
            .await
            .expect("first");
        let second = share_and_load(storage.as_ref(), "t", &dir.path().join("b"))
            .await
            .expect("second");
        assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
        // Each has its own client certificate, both from the shared CA, named as upstream's
        // requestheader-allowed-names expects.
        assert_ne!(first.client_cert_pem, second.client_cert_pem);
        let ca = issue::ca_info(&first.ca_cert_pem).expect("ca");
        for proxy in [&first, &second] {
            let leaf = issue::leaf_info(&proxy.client_cert_pem).expect("leaf");
            assert_eq!(leaf.renewal_reason(&ca, &proxy.client_key_pem), None);
            let der = issue::first_cert(&proxy.client_cert_pem).expect("der");
            let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
            let cn = cert.subject().iter_common_name().next().expect("cn");
            assert_eq!(cn.as_str().expect("text"), CLIENT_NAME);
        }
        // It is not the cluster CA's business: a wrong token cannot take it.
        assert!(matches!(
            share_and_load(storage.as_ref(), "other", &dir.path().join("c")).await,
            Err(ClusterError::WrongToken)
        ));
        storage.close().await;
    }
}
