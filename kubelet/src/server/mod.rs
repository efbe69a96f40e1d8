//! The kubelet API on port 10250 (TLS), for the apiserver to proxy to: `/healthz`,
//! `/containerLogs/{ns}/{pod}/{container}`, `/exec/…`, `/attach/…`, `/portForward/{ns}/{pod}`
//! `/runningpods/`, `/stats/summary` (the Summary API) and `/metrics/resource` (what
//! metrics-server scrapes), the last two from [`crate::stats`].
//!
//! Every request but `/healthz` is authenticated — a client certificate from the cluster CA,
//! or a bearer token checked with a TokenReview — and authorized with a SubjectAccessReview
//! on this node's `nodes/<subresource>` ([`auth`]), as upstream's kubelet does. Streaming
//! requests are handed to the runtime's own streaming server: the agent asks the runtime for
//! a one-shot URL and splices the client's upgraded connection to it ([`stream`]), so SPDY
//! and WebSocket clients both get what the runtime speaks.

pub mod auth;
pub mod logs;
pub mod stream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::runtime::{api, labels, Runtime};
use auth::{Authenticator, User};

pub type Body = BoxBody<Bytes, std::io::Error>;

/// What the handlers share.
pub struct Server {
    pub runtime: Arc<dyn Runtime>,
    pub auth: Authenticator,
    pub node_name: String,
    /// Usage numbers for `/stats/summary` and `/metrics/resource` (none: 404).
    pub stats: Option<Arc<crate::stats::Collector>>,
}

/// A `200` with `body` of `content_type`.
fn ok(body: Vec<u8>, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}

pub fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(message.into()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The query's values for `key`.
pub fn query_values(request: &Request<Incoming>, key: &str) -> Vec<String> {
    let query = request.uri().query().unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

fn decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

pub fn flag(request: &Request<Incoming>, names: &[&str]) -> bool {
    names.iter().any(|name| {
        query_values(request, name)
            .iter()
            .any(|v| matches!(v.as_str(), "1" | "true" | "True" | ""))
    })
}

/// Which subresource of `nodes` a path is authorized as (upstream's mapping).
fn subresource(path: &str) -> &'static str {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "stats" => "stats",
        "metrics" => "metrics",
        "logs" => "log",
        "spec" => "spec",
        "checkpoint" => "checkpoint",
        "configz" => "configz",
        "healthz" => "healthz",
        "pods" => "pods",
        _ => "proxy",
    }
}

fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

impl Server {
    /// The sandbox (the ready one first) of pod `namespace/name`.
    pub async fn sandbox(&self, namespace: &str, name: &str) -> Option<api::PodSandbox> {
        let mut sandboxes: Vec<api::PodSandbox> = self
            .runtime
            .list_pod_sandboxes()
            .await
            .ok()?
            .into_iter()
            .filter(|s| {
                s.labels.get(labels::POD_NAMESPACE).map(String::as_str) == Some(namespace)
                    && s.labels.get(labels::POD_NAME).map(String::as_str) == Some(name)
            })
            .collect();
        sandboxes.sort_by_key(|s| {
            (
                s.state != api::PodSandboxState::SandboxReady as i32,
                std::cmp::Reverse(s.created_at),
            )
        });
        sandboxes.into_iter().next()
    }

