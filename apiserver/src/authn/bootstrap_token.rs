//! Bootstrap tokens, as upstream's: a bearer token `<id>.<secret>` (6 and 16 characters of
//! `[a-z0-9]`) is valid while the Secret `kube-system/bootstrap-token-<id>` (type
//! `bootstrap.kubernetes.io/token`) holds that secret, allows authentication
//! (`usage-bootstrap-authentication: "true"`), has not expired and is not being deleted. The user
//! is `system:bootstrap:<id>` in `system:bootstrappers` and the Secret's `auth-extra-groups`.
//! For nodes that join later (`kubeadm join`-style flows).

use async_trait::async_trait;
use base64::Engine;
use serde_json::Value;

use super::{AuthnError, TokenSource, UserInfo};
use crate::catalog;
use crate::registry::Registry;

/// The group every bootstrap token's user is in.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";
const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
const NAMESPACE: &str = "kube-system";

/// Accepts bootstrap tokens against their Secrets.
pub struct BootstrapTokens {
    registry: Registry,
}

impl BootstrapTokens {
    pub fn new(registry: Registry) -> Self {
        Self { registry }
    }
}

/// The id and secret of a token of the bootstrap form.
fn split(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (valid(id, 6) && valid(secret, 16)).then_some((id, secret))
}

/// A Secret's `data` entry, decoded.
fn data(secret: &Value, key: &str) -> Option<String> {
    let encoded = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

fn refused(why: &str) -> AuthnError {
    tracing::debug!(why, "bootstrap token refused");
    AuthnError::InvalidBearerToken
}

#[async_trait]
impl TokenSource for BootstrapTokens {
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        let Some((id, secret)) = split(token) else {
            return Ok(None);
        };
        let info = catalog::find("", "v1", "secrets").ok_or_else(|| refused("no secrets"))?;
        let name = format!("bootstrap-token-{id}");
        let stored = match self.registry.get(info, Some(NAMESPACE), &name).await {
            Ok(stored) => stored,
            Err(_) => return Err(refused("no such token")),
        };
        if stored["type"] != SECRET_TYPE || stored["metadata"]["deletionTimestamp"].is_string() {
            return Err(refused("not a live bootstrap token secret"));
        }
        let held = data(&stored, "token-secret").unwrap_or_default();
        if data(&stored, "token-id").as_deref() != Some(id) || !same(&held, secret) {
            return Err(refused("the secret does not match"));
        }
        if data(&stored, "usage-bootstrap-authentication").as_deref() != Some("true") {
            return Err(refused("not for authentication"));
        }
        if let Some(expiration) = data(&stored, "expiration") {
            let expired = expiration
                .parse::<jiff::Timestamp>()
                .map(|at| at <= jiff::Timestamp::now())
                .unwrap_or(true);
            if expired {
                return Err(refused("expired"));
            }
        }
        let mut groups = vec![BOOTSTRAPPERS.to_string()];
        for group in data(&stored, "auth-extra-groups")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|group| !group.is_empty())
        {
            if !group.starts_with("system:bootstrappers:") {
                return Err(refused("an extra group outside system:bootstrappers:"));
            }
            groups.push(group.to_string());
        }
        Ok(Some(UserInfo {
            name: format!("system:bootstrap:{id}"),
            groups,
            ..UserInfo::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bootstrap_form_is_ours() {
        assert_eq!(
            split("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for other in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "eyJhbGciOi.x.y",
        ] {
            assert_eq!(split(other), None, "{other}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same("0123456789abcdef", "0123456789abcdef"));
        assert!(!same("0123456789abcdef", "0123456789abcdeg"));
        assert!(!same("0123456789abcdef", "0123456789abcde"));
    }
}
