//! Kubeconfig files with embedded credentials (CA data, client certificate and key).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::Pki;

/// Cluster and context name used in generated kubeconfigs.
pub const CLUSTER_NAME: &str = "rudder";

/// A YAML scalar: JSON string syntax is valid YAML and quotes everything that needs it.
fn scalar(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

/// A kubeconfig for any client certificate: cluster `cluster` at `server_url` trusting
/// `ca_cert_pem`, user `user` with the given certificate and key, and a context named after the
/// cluster that is the current context. All PEM data is embedded base64-encoded.
pub fn client_kubeconfig(
    cluster: &str,
    server_url: &str,
    ca_cert_pem: &str,
    user: &str,
    client_cert_pem: &str,
    client_key_pem: &str,
) -> String {
    let cluster = scalar(cluster);
    let user = scalar(user);
    let server = scalar(server_url);
    let ca = STANDARD.encode(ca_cert_pem);
    let cert = STANDARD.encode(client_cert_pem);
    let key = STANDARD.encode(client_key_pem);
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {cluster}\n  \
           cluster:\n    \
             server: {server}\n    \
             certificate-authority-data: {ca}\n\
         users:\n\
         - name: {user}\n  \
           user:\n    \
             client-certificate-data: {cert}\n    \
             client-key-data: {key}\n\
         contexts:\n\
         - name: {cluster}\n  \
           context:\n    \
             cluster: {cluster}\n    \
             user: {user}\n\
         current-context: {cluster}\n\
         preferences: {{}}\n"
    )
}

/// The admin kubeconfig: cluster "rudder", user "admin", context "rudder" (current), with the
/// cluster CA and the admin client certificate embedded.
pub fn admin_kubeconfig(pki: &Pki, server_url: &str) -> String {
    client_kubeconfig(
        CLUSTER_NAME,
        server_url,
        &pki.ca_cert_pem,
        super::ADMIN_USER,
        &pki.admin_cert_pem,
        &pki.admin_key_pem,
    )
}
