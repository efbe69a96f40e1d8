//! Proxying a request to the extension apiserver of its APIService, as upstream's
//! kube-aggregator does: authorized here by its path (`request_info`), then sent unchanged
//! (method, path, query, body, the client's other headers) to a ready endpoint of the
//! APIService's Service, with the caller's credentials and impersonation headers removed and
//! its identity in their place — `X-Remote-User`, `X-Remote-Uid`, one `X-Remote-Group` per
//! group, `X-Remote-Extra-<key>` per extra value (the key percent-encoded) — which the
//! extension apiserver believes because the connection presents the front-proxy client
//! certificate. The answer is relayed as it comes (watches stream); an upgrade is spliced.
//! An APIService whose last check failed answers 503 `service unavailable`.

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::header::{HeaderName, HeaderValue};
use http::request::Parts;
use http::{HeaderMap, StatusCode};

use super::{request_info, Remote};
use crate::authn::UserInfo;
use crate::authz::{self, Decision};
use crate::error::ApiError;
use crate::http::kubelet_proxy::upgrade;
use crate::http::AppState;

/// Headers a client may not send through the proxy: they carry identity, which only the
/// proxy asserts.
const IDENTITY_HEADER_PREFIXES: [&str; 2] = ["x-remote-", "impersonate-"];

/// Serves `parts`/`body` by proxying to `remote`.
pub async fn serve(
    state: &AppState,
    caller: &UserInfo,
    remote: Arc<Remote>,
    mut parts: Parts,
    body: Body,
) -> Response {
    let attributes = request_info::attributes(
        caller,
        &parts.method,
        parts.uri.path(),
        parts.uri.query().unwrap_or(""),
    );
    if let Err(error) = authorize(state, &attributes) {
        return error.into_response();
    }
    if !remote.available {
        return ApiError::unavailable("service unavailable").into_response();
    }
    let Some(aggregator) = state.aggregator.as_deref() else {
        return ApiError::unavailable("service unavailable").into_response();
    };
    let service = &remote.service;
    let authority = match crate::service_endpoint::resolve(
        &state.registry,
        &service.namespace,
        &service.name,
        service.port,
    )
    .await
    {
        Ok(authority) => authority,
        Err(why) => {
            tracing::debug!(apiservice = %remote.name, reason = why.reason(), "no endpoint");
            return ApiError::unavailable("service unavailable").into_response();
        }
    };
    let target = parts.uri.path_and_query().map_or_else(
        || parts.uri.path().to_string(),
        |pq| pq.as_str().to_string(),
    );
    let mut headers = upgrade::proxied_headers(&parts.headers);
    add_identity(&mut headers, caller);
    let forward = upgrade::Forward {
        method: parts.method.clone(),
        target,
        headers,
        body,
        on_upgrade: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
    };
    let mut request = match http::Request::builder()
        .method(forward.method)
        .uri(forward.target.as_str())
        .body(forward.body)
    {
        Ok(request) => request,
        Err(error) => return ApiError::bad_request(error.to_string()).into_response(),
    };
    *request.headers_mut() = forward.headers;
    let client = aggregator.client();
    let answer = match client.send(&remote, &authority, request).await {
        Ok(answer) => answer,
        Err(error) => {
            tracing::info!(apiservice = %remote.name, %error, "proxying failed");
            return ApiError::unavailable(format!("error trying to reach service: {error}"))
                .into_response();
        }
    };
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS {
        return match forward.on_upgrade {
            Some(downstream) => {
                upgrade::answer_upgrade(answer, downstream, |splice| client.spawn(splice))
            }
            None => ApiError::bad_request(
                "the extension apiserver upgraded a connection the client cannot upgrade",
            )
            .into_response(),
        };
    }
    upgrade::relay(answer)
}

fn authorize(state: &AppState, attributes: &authz::Attributes) -> Result<(), ApiError> {
    let reason = match state.authorizer.authorize(attributes) {
        Decision::Allow { .. } => return Ok(()),
        Decision::Deny { reason } => reason,
        Decision::NoOpinion => String::new(),
    };
    let message = authz::forbidden_message(attributes, &reason);
    if !attributes.resource_request {
        return Err(ApiError::forbidden(format!("forbidden: {message}")));
    }
    let what = format!("{}.{}", attributes.resource, attributes.group);
    Err(ApiError::forbidden(if attributes.name.is_empty() {
        format!("{what} is forbidden: {message}")
    } else {
        format!("{what} \"{}\" is forbidden: {message}", attributes.name)
    }))
}

/// Replaces whatever identity headers the client sent with the caller's.
pub fn add_identity(headers: &mut HeaderMap, caller: &UserInfo) {
    let spoofed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            IDENTITY_HEADER_PREFIXES
                .iter()
                .any(|prefix| name.as_str().starts_with(prefix))
        })
        .cloned()
        .collect();
    for name in spoofed {
        headers.remove(name);
    }
    let mut add = |name: &str, value: &str| {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    };
    add("x-remote-user", &caller.name);
    if !caller.uid.is_empty() {
        add("x-remote-uid", &caller.uid);
    }
    for group in &caller.groups {
        add("x-remote-group", group);
    }
    for (key, values) in &caller.extra {
        let name = format!("x-remote-extra-{}", escape_extra_key(key));
        for value in values {
            add(&name, value);
        }
    }
}

/// An extra's key in a header name: percent-encoded except for the characters a header
/// name may hold (upstream's `headerKeyEscape`: `url.PathEscape` of the lower-cased key).
fn escape_extra_key(key: &str) -> String {
    let mut out = String::new();
    for byte in key.to_ascii_lowercase().bytes() {
        let keep = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'^'
                    | b'`'
                    | b'|'
            );
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_identity_replaces_any_the_client_sent() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", HeaderValue::from_static("mallory"));
        headers.insert("x-remote-group", HeaderValue::from_static("system:masters"));
        headers.insert("impersonate-user", HeaderValue::from_static("admin"));
        headers.insert("accept", HeaderValue::from_static("application/json"));
        let caller = UserInfo {
            name: "alice".into(),
            uid: "u-1".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            extra: [(
                "scopes.example.com/Team".to_string(),
                vec!["a".to_string(), "b".to_string()],
            )]
            .into_iter()
            .collect(),
        };
        add_identity(&mut headers, &caller);
        let all = |name: &str| -> Vec<&str> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect()
        };
        assert_eq!(all("x-remote-user"), ["alice"]);
        assert_eq!(all("x-remote-uid"), ["u-1"]);
        assert_eq!(all("x-remote-group"), ["dev", "system:authenticated"]);
        assert_eq!(all("x-remote-extra-scopes.example.com%2Fteam"), ["a", "b"]);
        assert!(all("impersonate-user").is_empty());
        assert_eq!(all("accept"), ["application/json"]);
    }
}
