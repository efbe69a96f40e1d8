//! Node join through CertificateSigningRequests, end to end over real TLS against the real
//! binary: a bootstrap token from `rudder token`, the CA discovered from `cluster-info` and
//! checked against the join command's hash, the kubelet's client certificate requested,
//! auto-approved and signed by the in-process controllers, and that certificate accepted by the
//! apiserver as `system:node:<name>` — held to what a node may do. With the approver off,
//! `kubectl get csr` / `certificate approve` / `certificate deny` decide instead.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;
use rudder_kubelet::bootstrap::{self, Credentials, Error};
use rudder_tests::RudderServer;
use serde_json::json;

const RUDDER: &str = env!("CARGO_BIN_EXE_rudder");

fn rudder(args: &[&str]) -> String {
    let output = rudder_tests::run(RUDDER, args);
    assert!(
        output.status.success(),
        "rudder {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// `rudder token join-command`'s server, token and hash.
fn join_command(server: &RudderServer) -> (String, String, String) {
    let data_dir = server.data_dir();
    let line = rudder(&[
        "token",
        "join-command",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |flag: &str| {
        let at = words.iter().position(|word| *word == flag).unwrap();
        words[at + 1].to_string()
    };
    assert_eq!(words[..2], ["rudder", "agent"], "{line}");
    (after("--server"), after("--token"), after("--ca-cert-hash"))
}

fn code<T>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("{other}"),
    }
}

async fn anonymous(server_url: &str, ca_pem: &str) -> Client {
    let credentials = Credentials {
        server_url: server_url.into(),
        ca_pem: ca_pem.into(),
        cert_pem: String::new(),
        key_pem: String::new(),
    };
    let mut config = kube::config::Kubeconfig::default();
    config.clusters = vec![kube::config::NamedCluster {
        name: "c".into(),
        cluster: Some(kube::config::Cluster {
            server: Some(credentials.server_url.clone()),
            certificate_authority_data: Some(
                base64::engine::general_purpose::STANDARD.encode(&credentials.ca_pem),
            ),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    config.contexts = vec![kube::config::NamedContext {
        name: "c".into(),
        context: Some(kube::config::Context {
            cluster: "c".into(),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    config.current_context = Some("c".into());
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn node_request_pem(node: &str, ip: IpAddr) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.subject_alt_names = vec![rcgen::SanType::IpAddress(ip)];
    params
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap()
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_with_a_bootstrap_token() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let server = RudderServer::start(RUDDER, &harness.url());
    let (server_url, token, hash) = join_command(&server);
    assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");

    // Discovery: the right hash gives the server's CA, a wrong one is refused.
    let ca_pem = bootstrap::discover_ca(&server_url, &hash).await.unwrap();
    let on_disk = std::fs::read_to_string(server.data_dir().join("pki/ca.crt")).unwrap();
    assert_eq!(ca_pem, on_disk);
    let wrong = format!("sha256:{}", "0".repeat(64));
    match bootstrap::discover_ca(&server_url, &wrong).await {
        Err(Error::HashMismatch { .. }) => {}
        other => panic!("a wrong hash was accepted: {other:?}"),
    }

    // Without a token no request can be made.
    let nobody = anonymous(&server_url, &ca_pem).await;
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "anonymous"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(node_request_pem("n1", "10.0.0.1".parse().unwrap())),
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]}
    }))
    .unwrap();
    let refused = code(
        Api::<CertificateSigningRequest>::all(nobody)
            .create(&PostParams::default(), &csr)
            .await,
    );
    assert!(refused == 401 || refused == 403, "{refused}");

    // Join: a client certificate for system:node:n1, auto-approved and signed.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = bootstrap::join(&server_url, &ca_pem, &token, "n1", dir.path())
        .await
        .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let credentials = Credentials::read(&kubeconfig).unwrap();
    let node = credentials.client().await.unwrap();
    let nodes: Api<Node> = Api::all(node.clone());
    let n1: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    assert_eq!(code(nodes.create(&PostParams::default(), &n1).await), 200);
    assert_eq!(code(nodes.get("n1").await), 200);
    let n2: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
    assert_eq!(code(nodes.create(&PostParams::default(), &n2).await), 403);
    let secrets: Api<Secret> = Api::namespaced(node.clone(), "kube-system");
    assert_eq!(
        code(
            secrets
                .get(&format!("bootstrap-token-{}", &token[..6]))
                .await
        ),
        403
    );

    // A restart reuses the certificate.
    let again = bootstrap::join(&server_url, &ca_pem, "bad", "n1", dir.path())
        .await
        .unwrap();
    assert_eq!(again, kubeconfig);

    // Renewal, as the node itself (approved through selfnodeclient).
    bootstrap::renew(&kubeconfig, "n1").await.unwrap();
    let renewed = Credentials::read(&kubeconfig).unwrap();
    assert_ne!(renewed.cert_pem, credentials.cert_pem);
    let renewed_client = renewed.client().await.unwrap();
    assert_eq!(code(Api::<Node>::all(renewed_client).get("n1").await), 200);

    // A serving certificate for its own name and addresses.
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let (cert_pem, key_pem) =
        bootstrap::serving_certificate(&node, "n1", &[ip], &["n1.example".to_string()])
            .await
            .unwrap();
    assert!(key_pem.contains("PRIVATE KEY"));
    let (_, block) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).unwrap();
    assert_eq!(
        cert.subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        "system:node:n1"
    );
    let sans = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(sans.value.general_names.len(), 2);

    // A serving request for another node's name stays pending.
    let requests: Api<CertificateSigningRequest> = Api::all(node.clone());
    let other = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some("serving-for-n2".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(node_request_pem("n2", ip)),
            signer_name: "kubernetes.io/kubelet-serving".into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = requests
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    assert_eq!(created.spec.username.as_deref(), Some("system:node:n1"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = requests.get("serving-for-n2").await.unwrap();
    assert!(still
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .is_empty());
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_approves_and_denies_requests() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let server =
        RudderServer::start_with_args(RUDDER, &harness.url(), &["--controllers=*,-csrapproving"]);
    let (server_url, token, hash) = join_command(&server);
    let ca_pem = bootstrap::discover_ca(&server_url, &hash).await.unwrap();

    // Denied by hand: join says so.
    let dir = tempfile::tempdir().unwrap();
    let joining = {
        let (server_url, ca_pem, token) = (server_url.clone(), ca_pem.clone(), token.clone());
        let path = dir.path().to_path_buf();
        tokio::spawn(
            async move { bootstrap::join(&server_url, &ca_pem, &token, "n1", &path).await },
        )
    };
    let name = pending_request(&server).await;
    let table = server.kubectl("1.33", &["get", "csr"]);
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ],
        "{table}"
    );
    assert!(
        table.contains("Pending") && table.contains(&format!("system:bootstrap:{}", &token[..6])),
        "{table}"
    );
    let denied = server.kubectl("1.33", &["certificate", "deny", &name]);
    assert!(
        denied.status.success(),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    match joining.await.unwrap() {
        Err(Error::Denied { name: denied, .. }) => assert_eq!(denied, name),
        other => panic!("a denied request joined: {other:?}"),
    }
    // Once denied, it cannot be approved.
    let approved = server.kubectl("1.33", &["certificate", "approve", &name]);
    assert!(!approved.status.success());

    // Approved by hand: join gets its certificate.
    let joining = {
        let (server_url, ca_pem, token) = (server_url.clone(), ca_pem.clone(), token.clone());
        let path = dir.path().to_path_buf();
        tokio::spawn(
            async move { bootstrap::join(&server_url, &ca_pem, &token, "n1", &path).await },
        )
    };
    let name = pending_request(&server).await;
    let approved = server.kubectl("1.33", &["certificate", "approve", &name]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let kubeconfig = joining.await.unwrap().unwrap();
    let node = Credentials::read(&kubeconfig)
        .unwrap()
        .client()
        .await
        .unwrap();
    assert_eq!(
        code(Api::<Node>::all(node).list(&Default::default()).await),
        200
    );
    let table = server.kubectl("1.33", &["get", "csr", &name]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("Approved,Issued"));
    harness.cleanup().await;
}

/// The name of the one request that is still pending.
async fn pending_request(server: &RudderServer) -> String {
    let admin = rudder_tests::admin_client(server.kubeconfig()).await;
    let requests: Api<CertificateSigningRequest> = Api::all(admin);
    for _ in 0..100 {
        let list = requests.list(&Default::default()).await.unwrap();
        if let Some(pending) = list.items.iter().find(|csr| {
            csr.status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .is_none_or(Vec::is_empty)
        }) {
            return pending.metadata.name.clone().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no pending request appeared");
}
