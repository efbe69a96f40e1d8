//! Which tokens pass: the edge cases of JWT validation, each refused (or not ours) without a
//! store read where the token itself is wrong.

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::json;

use super::*;
use crate::registry::{Allocators, Cidr};

const ISSUER: &str = "https://issuer.test";

async fn tokens() -> (
    ServiceAccountTokens,
    Arc<dyn rudder_storage::Storage>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = format!("sqlite://{}", dir.path().join("state.db").display());
    let storage = rudder_storage::open(&url).await.expect("sqlite opens");
    let cidr = Cidr::parse("10.96.0.0/12").expect("cidr");
    let allocators = Allocators::new(storage.clone(), cidr, 30000..=32767);
    let registry = Registry::new(
        storage.clone(),
        Arc::new(rudder_admission::Chain::new()),
        allocators,
    );
    let key = rcgen::KeyPair::generate().expect("a key");
    let signer = TokenSigner::from_pem(&key.serialize_pem()).expect("a signer");
    let tokens = ServiceAccountTokens::new(Arc::new(signer), ISSUER.into(), registry);
    // The account the tokens name.
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": "a", "uid": "u-1"}});
    storage
        .put(
            b"/registry/serviceaccounts/a/robot",
            account.to_string().as_bytes(),
            0,
        )
        .await
        .expect("stored");
    (tokens, storage, dir)
}

fn claims(now: i64) -> serde_json::Value {
    json!({
        "aud": [ISSUER], "exp": now + 600, "iat": now, "nbf": now, "iss": ISSUER,
        "sub": "system:serviceaccount:a:robot",
        "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "robot", "uid": "u-1"}},
    })
}

fn accepted(result: &Result<Option<UserInfo>, AuthnError>) -> bool {
    matches!(result, Ok(Some(_)))
}

#[tokio::test]
async fn a_token_the_cluster_signed_for_a_live_account_passes() {
    let (tokens, _storage, _dir) = tokens().await;
    let token = tokens.signer.sign(&claims(now())).expect("signed");
    let user = tokens
        .authenticate_token(&token)
        .await
        .expect("valid")
        .expect("ours");
    assert_eq!(user.name, "system:serviceaccount:a:robot");
    assert_eq!(user.uid, "u-1");
}

#[tokio::test]
async fn unsigned_and_otherwise_signed_tokens_are_not_accepted() {
    let (tokens, _storage, _dir) = tokens().await;
    let body = URL_SAFE_NO_PAD.encode(claims(now()).to_string());
    // alg: none, no signature.
    let none = format!(
        "{}.{body}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#)
    );
    assert!(!accepted(&tokens.authenticate_token(&none).await));
    // HS256 keyed with the public key: the old algorithm confusion.
    let hs256 = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims(now()),
        &jsonwebtoken::EncodingKey::from_secret(tokens.signer.kid().as_bytes()).expect("a key"),
    )
    .expect("encoded");
    assert!(!accepted(&tokens.authenticate_token(&hs256).await));
    // Another key's signature.
    let other = rcgen::KeyPair::generate().expect("a key");
    let stranger = TokenSigner::from_pem(&other.serialize_pem()).expect("a signer");
    let forged = stranger.sign(&claims(now())).expect("signed");
    assert!(!accepted(&tokens.authenticate_token(&forged).await));
    // Not a JWT at all.
    assert!(!accepted(&tokens.authenticate_token("plain-token").await));
}

#[tokio::test]
async fn expiry_audience_issuer_and_the_account_are_checked() {
    let (tokens, storage, _dir) = tokens().await;
    let now = now();
    let mut expired = claims(now);
    expired["exp"] = json!(now - 1);
    let mut elsewhere = claims(now);
    elsewhere["aud"] = json!(["https://other.test"]);
    let mut foreign = claims(now);
    foreign["iss"] = json!("https://other.test");
    let mut future = claims(now);
    future["nbf"] = json!(now + 3600);
    let mut recreated = claims(now);
    recreated["kubernetes.io"]["serviceaccount"]["uid"] = json!("u-0");
    for (why, claims) in [
        ("expired", expired),
        ("another audience", elsewhere),
        ("another issuer", foreign),
        ("not valid yet", future),
        ("an account of the same name recreated", recreated),
    ] {
        let token = tokens.signer.sign(&claims).expect("signed");
        let result = tokens.authenticate_token(&token).await;
        assert!(
            matches!(result, Err(AuthnError::InvalidBearerToken)),
            "{why}: {result:?}"
        );
    }
    // A valid token stops passing once its account is deleted.
    let token = tokens.signer.sign(&claims(now)).expect("signed");
    assert!(accepted(&tokens.authenticate_token(&token).await));
    storage
        .delete(b"/registry/serviceaccounts/a/robot", None)
        .await
        .expect("deleted");
    assert!(!accepted(&tokens.authenticate_token(&token).await));
}

#[tokio::test]
async fn token_requests_are_checked_and_signed() {
    let (tokens, _storage, _dir) = tokens().await;
    let answer = tokens
        .issue("a", "robot", &json!({"spec": {"expirationSeconds": 1200}}))
        .await
        .expect("issued");
    assert_eq!(answer["spec"]["audiences"], json!([ISSUER]));
    let token = answer["status"]["token"].as_str().expect("a token");
    assert!(accepted(&tokens.authenticate_token(token).await));
    let short = tokens
        .issue("a", "robot", &json!({"spec": {"expirationSeconds": 60}}))
        .await
        .expect_err("too short");
    assert_eq!(short.code, 422);
    let missing = tokens
        .issue("a", "nobody", &json!({"spec": {}}))
        .await
        .expect_err("no such account");
    assert_eq!(missing.code, 404);
}
