//! Validation of certificates.k8s.io/v1 CertificateSigningRequests, as upstream's: the request
//! is a PEM `CERTIFICATE REQUEST` whose signature checks, the signer name is qualified, the
//! usages are known, a requested duration is at least ten minutes, the two kubelet signers get
//! the requests they can sign (a node's subject, their usages, their kind of SANs); the
//! conditions are well formed, Approved and Denied exclude each other, and once there neither
//! they, a Failed condition nor an issued certificate can go away.

use std::collections::BTreeSet;

use base64::Engine as _;
use rustls_pki_types::pem::{PemObject, SectionKind};
use serde_json::Value;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use super::{names, Errs, FieldError};

/// The signer of kubelets' client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The group every kubelet certificate names as its only organization.
const NODES_GROUP: &str = "system:nodes";
const NODE_PREFIX: &str = "system:node:";
/// The shortest certificate lifetime a request may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// Every key usage the API knows.
pub const KNOWN_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

const CONDITION_TYPES_THAT_STAY: [&str; 3] = ["Approved", "Denied", "Failed"];

/// What validation needs from a parsed request.
#[derive(Debug, Default)]
struct Request {
    common_names: Vec<String>,
    organizations: Vec<String>,
    dns: Vec<String>,
    ips: usize,
    emails: usize,
    uris: usize,
}

