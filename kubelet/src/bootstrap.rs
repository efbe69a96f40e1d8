//! Node join, as kubeadm's join and the kubelet's TLS bootstrap do it:
//!
//! ```text
//!  discover_ca(server, sha256:<hash>)   GET kube-public/cluster-info without verifying TLS,
//!                                       check its CA's public key hash, check the server again
//!                                       with that CA
//!  join(server, ca, token, node, dir)   P-256 key + CSR (CN system:node:<node>, O system:nodes)
//!                                       ─▶ CertificateSigningRequest as the bootstrap token
//!                                       ─▶ watch until Approved and issued (Denied/Failed: error)
//!                                       ─▶ <dir>/kubelet.kubeconfig (client cert + key, 0600)
//!  rotate(…)                            at 80% of the certificate's life: a new key and CSR as
//!                                       the node itself, the kubeconfig rewritten
//!  serving_certificate(client, …)       a kubelet-serving CSR for the node's IPs and names
//! ```
//!
//! The apiserver's approver and signer (the `csrapproving` and `csrsigning` controllers) do the
//! other half.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::runtime::wait::{await_condition, Condition};
use kube::Client;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use x509_parser::pem::Pem;

/// The kubelet's client signer and serving signer.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The kubeconfig `join` writes in its directory.
pub const KUBECONFIG_FILE: &str = "kubelet.kubeconfig";
/// How long `join` and `serving_certificate` wait for a request to be issued.
pub const ISSUE_TIMEOUT: Duration = Duration::from_secs(120);
/// A certificate is renewed once this share of its lifetime has passed.
pub const RENEW_AT: f64 = 0.8;
/// An existing certificate with less than this left is not reused at start.
const REUSE_MARGIN: Duration = Duration::from_secs(5 * 60);

