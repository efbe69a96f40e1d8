//! ServiceAccount tokens, as upstream's: JWTs signed ES256 with the cluster's key (signer.rs).
//!
//! - **Issued** by `serviceaccounts/<name>/token` (TokenRequest, what `kubectl create token`
//!   sends): audiences (default: the issuer), `expirationSeconds` (default an hour, at least
//!   ten minutes), optionally bound to a Pod or Secret of the account's namespace.
//! - **Accepted** as bearer tokens when the signature is the cluster's, the issuer ours, one
//!   audience the API's, the token not expired, and the ServiceAccount — and the Pod or Secret
//!   it is bound to — still there with the same uid: deleting the pod revokes its tokens.
//!   Legacy tokens (issuer `kubernetes/serviceaccount`, stored in a Secret of type
//!   `kubernetes.io/service-account-token`) are accepted while that Secret holds them.
//! - Every refusal is the same 401: the client learns nothing of why (the log does).

pub mod signer;
mod verified;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{AuthnError, TokenSource, UserInfo, AUTHENTICATED_GROUP};
use crate::catalog;
use crate::error::{ApiError, Cause};
use crate::registry::Registry;
pub use signer::TokenSigner;

/// The issuer of legacy Secret-held tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// Upstream's default issuer (what kubeadm sets), also the default audience.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A TokenRequest's default lifetime, and the shortest and longest it may ask for.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// Clock skew tolerated on `nbf` and `iat`.
const LEEWAY_SECONDS: i64 = 60;

/// One or several audiences (`aud` may be either in a JWT).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(untagged)]
enum Audiences {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Audiences {
    fn contains_any(&self, wanted: &[String]) -> bool {
        match self {
            Audiences::None => false,
            Audiences::One(one) => wanted.contains(one),
            Audiences::Many(many) => many.iter().any(|aud| wanted.contains(aud)),
        }
    }
}

/// An object a token names: its name and uid.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct Named {
    name: String,
    uid: String,
}

/// The `kubernetes.io` claim of a bound token.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct Private {
    namespace: String,
    serviceaccount: Named,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Named>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<Named>,
}

/// A token's claims, bound or legacy.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct Claims {
    #[serde(default, skip_serializing_if = "is_none")]
    aud: Audiences,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<i64>,
    iss: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jti: Option<String>,
    #[serde(
        rename = "kubernetes.io",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    kubernetes: Option<Private>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<i64>,
    sub: String,
    #[serde(rename = "kubernetes.io/serviceaccount/namespace", default)]
    legacy_namespace: Option<String>,
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name", default)]
    legacy_secret: Option<String>,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name", default)]
    legacy_account: Option<String>,
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid", default)]
    legacy_account_uid: Option<String>,
}

fn is_none(audiences: &Audiences) -> bool {
    matches!(audiences, Audiences::None)
}

/// The user a ServiceAccount authenticates as.
/// Fills a TokenRequest's defaults as upstream's decoding does (an hour when
/// `spec.expirationSeconds` is unset), so admission sees what will be issued.
pub fn default_token_request(request: &mut Value) {
    if !request.is_object() {
        return;
    }
    if !request["spec"].is_object() {
        request["spec"] = json!({});
    }
    if request["spec"]["expirationSeconds"].is_null() {
        request["spec"]["expirationSeconds"] = json!(DEFAULT_EXPIRATION_SECONDS);
    }
}

pub fn user_name(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Issues and verifies the cluster's ServiceAccount tokens.
pub struct ServiceAccountTokens {
    signer: Arc<TokenSigner>,
    issuer: String,
    /// What the API accepts as `aud`; a TokenRequest without audiences gets these.
    audiences: Vec<String>,
    /// Reads accounts, pods and secrets (no admission: it only reads).
    registry: Registry,
    /// Tokens whose signature held, with their claims.
    verified: verified::Verified<Claims>,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn rejected(why: impl std::fmt::Display) -> AuthnError {
    tracing::debug!(%why, "service-account token refused");
    AuthnError::InvalidBearerToken
}

fn invalid(field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "TokenRequest",
        "authentication.k8s.io",
        "",
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: field.into(),
        }],
    )
}

