//! The apiserver's proxy to kubelets, over real TLS both ways: an apiserver on SQLite, and a
//! fake kubelet (a hyper HTTPS server with a serving certificate from the cluster CA that
//! requires the apiserver's kubelet client certificate) serving `/containerLogs/…` (a body
//! the test releases chunk by chunk), upgrades on `/exec/…` and `/attach/…` (echoing bytes),
//! and anything else for nodes/proxy.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rudder_apiserver::pki::Pki;
use rudder_apiserver::server::{self, Config, Running};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed()
}

/// What the fake kubelet saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    client_cn: String,
    alpn: Option<Vec<u8>>,
    method: Method,
    target: String,
    headers: http::HeaderMap,
}

/// The fake kubelet's shared state.
#[derive(Default)]
struct Kubelet {
    seen: Mutex<Vec<Seen>>,
    /// Releases the next chunk of a followed log.
    next_chunk: Notify,
    /// Set when a followed log's body is dropped (the apiserver closed the stream).
    follow_closed: Notify,
}

impl Kubelet {
    fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

/// Drops into `follow_closed` when a followed log's body goes away.
struct OnDrop(Arc<Kubelet>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.follow_closed.notify_one();
    }
}

fn common_name(der: &[u8]) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    let cn = cert.subject().iter_common_name().next().unwrap();
    cn.as_str().unwrap().to_string()
}

/// Starts the fake kubelet on 127.0.0.1 with a serving certificate for 127.0.0.1 from the
/// cluster CA, requiring client certificates from that CA.
async fn start_kubelet(pki: &Pki) -> (SocketAddr, Arc<Kubelet>) {
    let (cert, key) = pki
        .issue_serving_cert(
            "system:node:n1",
            &["system:nodes"],
            &[],
            &["127.0.0.1".parse().unwrap()],
        )
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes()).unwrap())
        .unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let kubelet = Arc::new(Kubelet::default());
    let state = kubelet.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let session = tls.get_ref().1;
                let client_cn = session
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| common_name(leaf))
                    .unwrap_or_default();
                let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
                let service = hyper::service::service_fn(move |request| {
                    let seen = Seen {
                        client_cn: client_cn.clone(),
                        alpn: alpn.clone(),
                        method: request.method().clone(),
                        target: request.uri().to_string(),
                        headers: request.headers().clone(),
                    };
                    kubelet_answer(state.clone(), seen, request)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, kubelet)
}

async fn kubelet_answer(
    state: Arc<Kubelet>,
    seen: Seen,
    mut request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    state.seen.lock().unwrap().push(seen.clone());
    if seen.client_cn != "kube-apiserver-kubelet-client" {
        return Ok(status(StatusCode::UNAUTHORIZED, "Unauthorized"));
    }
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    if path == "/containerLogs/default/gone/app" {
        return Ok(status(StatusCode::NOT_FOUND, "pod default/gone not found"));
    }
    if path.starts_with("/containerLogs/") {
        if !query.contains("follow=true") {
            return Ok(status(StatusCode::OK, "hello\nworld\n"));
        }
        let guard = OnDrop(state.clone());
        let lines = futures::stream::unfold((0, guard), |(n, guard)| async move {
            if n > 0 {
                guard.0.next_chunk.notified().await;
            }
            let line = Bytes::from(format!("line {}\n", n + 1));
            Some((Ok::<_, Infallible>(Frame::data(line)), (n + 1, guard)))
        });
        // Three lines, then the kubelet ends the stream, unless the client left first.
        let body = BodyExt::boxed(StreamBody::new(lines.take(3)));
        return Ok(Response::new(body));
    }
    let upgrade = request
        .headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    if path.starts_with("/exec/") || path.starts_with("/attach/") {
        let Some(upgrade) = upgrade else {
            return Ok(status(StatusCode::BAD_REQUEST, "Upgrade request required"));
        };
        let mut response = Response::new(full(""));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert("connection", "Upgrade".parse().unwrap());
        if upgrade == "websocket" {
            headers.insert("upgrade", "websocket".parse().unwrap());
            headers.insert("sec-websocket-accept", "fake-accept".parse().unwrap());
            headers.insert(
                "sec-websocket-protocol",
                "v5.channel.k8s.io".parse().unwrap(),
            );
        } else {
            headers.insert("upgrade", "SPDY/3.1".parse().unwrap());
            headers.insert(
                "x-stream-protocol-version",
                "v4.channel.k8s.io".parse().unwrap(),
            );
        }
        let on_upgrade = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            let upgraded = on_upgrade.await.unwrap();
            let mut io = TokioIo::new(upgraded);
            let mut buffer = [0u8; 1024];
            // Echo, prefixed, until the client closes.
            loop {
                let n = io.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                let mut reply = b"echo:".to_vec();
                reply.extend_from_slice(&buffer[..n]);
                if io.write_all(&reply).await.is_err() {
                    break;
                }
            }
        });
        return Ok(response);
    }
    // nodes/proxy: say what arrived, body included.
    let method = request.method().clone();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let text = format!(
        "{method} {path}?{query} body={}",
        String::from_utf8_lossy(&body)
    );
    let mut response = status(StatusCode::OK, &text);
    response
        .headers_mut()
        .insert("x-kubelet", "fake".parse().unwrap());
    Ok(response)
}

