//! Request authentication: x509 client certificates first, then bearer tokens — the static
//! token file, ServiceAccount JWTs (`service_account`), bootstrap tokens (`bootstrap_token`);
//! without credentials the anonymous user, unless turned off; `impersonation` then resolves
//! `Impersonate-*` headers. Authenticated users always get the `system:authenticated` group.

pub mod bootstrap_token;
pub mod chain_verdicts;
pub mod impersonation;
pub mod request_header;
pub mod service_account;
pub mod token_file;
pub mod x509;

use std::path::PathBuf;

use rustls_pki_types::CertificateDer;

pub use token_file::TokenFile;

/// Group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Group of every request without credentials (when anonymous requests are allowed).
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// The user of a request without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";

/// An authenticated user (upstream `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Extra attributes (from impersonation's `Impersonate-Extra-*`, later from tokens).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The caller of a request without credentials.
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            ..Self::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// Credentials were presented but are not valid; the message is safe to show the client.
    #[error("invalid bearer token")]
    InvalidBearerToken,
    #[error("{0}")]
    InvalidCertificate(String),
    #[error("token file {path}: {source}", path = path.display())]
    TokenFileIo {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("token file{}: line {line}: {message}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    TokenFileSyntax {
        path: Option<PathBuf>,
        line: usize,
        message: String,
    },
}

/// A source of bearer tokens other than the static file (ServiceAccount tokens).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync {
    /// `Ok(Some)`: the token is this source's and valid; `Ok(None)`: not this source's;
    /// `Err`: this source's, and invalid.
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError>;

    /// The audiences this source's tokens must carry one of (none: it has no audiences).
    fn audiences(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The authenticator chain.
#[derive(Clone, Default)]
pub struct Authenticator {
    tokens: Option<TokenFile>,
    sources: Vec<std::sync::Arc<dyn TokenSource>>,
    /// Requests without credentials run as `system:anonymous` (else they are 401).
    anonymous: bool,
    /// Authenticating proxies (`--requestheader-*`), tried before client certificates.
    request_header: Option<request_header::RequestHeader>,
    /// The CA user certificates must chain to, when the TLS layer also accepts another (the
    /// request-header CA); unset, the TLS layer's verification is all.
    client_ca: Option<std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    /// What each client certificate chain was found to be, for its later requests.
    verdicts: std::sync::Arc<chain_verdicts::ChainVerdicts>,
}

impl Authenticator {
    /// A chain of x509 client certificates and, when given, the static token file; requests
    /// without credentials are anonymous.
    pub fn new(tokens: Option<TokenFile>) -> Self {
        Self {
            tokens,
            sources: Vec::new(),
            anonymous: true,
            request_header: None,
            client_ca: None,
            verdicts: Default::default(),
        }
    }

    /// Also accepts requests from authenticating proxies; user certificates must then chain
    /// to `client_ca_pem` (the cluster CA), since the TLS layer accepts the proxies' CA too.
    pub fn with_request_header(
        mut self,
        request_header: request_header::RequestHeader,
        client_ca_pem: &str,
    ) -> Result<Self, String> {
        self.client_ca = Some(request_header::verifier_of(client_ca_pem)?);
        self.request_header = Some(request_header);
        Ok(self)
    }

    /// The user an authenticating proxy names in `headers`, when `chain` is an allowed
    /// proxy's and it names one.
    pub fn authenticate_proxied(
        &self,
        chain: Option<&[CertificateDer<'static>]>,
        headers: &http::HeaderMap,
    ) -> Option<UserInfo> {
        let request_header = self.request_header.as_ref()?;
        let chain = chain.filter(|chain| !chain.is_empty())?;
        if !self.verdict(chain).proxy {
            return None;
        }
        let user = request_header::user_from_headers(request_header.config(), headers)?;
        Some(with_authenticated_group(user))
    }

    /// The remembered verdict on `chain` (see `chain_verdicts`), judged when new.
    fn verdict(&self, chain: &[CertificateDer<'static>]) -> chain_verdicts::Verdict {
        self.verdicts
            .get_or_judge(chain, |chain| chain_verdicts::Verdict {
                proxy: self
                    .request_header
                    .as_ref()
                    .is_some_and(|request_header| request_header.is_proxy(chain)),
                user: self.user_of_chain(chain).map_err(|error| error.to_string()),
            })
    }

    /// The user a client certificate chain names, checked against the cluster CA when the
    /// TLS layer also trusts another.
    fn user_of_chain(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, AuthnError> {
        if let Some(client_ca) = &self.client_ca {
            if !request_header::chains_to(client_ca.as_ref(), chain) {
                return Err(AuthnError::InvalidCertificate(
                    "x509: certificate signed by unknown authority".into(),
                ));
            }
        }
        Ok(x509::user_from_chain(chain)?.map(with_authenticated_group))
    }

    /// Also accepts the bearer tokens `source` vouches for (after the static file).
    pub fn with_source(mut self, source: std::sync::Arc<dyn TokenSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Whether requests without credentials are `system:anonymous` (`--anonymous-auth`).
    pub fn with_anonymous(mut self, anonymous: bool) -> Self {
        self.anonymous = anonymous;
        self
    }

    pub fn allows_anonymous(&self) -> bool {
        self.anonymous
    }

    /// The audiences the API accepts in tokens (its sources', or the default issuer).
    pub fn api_audiences(&self) -> Vec<String> {
        let mut audiences: Vec<String> = self
            .sources
            .iter()
            .flat_map(|source| source.audiences())
            .collect();
        audiences.dedup();
        audiences
    }

    /// Authenticate a request from its verified client certificate chain (leaf first) and its
    /// `Authorization` header value. `Ok(None)`: no usable credentials (anonymous);
    /// `Err`: credentials were presented but are invalid. Both end in 401.
    ///
    /// A bearer token is only considered when a token authenticator exists (the static file or
    /// a token source, as upstream); other schemes are ignored.
    pub async fn authenticate(
        &self,
        peer_certs: Option<&[CertificateDer<'static>]>,
        authorization_header: Option<&str>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        if let Some(chain) = peer_certs.filter(|chain| !chain.is_empty()) {
            if let Some(user) = self
                .verdict(chain)
                .user
                .map_err(AuthnError::InvalidCertificate)?
            {
                return Ok(Some(user));
            }
        }
        if self.tokens.is_none() && self.sources.is_empty() {
            return Ok(None);
        }
        let Some(token) = authorization_header.and_then(bearer_token) else {
            return Ok(None);
        };
        if token.is_empty() {
            return Err(AuthnError::InvalidBearerToken);
        }
        if let Some(user) = self.tokens.as_ref().and_then(|tokens| tokens.lookup(token)) {
            return Ok(Some(with_authenticated_group(user.clone())));
        }
        for source in &self.sources {
            if let Some(user) = source.authenticate_token(token).await? {
                return Ok(Some(with_authenticated_group(user)));
            }
        }
        Err(AuthnError::InvalidBearerToken)
    }
}

/// The token of a `Bearer <token>` header (scheme case-insensitive); `Some("")` for a bearer
/// header without a token, `None` for other schemes.
pub fn bearer_token(header: &str) -> Option<&str> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    // Upstream splits on single spaces: "Bearer  tok" carries an empty token.
    Some(rest.split(' ').next().unwrap_or_default())
}

fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        user.groups.push(AUTHENTICATED_GROUP.to_owned());
    }
    user
}

#[cfg(test)]
mod tests;
