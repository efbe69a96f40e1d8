//! Cluster PKI: the CA, the apiserver's serving certificate, the admin client certificate and
//! the service-account signing key, kept under `<data_dir>/pki/` and created on first start.

pub mod cluster;
mod der;
pub mod front_proxy;
pub mod host;
mod issue;
pub mod kubeconfig;

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use kubeconfig::{admin_kubeconfig, client_kubeconfig};

use issue::{CaSigner, Sans};

/// Common name of the cluster CA created on first start.
pub const CA_COMMON_NAME: &str = "rudder-ca";
/// User name and group of the admin client certificate.
pub const ADMIN_USER: &str = "admin";
pub const ADMIN_GROUP: &str = "system:masters";

/// File names inside `<data_dir>/pki/`.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const SERVING_CERT_FILE: &str = "apiserver.crt";
pub const SERVING_KEY_FILE: &str = "apiserver.key";
pub const ADMIN_CERT_FILE: &str = "admin.crt";
pub const ADMIN_KEY_FILE: &str = "admin.key";
pub const SA_KEY_FILE: &str = "sa.key";
pub const SA_PUB_FILE: &str = "sa.pub";

/// The DNS names every serving certificate carries besides the host's own.
const SERVICE_DNS_NAMES: [&str; 5] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid PKI material: {0}")]
    Invalid(String),
    #[error("certificate generation failed: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The cluster's certificates and keys (PEM). The CA's private key stays private.
