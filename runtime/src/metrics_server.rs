//! A component's metrics endpoint: `/metrics` in the Prometheus text format and `/healthz`
//! (`/livez`), over plain HTTP — kube-proxy's `--metrics-bind-address` (127.0.0.1:10249) and
//! the standalone scheduler's and controller-manager's `--metrics-bind-address`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Binds `address` and serves `registry` until `shutdown`; returns the bound address.
pub async fn serve(
    address: SocketAddr,
    registry: Registry,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else { continue };
            let registry = registry.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let registry = registry.clone();
                    async move { Ok::<_, Infallible>(respond(&request, &registry)) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn respond(request: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let (status, body) = match request.uri().path() {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => (StatusCode::OK, text),
                Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
            }
        }
        "/healthz" | "/livez" => (StatusCode::OK, "ok".to_owned()),
        _ => (StatusCode::NOT_FOUND, "404 page not found\n".to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
