//! OpenID Connect discovery for ServiceAccount tokens, as upstream serves it: the issuer's
//! configuration at `/.well-known/openid-configuration` and its keys at `/openid/v1/jwks`, so
//! a verifier outside the cluster can check Rudder's tokens. Readable by every ServiceAccount
//! (the default `system:service-account-issuer-discovery` binding).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

fn json_response(content_type: &'static str, body: serde_json::Value) -> Response {
    (
        [(http::header::CONTENT_TYPE, content_type)],
        body.to_string(),
    )
        .into_response()
}

pub async fn configuration(State(state): State<AppState>) -> Response {
    let issuer = state.service_accounts.issuer();
    json_response(
        "application/json",
        json!({
            "issuer": issuer,
            "jwks_uri": format!("https://{}/openid/v1/jwks", state.advertise),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        }),
    )
}

pub async fn jwks(State(state): State<AppState>) -> Response {
    json_response(
        "application/jwk-set+json",
        state.service_accounts.signer().jwks(),
    )
}