pub struct Pki {
    /// `<data_dir>/pki`.
    pub dir: PathBuf,
    pub ca_cert_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// PKCS#8 ECDSA P-256 private key for signing service-account tokens (ES256).
    pub sa_key_pem: String,
    /// The matching SubjectPublicKeyInfo PEM.
    pub sa_pub_pem: String,
    ca: CaSigner,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Write `contents` to `path` atomically (temporary file + rename) with the given mode.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let result = (|| {
        let mut file = options.open(&tmp)?;
        // `mode` only applies to new files; an old temporary file keeps its bits otherwise.
        #[cfg(unix)]
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(io_err(path))
}

/// Write a file that holds secrets (private keys, kubeconfigs with keys): mode 0600.
pub fn write_private_file(path: &Path, contents: &str) -> Result<(), PkiError> {
    write_file(path, contents, 0o600)
}

/// Write a public file (certificates): mode 0644.
pub fn write_public_file(path: &Path, contents: &str) -> Result<(), PkiError> {
    write_file(path, contents, 0o644)
}

/// The names a serving certificate must carry for this host.
fn wanted_sans(tls_sans: &[String], extra_ips: &[IpAddr]) -> Sans {
    let mut sans = Sans::default();
    for name in SERVICE_DNS_NAMES {
        sans.add(name);
    }
    sans.add("127.0.0.1");
    sans.add("::1");
    if let Some(name) = host::hostname() {
        sans.add(&name);
    }
    sans.ips.extend(host::local_addresses());
    sans.ips.extend(extra_ips.iter().copied());
    for entry in tls_sans {
        sans.add(entry);
    }
    sans
}

impl Pki {
    /// Load the PKI from `<data_dir>/pki/` or create what is missing: the cluster CA (10 years),
    /// the serving certificate (1 year; SANs: localhost, 127.0.0.1, ::1, the hostname, the
    /// machine's addresses, the `kubernetes…` service names, `extra_ips` and `tls_sans`), the
    /// admin client certificate (CN admin, O system:masters) and the service-account key pair.
    /// Existing files are reused; a leaf certificate that misses a wanted SAN, expires within 30
    /// days, does not match its key or was not issued by the CA is re-issued from the same CA.
    pub fn load_or_create(
        data_dir: &Path,
        tls_sans: &[String],
        extra_ips: &[IpAddr],
    ) -> Result<Pki, PkiError> {
        let dir = data_dir.join("pki");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        #[cfg(unix)]
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(io_err(&dir))?;
        let path = |name: &str| dir.join(name);

        let (ca, ca_cert_pem) =
            load_or_create_ca(&path(CA_CERT_FILE), &path(CA_KEY_FILE), CA_COMMON_NAME)?;
        let ca_info = issue::ca_info(&ca_cert_pem)?;

        let wanted = wanted_sans(tls_sans, extra_ips);
        let (serving_cert_pem, serving_key_pem) = load_or_issue_leaf(
            &path(SERVING_CERT_FILE),
            &path(SERVING_KEY_FILE),
            |info| {
                let missing = !info.sans.covers(&wanted);
                missing.then(|| "lacks a requested subject alternative name".to_owned())
            },
            &ca_info,
            || ca.issue(&issue::serving_params(&wanted)?, issue::SERVING_SUBJECT),
        )?;
        let (admin_cert_pem, admin_key_pem) = load_or_issue_leaf(
            &path(ADMIN_CERT_FILE),
            &path(ADMIN_KEY_FILE),
            |_| None,
            &ca_info,
            || {
                ca.issue(
                    &issue::client_params(),
                    &issue::client_subject(ADMIN_USER, &[ADMIN_GROUP]),
                )
            },
        )?;
        let (sa_key_pem, sa_pub_pem) =
            load_or_create_sa_key(&path(SA_KEY_FILE), &path(SA_PUB_FILE))?;

        Ok(Pki {
            dir,
            ca_cert_pem,
            serving_cert_pem,
            serving_key_pem,
            admin_cert_pem,
            admin_key_pem,
            sa_key_pem,
            sa_pub_pem,
            ca,
        })
    }

    /// A rustls server configuration presenting the serving certificate, offering ALPN h2 and
    /// http/1.1, and accepting (but not requiring) client certificates issued by the CA.
    /// Uses the ring provider explicitly; no process-wide default is needed.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, PkiError> {
        self.server_config_with_client_cas(&[])
    }

    /// [`Pki::server_config`], also accepting client certificates of the CAs in `extra`
    /// (the request-header CA: authentication tells the two apart).
    pub fn server_config_with_client_cas(
        &self,
        extra: &[&str],
    ) -> Result<Arc<ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for pem in std::iter::once(self.ca_cert_pem.as_str()).chain(extra.iter().copied()) {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| PkiError::Invalid(format!("CA PEM: {e}")))?;
                roots.add(cert)?;
            }
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()?;
        let chain = CertificateDer::pem_slice_iter(self.serving_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PkiError::Invalid(format!("serving certificate PEM: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.serving_key_pem.as_bytes())
            .map_err(|e| PkiError::Invalid(format!("serving key PEM: {e}")))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Issue a client certificate signed by the cluster CA (CN = user name, O = groups, 1 year).
    /// Returns (certificate PEM, private key PEM). Nothing is written to disk.
    pub fn issue_client_cert(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<(String, String), PkiError> {
        let subject = issue::client_subject(common_name, organizations);
        self.ca.issue(&issue::client_params(), &subject)
    }

    /// Issue a serving certificate signed by the cluster CA for `dns_names` and `ips`
    /// (CN = `common_name`, O = `organizations`, 1 year), e.g. a kubelet's
    /// (`system:node:<name>` in `system:nodes`). Returns (certificate PEM, private key PEM).
    pub fn issue_serving_cert(
        &self,
        common_name: &str,
        organizations: &[&str],
        dns_names: &[String],
        ips: &[IpAddr],
    ) -> Result<(String, String), PkiError> {
        let sans = Sans {
            dns: dns_names.iter().map(|name| name.to_lowercase()).collect(),
            ips: ips.iter().copied().collect(),
        };
        let subject = issue::client_subject(common_name, organizations);
        self.ca.issue(&issue::serving_params(&sans)?, &subject)
    }

    /// Paths of the CA certificate and the admin certificate and key (for `curl` and friends).
    pub fn path(&self, file_name: &str) -> PathBuf {
        self.dir.join(file_name)
    }
}

fn load_or_create_ca(
    cert_path: &Path,
    key_path: &Path,
    common_name: &str,
) -> Result<(CaSigner, String), PkiError> {
    match (read_optional(cert_path)?, read_optional(key_path)?) {
        (Some(cert), Some(key)) => Ok((CaSigner::load(&cert, &key)?, cert)),
        (None, None) => {
            let (signer, cert, key) = CaSigner::generate(common_name)?;
            write_private_file(key_path, &key)?;
            write_public_file(cert_path, &cert)?;
            tracing::info!(path = %cert_path.display(), common_name, "created a CA");
            Ok((signer, cert))
        }
        (Some(_), None) => Err(PkiError::Invalid(format!(
            "{} exists but its key {} is missing",
            cert_path.display(),
            key_path.display()
        ))),
        (None, Some(_)) => Err(PkiError::Invalid(format!(
            "{} exists but its certificate {} is missing",
            key_path.display(),
            cert_path.display()
        ))),
    }
}

/// Reuse the certificate/key pair at the given paths unless it must be renewed (generic checks
/// plus `extra_check`); otherwise issue a new one with `issue_new` and write it.
fn load_or_issue_leaf(
    cert_path: &Path,
    key_path: &Path,
    extra_check: impl Fn(&issue::LeafInfo) -> Option<String>,
    ca: &issue::CaInfo,
    issue_new: impl FnOnce() -> Result<(String, String), PkiError>,
) -> Result<(String, String), PkiError> {
    let existing = (read_optional(cert_path)?, read_optional(key_path)?);
    let reason = match &existing {
        (Some(cert), Some(key)) => match issue::leaf_info(cert) {
            Ok(info) => info.renewal_reason(ca, key).or_else(|| extra_check(&info)),
            Err(e) => Some(e.to_string()),
        },
        (Some(_), None) => Some("key missing".to_owned()),
        (None, _) => None,
    };
    if let ((Some(cert), Some(key)), None) = (&existing, &reason) {
        return Ok((cert.clone(), key.clone()));
    }
    let (cert, key) = issue_new()?;
    write_private_file(key_path, &key)?;
    write_public_file(cert_path, &cert)?;
    match reason {
        Some(reason) => {
            tracing::info!(path = %cert_path.display(), %reason, "re-issued certificate")
        }
        None => tracing::info!(path = %cert_path.display(), "issued certificate"),
    }
    Ok((cert, key))
}

fn load_or_create_sa_key(key_path: &Path, pub_path: &Path) -> Result<(String, String), PkiError> {
    let key = match read_optional(key_path)? {
        Some(pem) => rcgen::KeyPair::from_pem(&pem)
            .map_err(|e| PkiError::Invalid(format!("{}: {e}", key_path.display())))?,
        None => {
            let key = rcgen::KeyPair::generate()
                .map_err(|e| PkiError::Generate(format!("service-account key: {e}")))?;
            write_private_file(key_path, &key.serialize_pem())?;
            key
        }
    };
    let public = key.public_key_pem();
    if read_optional(pub_path)?.as_deref() != Some(public.as_str()) {
        write_public_file(pub_path, &public)?;
    }
    Ok((key.serialize_pem(), public))
}

#[cfg(test)]
mod tests;
