//! The cluster signer: issues certificates for approved requests with the cluster CA, copying
//! the request's subject and (for serving certificates) its DNS and IP SANs, with the usages
//! the request asks for, valid from five minutes ago for the requested duration (at most the
//! signer's maximum).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    CertificateParams, ExtendedKeyUsagePurpose, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    PublicKeyData, SanType, SerialNumber, SigningKey, SubjectPublicKeyInfo,
};
use x509_parser::extensions::ParsedExtension;
use x509_parser::pem::Pem;

use super::der;
use super::request::Request;

/// The default and longest lifetime of an issued certificate (upstream's
/// `--cluster-signing-duration` default).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// Issued certificates start this long before now, for clocks that lag.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Why the signer could not be built or could not sign.
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    /// The CA certificate or key is unusable.
    #[error("the cluster signing CA: {0}")]
    Ca(String),
    /// The request cannot become a certificate.
    #[error("{0}")]
    Request(String),
}

/// The cluster CA as a signer.
pub struct Signer {
    /// The CA certificate's subject, DER: every issued certificate's issuer.
    ca_subject: Vec<u8>,
    /// Issuer parameters: what rcgen needs to name the CA's key identifier.
    ca_params: CertificateParams,
    ca_key: KeyPair,
    max_duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("max_duration", &self.max_duration)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer from the CA certificate and private key, PEM (the server's `pki/ca.crt` and
    /// `pki/ca.key`). The key must belong to the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, SignerError> {
        let ca = |error: String| SignerError::Ca(error);
        let block = Pem::iter_from_buffer(cert_pem.as_bytes())
            .filter_map(Result::ok)
            .find(|block| block.label == "CERTIFICATE")
            .ok_or_else(|| ca("no CERTIFICATE PEM block".into()))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents)
            .map_err(|error| ca(format!("certificate: {error}")))?;
        let key = KeyPair::from_pem(key_pem).map_err(|error| ca(format!("key: {error}")))?;
        if key.der_bytes() != cert.public_key().subject_public_key.data.as_ref() {
            return Err(ca("the key does not belong to the certificate".into()));
        }
        let mut params = CertificateParams::default();
        let key_id = cert
            .extensions()
            .iter()
            .find_map(|ext| match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            });
        if let Some(id) = key_id {
            params.key_identifier_method = KeyIdMethod::PreSpecified(id);
        }
        Ok(Self {
            ca_subject: cert.subject().as_raw().to_vec(),
            ca_params: params,
            ca_key: key,
            max_duration: MAX_DURATION,
        })
    }

    /// The same signer with another longest lifetime.
    pub fn with_max_duration(mut self, max_duration: Duration) -> Self {
        self.max_duration = max_duration;
        self
    }

    /// How long a certificate for a request asking for `expiration_seconds` lives.
    pub fn duration_for(&self, expiration_seconds: Option<i32>) -> Duration {
        match expiration_seconds {
            Some(seconds) => {
                Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).min(self.max_duration)
            }
            None => self.max_duration,
        }
    }

    /// A certificate (PEM) for `request` with `usages`, living `duration`.
    pub fn sign(
        &self,
        request: &Request,
        usages: &[String],
        duration: Duration,
    ) -> Result<String, SignerError> {
        let refused = |error: String| SignerError::Request(error);
        let public_key = SubjectPublicKeyInfo::from_der(&request.public_key_der)
            .map_err(|error| refused(format!("the request's public key: {error}")))?;
        let mut params = CertificateParams::default();
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        params.not_before = epoch + now.saturating_sub(BACKDATE);
        params.not_after = epoch + now + duration;
        params.serial_number = Some(SerialNumber::from(serial()));
        params.use_authority_key_identifier_extension = true;
        for usage in usages {
            match usage.as_str() {
                "digital signature" | "signing" => {
                    params.key_usages.push(KeyUsagePurpose::DigitalSignature)
                }
                "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                "key agreement" => params.key_usages.push(KeyUsagePurpose::KeyAgreement),
                "data encipherment" => params.key_usages.push(KeyUsagePurpose::DataEncipherment),
                "content commitment" => params.key_usages.push(KeyUsagePurpose::ContentCommitment),
                "client auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
                "server auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
                other => return Err(refused(format!("usage {other:?} is not issued"))),
            }
        }
        for dns in &request.dns_names {
            let name = dns
                .clone()
                .try_into()
                .map_err(|error| refused(format!("DNS name {dns:?}: {error}")))?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        for ip in &request.ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let built = params
            .signed_by(&public_key, &issuer)
            .map_err(|error| SignerError::Ca(format!("signing: {error}")))?;
        let der = der::with_names(built.der(), &self.ca_subject, &request.subject_der, |tbs| {
            self.ca_key
                .sign(tbs)
                .map_err(|error| format!("signing: {error}"))
        })
        .map_err(SignerError::Ca)?;
        Ok(der::certificate_pem(&der))
    }
}

/// A random positive 16-byte serial number.
fn serial() -> Vec<u8> {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    bytes.to_vec()
}
