//! Request-header authentication, as upstream's `--requestheader-*` flags configure it: a
//! request whose client certificate chains to the request-header CA (the front-proxy CA, not
//! the cluster CA) and names one of the allowed common names (any, when none are listed) is
//! from an authenticating proxy, and its user is what the proxy says in the headers — the
//! first non-empty username header, the UID header, every value of the group headers, and
//! `<prefix><key>` headers as extras (the key lower-cased and percent-decoded). Without a
//! username header the request is not authenticated this way.

use std::sync::Arc;

use http::HeaderMap;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

use super::UserInfo;

/// The `--requestheader-*` settings.
#[derive(Clone, Debug)]
pub struct RequestHeaderConfig {
    /// The CA (PEM) proxies' client certificates chain to.
    pub client_ca_pem: String,
    /// Common names a proxy's certificate may have; empty: any.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

impl RequestHeaderConfig {
    /// The settings kubeadm gives a cluster: `X-Remote-*` headers from `allowed_names`.
    pub fn x_remote(client_ca_pem: String, allowed_names: Vec<String>) -> Self {
        Self {
            client_ca_pem,
            allowed_names,
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }
}

/// The authenticator.
#[derive(Clone)]
pub struct RequestHeader {
    config: RequestHeaderConfig,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for RequestHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHeader")
            .field("allowed_names", &self.config.allowed_names)
            .finish_non_exhaustive()
    }
}

/// A verifier of client certificates chaining to the CAs in `pem`.
pub fn verifier_of(pem: &str) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|error| format!("CA PEM: {error}"))?;
        roots.add(cert).map_err(|error| error.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|error| error.to_string())
}

/// Whether `chain` (leaf first) chains to what `verifier` trusts, for client authentication.
pub fn chains_to(verifier: &dyn ClientCertVerifier, chain: &[CertificateDer<'static>]) -> bool {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return false;
    };
    verifier
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .is_ok()
}

impl RequestHeader {
    pub fn new(config: RequestHeaderConfig) -> Result<Self, String> {
        let verifier = verifier_of(&config.client_ca_pem)?;
        Ok(Self { config, verifier })
    }

    pub fn config(&self) -> &RequestHeaderConfig {
        &self.config
    }

    /// Whether `chain` is an allowed proxy's.
    pub fn is_proxy(&self, chain: &[CertificateDer<'static>]) -> bool {
        if !chains_to(self.verifier.as_ref(), chain) {
            return false;
        }
        if self.config.allowed_names.is_empty() {
            return true;
        }
        let Some(leaf) = chain.first() else {
            return false;
        };
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
            return false;
        };
        let name = cert
            .subject()
            .iter_common_name()
            .last()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or("");
        self.config
            .allowed_names
            .iter()
            .any(|allowed| allowed == name)
    }
}

fn values<'a>(headers: &'a HeaderMap, names: &'a [String]) -> impl Iterator<Item = &'a str> + 'a {
    names.iter().flat_map(move |name| {
        headers
            .get_all(name.as_str())
            .iter()
            .filter_map(|value| value.to_str().ok())
    })
}

/// The user the headers name, by `config`'s header names (`None` without a username header).
pub(super) fn user_from_headers(
    config: &RequestHeaderConfig,
    headers: &HeaderMap,
) -> Option<UserInfo> {
    let name = values(headers, &config.username_headers).find(|v| !v.is_empty())?;
    let uid = values(headers, &config.uid_headers)
        .find(|v| !v.is_empty())
        .unwrap_or("");
    let groups: Vec<String> = values(headers, &config.group_headers)
        .map(str::to_string)
        .collect();
    let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (header, value) in headers {
        let header = header.as_str();
        let key = config.extra_headers_prefix.iter().find_map(|prefix| {
            let prefix = prefix.to_ascii_lowercase();
            header.strip_prefix(prefix.as_str())
        });
        let (Some(key), Ok(value)) = (key, value.to_str()) else {
            continue;
        };
        extra
            .entry(percent_decode(key))
            .or_default()
            .push(value.to_string());
    }
    Some(UserInfo {
        name: name.to_string(),
        uid: uid.to_string(),
        groups,
        extra,
    })
}

/// `%XX` sequences decoded (an extra's key in a header name, as upstream's proxy escapes it).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn the_headers_name_the_user_its_groups_and_extras() {
        let config = RequestHeaderConfig::x_remote(String::new(), vec![]);
        let mut headers = HeaderMap::new();
        assert_eq!(user_from_headers(&config, &headers), None);
        headers.insert("x-remote-user", HeaderValue::from_static("alice"));
        headers.insert("x-remote-uid", HeaderValue::from_static("u-1"));
        headers.append("x-remote-group", HeaderValue::from_static("dev"));
        headers.append("x-remote-group", HeaderValue::from_static("ops"));
        headers.append(
            "x-remote-extra-scopes.example.com%2fteam",
            HeaderValue::from_static("a"),
        );
        let user = user_from_headers(&config, &headers).expect("a user");
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, ["dev", "ops"]);
        assert_eq!(
            user.extra.get("scopes.example.com/team"),
            Some(&vec!["a".to_string()])
        );
    }
}
