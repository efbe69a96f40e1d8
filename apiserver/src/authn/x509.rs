//! Client-certificate authentication: the leaf certificate's subject names the user.
//!
//! The chain handed in here has already been verified by the TLS layer against the cluster CA
//! (rustls `WebPkiClientVerifier`, which also checks validity and the clientAuth usage), so this
//! module only maps the subject: CN = user name, each O = a group, no UID.

use rustls_pki_types::CertificateDer;

use super::{AuthnError, UserInfo};

/// The user named by the leaf (first) certificate of a verified chain. `Ok(None)` when the chain
/// is empty or the subject has no common name (the request then falls through to other
/// authenticators, as upstream does); `Err` when the certificate cannot be parsed.
pub fn user_from_chain(chain: &[CertificateDer<'static>]) -> Result<Option<UserInfo>, AuthnError> {
    let Some(leaf) = chain.first() else {
        return Ok(None);
    };
    let invalid = |what: String| AuthnError::InvalidCertificate(what);
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| invalid(format!("unparseable client certificate: {e}")))?;
    let subject = cert.subject();
    // Like Go's pkix.Name, the last CN attribute wins.
    let name = match subject.iter_common_name().last() {
        Some(cn) => cn
            .as_str()
            .map_err(|e| invalid(format!("client certificate common name: {e}")))?,
        None => return Ok(None),
    };
    if name.is_empty() {
        return Ok(None);
    }
    let groups = subject
        .iter_organization()
        .map(|o| {
            o.as_str()
                .map(str::to_owned)
                .map_err(|e| invalid(format!("client certificate organization: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(UserInfo {
        name: name.to_owned(),
        uid: String::new(),
        groups,
        ..UserInfo::default()
    }))
}
