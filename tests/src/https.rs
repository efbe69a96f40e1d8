//! A small HTTPS server for tests that play the other side of the apiserver — admission or
//! conversion webhooks, extension apiservers: a self-signed certificate for one name (which
//! is also its CA, as the caller's `caBundle`), optionally a required client certificate
//! from a given CA with a given common name, and a handler per request over HTTP/1.1.

// Test support: a failed setup is meant to panic.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// What the server's answer is.
pub type Answer = hyper::Response<Full<Bytes>>;

/// A JSON answer.
pub fn json_answer(status: u16, body: &serde_json::Value) -> Answer {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// A client certificate the server requires: issued by `ca_pem`, with `common_name`.
pub struct ClientAuth {
    pub ca_pem: String,
    pub common_name: String,
}

/// A running server; it stops when [`HttpsServer::stop`] is called or it is dropped.
pub struct HttpsServer {
    pub addr: SocketAddr,
    /// Its certificate, which is its own CA (PEM).
    pub ca_pem: String,
    /// How many TLS connections it has accepted (how well a client reuses them).
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl HttpsServer {
    /// Stops accepting and ends every open connection.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Serves `handler` on 127.0.0.1 with a certificate for `name`.
pub async fn serve<F, Fut>(name: &str, client: Option<ClientAuth>, handler: F) -> HttpsServer
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &client {
        Some(client) => {
            let mut roots = rustls::RootCertStore::empty();
            for der in CertificateDer::pem_slice_iter(client.ca_pem.as_bytes()) {
                roots.add(der.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let wanted_name = client.map(|client| client.common_name);
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let handler = handler.clone();
            let wanted_name = wanted_name.clone();
            let counter = counter.clone();
            connections.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Some(wanted) = wanted_name {
                    if peer_common_name(&tls).as_deref() != Some(wanted.as_str()) {
                        return;
                    }
                }
                let service = hyper::service::service_fn(move |request| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    HttpsServer {
        addr,
        ca_pem: cert.pem(),
        accepted,
        task: Some(task),
    }
}

fn peer_common_name(
    tls: &tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
) -> Option<String> {
    let peer = tls.get_ref().1.peer_certificates()?.first()?.clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(&peer).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_string)
}
