//! One call of an admission webhook: POST of an AdmissionReview over HTTPS to the webhook's
//! URL (or to a ready endpoint of its Service, verified as `<service>.<namespace>.svc`), its
//! certificate verified against the configuration's `caBundle`, within `timeoutSeconds`, and
//! the AdmissionReview it answers with. Connections are kept and reused between calls.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio_rustls::TlsConnector;

/// The largest answer read from a webhook.
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where a call goes.
#[derive(Clone, Debug)]
pub struct Target {
    /// `host:port` to dial.
    pub authority: String,
    /// The name the certificate must carry.
    pub server_name: String,
    /// The request's path and query.
    pub path: String,
    /// The URL as messages show it.
    pub url: String,
}

impl Target {
    /// The target of a `clientConfig.url`.
    pub fn of_url(url: &str) -> Result<Self, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|error| format!("parse {url:?}: {error}"))?;
        let host = uri.host().ok_or_else(|| format!("{url:?} has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            authority,
            server_name: host,
            path: uri
                .path_and_query()
                .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
            url: url.to_string(),
        })
    }
}

/// Where a webhook's `clientConfig` sends calls: its `url`, or a ready endpoint of its
/// `service` (read through `reader`), verified as `<service>.<namespace>.svc`.
pub async fn target_of(
    reader: &crate::registry::Registry,
    client_config: &Value,
) -> Result<Target, String> {
    if let Some(url) = client_config["url"].as_str() {
        return Target::of_url(url);
    }
    let service = &client_config["service"];
    let namespace = service["namespace"].as_str().unwrap_or("");
    let name = service["name"].as_str().unwrap_or("");
    let port = service["port"].as_i64().unwrap_or(443);
    let path = service["path"].as_str().unwrap_or("/");
    let url = format!("https://{name}.{namespace}.svc:{port}{path}");
    let endpoint = crate::service_endpoint::resolve(reader, namespace, name, port)
        .await
        .map_err(|_| {
            format!("Post \"{url}\": service \"{namespace}/{name}\" has no ready endpoint")
        })?;
    Ok(Target {
        authority: endpoint,
        server_name: format!("{name}.{namespace}.svc"),
        path: path.to_string(),
        url,
    })
}

fn connector(ca_bundle: Option<&str>) -> Result<TlsConnector, String> {
    let roots = crate::aggregator::client::roots(ca_bundle)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// POSTs `review` to `target` and returns the AdmissionReview it answers with. The error is
/// what upstream's messages put after `failed to call webhook: `.
pub async fn post(
    target: &Target,
    ca_bundle: Option<&str>,
    review: &Value,
    timeout: Duration,
) -> Result<Value, String> {
    let body = serde_json::to_vec(review).map_err(|error| error.to_string())?;
    let url = &target.url;
    match tokio::time::timeout(timeout, exchange(target, ca_bundle, body)).await {
        Ok(result) => result.map_err(|error| format!("Post \"{url}\": {error}")),
        Err(_) => Err(format!(
            "Post \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
    }
}

/// Idle connections to webhooks, by where they go and whom they trust, reused as upstream's
/// client reuses them (a TLS handshake per call would cost more than most webhooks' work).
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

static IDLE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Vec<Sender>>>> =
    std::sync::LazyLock::new(Default::default);

/// At most this many idle connections are kept per webhook.
const MAX_IDLE: usize = 16;

fn pool_key(target: &Target, ca_bundle: Option<&str>) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ca_bundle.hash(&mut hasher);
    format!(
        "{}|{}|{:x}",
        target.authority,
        target.server_name,
        hasher.finish()
    )
}

fn idle() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, Vec<Sender>>> {
    IDLE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn connect(target: &Target, ca_bundle: Option<&str>) -> Result<Sender, String> {
    let connector = connector(ca_bundle)?;
    let tcp = tokio::net::TcpStream::connect(&target.authority)
        .await
        .map_err(|error| format!("dial tcp {}: {error}", target.authority))?;
    let name = ServerName::try_from(target.server_name.clone())
        .map_err(|error| format!("invalid server name {:?}: {error}", target.server_name))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|error| format!("tls: {error}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|error| error.to_string())?;
    // The connection lives while it is used or idle, and ends when either side closes it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn exchange(
    target: &Target,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
) -> Result<Value, String> {
    let key = pool_key(target, ca_bundle);
    let reused = loop {
        let Some(mut sender) = idle().get_mut(&key).and_then(Vec::pop) else {
            break None;
        };
        if !sender.is_closed() && sender.ready().await.is_ok() {
            break Some(sender);
        }
    };
    let mut sender = match reused {
        Some(sender) => sender,
        None => connect(target, ca_bundle).await?,
    };
    let mut request = http::Request::post(target.path.as_str())
        .header(http::header::HOST, target.authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())?;
    crate::tracing_context::propagate_current_trace(request.headers_mut());
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| error.to_string())?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|error| format!("reading the response: {error}"))?
        .to_bytes();
    if !sender.is_closed() {
        let mut pool = idle();
        let idle_here = pool.entry(key).or_default();
        if idle_here.len() < MAX_IDLE {
            idle_here.push(sender);
        }
    }
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {} but did not return more information",
            status.as_u16()
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|error| format!("the response is not an AdmissionReview: {error}"))
}