impl ServiceAccountTokens {
    pub fn new(signer: Arc<TokenSigner>, issuer: String, registry: Registry) -> Self {
        let audiences = vec![issuer.clone()];
        Self {
            signer,
            issuer,
            audiences,
            registry,
            verified: verified::Verified::new(),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn signer(&self) -> &TokenSigner {
        &self.signer
    }

    /// Whether `plural` `name` in `namespace` exists with `uid`. As upstream's token getter
    /// reads its informers first, the watch cache answers when it holds the object with that
    /// uid; otherwise (not there yet, or another object of the name) the store does. Every
    /// request with a bound token checks its account and pod, so this keeps them off the
    /// store.
    async fn is_live(
        &self,
        plural: &str,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<bool, ApiError> {
        let info = catalog::find("", "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("the catalog lacks {plural}")))?;
        let has_uid = |object: &Value| object["metadata"]["uid"] == uid;
        if let Ok(cached) = self
            .registry
            .get_at(info, Some(namespace), name, Some("0"))
            .await
        {
            if has_uid(&cached) {
                return Ok(true);
            }
        }
        Ok(self
            .find(plural, namespace, name)
            .await?
            .is_some_and(|object| has_uid(&object)))
    }

    /// `plural` `name` in `namespace` as the store holds it, if it exists.
    async fn find(
        &self,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let info = catalog::find("", "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("the catalog lacks {plural}")))?;
        match self.registry.get(info, Some(namespace), name).await {
            Ok(object) => Ok(Some(object)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The user a valid token names; `Ok(None)` when the token is not one of ours.
    async fn verify(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        let claims = match self.verified.get(token) {
            Some(claims) => claims,
            None => {
                let Ok(header) = jsonwebtoken::decode_header(token) else {
                    return Ok(None);
                };
                if header.alg != jsonwebtoken::Algorithm::ES256 {
                    return Ok(None);
                }
                let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
                validation.validate_exp = false;
                validation.validate_nbf = false;
                validation.validate_aud = false;
                validation.required_spec_claims.clear();
                let key = self.signer.decoding_key();
                match jsonwebtoken::decode::<Claims>(token, key, &validation) {
                    Ok(data) => self.verified.insert(token, data.claims),
                    Err(error) => return Err(rejected(error)),
                }
            }
        };
        let claims = claims.as_ref().clone();
        let now = now();
        if claims.iss == LEGACY_ISSUER {
            return self.verify_legacy(token, &claims).await.map(Some);
        }
        if claims.iss != self.issuer {
            return Err(rejected(format!("issuer {:?}", claims.iss)));
        }
        if !claims.aud.contains_any(&self.audiences) {
            return Err(rejected("no audience of this API"));
        }
        match claims.exp {
            Some(exp) if exp > now => {}
            _ => return Err(rejected("expired")),
        }
        if claims.nbf.is_some_and(|nbf| nbf > now + LEEWAY_SECONDS) {
            return Err(rejected("not valid yet"));
        }
        let private = claims
            .kubernetes
            .ok_or_else(|| rejected("no kubernetes.io claim"))?;
        let namespace = &private.namespace;
        let account = &private.serviceaccount;
        let account_live = self
            .is_live("serviceaccounts", namespace, &account.name, &account.uid)
            .await
            .map_err(rejected)?;
        if !account_live {
            return Err(rejected("the service account is gone"));
        }
        let mut user = account_user(namespace, &private.serviceaccount);
        if let Some(pod) = &private.pod {
            let pod_live = self
                .is_live("pods", namespace, &pod.name, &pod.uid)
                .await
                .map_err(rejected)?;
            if !pod_live {
                return Err(rejected("the pod it is bound to is gone"));
            }
            user.extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                vec![pod.name.clone()],
            );
            user.extra.insert(
                "authentication.kubernetes.io/pod-uid".into(),
                vec![pod.uid.clone()],
            );
        }
        if let Some(secret) = &private.secret {
            let secret_live = self
                .is_live("secrets", namespace, &secret.name, &secret.uid)
                .await
                .map_err(rejected)?;
            if !secret_live {
                return Err(rejected("the secret it is bound to is gone"));
            }
        }
        if let Some(jti) = claims.jti {
            user.extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                vec![format!("JTI={jti}")],
            );
        }
        Ok(Some(user))
    }

    /// A legacy token is valid while its Secret holds it.
    async fn verify_legacy(&self, token: &str, claims: &Claims) -> Result<UserInfo, AuthnError> {
        let (Some(namespace), Some(secret), Some(account), Some(uid)) = (
            &claims.legacy_namespace,
            &claims.legacy_secret,
            &claims.legacy_account,
            &claims.legacy_account_uid,
        ) else {
            return Err(rejected("a legacy token without its claims"));
        };
        let stored = self
            .find("secrets", namespace, secret)
            .await
            .map_err(rejected)?
            .ok_or_else(|| rejected("its secret is gone"))?;
        use base64::Engine;
        let held = stored["data"]["token"]
            .as_str()
            .and_then(|data| base64::engine::general_purpose::STANDARD.decode(data).ok());
        if stored["type"] != "kubernetes.io/service-account-token"
            || held.as_deref() != Some(token.as_bytes())
        {
            return Err(rejected("its secret no longer holds it"));
        }
        let found = self
            .find("serviceaccounts", namespace, account)
            .await
            .map_err(rejected)?;
        if !found.is_some_and(|found| found["metadata"]["uid"] == uid.as_str()) {
            return Err(rejected("the service account is gone"));
        }
        Ok(account_user(
            namespace,
            &Named {
                name: account.clone(),
                uid: uid.clone(),
            },
        ))
    }

    /// Answers a TokenRequest for ServiceAccount `name` in `namespace`.
    pub async fn issue(
        &self,
        namespace: &str,
        name: &str,
        request: &Value,
    ) -> Result<Value, ApiError> {
        let info = catalog::find("", "v1", "serviceaccounts")
            .ok_or_else(|| ApiError::internal("the catalog lacks serviceaccounts"))?;
        let account = self.registry.get(info, Some(namespace), name).await?;
        let spec = &request["spec"];
        let audiences: Vec<String> = match spec["audiences"].as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .filter_map(|aud| aud.as_str().map(str::to_string))
                .collect(),
            _ => self.audiences.clone(),
        };
        let expiration = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_EXPIRATION_SECONDS,
            value => value.as_i64().unwrap_or(0),
        };
        if expiration < MIN_EXPIRATION_SECONDS {
            return Err(invalid(
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {expiration}: may not specify a duration less than 10 minutes"
                ),
            ));
        }
        if expiration > MAX_EXPIRATION_SECONDS {
            return Err(invalid(
                "spec.expirationSeconds",
                format!("Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"),
            ));
        }
        let mut private = Private {
            namespace: namespace.to_string(),
            serviceaccount: Named {
                name: name.to_string(),
                uid: account["metadata"]["uid"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            },
            ..Private::default()
        };
        let bound = &spec["boundObjectRef"];
        if bound.is_object() {
            let kind = bound["kind"].as_str().unwrap_or("");
            let bound_name = bound["name"].as_str().unwrap_or("");
            let plural = match kind {
                "Pod" => "pods",
                "Secret" => "secrets",
                other => {
                    return Err(invalid(
                        "spec.boundObjectRef.kind",
                        format!(
                            "Unsupported value: \"{other}\": supported values: \"Pod\", \"Secret\""
                        ),
                    ))
                }
            };
            let object = self
                .find(plural, namespace, bound_name)
                .await?
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "cannot bind token to {kind} \"{bound_name}\": it does not exist"
                    ))
                })?;
            let uid = object["metadata"]["uid"].as_str().unwrap_or("").to_string();
            if let Some(wanted) = bound["uid"].as_str().filter(|uid| !uid.is_empty()) {
                if wanted != uid {
                    return Err(ApiError::conflict_plain(format!(
                        "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
                    )));
                }
            }
            if kind == "Pod" {
                let runs_as = object["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or("default");
                if runs_as != name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount name."
                    )));
                }
                private.pod = Some(Named {
                    name: bound_name.to_string(),
                    uid,
                });
            } else {
                private.secret = Some(Named {
                    name: bound_name.to_string(),
                    uid,
                });
            }
        }
        let issued = now();
        let claims = Claims {
            aud: Audiences::Many(audiences.clone()),
            exp: Some(issued + expiration),
            iat: Some(issued),
            iss: self.issuer.clone(),
            jti: Some(uuid::Uuid::new_v4().to_string()),
            kubernetes: Some(private),
            nbf: Some(issued),
            sub: user_name(namespace, name),
            ..Claims::default()
        };
        let token = self
            .signer
            .sign(&claims)
            .map_err(|error| ApiError::internal(format!("signing the token: {error}")))?;
        let expires = jiff::Timestamp::from_second(issued + expiration)
            .map(|at| at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        let mut spec = spec.clone();
        spec["audiences"] = json!(audiences);
        spec["expirationSeconds"] = json!(expiration);
        Ok(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": crate::registry::object::now()},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires},
        }))
    }
}

/// A legacy token for the Secret `secret` of ServiceAccount `account`, signed by `signer` (what
/// the tokens controller writes into Secrets of type `kubernetes.io/service-account-token`).
pub fn legacy_token(
    signer: &TokenSigner,
    namespace: &str,
    secret: &str,
    account: &str,
    account_uid: &str,
) -> Result<String, String> {
    let claims = Claims {
        iss: LEGACY_ISSUER.into(),
        sub: user_name(namespace, account),
        legacy_namespace: Some(namespace.into()),
        legacy_secret: Some(secret.into()),
        legacy_account: Some(account.into()),
        legacy_account_uid: Some(account_uid.into()),
        ..Claims::default()
    };
    signer.sign(&claims)
}

fn account_user(namespace: &str, account: &Named) -> UserInfo {
    UserInfo {
        name: user_name(namespace, &account.name),
        uid: account.uid.clone(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            AUTHENTICATED_GROUP.into(),
        ],
        ..UserInfo::default()
    }
}

#[async_trait]
impl TokenSource for ServiceAccountTokens {
    async fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        self.verify(token).await
    }

    fn audiences(&self) -> Vec<String> {
        self.audiences.clone()
    }
}

#[cfg(test)]
mod tests;