/// `Result` with the join's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong joining.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiserver refused or failed a call.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The client for the apiserver could not be built.
    #[error("building a client for {server}: {message}")]
    Client { server: String, message: String },
    /// The bootstrap token is not `<6 chars>.<16 chars>`.
    #[error("the bootstrap token must look like abcdef.0123456789abcdef")]
    BadToken,
    /// `--ca-cert-hash` is not `sha256:<64 hex digits>`.
    #[error("the CA certificate hash must be sha256:<64 hex digits>, not {0:?}")]
    BadHash(String),
    /// `cluster-info` is missing or has no usable CA.
    #[error("kube-public/cluster-info: {0}")]
    ClusterInfo(String),
    /// The CA the apiserver published is not the one the hash names.
    #[error("the cluster CA's public key hash is {found}, not the expected {expected}")]
    HashMismatch { expected: String, found: String },
    /// The request was denied.
    #[error("certificate signing request {name} was denied: {message}")]
    Denied { name: String, message: String },
    /// The signer failed the request.
    #[error("certificate signing request {name} failed: {message}")]
    Failed { name: String, message: String },
    /// No certificate came in time.
    #[error("certificate signing request {name} was not approved and issued within {after:?} (is the csrapproving/csrsigning controller running? `kubectl certificate approve {name}` approves it by hand)")]
    Timeout { name: String, after: Duration },
    /// A key, request or certificate could not be made or read.
    #[error("{0}")]
    Crypto(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// A client of `server_url` trusting `ca_pem` (none: trusting anything), authenticated by
/// `auth`.
async fn client_for(server_url: &str, ca_pem: Option<&str>, auth: AuthInfo) -> Result<Client> {
    let kubeconfig = kubeconfig(server_url, ca_pem, auth, "bootstrap");
    let build = |message: String| Error::Client {
        server: server_url.to_string(),
        message,
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|error| build(error.to_string()))?;
    if ca_pem.is_none() {
        config.accept_invalid_certs = true;
    }
    config.read_timeout = Some(Duration::from_secs(30));
    Client::try_from(config).map_err(|error| build(error.to_string()))
}

/// A kubeconfig with one cluster, user and context, current.
fn kubeconfig(server_url: &str, ca_pem: Option<&str>, auth: AuthInfo, user: &str) -> Kubeconfig {
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: "default".into(),
            cluster: Some(Cluster {
                server: Some(server_url.to_string()),
                certificate_authority_data: ca_pem.map(encode),
                ..Cluster::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.into(),
            auth_info: Some(auth),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: "default".into(),
            context: Some(Context {
                cluster: "default".into(),
                user: Some(user.into()),
                ..Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some("default".into()),
        ..Kubeconfig::default()
    }
}

/// kubeadm's CA hash: `sha256:` and the hex SHA-256 of the CA certificate's
/// SubjectPublicKeyInfo (DER).
pub fn ca_cert_hash(ca_pem: &str) -> Result<String> {
    let der = first_certificate(ca_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|error| Error::Crypto(format!("the CA certificate: {error}")))?;
    let digest = Sha256::digest(cert.public_key().raw);
    Ok(format!("sha256:{}", hex(&digest)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn first_certificate(pem: &str) -> Result<Vec<u8>> {
    Pem::iter_from_buffer(pem.as_bytes())
        .filter_map(std::result::Result::ok)
        .find(|block| block.label == "CERTIFICATE")
        .map(|block| block.contents)
        .ok_or_else(|| Error::Crypto("no CERTIFICATE PEM block".into()))
}

/// The validity (not before, not after; Unix seconds) of the first certificate in `pem`.
fn validity(pem: &str) -> Result<(i64, i64)> {
    let der = first_certificate(pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|error| Error::Crypto(format!("certificate: {error}")))?;
    Ok((
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    ))
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Fetches the cluster's CA from `kube-public/cluster-info` over an unverified connection
/// (as anonymous), accepts it only if its public key hashes to `ca_cert_hash`
/// (`sha256:<hex>`, kubeadm's `--discovery-token-ca-cert-hash`), then checks that the server
/// answers over a connection verified with it. Returns the CA PEM.
pub async fn discover_ca(server_url: &str, ca_cert_hash: &str) -> Result<String> {
    let wanted = ca_cert_hash;
    let expected = wanted.trim().to_ascii_lowercase();
    let hex_part = expected.strip_prefix("sha256:").unwrap_or("");
    if hex_part.len() != 64 || !hex_part.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::BadHash(wanted.to_string()));
    }
    let unverified = client_for(server_url, None, AuthInfo::default()).await?;
    let ca_pem = cluster_info_ca(&unverified).await?;
    let found = self::ca_cert_hash(&ca_pem)?;
    if found != expected {
        return Err(Error::HashMismatch { expected, found });
    }
    let verified = client_for(server_url, Some(&ca_pem), AuthInfo::default()).await?;
    cluster_info_ca(&verified).await?;
    Ok(ca_pem)
}

/// The CA in the kubeconfig `cluster-info` publishes.
async fn cluster_info_ca(client: &Client) -> Result<String> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), "kube-public")
        .get("cluster-info")
        .await
        .map_err(api("reading kube-public/cluster-info"))?;
    let text = map
        .data
        .as_ref()
        .and_then(|data| data.get("kubeconfig"))
        .ok_or_else(|| Error::ClusterInfo("no kubeconfig in it".into()))?;
    let config = Kubeconfig::from_yaml(text)
        .map_err(|error| Error::ClusterInfo(format!("its kubeconfig: {error}")))?;
    let data = config
        .clusters
        .iter()
        .find_map(|named| named.cluster.as_ref()?.certificate_authority_data.clone())
        .ok_or_else(|| Error::ClusterInfo("its kubeconfig names no CA".into()))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|error| Error::ClusterInfo(format!("its CA is not base64: {error}")))?;
    String::from_utf8(pem).map_err(|_| Error::ClusterInfo("its CA is not PEM".into()))
}

/// A P-256 key and a PEM request for `system:node:<node_name>` in `system:nodes` with `sans`.
fn node_request(node_name: &str, sans: Vec<SanType>) -> Result<(KeyPair, String)> {
    let crypto = |error: rcgen::Error| Error::Crypto(format!("certificate request: {error}"));
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(crypto)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node_name}"));
    params.subject_alt_names = sans;
    let request = params.serialize_request(&key).map_err(crypto)?;
    Ok((key, request.pem().map_err(crypto)?))
}

/// Whether a request has been issued, or decided against.
fn settled() -> impl Condition<CertificateSigningRequest> {
    |object: Option<&CertificateSigningRequest>| {
        let Some(status) = object.and_then(|csr| csr.status.as_ref()) else {
            return false;
        };
        let decided_against = status
            .conditions
            .iter()
            .flatten()
            .any(|condition| condition.type_ == "Denied" || condition.type_ == "Failed");
        decided_against
            || status
                .certificate
                .as_ref()
                .is_some_and(|certificate| !certificate.0.is_empty())
    }
}

/// Creates a request to `signer` with `usages` as `client`'s user, waits for its certificate
/// and returns it (PEM).
async fn request_certificate(
    client: &Client,
    node_name: &str,
    signer: &str,
    usages: &[&str],
    request_pem: &str,
) -> Result<String> {
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-{node_name}-",
                if signer == SERVING_SIGNER {
                    "serving"
                } else {
                    "node-csr"
                }
            )),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|usage| usage.to_string()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        ..CertificateSigningRequest::default()
    };
    let created = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(api_error("creating a certificate signing request"))?;
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %name, signer, "waiting for the certificate signing request to be approved and issued");
    let wait = await_condition(api, &name, settled());
    let settled = match tokio::time::timeout(ISSUE_TIMEOUT, wait).await {
        Err(_) => {
            return Err(Error::Timeout {
                name,
                after: ISSUE_TIMEOUT,
            })
        }
        Ok(Err(error)) => {
            return Err(Error::Crypto(format!(
                "watching certificate signing request {name}: {error}"
            )))
        }
        Ok(Ok(None)) => {
            return Err(Error::Failed {
                name,
                message: "it was deleted".into(),
            })
        }
        Ok(Ok(Some(settled))) => settled,
    };
    let status = settled.status.unwrap_or_default();
    for condition in status.conditions.iter().flatten() {
        let message = condition
            .message
            .clone()
            .or_else(|| condition.reason.clone())
            .unwrap_or_default();
        match condition.type_.as_str() {
            "Denied" => return Err(Error::Denied { name, message }),
            "Failed" => return Err(Error::Failed { name, message }),
            _ => {}
        }
    }
    let certificate = status.certificate.unwrap_or_default().0;
    String::from_utf8(certificate)
        .map_err(|_| Error::Crypto(format!("the certificate of {name} is not PEM")))
}

fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> Error {
    api(what)
}

/// The kubelet's credentials in a kubeconfig written by [`join`].
#[derive(Clone, Debug)]
pub struct Credentials {
    pub server_url: String,
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Credentials {
    /// Reads `<dir>/kubelet.kubeconfig`.
    pub fn read(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let config = Kubeconfig::from_yaml(&text).map_err(|error| Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string()),
        })?;
        let decode = |data: Option<String>| -> Option<String> {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data?.trim())
                .ok()?;
            String::from_utf8(bytes).ok()
        };
        let cluster = config
            .clusters
            .first()
            .and_then(|named| named.cluster.clone())
            .unwrap_or_default();
        let auth = config
            .auth_infos
            .first()
            .and_then(|named| named.auth_info.clone())
            .unwrap_or_default();
        let key = auth.client_key_data.map(|secret| {
            use secrecy::ExposeSecret as _;
            secret.expose_secret().to_string()
        });
        let invalid = |what: &str| Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("no {what}")),
        };
        Ok(Self {
            server_url: cluster.server.ok_or_else(|| invalid("server"))?,
            ca_pem: decode(cluster.certificate_authority_data).ok_or_else(|| invalid("CA"))?,
            cert_pem: decode(auth.client_certificate_data)
                .ok_or_else(|| invalid("client certificate"))?,
            key_pem: decode(key).ok_or_else(|| invalid("client key"))?,
        })
    }

    /// Writes them as a kubeconfig at `path`, readable by its owner only.
    pub fn write(&self, path: &Path) -> Result<()> {
        let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let auth = AuthInfo {
            client_certificate_data: Some(encode(&self.cert_pem)),
            client_key_data: Some(encode(&self.key_pem).into()),
            ..AuthInfo::default()
        };
        let config = kubeconfig(&self.server_url, Some(&self.ca_pem), auth, "kubelet");
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = serde_json::to_string_pretty(&config)
            .map_err(|error| io(std::io::Error::other(error)))?;
        write_private(path, &text).map_err(io)
    }

    /// A client of the apiserver as the kubelet.
    pub async fn client(&self) -> Result<Client> {
        let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let auth = AuthInfo {
            client_certificate_data: Some(encode(&self.cert_pem)),
            client_key_data: Some(encode(&self.key_pem).into()),
            ..AuthInfo::default()
        };
        client_for(&self.server_url, Some(&self.ca_pem), auth).await
    }

    /// Whether the client certificate is still usable for a while.
    fn usable(&self) -> bool {
        validity(&self.cert_pem).is_ok_and(|(_, not_after)| {
            not_after - now_unix() > i64::try_from(REUSE_MARGIN.as_secs()).unwrap_or(0)
        })
    }
}

