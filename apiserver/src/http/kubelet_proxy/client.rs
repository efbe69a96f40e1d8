//! The apiserver's client of kubelets: HTTPS with a client certificate the apiserver issues
//! itself from the cluster CA (CN `kube-apiserver-kubelet-client`, no groups; the kubelet
//! authorizes it with a SubjectAccessReview, which RBAC's `system:kubelet-api-admin` grants),
//! the kubelet's serving certificate verified against the cluster CA for the address dialled,
//! and HTTP/1.1 only (ALPN), because exec, attach and port-forward are HTTP/1.1 upgrades.
//!
//! One connection per request, driven by a task on the server's tracker that ends when the
//! response (or the upgraded stream) is done, or when the server shuts down.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::endpoint::Endpoint;
use crate::pki::{Pki, PkiError};

/// The user the apiserver is to kubelets (its client certificate's CN).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// How long dialling a kubelet (TCP and TLS) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request did not reach a kubelet, or its answer did not come back.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The TCP connection failed.
    #[error("dial tcp {authority}: {source}")]
    Connect {
        authority: String,
        #[source]
        source: std::io::Error,
    },
    /// The TCP connection or the TLS handshake took longer than [`DIAL_TIMEOUT`].
    #[error("dial tcp {authority}: i/o timeout")]
    Timeout { authority: String },
    /// The TLS handshake failed (for instance, a serving certificate the cluster CA did not
    /// sign, or one without the dialled address).
    #[error("tls: {source}")]
    Tls {
        #[source]
        source: std::io::Error,
    },
    /// The host is neither an IP address nor a valid DNS name.
    #[error("invalid kubelet host name {host:?}")]
    ServerName { host: String },
    /// HTTP failed on the connection.
    #[error("{source}")]
    Http {
        #[source]
        source: hyper::Error,
    },
}

/// Connects to kubelets; one per server.
pub struct KubeletClient {
    connector: TlsConnector,
    background: crate::background::Background,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

impl KubeletClient {
    /// A client with a fresh certificate from `pki`'s CA; its connections and spliced streams
    /// run on `tasks` and end when `shutdown` is cancelled.
    pub fn new(
        pki: &Pki,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self, PkiError> {
        let (cert_pem, key_pem) = pki.issue_client_cert(KUBELET_CLIENT_USER, &[])?;
        fn invalid(what: &'static str) -> impl Fn(rustls_pki_types::pem::Error) -> PkiError {
            move |error| PkiError::Invalid(format!("{what}: {error}"))
        }
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes())
            .map_err(invalid("the cluster CA certificate"))?;
        roots.add(ca)?;
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(invalid("the kubelet client certificate"))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(invalid("the kubelet client key"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![cert], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
            background: crate::background::Background::new(tasks, shutdown),
        })
    }

    /// Runs `work` on the server's tracker until it ends or the server shuts down.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.background.spawn(work);
    }

    /// Sends `request` (origin-form URI; the `Host` header is set here) to the kubelet at
    /// `endpoint` on a new connection, which also carries an upgrade the kubelet accepts.
    pub async fn send(
        &self,
        endpoint: &Endpoint,
        mut request: http::Request<Body>,
    ) -> Result<http::Response<Incoming>, DialError> {
        let authority = endpoint.authority();
        if let Ok(host) = http::HeaderValue::from_str(&authority) {
            request.headers_mut().insert(http::header::HOST, host);
        }
        let tls = tokio::time::timeout(DIAL_TIMEOUT, self.dial(endpoint))
            .await
            .map_err(|_| DialError::Timeout {
                authority: authority.clone(),
            })??;
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|source| DialError::Http { source })?;
        self.spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "kubelet connection ended with an error");
            }
        });
        sender
            .send_request(request)
            .await
            .map_err(|source| DialError::Http { source })
    }

    async fn dial(
        &self,
        endpoint: &Endpoint,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, DialError> {
        let server_name = match endpoint.host.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => {
                ServerName::try_from(endpoint.host.clone()).map_err(|_| DialError::ServerName {
                    host: endpoint.host.clone(),
                })?
            }
        };
        let tcp = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|source| DialError::Connect {
                authority: endpoint.authority(),
                source,
            })?;
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on a kubelet connection");
        }
        self.connector
            .connect(server_name, tcp)
            .await
            .map_err(|source| DialError::Tls { source })
    }
}
