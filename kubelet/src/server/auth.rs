//! Who is asking the kubelet API, and may they: the client certificate's subject (CN = user,
//! O = groups; the TLS layer has already checked it against the cluster CA), or a bearer token
//! the apiserver vouches for through a TokenReview; then a SubjectAccessReview for
//! `<verb> nodes/<subresource>` on this node. Answers are cached briefly (upstream's webhook
//! defaults: 2 min for tokens and allowed decisions, 30 s for denials).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::Api;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// The user a client certificate names.
pub fn user_of_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(User { name, groups })
}

/// Who asks to do what (verb, subresource).
type Question = (User, String, String);

const ALLOWED_TTL: Duration = Duration::from_secs(120);
const DENIED_TTL: Duration = Duration::from_secs(30);

/// TokenReviews and SubjectAccessReviews through the apiserver, cached.
pub struct Authenticator {
    client: kube::Client,
    tokens: Mutex<HashMap<String, (Option<User>, Instant)>>,
    decisions: Mutex<HashMap<Question, (bool, Instant)>>,
}

impl Authenticator {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            tokens: Mutex::default(),
            decisions: Mutex::default(),
        }
    }

    /// The user of the request's bearer token; `Ok(None)` when there is none or it is refused.
    pub async fn authenticate_token(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<User>, String> {
        let Some(token) = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(None);
        };
        if let Some((user, at)) = self
            .tokens
            .lock()
            .map_err(|_| "poisoned")?
            .get(token)
            .cloned()
        {
            if at.elapsed() < ALLOWED_TTL {
                return Ok(user);
            }
        }
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("reviewing a token: {e}"))?;
        let status = answer.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            status.user.map(|u| User {
                name: u.username.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
            })
        } else {
            None
        };
        self.tokens
            .lock()
            .map_err(|_| "poisoned")?
            .insert(token.to_owned(), (user.clone(), Instant::now()));
        Ok(user)
    }

    /// Whether `user` may `verb` `nodes/<subresource>` of `node`.
    pub async fn authorize(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
        node: &str,
    ) -> Result<bool, String> {
        let key = (user.clone(), verb.to_owned(), subresource.to_owned());
        if let Some((allowed, at)) = self
            .decisions
            .lock()
            .map_err(|_| "poisoned")?
            .get(&key)
            .cloned()
        {
            let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
            if at.elapsed() < ttl {
                return Ok(allowed);
            }
        }
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    resource: Some("nodes".into()),
                    subresource: Some(subresource.to_owned()),
                    name: Some(node.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("reviewing access: {e}"))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        self.decisions
            .lock()
            .map_err(|_| "poisoned")?
            .insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}
