//! Tests of PKI creation, reuse, re-issue and kubeconfig generation.

use super::*;
use std::net::Ipv4Addr;
use std::time::Duration;

use x509_parser::extensions::GeneralName;

fn cert_der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn subject_of(pem: &str) -> (String, Vec<String>) {
    let der = cert_der(pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let orgs = cert
        .subject()
        .iter_organization()
        .map(|o| o.as_str().unwrap().to_owned())
        .collect();
    (cn, orgs)
}

fn sans_of(pem: &str) -> Vec<String> {
    let der = cert_der(pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let ext = cert.subject_alternative_name().unwrap().unwrap();
    assert!(
        !ext.critical,
        "SAN must not be critical when the subject is set"
    );
    ext.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(b) if b.len() == 4 => {
                IpAddr::from(<[u8; 4]>::try_from(*b).unwrap()).to_string()
            }
            GeneralName::IPAddress(b) => {
                IpAddr::from(<[u8; 16]>::try_from(*b).unwrap()).to_string()
            }
            other => format!("{other:?}"),
        })
        .collect()
}

fn issuer_and_subject_raw(pem: &str) -> (Vec<u8>, Vec<u8>) {
    let der = cert_der(pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    (
        cert.issuer().as_raw().to_vec(),
        cert.subject().as_raw().to_vec(),
    )
}

const SERVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1));