/// Writes `contents` to `path` with mode 0600, through a temporary file and a rename.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

/// Joins the cluster at `server_url` (whose CA is `ca_pem`) as node `node_name` with the
/// bootstrap token `token`: a new P-256 key, a `kubernetes.io/kube-apiserver-client-kubelet`
/// request for `system:node:<node_name>`, the issued certificate and the key written as
/// `<dir>/kubelet.kubeconfig` (0600). A kubeconfig already there for this server whose
/// certificate is still valid is reused. Returns the kubeconfig's path.
pub async fn join(
    server_url: &str,
    ca_pem: &str,
    token: &str,
    node_name: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let path = dir.join(KUBECONFIG_FILE);
    if let Ok(existing) = Credentials::read(&path) {
        if existing.server_url == server_url && existing.usable() {
            tracing::info!(path = %path.display(), "reusing the kubelet's client certificate");
            return Ok(path);
        }
    }
    let (id, secret) = token.split_once('.').ok_or(Error::BadToken)?;
    let token_shape = id.len() == 6
        && secret.len() == 16
        && token
            .chars()
            .all(|c| c == '.' || c.is_ascii_lowercase() || c.is_ascii_digit());
    if !token_shape {
        return Err(Error::BadToken);
    }
    let auth = AuthInfo {
        token: Some(token.to_string().into()),
        ..AuthInfo::default()
    };
    let bootstrap = client_for(server_url, Some(ca_pem), auth).await?;
    let (key, request) = node_request(node_name, Vec::new())?;
    let cert_pem = request_certificate(
        &bootstrap,
        node_name,
        CLIENT_SIGNER,
        &["digital signature", "client auth"],
        &request,
    )
    .await?;
    let credentials = Credentials {
        server_url: server_url.to_string(),
        ca_pem: ca_pem.to_string(),
        cert_pem,
        key_pem: key.serialize_pem(),
    };
    credentials.write(&path)?;
    tracing::info!(path = %path.display(), node = node_name, "joined the cluster");
    Ok(path)
}

/// A serving certificate for the kubelet of `node_name` for `ips` and `dns` through a
/// `kubernetes.io/kubelet-serving` request made with `client` (the kubelet's own identity).
/// Returns (certificate PEM, private key PEM).
pub async fn serving_certificate(
    client: &Client,
    node_name: &str,
    ips: &[IpAddr],
    dns: &[String],
) -> Result<(String, String)> {
    let mut sans: Vec<SanType> = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
    for name in dns {
        let name = name
            .clone()
            .try_into()
            .map_err(|error| Error::Crypto(format!("DNS name {name:?}: {error}")))?;
        sans.push(SanType::DnsName(name));
    }
    let (key, request) = node_request(node_name, sans)?;
    let cert_pem = request_certificate(
        client,
        node_name,
        SERVING_SIGNER,
        &["digital signature", "server auth"],
        &request,
    )
    .await?;
    Ok((cert_pem, key.serialize_pem()))
}

