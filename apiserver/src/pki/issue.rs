//! Certificate issuing (rcgen) and inspection (x509-parser) for the cluster PKI.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyIdMethod, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SigningKey,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::der::{self, NameAttr};
use super::PkiError;

/// Certificates are back-dated by this much to tolerate clock skew between machines.
const BACKDATE: Duration = Duration::from_secs(60 * 60);
const DAY: u64 = 24 * 60 * 60;
/// Lifetime of the cluster CA.
pub(super) const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * DAY);
/// Lifetime of serving and client certificates.
pub(super) const LEAF_LIFETIME: Duration = Duration::from_secs(365 * DAY);
/// A leaf certificate with less than this much validity left is re-issued at start-up.
pub(super) const RENEW_BEFORE: Duration = Duration::from_secs(30 * DAY);

fn rcgen_err(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |e| PkiError::Generate(format!("{what}: {e}"))
}

/// Seconds since the Unix epoch, now.
pub(super) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn set_validity(params: &mut CertificateParams, lifetime: Duration) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    params.not_before = epoch + now.saturating_sub(BACKDATE);
    params.not_after = epoch + now + lifetime;
}

/// The cluster CA: its subject (DER), key identifier method and private key.
pub(super) struct CaSigner {
    subject_der: Vec<u8>,
    params: CertificateParams,
    key: KeyPair,
}

impl CaSigner {
    /// A new self-signed CA; returns the signer and the certificate and key PEM.
    pub(super) fn generate(common_name: &str) -> Result<(Self, String, String), PkiError> {
        let key = KeyPair::generate().map_err(rcgen_err("CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        set_validity(&mut params, CA_LIFETIME);
        let cert = params
            .self_signed(&key)
            .map_err(rcgen_err("CA certificate"))?;
        let key_pem = key.serialize_pem();
        let signer = Self::load(&cert.pem(), &key_pem)?;
        Ok((signer, cert.pem(), key_pem))
    }

    /// A signer for an existing CA certificate and key (PEM). The key must match the certificate.
    pub(super) fn load(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let der = first_cert(cert_pem)?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| PkiError::Invalid(format!("CA certificate: {e}")))?;
        let key = KeyPair::from_pem(key_pem)
            .map_err(|e| PkiError::Invalid(format!("CA private key: {e}")))?;
        if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
            return Err(PkiError::Invalid(
                "CA private key does not match the CA certificate".into(),
            ));
        }
        let mut params = CertificateParams::default();
        // Keep the authority key identifier of issued certificates equal to the CA's own
        // subject key identifier, whichever method produced it.
        if let Some(ski) = subject_key_id(&cert) {
            params.key_identifier_method = KeyIdMethod::PreSpecified(ski);
        }
        Ok(Self {
            subject_der: cert.subject().as_raw().to_vec(),
            params,
            key,
        })
    }

    /// Sign `params` with subject `subject` for a freshly generated ECDSA P-256 key; returns
    /// (cert PEM, key PEM). The issuer name is the CA certificate's subject, byte for byte.
    pub(super) fn issue(
        &self,
        params: &CertificateParams,
        subject: &[(NameAttr, &str)],
    ) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate().map_err(rcgen_err("leaf key"))?;
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(rcgen_err("certificate"))?;
        let subject = der::encode_name(subject);
        let der = der::replace_names(cert.der(), &self.subject_der, &subject, |tbs| {
            self.key.sign(tbs).map_err(rcgen_err("signing"))
        })?;
        Ok((der::cert_pem(&der), key.serialize_pem()))
    }
}

fn subject_key_id(cert: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        })
}

fn authority_key_id(cert: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|id| id.0.to_vec())
            }
            _ => None,
        })
}

/// Parameters of a serving certificate for `sans` (IP strings become IP SANs).
/// The subject is set by [`CaSigner::issue`]; rcgen's placeholder subject stays non-empty so
/// that the SAN extension is not marked critical.
pub(super) fn serving_params(sans: &Sans) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::default();
    for dns in &sans.dns {
        let name = dns
            .clone()
            .try_into()
            .map_err(|e| PkiError::Generate(format!("SAN {dns:?}: {e}")))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in &sans.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_LIFETIME);
    Ok(params)
}

