//! The upgrade-aware proxy: a request forwarded to a kubelet with the headers an upgrade
//! needs; a `101 Switching Protocols` answered to the client with the kubelet's headers, then
//! both upgraded connections spliced byte for byte until each side has closed; any other answer
//! relayed as it is (status, headers, body streamed). SPDY/3.1 (POST, `Upgrade: SPDY/3.1`,
//! `X-Stream-Protocol-Version`) and WebSocket (GET, `Sec-WebSocket-*`) pass through unchanged.
//!
//! ```text
//! client ──HTTP/1.1 Upgrade──▶ apiserver ──HTTPS + client cert──▶ kubelet
//!        ◀── 101 (kubelet's headers) ──   ◀──────── 101 ─────────
//!        ◀═══════ copy_bidirectional (a task on the server's tracker) ═══════▶
//! ```

use axum::body::Body;
use axum::response::Response;
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::client::KubeletClient;
use super::endpoint::Endpoint;
use crate::error::{ApiError, Result};

/// What the client's request carries to the kubelet.
pub struct Forward {
    pub method: Method,
    /// The kubelet's path and query (origin form).
    pub target: String,
    pub headers: HeaderMap,
    pub body: Body,
    /// The client connection's upgrade, when the request asked for one over HTTP/1.1.
    pub on_upgrade: Option<OnUpgrade>,
}

/// The headers an upgrade request needs, forwarded for exec, attach and port-forward (which
/// carry no body). `X-Stream-Protocol-Version` may repeat; every value is kept.
const UPGRADE_HEADERS: [&str; 8] = [
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
    "user-agent",
];

/// Headers that are about one hop, never forwarded as they are (upgrades re-add
/// `Connection`/`Upgrade`), and the client's own credentials, which are for the apiserver only.
const NOT_FORWARDED: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
];

/// Whether `headers` ask for an upgrade (`Connection` lists `upgrade`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// The upgrade headers of `client`, for an exec, attach or port-forward.
pub fn upgrade_headers(client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in UPGRADE_HEADERS {
        let name = HeaderName::from_static(name);
        for value in client.get_all(&name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The end-to-end headers of `client`, for a nodes/proxy request: hop-by-hop headers, the
/// client's credentials and impersonation dropped, the upgrade headers kept when it upgrades.
pub fn proxied_headers(client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in client {
        let lower = name.as_str();
        if NOT_FORWARDED.contains(&lower)
            || lower.starts_with("impersonate-")
            || *name == header::CONTENT_LENGTH
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if is_upgrade_request(client) {
        for name in [header::CONNECTION, header::UPGRADE] {
            for value in client.get_all(&name) {
                out.append(name.clone(), value.clone());
            }
        }
    }
    out
}

/// Sends `forward` to the kubelet at `endpoint` and answers the client: 101 and a splice when
/// both sides upgrade, else the kubelet's answer as it is.
pub async fn proxy(
    client: &KubeletClient,
    endpoint: &Endpoint,
    forward: Forward,
) -> Result<Response> {
    let mut request = http::Request::builder()
        .method(forward.method)
        .uri(forward.target.as_str())
        .body(forward.body)
        .map_err(|error| ApiError::internal(format!("the kubelet request: {error}")))?;
    *request.headers_mut() = forward.headers;
    let answer = client
        .send(endpoint, request)
        .await
        .map_err(|error| ApiError::internal(format!("error dialing backend: {error}")))?;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(relay(answer));
    }
    let Some(downstream) = forward.on_upgrade else {
        return Err(ApiError::bad_request(
            "the kubelet upgraded a connection the client cannot upgrade",
        ));
    };
    Ok(answer_upgrade(answer, downstream, |splice| {
        client.spawn(splice)
    }))
}

/// An answer that is not an upgrade, relayed as it is (status, headers, body streamed).
pub fn relay(answer: http::Response<hyper::body::Incoming>) -> Response {
    let (mut parts, body) = answer.into_parts();
    strip_hop_headers(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
}

/// A `101` answer: the client gets it with the backend's headers, and `spawn` runs the
/// splice of the two upgraded connections.
pub fn answer_upgrade(
    mut answer: http::Response<hyper::body::Incoming>,
    downstream: OnUpgrade,
    spawn: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
) -> Response {
    let upstream = hyper::upgrade::on(&mut answer);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = answer.headers().clone();
    spawn(Box::pin(splice(downstream, upstream)));
    response
}

/// Drops a relayed answer's hop-by-hop headers (hyper frames the body itself).
fn strip_hop_headers(headers: &mut HeaderMap) {
    for name in NOT_FORWARDED {
        headers.remove(name);
    }
}

/// Copies bytes both ways between the client's and the kubelet's upgraded connections until
/// each direction has ended (or one fails).
async fn splice(downstream: OnUpgrade, upstream: OnUpgrade) {
    let (downstream, upstream) = tokio::join!(downstream, upstream);
    let (downstream, upstream) = match (downstream, upstream) {
        (Ok(downstream), Ok(upstream)) => (downstream, upstream),
        (Err(error), _) => {
            tracing::debug!(%error, "the client's upgrade failed");
            return;
        }
        (_, Err(error)) => {
            tracing::debug!(%error, "the kubelet's upgrade failed");
            return;
        }
    };
    let mut downstream = TokioIo::new(downstream);
    let mut upstream = TokioIo::new(upstream);
    match tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await {
        Ok((to_kubelet, to_client)) => {
            tracing::debug!(to_kubelet, to_client, "upgraded stream ended");
        }
        Err(error) => tracing::debug!(%error, "upgraded stream failed"),
    }
}
