//! HTTPS accept loop: TLS handshakes (tokio-rustls), then HTTP/1.1 or HTTP/2 (hyper-util auto)
//! serving an axum `Router`, with the client's certificate chain and address attached to every
//! request, and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::connection::{Activity, Idleness, TrackedBody};
use crate::limits::Limits;

/// The client's certificate chain as verified during the TLS handshake (leaf first). Present in
/// a request's extensions only when the client presented a certificate.
#[derive(Clone, Debug)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

impl PeerCertificates {
    /// The chain as a slice, leaf first (what the authenticator takes).
    pub fn as_slice(&self) -> &[CertificateDer<'static>] {
        &self.0
    }
}

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight connections before aborting them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Accept TLS connections on `listener` and serve `app` on them until `shutdown` is cancelled.
///
/// Each connection is handled on its own task: the TLS handshake (bounded by
/// [`HANDSHAKE_TIMEOUT`]; failures are logged at debug level and never stop the loop), then
/// HTTP/1.1 or HTTP/2 with upgrades, under the connection limits of `limits` (see
/// `connection`: a cap on open connections, a first request soon after the handshake, an idle
/// timeout, HTTP/2 keep-alive PINGs). Every request carries [`PeerCertificates`] (when the
/// client presented a certificate) and `ConnectInfo<SocketAddr>` in its extensions. On
/// shutdown the listener is closed, open connections are asked to finish gracefully, and
/// whatever is still running after [`SHUTDOWN_GRACE`] is aborted.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    shutdown: CancellationToken,
    limits: Limits,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(HEADER_READ_TIMEOUT));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.keep_alive_interval))
        .keep_alive_timeout(limits.keep_alive_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let limits = Arc::new(limits);
    let mut connections = JoinSet::new();

    loop {
        // At the cap, stop accepting: new clients wait in the backlog until a slot frees.
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                log_join(joined);
                continue;
            }
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let accepted = loop {
            tokio::select! {
                () = shutdown.cancelled() => break None,
                Some(joined) = connections.join_next(), if !connections.is_empty() => {
                    log_join(joined);
                }
                accepted = listener.accept() => break Some(accepted),
            }
        };
        let Some(accepted) = accepted else { break };
        let (stream, remote) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Typically EMFILE/ENFILE or a connection reset before accept: back off briefly.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%remote, error = %e, "TCP_NODELAY not set");
        }
        let connection = Connection {
            acceptor: acceptor.clone(),
            builder: builder.clone(),
            remote,
            app: app.clone(),
            shutdown: shutdown.clone(),
            limits: limits.clone(),
        };
        connections.spawn(async move {
            connection.serve(stream).await;
            drop(slot);
        });
    }

    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            remaining = connections.len(),
            "connections still open after the shutdown grace period; aborting them"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// How long a client may take to send one request's headers (upstream: 32 s).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// How long a connection asked to close (idle, or the server shutting down) may take.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            tracing::error!(error = %e, "connection task panicked");
        }
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    acceptor: TlsAcceptor,
    builder: auto::Builder<TokioExecutor>,
    remote: SocketAddr,
    app: axum::Router,
    shutdown: CancellationToken,
    limits: Arc<Limits>,
}

impl Connection {
    async fn serve(self, stream: tokio::net::TcpStream) {
        let remote = self.remote;
        let handshake = tokio::select! {
            () = self.shutdown.cancelled() => return,
            result = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)) => result,
        };
        let tls_stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%remote, "TLS handshake timed out");
                return;
            }
        };
        let peer = tls_stream
            .get_ref()
            .1
            .peer_certificates()
            .filter(|chain| !chain.is_empty())
            .map(|chain| PeerCertificates(Arc::new(chain.to_vec())));

        let activity = Activity::new();
        let app = self.app.clone();
        let requests = activity.clone();
        let service = tower::service_fn(move |mut request: http::Request<Incoming>| {
            let in_flight = requests.begin();
            let extensions = request.extensions_mut();
            extensions.insert(ConnectInfo(remote));
            if let Some(peer) = &peer {
                extensions.insert(peer.clone());
            }
            let response = app.clone().oneshot(request);
            async move {
                let response = response.await?;
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| TrackedBody::wrap(body, in_flight)),
                )
            }
        });
        let connection = self.builder.serve_connection_with_upgrades(
            TokioIo::new(tls_stream),
            TowerToHyperService::new(service),
        );
        tokio::pin!(connection);
        let check_every = (self
            .limits
            .first_request_timeout
            .min(self.limits.idle_timeout)
            / 4)
        .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval(check_every);
        let mut closing: Option<tokio::time::Instant> = None;
        let result = loop {
            tokio::select! {
                result = connection.as_mut() => break result,
                () = self.shutdown.cancelled(), if closing.is_none() => {
                    connection.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
                }
                _ = ticker.tick() => {
                    if let Some(deadline) = closing {
                        if tokio::time::Instant::now() >= deadline {
                            tracing::debug!(%remote, "connection did not close in time; dropped");
                            return;
                        }
                        continue;
                    }
                    match activity.idleness() {
                        Idleness::NeverUsed(since) if since >= self.limits.first_request_timeout => {
                            tracing::debug!(%remote, "no request after the TLS handshake; closed");
                            return;
                        }
                        Idleness::Idle(since) if since >= self.limits.idle_timeout => {
                            connection.as_mut().graceful_shutdown();
                            closing = Some(tokio::time::Instant::now() + CLOSE_GRACE);
                        }
                        _ => {}
                    }
                }
            }
        };
        if let Err(e) = result {
            tracing::debug!(%remote, error = %e, "connection closed with error");
        }
    }
}