/// Subject of the serving certificate.
pub(super) const SERVING_SUBJECT: &[(NameAttr, &str)] = &[(NameAttr::CommonName, "kube-apiserver")];

/// Subject of a client certificate: one O per group, then CN = user name.
pub(super) fn client_subject<'a>(
    common_name: &'a str,
    organizations: &[&'a str],
) -> Vec<(NameAttr, &'a str)> {
    let mut subject: Vec<_> = organizations
        .iter()
        .map(|o| (NameAttr::Organization, *o))
        .collect();
    subject.push((NameAttr::CommonName, common_name));
    subject
}

/// Parameters of a client certificate (the subject is set by [`CaSigner::issue`]).
pub(super) fn client_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, LEAF_LIFETIME);
    params
}

/// Subject alternative names: DNS names (lower-case) and IP addresses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Sans {
    pub dns: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
}

impl Sans {
    /// Add an entry: an IP literal becomes an IP SAN, anything else a DNS SAN.
    pub(super) fn add(&mut self, entry: &str) {
        let entry = entry.trim();
        let bare = entry.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.ips.insert(ip);
        } else if !entry.is_empty() {
            self.dns.insert(entry.to_ascii_lowercase());
        }
    }

    /// Whether every name in `wanted` is also in `self`.
    pub(super) fn covers(&self, wanted: &Sans) -> bool {
        wanted.dns.is_subset(&self.dns) && wanted.ips.is_subset(&self.ips)
    }
}

/// What start-up needs to know about an existing leaf certificate.
pub(super) struct LeafInfo {
    pub sans: Sans,
    pub not_after: i64,
    issuer_raw: Vec<u8>,
    authority_key_id: Option<Vec<u8>>,
    public_key: Vec<u8>,
}

/// The parts of the CA certificate a leaf is checked against.
pub(super) struct CaInfo {
    subject_raw: Vec<u8>,
    key_id: Option<Vec<u8>>,
}

pub(super) fn first_cert(pem: &str) -> Result<CertificateDer<'static>, PkiError> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| PkiError::Invalid(format!("certificate PEM: {e}")))
}

pub(super) fn ca_info(ca_pem: &str) -> Result<CaInfo, PkiError> {
    let der = first_cert(ca_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| PkiError::Invalid(format!("CA certificate: {e}")))?;
    Ok(CaInfo {
        subject_raw: cert.subject().as_raw().to_vec(),
        key_id: subject_key_id(&cert),
    })
}

pub(super) fn leaf_info(pem: &str) -> Result<LeafInfo, PkiError> {
    let der = first_cert(pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| PkiError::Invalid(format!("certificate: {e}")))?;
    let mut sans = Sans::default();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(dns) => {
                    sans.dns.insert(dns.to_ascii_lowercase());
                }
                GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        sans.ips.insert(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        sans.ips.insert(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(LeafInfo {
        sans,
        not_after: cert.validity().not_after.timestamp(),
        issuer_raw: cert.issuer().as_raw().to_vec(),
        authority_key_id: authority_key_id(&cert),
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

impl LeafInfo {
    /// Why this certificate (with private key `key_pem`) must be re-issued, if it must.
    pub(super) fn renewal_reason(&self, ca: &CaInfo, key_pem: &str) -> Option<String> {
        if self.issuer_raw != ca.subject_raw {
            return Some("issued by a different CA".into());
        }
        if let (Some(aki), Some(ski)) = (&self.authority_key_id, &ca.key_id) {
            if aki != ski {
                return Some("issued by a different CA key".into());
            }
        }
        match KeyPair::from_pem(key_pem) {
            Ok(key) if key.der_bytes() == self.public_key.as_slice() => {}
            Ok(_) => return Some("private key does not match the certificate".into()),
            Err(e) => return Some(format!("private key unreadable: {e}")),
        }
        let left = self.not_after - now_unix();
        if left < i64::try_from(RENEW_BEFORE.as_secs()).unwrap_or(i64::MAX) {
            return Some(format!("expires in {} days", left / (DAY as i64)));
        }
        None
    }
}
