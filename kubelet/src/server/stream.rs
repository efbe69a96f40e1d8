//! exec, attach and port-forward: the agent asks the runtime for a one-shot URL on its
//! streaming server (containerd's, on 127.0.0.1) and passes the client's request there,
//! upgrade headers and all. When the runtime answers `101 Switching Protocols`, the two
//! upgraded connections are spliced until either side closes; any other answer is relayed.
//! The protocol (SPDY/3.1 or WebSocket channels) is the client's and the runtime's business.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::{flag, query_values, text, Body, Server};
use crate::runtime::api;

pub async fn exec_or_attach(
    server: &Server,
    request: Request<Incoming>,
    kind: &str,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Response<Body> {
    let running = server
        .containers(namespace, pod, container)
        .await
        .into_iter()
        .find(|c| c.state == api::ContainerState::ContainerRunning as i32);
    let Some(target) = running else {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container} is not running in pod {pod}"),
        );
    };
    let stdin = flag(&request, &["input", "stdin"]);
    let stdout = flag(&request, &["output", "stdout"]);
    let stderr = flag(&request, &["error", "stderr"]);
    let tty = flag(&request, &["tty"]);
    let url = if kind == "exec" {
        let cmd = query_values(&request, "command");
        if cmd.is_empty() {
            return text(
                StatusCode::BAD_REQUEST,
                "you must specify at least 1 command",
            );
        }
        server
            .runtime
            .exec(api::ExecRequest {
                container_id: target.id.clone(),
                cmd,
                tty,
                stdin,
                stdout,
                // With a TTY there is no separate stderr.
                stderr: stderr && !tty,
            })
            .await
    } else {
        server
            .runtime
            .attach(api::AttachRequest {
                container_id: target.id.clone(),
                stdin,
                tty,
                stdout,
                stderr: stderr && !tty,
            })
            .await
    };
    match url {
        Ok(url) => proxy(request, &url).await,
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

pub async fn port_forward(
    server: &Server,
    request: Request<Incoming>,
    namespace: &str,
    pod: &str,
) -> Response<Body> {
    let Some(sandbox) = server.sandbox(namespace, pod).await else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} is not running on this node"),
        );
    };
    let ports: Vec<i32> = query_values(&request, "port")
        .into_iter()
        .chain(query_values(&request, "ports"))
        .flat_map(|v| {
            v.split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    match server
        .runtime
        .port_forward(api::PortForwardRequest {
            pod_sandbox_id: sandbox.id,
            port: ports,
        })
        .await
    {
        Ok(url) => proxy(request, &url).await,
        Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

/// Headers that belong to one hop and are not passed on.
const HOP: [&str; 3] = ["host", "authorization", "content-length"];

/// Passes `request` to the runtime's streaming `url` and splices an upgrade.
pub async fn proxy(mut request: Request<Incoming>, url: &str) -> Response<Body> {
    let Ok(target) = url.parse::<http::Uri>() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime returned a bad URL {url:?}"),
        );
    };
    let host = target.host().unwrap_or("127.0.0.1").to_owned();
    let port = target.port_u16().unwrap_or(80);
    let path = target
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let stream = match tokio::net::TcpStream::connect((host.as_str(), port)).await {
        Ok(stream) => stream,
        Err(error) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("connecting to the runtime's streaming server: {error}"),
            )
        }
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(error) => return text(StatusCode::BAD_GATEWAY, error.to_string()),
        };
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let mut upstream = Request::builder()
        .method(request.method().clone())
        .uri(path)
        .header(http::header::HOST, format!("{host}:{port}"));
    for (name, value) in request.headers() {
        if !HOP.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(Empty::<Bytes>::new()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "building the streaming request",
        );
    };
    let client_upgrade = hyper::upgrade::on(&mut request);
    let answer = match sender.send_request(upstream).await {
        Ok(answer) => answer,
        Err(error) => return text(StatusCode::BAD_GATEWAY, error.to_string()),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let body = answer
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut response = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        return response;
    }
    tokio::spawn(async move {
        let backend = hyper::upgrade::on(answer).await;
        let client = client_upgrade.await;
        match (client, backend) {
            (Ok(client), Ok(backend)) => {
                let mut client = TokioIo::new(client);
                let mut backend = TokioIo::new(backend);
                if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
                    tracing::debug!(%error, "a streaming session ended");
                }
            }
            (client, backend) => {
                tracing::debug!(
                    client_ok = client.is_ok(),
                    backend_ok = backend.is_ok(),
                    "an upgrade failed"
                );
            }
        }
    });
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = headers;
    response
}
