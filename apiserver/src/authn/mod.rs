//! Request authentication: x509 client certificates first, then bearer tokens from the static
//! token file. Authenticated users always get the `system:authenticated` group.

pub mod token_file;
pub mod x509;

use std::path::PathBuf;

use rustls_pki_types::CertificateDer;

pub use token_file::TokenFile;

/// Group every authenticated user belongs to.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// An authenticated user (upstream `user.Info` without extra fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
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

/// The authenticator chain.
#[derive(Clone, Debug, Default)]
pub struct Authenticator {
    tokens: Option<TokenFile>,
}

impl Authenticator {
    /// A chain of x509 client certificates and, when given, the static token file.
    pub fn new(tokens: Option<TokenFile>) -> Self {
        Self { tokens }
    }

    /// Authenticate a request from its verified client certificate chain (leaf first) and its
    /// `Authorization` header value. `Ok(None)`: no usable credentials (anonymous);
    /// `Err`: credentials were presented but are invalid. Both end in 401.
    ///
    /// A bearer token is only considered when a token file is configured (as upstream, where the
    /// bearer authenticator exists only with a token source); other schemes are ignored.
    pub fn authenticate(
        &self,
        peer_certs: Option<&[CertificateDer<'static>]>,
        authorization_header: Option<&str>,
    ) -> Result<Option<UserInfo>, AuthnError> {
        if let Some(chain) = peer_certs {
            if let Some(user) = x509::user_from_chain(chain)? {
                return Ok(Some(with_authenticated_group(user)));
            }
        }
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        let Some(token) = authorization_header.and_then(bearer_token) else {
            return Ok(None);
        };
        if token.is_empty() {
            return Err(AuthnError::InvalidBearerToken);
        }
        match tokens.lookup(token) {
            Some(user) => Ok(Some(with_authenticated_group(user.clone()))),
            None => Err(AuthnError::InvalidBearerToken),
        }
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