fn status(code: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(full(text.to_string()));
    *response.status_mut() = code;
    response
}

/// An HTTPS client of the apiserver with one identity, a new HTTP/1.1 connection per request.
struct Client {
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
}

impl Client {
    fn new(running: &Running, cert: &str, key: &str) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(running.pki.ca_cert_pem.as_bytes()).unwrap())
            .unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            addr: running.addr,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    async fn send(&self, mut request: Request<Full<Bytes>>) -> Response<Incoming> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let tls = self
            .tls
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(connection.with_upgrades());
        request
            .headers_mut()
            .insert("host", "localhost".parse().unwrap());
        sender.send_request(request).await.unwrap()
    }

    async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, String) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = self.send(request).await;
        let code = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn get(&self, uri: &str) -> (StatusCode, String) {
        self.call(Method::GET, uri, None).await
    }

    async fn create(&self, uri: &str, object: Value) {
        let (code, text) = self.call(Method::POST, uri, Some(object)).await;
        assert_eq!(code, StatusCode::CREATED, "{uri}: {text}");
    }
}

fn message(text: &str) -> String {
    let status: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("a Status: {text}"));
    status["message"].as_str().unwrap_or_default().to_string()
}

fn pod(name: &str, node: Option<&str>, init: &[&str], containers: &[&str]) -> Value {
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| json!({"name": n, "image": "busybox"}))
            .collect::<Vec<_>>()
    };
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": list(containers)}});
    if !init.is_empty() {
        pod["spec"]["initContainers"] = json!(list(init));
    }
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

/// Sends an upgrade request and, on 101, writes `ping` and reads the kubelet's echo.
async fn upgrade_and_echo(client: &Client, request: Request<Full<Bytes>>) -> Response<()> {
    let mut response = client.send(request).await;
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    let upgraded = hyper::upgrade::on(&mut response).await.unwrap();
    let mut io = TokioIo::new(upgraded);
    io.write_all(b"ping").await.unwrap();
    let mut buffer = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), io.read(&mut buffer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buffer[..n], b"echo:ping");
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, ())
}

