use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType,
};
use x509_parser::prelude::FromDer;

use super::*;
use crate::csrapproving::tests::pem_request;

/// A CA whose subject rcgen encodes as PrintableString-free UTF8, with two attributes.
fn ca() -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Rudder");
    params
        .distinguished_name
        .push(DnType::CommonName, "test-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("ca");
    (cert.pem(), key.serialize_pem())
}

fn approved(request: Vec<u8>, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
    CertificateSigningRequest {
        spec: CertificateSigningRequestSpec {
            request: ByteString(request),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_issued_certificate_chains_to_the_ca_with_the_requested_subject() {
    let (ca_pem, ca_key) = ca();
    let signer = Signer::from_pem(&ca_pem, &ca_key).expect("signer");
    let csr = approved(
        pem_request("system:node:n1", &["system:nodes"], vec![]),
        KUBELET_CLIENT,
        &["digital signature", "client auth"],
    );
    let Verdict::Sign(request) = verdict(&csr) else {
        panic!("not signed: {:?}", verdict(&csr));
    };
    let pem = signer
        .sign(&request, &["client auth".into()], Duration::from_secs(3600))
        .expect("signed");
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).expect("der");
    let ca_block = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes())
        .expect("ca pem")
        .1;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_block.contents).expect("ca der");
    assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
    assert_eq!(cert.subject().as_raw(), request.subject_der.as_slice());
    cert.verify_signature(Some(ca_cert.public_key()))
        .expect("signed by the CA");
    let lifetime = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert_eq!(lifetime, 3600 + 300);
    let (_, parsed) =
        x509_parser::certificate::X509Certificate::from_der(&block.contents).expect("again");
    assert!(
        parsed
            .extended_key_usage()
            .expect("eku")
            .expect("present")
            .value
            .client_auth
    );
}

#[test]
fn durations_are_capped_at_the_maximum() {
    let (ca_pem, ca_key) = ca();
    let signer = Signer::from_pem(&ca_pem, &ca_key).expect("signer");
    assert_eq!(signer.duration_for(None), signer::MAX_DURATION);
    assert_eq!(signer.duration_for(Some(600)), Duration::from_secs(600));
    assert_eq!(signer.duration_for(Some(i32::MAX)), signer::MAX_DURATION);
}

#[test]
fn the_signer_issues_only_what_each_signer_may() {
    let node = "system:node:n1";
    let nodes = &["system:nodes"][..];
    let ip = || SanType::IpAddress("10.0.0.1".parse().expect("ip"));
    let client = &["digital signature", "client auth"][..];
    let serving = &["digital signature", "server auth"][..];
    // (what, request, signs?)
    let cases = [
        (
            "a kubelet client request",
            approved(pem_request(node, nodes, vec![]), KUBELET_CLIENT, client),
            true,
        ),
        (
            "a kubelet client request for someone else",
            approved(pem_request("alice", &[], vec![]), KUBELET_CLIENT, client),
            false,
        ),
        (
            "a kubelet client request with a SAN",
            approved(pem_request(node, nodes, vec![ip()]), KUBELET_CLIENT, client),
            false,
        ),
        (
            "a serving request",
            approved(
                pem_request(node, nodes, vec![ip()]),
                KUBELET_SERVING,
                serving,
            ),
            true,
        ),
        (
            "a serving request without SANs",
            approved(pem_request(node, nodes, vec![]), KUBELET_SERVING, serving),
            false,
        ),
        (
            "an API client request",
            approved(
                pem_request("alice", &["devs"], vec![]),
                KUBE_APISERVER_CLIENT,
                client,
            ),
            true,
        ),
        (
            "an API client request for system:masters",
            approved(
                pem_request("alice", &["system:masters"], vec![]),
                KUBE_APISERVER_CLIENT,
                client,
            ),
            false,
        ),
        (
            "an API client request for serving",
            approved(
                pem_request("alice", &[], vec![]),
                KUBE_APISERVER_CLIENT,
                serving,
            ),
            false,
        ),
    ];
    for (what, csr, signs) in cases {
        match verdict(&csr) {
            Verdict::Sign(_) => assert!(signs, "{what} was signed"),
            Verdict::Fail(reason) => assert!(!signs, "{what} failed: {reason}"),
            Verdict::Ignore => panic!("{what} was ignored"),
        }
    }
    let mut pending = approved(pem_request(node, nodes, vec![]), KUBELET_CLIENT, client);
    pending.status = None;
    assert_eq!(verdict(&pending), Verdict::Ignore);
    let mut other = approved(pem_request(node, nodes, vec![]), "example.com/x", client);
    other.spec.signer_name = "example.com/x".into();
    assert_eq!(verdict(&other), Verdict::Ignore);
}