#[cfg(test)]
mod tests {
    //! Real TLS round trips against `serve` with certificates from the cluster PKI.
    //! (Test-only use of the sibling `pki` module.)

    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::pki::Pki;

    async fn whoami(request: axum::extract::Request) -> String {
        let cn = request
            .extensions()
            .get::<PeerCertificates>()
            .map(|peer| {
                let (_, cert) = x509_parser::parse_x509_certificate(&peer.as_slice()[0]).unwrap();
                let cn = cert.subject().iter_common_name().next().unwrap();
                cn.as_str().unwrap().to_owned()
            })
            .unwrap_or_else(|| "anonymous".to_owned());
        let ConnectInfo(remote) = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .unwrap();
        format!("cn={cn} ip={} version={:?}", remote.ip(), request.version())
    }

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_millis(500)).await;
        "slow done"
    }

    fn client_config(pki: &Pki, client: Option<(&str, &str)>) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes()).unwrap())
            .unwrap();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// GET `path` over HTTP/1.1; the raw response, or the I/O error (handshake refused).
    async fn get(
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
        path: &str,
    ) -> std::io::Result<String> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        tls.read_to_string(&mut response).await?;
        Ok(response)
    }

    #[tokio::test]
    async fn tls_round_trip_client_certs_and_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
        let app = axum::Router::new()
            .route("/", axum::routing::get(whoami))
            .route("/slow", axum::routing::get(slow));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            pki.server_config().unwrap(),
            app,
            shutdown.clone(),
            Limits::default(),
        ));

        // Admin certificate: the handler sees its CN and the peer address.
        let admin = client_config(&pki, Some((&pki.admin_cert_pem, &pki.admin_key_pem)));
        let response = get(addr, admin.clone(), "/").await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            response.contains("cn=admin ip=127.0.0.1 version=HTTP/1.1"),
            "{response}"
        );

        // No client certificate: still served, anonymously.
        let response = get(addr, client_config(&pki, None), "/").await.unwrap();
        assert!(response.contains("cn=anonymous"), "{response}");

        // A certificate from another CA: the server refuses the handshake.
        let other_dir = tempfile::tempdir().unwrap();
        let other = Pki::load_or_create(other_dir.path(), &[], &[]).unwrap();
        let (cert, key) = other
            .issue_client_cert("mallory", &["system:masters"])
            .unwrap();
        let refused = get(addr, client_config(&pki, Some((&cert, &key))), "/")
            .await
            .unwrap_err();
        // Same CA name, other key: the signature check fails (DecryptError alert).
        assert!(refused.to_string().contains("alert"), "{refused}");
        // A self-signed client certificate: unknown issuer.
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["mallory".to_owned()]).unwrap();
        let self_signed = params.self_signed(&key).unwrap();
        let config = client_config(&pki, Some((&self_signed.pem(), &key.serialize_pem())));
        let refused = get(addr, config, "/").await.unwrap_err();
        assert!(refused.to_string().contains("alert"), "{refused}");

        // A connection that never speaks TLS does not disturb the loop.
        let mut junk = tokio::net::TcpStream::connect(addr).await.unwrap();
        junk.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        drop(junk);

        // ALPN offers h2.
        let mut h2 = (*client_config(&pki, None)).clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(h2))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        drop(tls);

        // Issued client certificates work too, and the loop is still alive.
        let (cert, key) = pki.issue_client_cert("jane", &["dev"]).unwrap();
        let response = get(addr, client_config(&pki, Some((&cert, &key))), "/")
            .await
            .unwrap();
        assert!(response.contains("cn=jane"), "{response}");

        // Graceful shutdown: an in-flight request completes, then the listener is gone.
        let in_flight = tokio::spawn(get(addr, admin.clone(), "/slow"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let started = Instant::now();
        shutdown.cancel();
        let response = in_flight.await.unwrap().unwrap();
        assert!(response.contains("slow done"), "{response}");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve did not stop")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < SHUTDOWN_GRACE);
        assert!(get(addr, admin, "/").await.is_err());
    }
}
