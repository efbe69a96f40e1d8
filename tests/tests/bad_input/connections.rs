//! What a client's connections may hold: a connection silent after its TLS handshake is
//! closed, a thousand of them do not starve other clients (the open-file limit is raised, the
//! connection count capped), the data dir is private, and the etcd gateway — which has no
//! authentication — listens on loopback only.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncReadExt;

use super::{client, send, start_with};

/// A TLS connection to `addr` that completed its handshake and sends nothing.
async fn silent_tls(
    addr: SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls(addr, ca_pem, None).await
}

/// A TLS connection to `addr`, with a client certificate and key (PEM) if given.
async fn tls(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Who a raw request is from.
pub(super) enum Credentials<'a> {
    /// The admin client certificate (system:masters).
    Admin,
    /// A bearer token.
    Token(&'a str),
}

/// One HTTP/1.1 GET over its own connection, with no retries (kube-rs and client-go retry a
/// 429 or a 504 by themselves): (status, lower-cased response head, body).
pub(super) async fn raw_get(
    running: &rudder_apiserver::Running,
    credentials: Credentials<'_>,
    path: &str,
) -> (u16, String, serde_json::Value) {
    use tokio::io::AsyncWriteExt;
    let pki = &running.pki;
    let (client, authorization) = match credentials {
        Credentials::Admin => (
            Some((pki.admin_cert_pem.as_str(), pki.admin_key_pem.as_str())),
            String::new(),
        ),
        Credentials::Token(token) => (None, format!("Authorization: Bearer {token}\r\n")),
    };
    let mut stream = tls(running.addr, &pki.ca_cert_pem, client).await;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = body
        .lines()
        .find(|line| line.starts_with('{'))
        .unwrap_or("null");
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_silent_after_its_handshake_is_closed() {
    let (running, _dir, _harness) = start_with(|config| {
        config.limits.first_request_timeout = Duration::from_secs(1);
        config.limits.max_connections = 4;
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(silent_tls(running.addr, &running.pki.ca_cert_pem).await);
    }
    // Every slot is held: the next client waits until the silent ones are closed.
    let started = Instant::now();
    let admin = client(&running).await;
    let (code, _) = send(
        &admin,
        http::Method::GET,
        "/api/v1/namespaces",
        "application/json",
        Vec::new(),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for mut connection in silent {
        let mut buffer = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), connection.read(&mut buffer)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            other => panic!("a silent connection was not closed: {other:?}"),
        }
    }
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_silent_connections_do_not_starve_kubectl() {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    // As under a default `ulimit -n 1024`, which the server must raise.
    let server =
        rudder_tests::RudderServer::start_with_open_file_limit(binary, &harness.url(), 1024);
    let kubeconfig = std::fs::read_to_string(server.kubeconfig()).unwrap();
    let addr: SocketAddr = kubeconfig
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: \"https://"))
        .map(|rest| rest.trim_end_matches('"'))
        .unwrap()
        .parse()
        .unwrap();
    let ca = std::fs::read_to_string(server.data_dir().join("pki").join("ca.crt")).unwrap();
    let mut silent = Vec::new();
    for _ in 0..1100 {
        // A starved server stops completing handshakes: then kubectl below fails too.
        match tokio::time::timeout(Duration::from_secs(5), silent_tls(addr, &ca)).await {
            Ok(connection) => silent.push(connection),
            Err(_) => break,
        }
    }
    let output = tokio::task::spawn_blocking(move || {
        let output = server.kubectl("1.33", &["get", "ns", "--request-timeout=20s"]);
        (output, server)
    })
    .await
    .unwrap();
    let (output, server) = output;
    assert!(
        output.status.success(),
        "kubectl get ns: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_dir_and_the_database_are_private() {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let url = format!("sqlite://{}", data.join("state.db").display());
    let server = rudder_tests::RudderServer::start(binary, &url);
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&server.data_dir()), 0o700);
    for file in ["state.db", "state.db-wal"] {
        let path = data.join(file);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{file}");
        }
    }
    assert!(data.join("state.db").exists());
    drop(server);
}

#[test]
fn the_etcd_gateway_refuses_to_listen_beyond_loopback() {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let output = rudder_tests::run(
        binary,
        &[
            "server",
            "--data-dir",
            &data,
            "--listen",
            "127.0.0.1:0",
            "--etcd-listen",
            "0.0.0.0:0",
        ],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
    let output = rudder_tests::run(
        binary,
        &["etcd", "--data-dir", &data, "--listen", "0.0.0.0:0"],
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("loopback"));
}