    /// The containers named `container` of pod `namespace/name`, newest attempt first.
    pub async fn containers(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> Vec<api::ContainerStatus> {
        let Some(sandbox) = self.sandbox(namespace, name).await else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for c in self
            .runtime
            .list_containers(Some(&sandbox.id))
            .await
            .unwrap_or_default()
        {
            if c.metadata.as_ref().is_some_and(|m| m.name == container) {
                if let Ok(status) = self.runtime.container_status(&c.id).await {
                    found.push(status);
                }
            }
        }
        found.sort_by_key(|s| std::cmp::Reverse(s.metadata.as_ref().map(|m| m.attempt)));
        found
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<User>,
    ) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if path == "/healthz" {
            return text(StatusCode::OK, "ok");
        }
        let user = match peer {
            Some(user) => user,
            None => match self.auth.authenticate_token(request.headers()).await {
                Ok(Some(user)) => user,
                Ok(None) => return text(StatusCode::UNAUTHORIZED, "Unauthorized"),
                Err(message) => return text(StatusCode::UNAUTHORIZED, message),
            },
        };
        let (verb, sub) = (verb(request.method()), subresource(&path));
        match self.auth.authorize(&user, verb, sub, &self.node_name).await {
            Ok(true) => {}
            Ok(false) => {
                let message = format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource={sub})",
                    user.name
                );
                return text(StatusCode::FORBIDDEN, message);
            }
            Err(message) => return text(StatusCode::INTERNAL_SERVER_ERROR, message),
        }
        let parts: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(decode)
            .collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        match parts.as_slice() {
            ["containerLogs", namespace, pod, container] => {
                logs::serve(&self, &request, namespace, pod, container).await
            }
            [kind @ ("exec" | "attach"), namespace, pod, container, ..] => {
                stream::exec_or_attach(&self, request, kind, namespace, pod, container).await
            }
            ["portForward", namespace, pod, ..] => {
                stream::port_forward(&self, request, namespace, pod).await
            }
            ["runningpods", ..] => self.running_pods().await,
            ["stats", "summary"] if request.method() == Method::GET => {
                self.summary(flag(&request, &["only_cpu_and_memory"])).await
            }
            ["metrics", "resource"] if request.method() == Method::GET => {
                let Some(stats) = &self.stats else {
                    return text(StatusCode::NOT_FOUND, "404 page not found");
                };
                let body = crate::stats::resource_metrics::render(&stats.summary().await);
                ok(
                    body.into_bytes(),
                    "text/plain; version=0.0.4; charset=utf-8",
                )
            }
            _ => text(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }

    /// `/stats/summary`; `only_cpu_and_memory` leaves out filesystems, volumes and limits, as
    /// metrics-server asks.
    async fn summary(&self, only_cpu_and_memory: bool) -> Response<Body> {
        let Some(stats) = &self.stats else {
            return text(StatusCode::NOT_FOUND, "404 page not found");
        };
        let mut summary = stats.summary().await;
        if only_cpu_and_memory {
            summary.node.fs = None;
            summary.node.runtime = None;
            summary.node.rlimit = None;
            for pod in &mut summary.pods {
                pod.volume.clear();
                pod.ephemeral_storage = None;
                for container in &mut pod.containers {
                    container.rootfs = None;
                    container.logs = None;
                }
            }
        }
        match serde_json::to_vec(&summary) {
            Ok(body) => ok(body, "application/json"),
            Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        }
    }

    /// `/runningpods/`: a PodList of what the runtime runs (names, uids, containers).
    async fn running_pods(&self) -> Response<Body> {
        use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
        let sandboxes = self.runtime.list_pod_sandboxes().await.unwrap_or_default();
        let mut items = Vec::new();
        for sandbox in sandboxes
            .iter()
            .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
        {
            let containers = self
                .runtime
                .list_containers(Some(&sandbox.id))
                .await
                .unwrap_or_default();
            let meta = sandbox.metadata.clone().unwrap_or_default();
            items.push(Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(meta.name),
                    namespace: Some(meta.namespace),
                    uid: Some(meta.uid),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: containers
                        .into_iter()
                        .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
                        .map(|c| Container {
                            name: c.metadata.map(|m| m.name).unwrap_or_default(),
                            image: c.image.map(|i| i.image),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
                status: None,
            });
        }
        let list = k8s_openapi::List::<Pod> {
            items,
            metadata: Default::default(),
        };
        match serde_json::to_vec(&list) {
            Ok(body) => ok(body, "application/json"),
            Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        }
    }
}

/// Serves the kubelet API on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    server: Arc<Server>,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (stream, remote) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a kubelet API connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let server = server.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            connection(acceptor, stream, remote, server, shutdown).await;
        });
    }
}

async fn connection(
    acceptor: TlsAcceptor,
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
    server: Arc<Server>,
    shutdown: CancellationToken,
) {
    let tls =
        match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(stream))
            .await
        {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%remote, %error, "kubelet API TLS handshake failed");
                return;
            }
            Err(_) => return,
        };
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|cert| auth::user_of_certificate(cert.as_ref()));
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let server = server.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(server.handle(request, peer).await) }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let serving = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(serving);
    tokio::select! {
        result = serving.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%remote, %error, "kubelet API connection ended");
            }
        }
        () = shutdown.cancelled() => {}
    }
}
