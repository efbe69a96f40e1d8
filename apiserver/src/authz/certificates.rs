//! Who may decide and issue CertificateSigningRequests, as upstream's CertificateApproval,
//! CertificateSigning and CertificateSubjectRestriction admission plugins: approving or denying
//! (through `/approval`) takes the verb `approve` on the `certificates.k8s.io` resource
//! `signers` named after the request's signer (or `<domain>/*`), setting the certificate
//! (through `/status`) the verb `sign` on it; and no request to the
//! `kubernetes.io/kube-apiserver-client` signer may ask for the `system:masters` group.

use std::sync::Arc;

use async_trait::async_trait;
use rudder_admission::{Attributes, Denied, Operation, Validating};
use serde_json::Value;

use crate::authz::{self, Authorizer, Decision};
use crate::json::str_at;

const GROUP: &str = "certificates.k8s.io";
const RESOURCE: &str = "certificatesigningrequests";
const API_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// Whether `attributes`' user may `verb` the signer `signer`: by its name, or by its domain's
/// wildcard `<domain>/*`.
fn may(authorizer: &dyn Authorizer, attributes: &Attributes, verb: &str, signer: &str) -> bool {
    let asks = |name: &str| {
        let asked = authz::Attributes {
            user: attributes.user.clone(),
            groups: attributes.groups.clone(),
            verb: verb.into(),
            resource_request: true,
            group: GROUP.into(),
            resource: "signers".into(),
            name: name.into(),
            ..authz::Attributes::default()
        };
        matches!(authorizer.authorize(&asked), Decision::Allow { .. })
    };
    if asks(signer) {
        return true;
    }
    match signer.split_once('/') {
        Some((domain, _)) => asks(&format!("{domain}/*")),
        None => false,
    }
}

fn is_csr(attributes: &Attributes, subresource: &str) -> bool {
    attributes.group == GROUP
        && attributes.resource == RESOURCE
        && attributes.operation == Operation::Update
        && attributes.subresource.as_deref() == Some(subresource)
}

/// CertificateApproval: `/approval` writes need `approve` on the signer.
pub struct CertificateApproval {
    authorizer: Arc<dyn Authorizer>,
}

impl CertificateApproval {
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }
}

#[async_trait]
impl Validating for CertificateApproval {
    fn name(&self) -> &'static str {
        "CertificateApproval"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(object) = object.filter(|_| is_csr(attributes, "approval")) else {
            return Ok(());
        };
        let signer = str_at(object, &["spec", "signerName"]);
        if may(self.authorizer.as_ref(), attributes, "approve", signer) {
            return Ok(());
        }
        Err(Denied::forbidden(format!(
            "user not permitted to approve requests with signerName {signer:?}"
        )))
    }
}

/// CertificateSigning: a `/status` write that changes the certificate needs `sign` on the
/// signer.
pub struct CertificateSigning {
    authorizer: Arc<dyn Authorizer>,
}

impl CertificateSigning {
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }
}

#[async_trait]
impl Validating for CertificateSigning {
    fn name(&self) -> &'static str {
        "CertificateSigning"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(object) = object.filter(|_| is_csr(attributes, "status")) else {
            return Ok(());
        };
        let certificate = |obj: Option<&Value>| {
            obj.map(|obj| str_at(obj, &["status", "certificate"]).to_string())
                .unwrap_or_default()
        };
        if certificate(Some(object)) == certificate(old) {
            return Ok(());
        }
        let signer = str_at(object, &["spec", "signerName"]);
        if may(self.authorizer.as_ref(), attributes, "sign", signer) {
            return Ok(());
        }
        Err(Denied::forbidden(format!(
            "user not permitted to sign requests with signerName {signer:?}"
        )))
    }
}

/// CertificateSubjectRestriction: no `system:masters` through the API client signer.
pub struct CertificateSubjectRestriction;

#[async_trait]
impl Validating for CertificateSubjectRestriction {
    fn name(&self) -> &'static str {
        "CertificateSubjectRestriction"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), Denied> {
        let creates_csr = attributes.group == GROUP
            && attributes.resource == RESOURCE
            && attributes.operation == Operation::Create
            && attributes.subresource.is_none();
        let Some(object) = object.filter(|_| creates_csr) else {
            return Ok(());
        };
        if str_at(object, &["spec", "signerName"]) != API_CLIENT_SIGNER {
            return Ok(());
        }
        let groups = crate::validation::certificates::requested_organizations(str_at(
            object,
            &["spec", "request"],
        ))
        .unwrap_or_default();
        if groups.iter().any(|group| group == "system:masters") {
            return Err(Denied::forbidden(format!(
                "use of {API_CLIENT_SIGNER} signer with system:masters group is not allowed"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Allows `approve`/`sign` only on the signers it names, to `approver`.
    struct Signers(&'static [&'static str]);

    impl Authorizer for Signers {
        fn authorize(&self, attributes: &authz::Attributes) -> Decision {
            let allowed = attributes.user == "approver"
                && attributes.resource == "signers"
                && self.0.contains(&attributes.name.as_str());
            if allowed {
                Decision::Allow {
                    reason: String::new(),
                }
            } else {
                Decision::NoOpinion
            }
        }
    }

    fn update(user: &str, subresource: &str) -> Attributes {
        Attributes {
            operation: Operation::Update,
            group: GROUP.into(),
            version: "v1".into(),
            kind: "CertificateSigningRequest".into(),
            kind_group: GROUP.into(),
            kind_version: "v1".into(),
            resource: RESOURCE.into(),
            subresource: Some(subresource.into()),
            namespace: None,
            name: "c".into(),
            user: user.into(),
            groups: vec![],
            dry_run: false,
            uid: String::new(),
            extra: Default::default(),
            warnings: Default::default(),
        }
    }

    #[tokio::test]
    async fn approving_takes_approve_on_the_signer_or_its_domain() {
        let csr = json!({"spec": {"signerName": "example.com/a"}});
        let cases = [
            (&["example.com/a"][..], "approver", true),
            (&["example.com/*"][..], "approver", true),
            (&["example.com/b"][..], "approver", false),
            (&["example.com/a"][..], "someone", false),
        ];
        for (signers, user, allowed) in cases {
            let plugin = CertificateApproval::new(Arc::new(Signers(signers)));
            let result = plugin
                .validate(&update(user, "approval"), Some(&csr), Some(&csr))
                .await;
            assert_eq!(result.is_ok(), allowed, "{signers:?} {user}: {result:?}");
        }
    }

    #[tokio::test]
    async fn setting_a_certificate_takes_sign_but_other_status_changes_do_not() {
        let plugin = CertificateSigning::new(Arc::new(Signers(&["example.com/a"])));
        let old = json!({"spec": {"signerName": "example.com/a"}});
        let failed = json!({"spec": {"signerName": "example.com/a"}, "status": {"conditions": [{"type": "Failed"}]}});
        let issued =
            json!({"spec": {"signerName": "example.com/a"}, "status": {"certificate": "Zm9v"}});
        let attributes = update("someone", "status");
        assert!(plugin
            .validate(&attributes, Some(&failed), Some(&old))
            .await
            .is_ok());
        let refused = plugin
            .validate(&attributes, Some(&issued), Some(&old))
            .await
            .expect_err("no sign permission");
        assert!(
            refused.message.contains("not permitted to sign"),
            "{refused}"
        );
        assert!(plugin
            .validate(&update("approver", "status"), Some(&issued), Some(&old))
            .await
            .is_ok());
    }
}
