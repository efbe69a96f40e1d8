//! The proxy's client of extension apiservers: TLS presenting the front-proxy client
//! certificate, the server's certificate verified against the APIService's `caBundle` for
//! the name `<service>.<namespace>.svc` (or not at all with `insecureSkipTLSVerify`, as
//! upstream allows), HTTP/1.1 so that upgrades (exec-like subresources of an extension API)
//! pass through. Connections are kept for reuse (at most [`MAX_IDLE`] per endpoint and
//! identity; a request takes one that is free, else dials) and driven by tasks on the
//! server's tracker; an upgrade gets a connection of its own, which it then owns.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use base64::Engine;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Remote;
use crate::pki::front_proxy::FrontProxy;
use crate::pki::PkiError;

/// How long dialling an extension apiserver (TCP and TLS) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections kept per endpoint and identity.
const MAX_IDLE: usize = 16;

/// What a kept connection is for: the endpoint, the name its certificate must carry and how
/// it is verified.
type PoolKey = (String, String, Option<String>, bool);

type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// Dials extension apiservers; one per server.
pub struct Client {
    certificate: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    /// A connector per (caBundle, insecure), made once.
    connectors: Mutex<HashMap<(Option<String>, bool), TlsConnector>>,
    /// Connections kept for reuse.
    pool: Mutex<HashMap<PoolKey, Vec<Sender>>>,
    background: crate::background::Background,
}

impl Client {
    /// A client presenting `identity`; connections run on `tasks` until `shutdown`.
    pub fn new(
        identity: &FrontProxy,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self, PkiError> {
        let invalid = |what: &str, error: rustls_pki_types::pem::Error| {
            PkiError::Invalid(format!("the front-proxy client {what}: {error}"))
        };
        let certificate = CertificateDer::pem_slice_iter(identity.client_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| invalid("certificate", error))?;
        let key = PrivateKeyDer::from_pem_slice(identity.client_key_pem.as_bytes())
            .map_err(|error| invalid("key", error))?;
        Ok(Self {
            certificate,
            key: Arc::new(key),
            connectors: Mutex::default(),
            pool: Mutex::default(),
            background: crate::background::Background::new(tasks, shutdown),
        })
    }

    fn connector(&self, remote: &Remote) -> Result<TlsConnector, String> {
        let key = (remote.ca_bundle.clone(), remote.insecure_skip_tls_verify);
        let mut connectors = self
            .connectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(connector) = connectors.get(&key) {
            return Ok(connector.clone());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?;
        let builder = if remote.insecure_skip_tls_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            builder.with_root_certificates(roots(remote.ca_bundle.as_deref())?)
        };
        let mut config = builder
            .with_client_auth_cert(self.certificate.clone(), self.key.clone_key())
            .map_err(|error| error.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = TlsConnector::from(Arc::new(config));
        connectors.insert(key, connector.clone());
        Ok(connector)
    }

    /// Runs `work` on the server's tracker until it ends or the server shuts down.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.background.spawn(work);
    }

    /// A kept connection for `key` that is free for a request, if there is one (closed ones
    /// are dropped on the way).
    fn take_idle(&self, key: &PoolKey) -> Option<Sender> {
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let senders = pool.get_mut(key)?;
        senders.retain(|sender| !sender.is_closed());
        let free = senders.iter().position(Sender::is_ready)?;
        Some(senders.swap_remove(free))
    }

    /// Keeps `sender` for reuse, unless `key` has enough.
    fn keep(&self, key: PoolKey, sender: Sender) {
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let senders = pool.entry(key).or_default();
        senders.retain(|sender| !sender.is_closed());
        if senders.len() < MAX_IDLE {
            senders.push(sender);
        }
    }

    /// A new connection to `authority`, verified for `remote`.
    async fn dial(&self, remote: &Remote, authority: &str) -> Result<Sender, String> {
        let connector = self.connector(remote)?;
        let server_name = ServerName::try_from(remote.service.server_name())
            .map_err(|error| format!("invalid server name: {error}"))?;
        let dial = async {
            let tcp = tokio::net::TcpStream::connect(authority)
                .await
                .map_err(|error| format!("dial tcp {authority}: {error}"))?;
            let _ = tcp.set_nodelay(true);
            connector
                .connect(server_name, tcp)
                .await
                .map_err(|error| format!("tls: {error}"))
        };
        let tls = tokio::time::timeout(DIAL_TIMEOUT, dial)
            .await
            .map_err(|_| format!("dial tcp {authority}: i/o timeout"))??;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|error| error.to_string())?;
        self.spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "extension apiserver connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Sends `request` (origin-form URI) to `remote`'s endpoint `authority`, on a kept
    /// connection when one is free (an upgrade always on a new one, which it keeps). The
    /// error reads as upstream's proxy errors do.
    pub async fn send(
        &self,
        remote: &Remote,
        authority: &str,
        mut request: http::Request<Body>,
    ) -> Result<http::Response<Incoming>, String> {
        let upgrade = request.headers().contains_key(http::header::UPGRADE);
        let key: PoolKey = (
            authority.to_string(),
            remote.service.server_name(),
            remote.ca_bundle.clone(),
            remote.insecure_skip_tls_verify,
        );
        let kept = if upgrade { None } else { self.take_idle(&key) };
        let mut sender = match kept {
            Some(sender) => sender,
            None => self.dial(remote, authority).await?,
        };
        if let Ok(host) = http::HeaderValue::from_str(authority) {
            request.headers_mut().insert(http::header::HOST, host);
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| error.to_string())?;
        if !upgrade {
            // Free again once this response's body has been read.
            self.keep(key, sender);
        }
        Ok(response)
    }
}

/// The roots a `caBundle` (base64 of PEM, as APIServices and webhook configurations hold it)
/// holds.
pub(crate) fn roots(ca_bundle: Option<&str>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let Some(bundle) = ca_bundle else {
        return Ok(roots);
    };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .map_err(|error| format!("caBundle: {error}"))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|error| format!("caBundle: {error}"))?;
        roots
            .add(cert)
            .map_err(|error| format!("caBundle: {error}"))?;
    }
    Ok(roots)
}

/// `insecureSkipTLSVerify`: any certificate is accepted (its handshake signatures are still
/// checked).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