/// When the certificate in `cert_pem` is due for renewal: once [`RENEW_AT`] of its lifetime
/// has passed, as time from now (zero if that is past).
pub fn renewal_due(cert_pem: &str) -> Result<Duration> {
    let (not_before, not_after) = validity(cert_pem)?;
    let lifetime = (not_after - not_before).max(0) as f64;
    let due = not_before + (lifetime * RENEW_AT) as i64;
    Ok(Duration::from_secs(
        u64::try_from(due - now_unix()).unwrap_or(0),
    ))
}

/// Renews the client certificate in `kubeconfig` (written by [`join`]) as the node itself: a
/// new key and request, the kubeconfig rewritten. The approver approves a node's renewal of
/// its own certificate (`…:selfnodeclient`).
pub async fn renew(kubeconfig: &Path, node_name: &str) -> Result<()> {
    let mut credentials = Credentials::read(kubeconfig)?;
    let client = credentials.client().await?;
    let (key, request) = node_request(node_name, Vec::new())?;
    credentials.cert_pem = request_certificate(
        &client,
        node_name,
        CLIENT_SIGNER,
        &["digital signature", "client auth"],
        &request,
    )
    .await?;
    credentials.key_pem = key.serialize_pem();
    credentials.write(kubeconfig)?;
    tracing::info!(path = %kubeconfig.display(), "renewed the kubelet's client certificate");
    Ok(())
}

/// Keeps the client certificate in `kubeconfig` fresh until `shutdown`: renews it when
/// [`renewal_due`] says so, retrying a failed renewal after a back-off. Spawn it; clients built
/// from the kubeconfig afterwards use the new certificate.
pub async fn rotate(kubeconfig: PathBuf, node_name: String, shutdown: CancellationToken) {
    let mut backoff = Duration::from_secs(5);
    loop {
        let wait = match Credentials::read(&kubeconfig).and_then(|c| renewal_due(&c.cert_pem)) {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(%error, "cannot read the kubelet's certificate; retrying");
                backoff
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if renewal_due(
            &Credentials::read(&kubeconfig)
                .map(|c| c.cert_pem)
                .unwrap_or_default(),
        )
        .is_ok_and(|due| !due.is_zero())
        {
            continue;
        }
        let renewal = tokio::select! {
            () = shutdown.cancelled() => return,
            renewal = renew(&kubeconfig, &node_name) => renewal,
        };
        match renewal {
            Ok(()) => backoff = Duration::from_secs(5),
            Err(error) => {
                tracing::warn!(%error, ?backoff, "renewing the kubelet's certificate failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_hash_is_the_sha256_of_the_public_key_info() {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::default().self_signed(&key).expect("ca");
        let hash = ca_cert_hash(&cert.pem()).expect("hash");
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let expected = format!("sha256:{}", hex(&Sha256::digest(spki)));
        assert_eq!(hash, expected);
    }

    #[test]
    fn renewal_is_due_at_eighty_percent_of_the_lifetime() {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + now - Duration::from_secs(100);
        params.not_after = epoch + now + Duration::from_secs(900);
        let cert = params.self_signed(&key).expect("cert");
        let due = renewal_due(&cert.pem()).expect("due").as_secs();
        assert!((690..=700).contains(&due), "{due}");
        params.not_after = epoch + now + Duration::from_secs(10);
        let cert = params.self_signed(&key).expect("cert");
        assert!(renewal_due(&cert.pem()).expect("due").is_zero());
    }

    #[test]
    fn credentials_round_trip_through_a_private_kubeconfig() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(KUBECONFIG_FILE);
        let credentials = Credentials {
            server_url: "https://127.0.0.1:6443".into(),
            ca_pem: "CA".into(),
            cert_pem: "CERT".into(),
            key_pem: "KEY".into(),
        };
        credentials.write(&path).expect("written");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = Credentials::read(&path).expect("read");
        assert_eq!(read.key_pem, "KEY");
        assert_eq!(read.server_url, "https://127.0.0.1:6443");
    }
}