/// Decodes `spec.request` (base64 of PEM, as JSON carries bytes) and parses its one
/// `CERTIFICATE REQUEST` block, checking its signature.
fn parse_request(encoded: &str) -> Result<Request, String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|error| format!("not base64: {error}"))?;
    let der = first_section(&pem, SectionKind::Csr)
        .ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    let (_, csr) = X509CertificationRequest::from_der(&der)
        .map_err(|error| format!("asn1: structure error: {error}"))?;
    csr.verify_signature()
        .map_err(|error| format!("x509: signature does not verify: {error}"))?;
    let info = &csr.certification_request_info;
    let strings = |attrs: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        attrs
            .filter_map(|attr| attr.as_str().ok().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let mut request = Request {
        common_names: strings(&mut info.subject.iter_common_name()),
        organizations: strings(&mut info.subject.iter_organization()),
        ..Request::default()
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(sans) = extension {
            for name in &sans.general_names {
                match name {
                    GeneralName::DNSName(dns) => request.dns.push(dns.to_string()),
                    GeneralName::IPAddress(_) => request.ips += 1,
                    GeneralName::RFC822Name(_) => request.emails += 1,
                    GeneralName::URI(_) => request.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(request)
}

/// The organizations (groups) a `spec.request` asks for, if it parses.
pub(crate) fn requested_organizations(encoded: &str) -> Option<Vec<String>> {
    parse_request(encoded)
        .ok()
        .map(|request| request.organizations)
}

/// The DER of the first PEM section of `kind` in `pem`.
fn first_section(pem: &[u8], kind: SectionKind) -> Option<Vec<u8>> {
    <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .find(|(found, _)| *found == kind)
        .map(|(_, der)| der)
}

/// Checks `status.certificate`: base64 of one or more PEM `CERTIFICATE` blocks that parse.
fn check_certificate(encoded: &str) -> Result<(), String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|error| format!("not base64: {error}"))?;
    let mut count = 0;
    for section in <(SectionKind, Vec<u8>) as PemObject>::pem_slice_iter(&pem) {
        let (kind, der) = section.map_err(|error| format!("invalid PEM: {error}"))?;
        if kind != SectionKind::Certificate {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {kind:?}"
            ));
        }
        x509_parser::parse_x509_certificate(&der)
            .map_err(|error| format!("asn1: structure error: {error}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

/// Validates a CertificateSigningRequest create (`old` None) or update.
pub fn validate_csr(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    // The spec cannot change after create, so it is checked on create only (an update carries
    // the stored spec).
    if old.is_none() {
        validate_spec(spec, errs);
    }
    validate_conditions(obj, errs);
    let certificate = crate::json::str_at(obj, &["status", "certificate"]);
    if !certificate.is_empty() {
        if let Err(detail) = check_certificate(certificate) {
            errs.push(FieldError::invalid(
                "status.certificate",
                "<certificate data>",
                detail,
            ));
        }
    }
    if let Some(old) = old {
        validate_update(obj, old, errs);
    }
}

fn validate_spec(spec: &Value, errs: &mut Errs) {
    let request = match spec.get("request").and_then(Value::as_str) {
        None | Some("") => {
            errs.push(FieldError::required("spec.request", ""));
            None
        }
        Some(encoded) => match parse_request(encoded) {
            Ok(request) => Some(request),
            Err(detail) => {
                errs.push(FieldError::invalid(
                    "spec.request",
                    "<request data>",
                    detail,
                ));
                None
            }
        },
    };
    let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or("");
    validate_signer_name(signer, errs);
    let usages: Vec<&str> = crate::json::array_at(spec, &["usages"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if usages.is_empty() {
        errs.push(FieldError::required(
            "spec.usages",
            "usages must be provided",
        ));
    }
    let mut seen = BTreeSet::new();
    for (index, usage) in usages.iter().enumerate() {
        let field = format!("spec.usages[{index}]");
        if !KNOWN_USAGES.contains(usage) {
            errs.push(FieldError::not_supported(&field, *usage, KNOWN_USAGES));
        } else if !seen.insert(*usage) {
            errs.push(FieldError::duplicate(&field, *usage));
        }
    }
    if let Some(seconds) = spec.get("expirationSeconds").and_then(Value::as_i64) {
        if seconds < MIN_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid(
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }
    if let Some(request) = request {
        if let Err(detail) = signer_rules(signer, &request, &usages) {
            errs.push(FieldError::invalid(
                "spec.request",
                "<request data>",
                detail,
            ));
        }
    }
}

/// `<fully qualified domain>/<path>`, as upstream's signer names.
fn validate_signer_name(signer: &str, errs: &mut Errs) {
    const FIELD: &str = "spec.signerName";
    if signer.is_empty() {
        errs.push(FieldError::required(FIELD, ""));
        return;
    }
    let form = "must be a fully qualified domain and path of the form 'example.com/signer-name'";
    let Some((domain, path)) = signer.split_once('/') else {
        errs.push(FieldError::invalid(FIELD, signer, form));
        return;
    };
    if path.is_empty() || !domain.contains('.') {
        errs.push(FieldError::invalid(FIELD, signer, form));
        return;
    }
    for problem in names::is_dns1123_subdomain(domain) {
        errs.push(FieldError::invalid(FIELD, signer, problem));
    }
    if signer.len() > 571 {
        errs.push(FieldError::too_long(FIELD, 571));
    }
}

/// What the two kubelet signers require of the request they sign.
fn signer_rules(signer: &str, request: &Request, usages: &[&str]) -> Result<(), String> {
    let required_usages: &[&str] = match signer {
        KUBELET_CLIENT_SIGNER => &["digital signature", "client auth"],
        KUBELET_SERVING_SIGNER => &["digital signature", "server auth"],
        _ => return Ok(()),
    };
    if request.organizations != [NODES_GROUP] {
        return Err(format!(
            "subject organization must be exactly [{NODES_GROUP}]"
        ));
    }
    let node_subject = request.common_names.len() == 1
        && request.common_names[0]
            .strip_prefix(NODE_PREFIX)
            .is_some_and(|node| !node.is_empty());
    if !node_subject {
        return Err(format!(
            "subject common name must be {NODE_PREFIX}<nodeName>"
        ));
    }
    let allowed = [required_usages[0], required_usages[1], "key encipherment"];
    let usages_fit = usages.iter().all(|usage| allowed.contains(usage))
        && required_usages.iter().all(|usage| usages.contains(usage));
    if !usages_fit {
        return Err(format!(
            "usages must be {:?}, optionally with \"key encipherment\"",
            required_usages
        ));
    }
    if request.emails > 0 {
        return Err("emailAddresses are not allowed".into());
    }
    if request.uris > 0 {
        return Err("uris are not allowed".into());
    }
    if signer == KUBELET_CLIENT_SIGNER {
        if !request.dns.is_empty() {
            return Err("dnsNames are not allowed".into());
        }
        if request.ips > 0 {
            return Err("ipAddresses are not allowed".into());
        }
    } else if request.dns.is_empty() && request.ips == 0 {
        return Err("at least one DNS or IP subjectAltName is required".into());
    }
    Ok(())
}

fn validate_conditions(obj: &Value, errs: &mut Errs) {
    let conditions = crate::json::array_at(obj, &["status", "conditions"]);
    let mut seen = BTreeSet::new();
    for (index, condition) in conditions.iter().enumerate() {
        let field = format!("status.conditions[{index}]");
        let kind = condition.get("type").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() {
            errs.push(FieldError::required(format!("{field}.type"), ""));
            continue;
        }
        if !seen.insert(kind) {
            errs.push(FieldError::duplicate(format!("{field}.type"), kind));
        }
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("");
        if CONDITION_TYPES_THAT_STAY.contains(&kind) {
            if status != "True" {
                errs.push(FieldError::not_supported(
                    format!("{field}.status"),
                    status,
                    &["True"],
                ));
            }
        } else if !matches!(status, "True" | "False" | "Unknown") {
            errs.push(FieldError::not_supported(
                format!("{field}.status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
    }
    if seen.contains("Approved") && seen.contains("Denied") {
        errs.push(FieldError::invalid(
            "status.conditions",
            "Approved,Denied",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
}

fn validate_update(new: &Value, old: &Value, errs: &mut Errs) {
    let types = |obj: &Value| -> BTreeSet<String> {
        crate::json::array_at(obj, &["status", "conditions"])
            .iter()
            .filter_map(|c| c.get("type").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    };
    let (new_types, old_types) = (types(new), types(old));
    for kind in CONDITION_TYPES_THAT_STAY {
        if old_types.contains(kind) && !new_types.contains(kind) {
            errs.push(FieldError::forbidden(
                "status.conditions",
                format!("updates may not remove a condition of type {kind:?}"),
            ));
        }
    }
    let certificate =
        |obj: &Value| crate::json::str_at(obj, &["status", "certificate"]).to_string();
    let old_certificate = certificate(old);
    if !old_certificate.is_empty() && certificate(new) != old_certificate {
        errs.push(FieldError::forbidden(
            "status.certificate",
            "updates may not modify existing certificate",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
    use serde_json::json;

    fn pem_request(cn: &str, orgs: &[&str], sans: Vec<SanType>) -> String {
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
        base64::engine::general_purpose::STANDARD.encode(csr.pem().expect("pem"))
    }

    fn csr(request: &str, signer: &str, usages: &[&str]) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"request": request, "signerName": signer, "usages": usages}})
    }

    fn errors(obj: &Value, old: Option<&Value>) -> Vec<String> {
        let mut errs = Vec::new();
        validate_csr(obj, old, &mut errs);
        errs.iter().map(FieldError::message).collect()
    }

    const CLIENT: &[&str] = &["digital signature", "client auth"];
    const SERVING: &[&str] = &["digital signature", "key encipherment", "server auth"];

    /// What a case is, its request, signer and usages, and the error it expects, if any.
    type Case<'a> = (&'a str, String, &'a str, &'a [&'a str], Option<&'a str>);

    #[test]
    fn requests_are_checked_by_signer() {
        let dns = |name: &str| SanType::DnsName(name.try_into().expect("dns"));
        let ip = SanType::IpAddress("10.0.0.1".parse().expect("ip"));
        let node = "system:node:n1";
        let nodes = &["system:nodes"][..];
        // (what, request, signer, usages, the error expected, if any)
        let cases: Vec<Case> = vec![
            (
                "a kubelet client request",
                pem_request(node, nodes, vec![]),
                KUBELET_CLIENT_SIGNER,
                CLIENT,
                None,
            ),
            (
                "a kubelet client request with key encipherment",
                pem_request(node, nodes, vec![]),
                KUBELET_CLIENT_SIGNER,
                &["digital signature", "key encipherment", "client auth"],
                None,
            ),
            (
                "a client request for another user",
                pem_request("alice", nodes, vec![]),
                KUBELET_CLIENT_SIGNER,
                CLIENT,
                Some("subject common name must be system:node:"),
            ),
            (
                "a client request in another group",
                pem_request(node, &["system:masters"], vec![]),
                KUBELET_CLIENT_SIGNER,
                CLIENT,
                Some("organization must be exactly"),
            ),
            (
                "a client request in two groups",
                pem_request(node, &["system:nodes", "x"], vec![]),
                KUBELET_CLIENT_SIGNER,
                CLIENT,
                Some("organization must be exactly"),
            ),
            (
                "a client request with SANs",
                pem_request(node, nodes, vec![dns("n1")]),
                KUBELET_CLIENT_SIGNER,
                CLIENT,
                Some("dnsNames are not allowed"),
            ),
            (
                "a client request for serving",
                pem_request(node, nodes, vec![]),
                KUBELET_CLIENT_SIGNER,
                &["digital signature", "server auth"],
                Some("usages must be"),
            ),
            (
                "a serving request",
                pem_request(node, nodes, vec![dns("n1"), ip.clone()]),
                KUBELET_SERVING_SIGNER,
                SERVING,
                None,
            ),
            (
                "a serving request without SANs",
                pem_request(node, nodes, vec![]),
                KUBELET_SERVING_SIGNER,
                SERVING,
                Some("at least one DNS or IP"),
            ),
            (
                "a serving request with an email",
                pem_request(
                    node,
                    nodes,
                    vec![SanType::Rfc822Name("a@b.c".try_into().expect("email"))],
                ),
                KUBELET_SERVING_SIGNER,
                SERVING,
                Some("emailAddresses are not allowed"),
            ),
            (
                "a serving request for client auth",
                pem_request(node, nodes, vec![ip.clone()]),
                KUBELET_SERVING_SIGNER,
                CLIENT,
                Some("usages must be"),
            ),
            (
                "any request to another signer",
                pem_request("alice", &[], vec![dns("x")]),
                "example.com/mine",
                &["client auth"],
                None,
            ),
            (
                "an unqualified signer",
                pem_request("alice", &[], vec![]),
                "mine",
                &["client auth"],
                Some("spec.signerName: Invalid value"),
            ),
            (
                "no signer",
                pem_request("alice", &[], vec![]),
                "",
                &["client auth"],
                Some("spec.signerName: Required value"),
            ),
            (
                "no usages",
                pem_request("alice", &[], vec![]),
                "example.com/mine",
                &[],
                Some("spec.usages: Required value"),
            ),
            (
                "an unknown usage",
                pem_request("alice", &[], vec![]),
                "example.com/mine",
                &["flying"],
                Some("spec.usages[0]: Unsupported value"),
            ),
            (
                "a repeated usage",
                pem_request("alice", &[], vec![]),
                "example.com/mine",
                &["any", "any"],
                Some("spec.usages[1]: Duplicate value"),
            ),
            (
                "no PEM request",
                base64::engine::general_purpose::STANDARD.encode("hello"),
                "example.com/mine",
                &["any"],
                Some("PEM block type must be CERTIFICATE REQUEST"),
            ),
            (
                "no request",
                String::new(),
                "example.com/mine",
                &["any"],
                Some("spec.request: Required value"),
            ),
        ];
        for (what, request, signer, usages, expected) in cases {
            let found = errors(&csr(&request, signer, usages), None);
            match expected {
                None => assert!(found.is_empty(), "{what}: {found:?}"),
                Some(text) => assert!(
                    found.iter().any(|error| error.contains(text)),
                    "{what}: expected {text:?} in {found:?}"
                ),
            }
        }
    }

    #[test]
    fn a_short_duration_is_refused() {
        let mut obj = csr(
            &pem_request("alice", &[], vec![]),
            "example.com/mine",
            &["any"],
        );
        obj["spec"]["expirationSeconds"] = json!(599);
        assert!(errors(&obj, None)[0].contains("600 seconds"));
        obj["spec"]["expirationSeconds"] = json!(600);
        assert!(errors(&obj, None).is_empty());
    }

    #[test]
    fn conditions_follow_the_rules_of_approval() {
        let base = csr(
            &pem_request("alice", &[], vec![]),
            "example.com/mine",
            &["any"],
        );
        let with = |conditions: Value, certificate: Option<&str>| {
            let mut obj = base.clone();
            obj["status"] = json!({"conditions": conditions});
            if let Some(certificate) = certificate {
                obj["status"]["certificate"] = json!(certificate);
            }
            obj
        };
        let approved = with(json!([{"type": "Approved", "status": "True"}]), None);
        // (what, new, old, the error expected, if any)
        let cases: Vec<(&str, Value, Value, Option<&str>)> = vec![
            ("approving", approved.clone(), base.clone(), None),
            (
                "approving and denying",
                with(
                    json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
                    None,
                ),
                base.clone(),
                Some("mutually exclusive"),
            ),
            (
                "approving twice",
                with(
                    json!([{"type": "Approved", "status": "True"}, {"type": "Approved", "status": "True"}]),
                    None,
                ),
                base.clone(),
                Some("Duplicate value"),
            ),
            (
                "a false approval",
                with(json!([{"type": "Approved", "status": "False"}]), None),
                base.clone(),
                Some("Unsupported value"),
            ),
            (
                "removing an approval",
                base.clone(),
                approved.clone(),
                Some("may not remove a condition of type \"Approved\""),
            ),
            (
                "a certificate that is no PEM",
                with(
                    json!([{"type": "Approved", "status": "True"}]),
                    Some("bm90IGEgY2VydA=="),
                ),
                approved.clone(),
                Some("status.certificate: Invalid value"),
            ),
            (
                "a custom condition",
                with(
                    json!([{"type": "Approved", "status": "True"}, {"type": "Checked", "status": "Unknown"}]),
                    None,
                ),
                approved.clone(),
                None,
            ),
        ];
        for (what, new, old, expected) in cases {
            let found = errors(&new, Some(&old));
            match expected {
                None => assert!(found.is_empty(), "{what}: {found:?}"),
                Some(text) => assert!(
                    found.iter().any(|error| error.contains(text)),
                    "{what}: expected {text:?} in {found:?}"
                ),
            }
        }
    }
}
