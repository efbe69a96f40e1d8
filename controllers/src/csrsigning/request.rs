//! What the certificate controllers read in a CertificateSigningRequest's `spec.request`: the
//! subject (as its DER bytes, to copy into the certificate, and its CN and O values), the SANs
//! and the public key.

use std::net::IpAddr;

use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;

/// A parsed certificate request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The subject Name, DER, exactly as requested.
    pub subject_der: Vec<u8>,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// Email addresses, URIs and other names: none of the built-in signers issues them.
    pub other_sans: usize,
    /// The SubjectPublicKeyInfo, DER.
    pub public_key_der: Vec<u8>,
}

/// Parses the PEM `CERTIFICATE REQUEST` in `pem` (the bytes of `spec.request`), checking its
/// signature.
pub fn parse(pem: &[u8]) -> Result<Request, String> {
    let block = Pem::iter_from_buffer(pem)
        .filter_map(Result::ok)
        .find(|block| block.label == "CERTIFICATE REQUEST")
        .ok_or_else(|| "no PEM block of type CERTIFICATE REQUEST".to_string())?;
    let (_, csr) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|error| format!("unparseable certificate request: {error}"))?;
    csr.verify_signature()
        .map_err(|error| format!("the request's signature does not verify: {error}"))?;
    let info = &csr.certification_request_info;
    let text =
        |attr: &x509_parser::x509::AttributeTypeAndValue| attr.as_str().ok().map(str::to_string);
    let mut request = Request {
        subject_der: info.subject.as_raw().to_vec(),
        common_name: info
            .subject
            .iter_common_name()
            .find_map(text)
            .unwrap_or_default(),
        organizations: info.subject.iter_organization().filter_map(text).collect(),
        public_key_der: info.subject_pki.raw.to_vec(),
        ..Request::default()
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(sans) = extension else {
            continue;
        };
        for name in &sans.general_names {
            match name {
                GeneralName::DNSName(dns) => request.dns_names.push(dns.to_string()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => request.ips.push(IpAddr::from(
                        <[u8; 4]>::try_from(*bytes).unwrap_or_default(),
                    )),
                    16 => request.ips.push(IpAddr::from(
                        <[u8; 16]>::try_from(*bytes).unwrap_or_default(),
                    )),
                    _ => request.other_sans += 1,
                },
                _ => request.other_sans += 1,
            }
        }
    }
    Ok(request)
}

/// The node a request's subject names (`system:node:<name>` in exactly `system:nodes`).
pub fn node_of(request: &Request) -> Option<&str> {
    let node = request.common_name.strip_prefix("system:node:")?;
    (!node.is_empty() && request.organizations == ["system:nodes"]).then_some(node)
}
