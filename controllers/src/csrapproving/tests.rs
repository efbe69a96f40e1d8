use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
use k8s_openapi::ByteString;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use super::*;
use crate::csrsigning;

pub(crate) fn pem_request(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> Vec<u8> {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    params.subject_alt_names = sans;
    let csr = params.serialize_request(&key).expect("csr");
    csr.pem().expect("pem").into_bytes()
}

fn csr(
    request: Vec<u8>,
    signer: &str,
    usages: &[&str],
    user: &str,
    groups: &[&str],
) -> CertificateSigningRequest {
    CertificateSigningRequest {
        spec: CertificateSigningRequestSpec {
            request: ByteString(request),
            signer_name: signer.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            username: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn the_approver_decides_by_signer_subject_and_requestor() {
    const CLIENT: &[&str] = &["digital signature", "client auth"];
    const SERVING: &[&str] = &["digital signature", "key encipherment", "server auth"];
    let node = "system:node:n1";
    let nodes = &["system:nodes"][..];
    let ip = || SanType::IpAddress("10.0.0.1".parse().expect("ip"));
    let dns = |name: &str| SanType::DnsName(name.try_into().expect("dns"));
    let bootstrap = "system:bootstrap:abcdef";
    let ask_new = Decision::Ask(vec![Permission::NodeClient]);
    let ask_self = Decision::Ask(vec![Permission::SelfNodeClient, Permission::NodeClient]);
    let approve_serving = Decision::Approve {
        reason: "AutoApproved",
        message: "Auto approving the kubelet serving certificate of its own node.",
    };
    // (what, the request, what the approver decides)
    let cases = [
        (
            "a bootstrap token asking for a node's client certificate",
            csr(
                pem_request(node, nodes, vec![]),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                bootstrap,
                &["system:bootstrappers"],
            ),
            ask_new.clone(),
        ),
        (
            "a node renewing its own client certificate",
            csr(
                pem_request(node, nodes, vec![]),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                node,
                nodes,
            ),
            ask_self,
        ),
        (
            "a node asking for another node's client certificate",
            csr(
                pem_request("system:node:n2", nodes, vec![]),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                node,
                nodes,
            ),
            ask_new,
        ),
        (
            "a client request for a user who is no node",
            csr(
                pem_request("alice", nodes, vec![]),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                bootstrap,
                &[],
            ),
            Decision::Ignore,
        ),
        (
            "a client request with SANs",
            csr(
                pem_request(node, nodes, vec![ip()]),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                bootstrap,
                &[],
            ),
            Decision::Ignore,
        ),
        (
            "a client request for server auth",
            csr(
                pem_request(node, nodes, vec![]),
                csrsigning::KUBELET_CLIENT,
                &["server auth"],
                bootstrap,
                &[],
            ),
            Decision::Ignore,
        ),
        (
            "a node's serving request for itself",
            csr(
                pem_request(node, nodes, vec![ip(), dns("n1")]),
                csrsigning::KUBELET_SERVING,
                SERVING,
                node,
                nodes,
            ),
            approve_serving,
        ),
        (
            "a node's serving request for another node",
            csr(
                pem_request("system:node:n2", nodes, vec![ip()]),
                csrsigning::KUBELET_SERVING,
                SERVING,
                node,
                nodes,
            ),
            Decision::Ignore,
        ),
        (
            "a bootstrap token's serving request",
            csr(
                pem_request(node, nodes, vec![ip()]),
                csrsigning::KUBELET_SERVING,
                SERVING,
                bootstrap,
                &["system:bootstrappers"],
            ),
            Decision::Ignore,
        ),
        (
            "a serving request with an email SAN",
            csr(
                pem_request(
                    node,
                    nodes,
                    vec![SanType::Rfc822Name("a@b.c".try_into().expect("email"))],
                ),
                csrsigning::KUBELET_SERVING,
                SERVING,
                node,
                nodes,
            ),
            Decision::Ignore,
        ),
        (
            "a request to another signer",
            csr(
                pem_request(node, nodes, vec![]),
                "example.com/x",
                CLIENT,
                node,
                nodes,
            ),
            Decision::Ignore,
        ),
        (
            "a request that is no PEM",
            csr(
                b"hello".to_vec(),
                csrsigning::KUBELET_CLIENT,
                CLIENT,
                node,
                nodes,
            ),
            Decision::Ignore,
        ),
    ];
    for (what, request, expected) in cases {
        assert_eq!(decide(&request), expected, "{what}");
    }
}

#[test]
fn decided_requests_are_left_alone() {
    for kind in ["Approved", "Denied", "Failed"] {
        let mut request = csr(
            pem_request("system:node:n1", &["system:nodes"], vec![]),
            csrsigning::KUBELET_CLIENT,
            &["client auth"],
            "system:bootstrap:abcdef",
            &[],
        );
        request.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: kind.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(decide(&request), Decision::Ignore, "{kind}");
    }
}
