//! `kube-public/cluster-info`, as kubeadm publishes it: a ConfigMap whose `kubeconfig` names the
//! cluster's CA and address, readable without credentials, so that a joining node can fetch the
//! CA over an unverified connection and check it against the `--ca-cert-hash` it was given.

use base64::Engine as _;
use serde_json::json;

use super::namespaces::system_write;
use super::store::Input;
use super::Registry;
use crate::catalog;
use crate::error::{ApiError, Result};

/// Where the ConfigMap lives, and its name.
pub const NAMESPACE: &str = "kube-public";
pub const NAME: &str = "cluster-info";
/// The key of the kubeconfig in it.
pub const KEY: &str = "kubeconfig";

/// The kubeconfig kubeadm publishes: one nameless cluster, no users or contexts.
pub fn kubeconfig(server_url: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server_url}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    )
}

/// Creates `cluster-info`, or updates it when it names another CA (a cluster whose CA was
/// replaced); the address of the first server to publish it stays.
pub async fn publish_cluster_info(
    registry: &Registry,
    server_url: &str,
    ca_pem: &str,
) -> Result<()> {
    let maps = catalog::find("", "v1", "configmaps")
        .ok_or_else(|| ApiError::internal("the catalog lacks configmaps"))?;
    let write = system_write();
    let wanted = kubeconfig(server_url, ca_pem);
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    match registry.read(maps, Some(NAMESPACE), NAME).await? {
        Some(stored) => {
            let current = stored.object["data"][KEY].as_str().unwrap_or("");
            if current.contains(&ca) {
                return Ok(());
            }
            registry
                .update_with(maps, Some(NAMESPACE), NAME, None, &write, |current| {
                    let mut updated = current.clone();
                    updated["data"] = json!({ KEY: wanted });
                    crate::registry::object::remove_meta(&mut updated, "resourceVersion");
                    Ok(updated)
                })
                .await?;
            tracing::info!("updated kube-public/cluster-info for a new cluster CA");
        }
        None => {
            let input = Input {
                object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": NAMESPACE},
                    "data": { KEY: wanted }}),
                duplicate_fields: Vec::new(),
            };
            match registry.create(maps, Some(NAMESPACE), input, &write).await {
                Ok(_) => tracing::info!(server_url, "published kube-public/cluster-info"),
                Err(error) if error.is_already_exists() => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// kubeadm's `--discovery-token-ca-cert-hash` of a CA certificate (PEM): `sha256:` and the hex
/// SHA-256 of its SubjectPublicKeyInfo (DER).
pub fn ca_cert_hash(ca_pem: &str) -> std::result::Result<String, String> {
    use rustls_pki_types::pem::PemObject;
    use sha2::Digest;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|error| format!("the CA certificate PEM: {error}"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|error| format!("the CA certificate: {error}"))?;
    let digest = sha2::Sha256::digest(cert.public_key().raw);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}