/// Polls `check` until it holds (RBAC's cache follows writes shortly after).
async fn eventually<F: std::future::Future<Output = bool>>(mut check: impl FnMut() -> F) {
    for _ in 0..100 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_proxies_logs_streams_and_node_requests_to_the_kubelet() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    let store = rudder_storage::open(&harness.url()).await.unwrap();
    let running = server::start(config, store, CancellationToken::new())
        .await
        .unwrap();
    let admin = Client::new(
        &running,
        &running.pki.admin_cert_pem,
        &running.pki.admin_key_pem,
    );
    let (kubelet_addr, kubelet) = start_kubelet(&running.pki).await;

    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"addresses": [{"type": "Hostname", "address": "n1.invalid"},
                                 {"type": "InternalIP", "address": "127.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_addr.port()}}}});
    admin.create("/api/v1/nodes", node).await;
    let pods = "/api/v1/namespaces/default/pods";
    admin
        .create(pods, pod("web", Some("n1"), &[], &["app"]))
        .await;
    admin
        .create(pods, pod("multi", Some("n1"), &["setup"], &["a", "b"]))
        .await;
    admin
        .create(pods, pod("gone", Some("n1"), &[], &["app"]))
        .await;
    admin
        .create(pods, pod("pending", None, &[], &["app"]))
        .await;
    admin
        .create(pods, pod("orphan", Some("ghost"), &[], &["app"]))
        .await;

    // pods/log: the query reaches the kubelet as its own, over HTTP/1.1, as the kubelet client.
    let (code, text) = admin
        .get("/api/v1/namespaces/default/pods/web/log?tailLines=10&timestamps=true&previous=false")
        .await;
    assert_eq!((code, text.as_str()), (StatusCode::OK, "hello\nworld\n"));
    let seen = kubelet.last();
    assert_eq!(
        seen.target,
        "/containerLogs/default/web/app?tailLines=10&timestamps=true"
    );
    assert_eq!(seen.client_cn, "kube-apiserver-kubelet-client");
    assert_eq!(seen.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert!(seen.headers.get("authorization").is_none());

    // follow streams each chunk as the kubelet sends it, and ends when the kubelet does.
    let request = Request::get("/api/v1/namespaces/default/pods/web/log?follow=true")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = admin.send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/plain");
    let mut body = response.into_body();
    let mut next_line = async || {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a chunk in time");
        frame.map(|frame| frame.unwrap().into_data().unwrap())
    };
    assert_eq!(next_line().await.unwrap(), "line 1\n");
    kubelet.next_chunk.notify_one();
    assert_eq!(next_line().await.unwrap(), "line 2\n");
    kubelet.next_chunk.notify_one();
    assert_eq!(next_line().await.unwrap(), "line 3\n");
    assert!(
        next_line().await.is_none(),
        "the stream ends with the kubelet's"
    );

    // A client that leaves a followed log closes the kubelet's stream.
    let request = Request::get("/api/v1/namespaces/default/pods/web/log?follow=1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut body = admin.send(request).await.into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "line 1\n"
    );
    drop(body);
    tokio::time::timeout(Duration::from_secs(5), kubelet.follow_closed.notified())
        .await
        .expect("the kubelet's stream is closed");

    // The errors upstream gives.
    let log = |pod: &str, query: &str| format!("/api/v1/namespaces/default/pods/{pod}/log{query}");
    let (code, text) = admin.get(&log("multi", "")).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        message(&text),
        "a container name must be specified for pod multi, choose one of: [setup a b]"
    );
    let (code, text) = admin.get(&log("web", "?container=nope")).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(message(&text), "container nope is not valid for pod web");
    let (code, text) = admin.get(&log("web", "?tailLines=-1")).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    let (code, text) = admin
        .get(&log(
            "web",
            "?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
        ))
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    let (code, text) = admin.get(&log("pending", "")).await;
    assert_eq!(
        (code, text.as_str()),
        (StatusCode::OK, ""),
        "no node, no logs"
    );
    let (code, text) = admin.get(&log("orphan", "")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(message(&text), "nodes \"ghost\" not found");
    let (code, text) = admin.get(&log("nobody", "")).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(message(&text), "pods \"nobody\" not found");
    let (code, text) = admin.get(&log("gone", "")).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "the kubelet's code is kept");
    assert_eq!(
        message(&text),
        "the server could not find the requested resource ( pods/log gone)"
    );

    // exec by WebSocket (GET): the upgrade is spliced, the options are the kubelet's.
    let exec = "/api/v1/namespaces/default/pods/web/exec?command=ls&command=-l&stdout=true&stderr=true&container=app";
    let websocket = |uri: &str| {
        Request::get(uri)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "v5.channel.k8s.io")
            .header("sec-websocket-protocol", "v4.channel.k8s.io")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let answered = upgrade_and_echo(&admin, websocket(exec)).await;
    assert_eq!(
        answered.headers()["sec-websocket-protocol"],
        "v5.channel.k8s.io"
    );
    let seen = kubelet.last();
    assert_eq!(seen.method, Method::GET);
    assert_eq!(
        seen.target,
        "/exec/default/web/app?command=ls&command=-l&error=1&output=1"
    );
    assert_eq!(
        seen.headers
            .get_all("sec-websocket-protocol")
            .iter()
            .count(),
        2
    );
    assert_eq!(
        seen.headers["sec-websocket-key"],
        "dGhlIHNhbXBsZSBub25jZQ=="
    );

    // attach by SPDY (POST): the same splice, every protocol version offered.
    let spdy =
        Request::post("/api/v1/namespaces/default/pods/web/attach?stdin=true&stdout=true&tty=true")
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1")
            .header("x-stream-protocol-version", "v4.channel.k8s.io")
            .header("x-stream-protocol-version", "v3.channel.k8s.io")
            .body(Full::new(Bytes::new()))
            .unwrap();
    let answered = upgrade_and_echo(&admin, spdy).await;
    assert_eq!(
        answered.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );
    let seen = kubelet.last();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(
        seen.target,
        "/attach/default/web/app?input=1&output=1&tty=1"
    );
    assert_eq!(
        seen.headers
            .get_all("x-stream-protocol-version")
            .iter()
            .count(),
        2
    );

    // No upgrade asked, or no node: upstream's 400s.
    let (code, text) = admin.call(Method::POST, exec, None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(message(&text), "Upgrade request required");
    let response = admin
        .send(websocket(
            "/api/v1/namespaces/default/pods/pending/exec?command=ls",
        ))
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let text = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        message(&String::from_utf8_lossy(&text)),
        "pod pending does not have a host assigned"
    );

    // nodes/proxy: the rest of the path and the query, the method and the body.
    let (code, text) = admin.get("/api/v1/nodes/n1/proxy/configz?x=1&y=2").await;
    assert_eq!(
        (code, text.as_str()),
        (StatusCode::OK, "GET /configz?x=1&y=2 body=")
    );
    let (code, text) = admin
        .call(
            Method::PUT,
            "/api/v1/nodes/n1/proxy/a/b",
            Some(json!({"k": 1})),
        )
        .await;
    assert_eq!(
        (code, text.as_str()),
        (StatusCode::OK, "PUT /a/b? body={\"k\":1}")
    );
    let (code, _) = admin.get("/api/v1/nodes/ghost/proxy/healthz").await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // Discovery lists the subresources with upstream's verbs.
    let (_, text) = admin.get("/api/v1").await;
    let list: Value = serde_json::from_str(&text).unwrap();
    let verbs = |name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["verbs"].clone())
            .unwrap_or_else(|| panic!("{name} in discovery"))
    };
    assert_eq!(verbs("pods/log"), json!(["get"]));
    assert_eq!(verbs("pods/exec"), json!(["create", "get"]));
    assert_eq!(verbs("pods/attach"), json!(["create", "get"]));
    assert_eq!(verbs("pods/portforward"), json!(["create", "get"]));
    assert_eq!(
        verbs("nodes/proxy"),
        json!(["create", "delete", "get", "patch", "update"])
    );

    // Authorization: a user without pods/log is refused; a WebSocket exec needs `create` too.
    let (cert, key) = running.pki.issue_client_cert("jane", &[]).unwrap();
    let jane = Client::new(&running, &cert, &key);
    let (code, text) = jane.get(&log("web", "")).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{text}");
    assert!(
        message(&text).starts_with(
            "pods \"web\" is forbidden: User \"jane\" cannot get resource \"pods/log\""
        ),
        "{text}"
    );
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    admin
        .create(
            &format!("{rbac}/roles"),
            json!({"metadata": {"name": "exec-get"}, "rules": [
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}]}),
        )
        .await;
    admin
        .create(
            &format!("{rbac}/rolebindings"),
            json!({"metadata": {"name": "jane-exec"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec-get"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}]}),
        )
        .await;
    eventually(|| async {
        let response = jane.send(websocket(exec)).await;
        let code = response.status();
        let text = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&text);
        code == StatusCode::FORBIDDEN && text.contains("cannot create resource \\\"pods/exec\\\"")
    })
    .await;
    let (code, text) = admin
        .call(
            Method::PUT,
            &format!("{rbac}/roles/exec-get"),
            Some(json!({"metadata": {"name": "exec-get"}, "rules": [
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}]})),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{text}");
    eventually(|| async {
        jane.send(websocket(exec)).await.status() == StatusCode::SWITCHING_PROTOCOLS
    })
    .await;

    // Metrics count these as CONNECT.
    let (_, text) = admin.get("/metrics").await;
    assert!(
        text.lines()
            .any(|line| line.starts_with("apiserver_request_total")
                && line.contains("subresource=\"log\"")
                && line.contains("verb=\"CONNECT\"")),
        "no CONNECT for pods/log"
    );

    running.stop().await.unwrap();
}