#[test]
fn create_then_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let first = Pki::load_or_create(dir.path(), &[], &[SERVICE_IP]).unwrap();
    let second = Pki::load_or_create(dir.path(), &[], &[SERVICE_IP]).unwrap();
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
    assert_eq!(first.serving_cert_pem, second.serving_cert_pem);
    assert_eq!(first.serving_key_pem, second.serving_key_pem);
    assert_eq!(first.admin_cert_pem, second.admin_cert_pem);
    assert_eq!(first.sa_key_pem, second.sa_key_pem);
    assert_eq!(first.sa_pub_pem, second.sa_pub_pem);
    assert!(first.sa_pub_pem.starts_with("-----BEGIN PUBLIC KEY-----"));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |name: &str| {
            std::fs::metadata(first.path(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        for key in [CA_KEY_FILE, SERVING_KEY_FILE, ADMIN_KEY_FILE, SA_KEY_FILE] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        assert_eq!(mode(CA_CERT_FILE), 0o644);
        let dir_mode = std::fs::metadata(&first.dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
    }
    assert_eq!(
        std::fs::read_to_string(first.path(CA_CERT_FILE)).unwrap(),
        first.ca_cert_pem
    );

    let (cn, orgs) = subject_of(&first.admin_cert_pem);
    assert_eq!(
        (cn.as_str(), orgs),
        (ADMIN_USER, vec![ADMIN_GROUP.to_owned()])
    );
    assert_eq!(subject_of(&first.ca_cert_pem).0, CA_COMMON_NAME);
    let (issuer, _) = issuer_and_subject_raw(&first.admin_cert_pem);
    assert_eq!(issuer, issuer_and_subject_raw(&first.ca_cert_pem).1);
}

#[test]
fn serving_cert_sans() {
    let dir = tempfile::tempdir().unwrap();
    let sans = [
        "Api.Example.com".to_owned(),
        "192.0.2.10".to_owned(),
        "[2001:db8::5]".to_owned(),
    ];
    let pki = Pki::load_or_create(dir.path(), &sans, &[SERVICE_IP]).unwrap();
    let got = sans_of(&pki.serving_cert_pem);
    let mut expected = vec![
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "api.example.com",
        "127.0.0.1",
        "::1",
        "10.96.0.1",
        "192.0.2.10",
        "2001:db8::5",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    if let Some(host) = host::hostname() {
        expected.push(host);
    }
    expected.extend(host::local_addresses().iter().map(|ip| ip.to_string()));
    for name in &expected {
        assert!(got.contains(name), "missing {name} in {got:?}");
    }
}

#[test]
fn new_san_reissues_serving_cert_from_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    let first = Pki::load_or_create(dir.path(), &[], &[SERVICE_IP]).unwrap();
    let sans = ["rudder.example.org".to_owned()];
    let second = Pki::load_or_create(dir.path(), &sans, &[SERVICE_IP]).unwrap();
    assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
    assert_eq!(first.admin_cert_pem, second.admin_cert_pem);
    assert_ne!(first.serving_cert_pem, second.serving_cert_pem);
    assert!(sans_of(&second.serving_cert_pem).contains(&"rudder.example.org".to_owned()));
    let (issuer, _) = issuer_and_subject_raw(&second.serving_cert_pem);
    assert_eq!(issuer, issuer_and_subject_raw(&second.ca_cert_pem).1);
    // Stable once it covers the names; fewer names requested later is fine too.
    let third = Pki::load_or_create(dir.path(), &sans, &[SERVICE_IP]).unwrap();
    assert_eq!(second.serving_cert_pem, third.serving_cert_pem);
    let fourth = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    assert_eq!(second.serving_cert_pem, fourth.serving_cert_pem);
    // A new service IP is a new SAN.
    let other_ip = IpAddr::V4(Ipv4Addr::new(10, 43, 0, 1));
    let fifth = Pki::load_or_create(dir.path(), &[], &[other_ip]).unwrap();
    assert_ne!(fourth.serving_cert_pem, fifth.serving_cert_pem);
}

#[test]
fn near_expiry_and_foreign_certs_are_reissued() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    // A serving certificate that expires in 2 days.
    let mut params = issue::serving_params(&wanted_sans(&[], &[])).unwrap();
    params.not_after = params.not_before + Duration::from_secs(3 * 24 * 3600);
    let (short, short_key) = pki.ca.issue(&params, issue::SERVING_SUBJECT).unwrap();
    write_public_file(&pki.path(SERVING_CERT_FILE), &short).unwrap();
    write_private_file(&pki.path(SERVING_KEY_FILE), &short_key).unwrap();
    // An admin certificate from another CA.
    let other = tempfile::tempdir().unwrap();
    let foreign = Pki::load_or_create(other.path(), &[], &[]).unwrap();
    write_public_file(&pki.path(ADMIN_CERT_FILE), &foreign.admin_cert_pem).unwrap();
    write_private_file(&pki.path(ADMIN_KEY_FILE), &foreign.admin_key_pem).unwrap();

    let again = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    assert_eq!(again.ca_cert_pem, pki.ca_cert_pem);
    assert_ne!(again.serving_cert_pem, short);
    assert_ne!(again.admin_cert_pem, foreign.admin_cert_pem);
    let (issuer, _) = issuer_and_subject_raw(&again.admin_cert_pem);
    assert_eq!(issuer, issuer_and_subject_raw(&pki.ca_cert_pem).1);

    // A key that does not match its certificate.
    write_private_file(&pki.path(ADMIN_KEY_FILE), &foreign.admin_key_pem).unwrap();
    let third = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    assert_ne!(third.admin_cert_pem, again.admin_cert_pem);
}

#[test]
fn broken_ca_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let other = tempfile::tempdir().unwrap();
    let foreign = Pki::load_or_create(other.path(), &[], &[]).unwrap();
    // The CA key must match the CA certificate.
    std::fs::copy(foreign.path(CA_KEY_FILE), pki.path(CA_KEY_FILE)).unwrap();
    let err = Pki::load_or_create(dir.path(), &[], &[]).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    std::fs::remove_file(pki.path(CA_KEY_FILE)).unwrap();
    let err = Pki::load_or_create(dir.path(), &[], &[]).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn external_ca_with_printable_subject() {
    // A CA made elsewhere (PrintableString attributes, several RDNs) keeps signing with an
    // issuer name byte-identical to its subject.
    use rcgen::{BasicConstraints, DnValue, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let printable = |s: &str| DnValue::PrintableString(s.try_into().unwrap());
    params
        .distinguished_name
        .push(rcgen::DnType::CountryName, printable("DE"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, printable("Example"));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Example CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pki")).unwrap();
    std::fs::write(dir.path().join("pki").join(CA_CERT_FILE), ca.pem()).unwrap();
    std::fs::write(
        dir.path().join("pki").join(CA_KEY_FILE),
        key.serialize_pem(),
    )
    .unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let (_, ca_subject) = issuer_and_subject_raw(&pki.ca_cert_pem);
    for pem in [&pki.admin_cert_pem, &pki.serving_cert_pem] {
        assert_eq!(issuer_and_subject_raw(pem).0, ca_subject);
    }
    pki.server_config().unwrap();
}

#[test]
fn issue_client_cert_subject() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let (cert, key) = pki
        .issue_client_cert("system:kube-scheduler", &["g1", "g2"])
        .unwrap();
    assert!(key.contains("PRIVATE KEY"));
    let (cn, orgs) = subject_of(&cert);
    assert_eq!(cn, "system:kube-scheduler");
    assert_eq!(orgs, ["g1", "g2"]);
}

#[test]
fn server_config_alpn() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let config = pki.server_config().unwrap();
    assert_eq!(
        config.alpn_protocols,
        [b"h2".to_vec(), b"http/1.1".to_vec()]
    );
    assert!(format!("{pki:?}").contains("Pki"));
    assert!(!format!("{pki:?}").contains("PRIVATE"));
}

#[test]
fn admin_kubeconfig_parses_and_kubectl_accepts_it() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(dir.path(), &[], &[]).unwrap();
    let yaml = admin_kubeconfig(&pki, "https://127.0.0.1:6443");
    let doc: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    assert_eq!(doc["kind"], "Config");
    assert_eq!(doc["current-context"], "rudder");
    assert_eq!(doc["clusters"][0]["name"], "rudder");
    assert_eq!(
        doc["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:6443"
    );
    assert_eq!(doc["contexts"][0]["context"]["user"], "admin");
    assert_eq!(doc["users"][0]["name"], "admin");
    let b64 = base64::engine::general_purpose::STANDARD;
    let decode = |v: &serde_json::Value| {
        String::from_utf8(b64.decode(v.as_str().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(
        decode(&doc["clusters"][0]["cluster"]["certificate-authority-data"]),
        pki.ca_cert_pem
    );
    assert_eq!(
        decode(&doc["users"][0]["user"]["client-certificate-data"]),
        pki.admin_cert_pem
    );
    assert_eq!(
        decode(&doc["users"][0]["user"]["client-key-data"]),
        pki.admin_key_pem
    );

    // Names needing quotes survive.
    let odd = client_kubeconfig("a: b", "https://[::1]:6443", "x", "#u", "c", "k");
    let doc: serde_json::Value = yaml_serde::from_str(&odd).unwrap();
    assert_eq!(doc["clusters"][0]["name"], "a: b");
    assert_eq!(doc["users"][0]["name"], "#u");

    let path = dir.path().join("admin.kubeconfig");
    write_private_file(&path, &yaml).unwrap();
    let output = match std::process::Command::new("kubectl")
        .args(["config", "view", "--raw", "-o", "json", "--kubeconfig"])
        .arg(&path)
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping the kubectl check");
            return;
        }
    };
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(view["current-context"], "rudder");
    assert_eq!(
        view["clusters"][0]["cluster"]["server"],
        "https://127.0.0.1:6443"
    );
    assert_eq!(
        decode(&view["users"][0]["user"]["client-key-data"]),
        pki.admin_key_pem
    );
}
