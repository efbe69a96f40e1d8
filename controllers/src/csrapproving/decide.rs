//! The approver's decision about one request, apart from the API calls, so that it can be
//! tested case by case.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

use crate::csrsigning::{self, has_condition, request};

/// A permission whose holder's kubelet client requests are approved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// A node renewing its own client certificate.
    SelfNodeClient,
    /// A new node's client certificate (the requestor is a bootstrap token).
    NodeClient,
}

impl Permission {
    /// The `certificatesigningrequests` subresource whose `create` is the permission.
    pub fn subresource(self) -> &'static str {
        match self {
            Self::SelfNodeClient => "selfnodeclient",
            Self::NodeClient => "nodeclient",
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Self::SelfNodeClient => "AutoApproved",
            Self::NodeClient => "AutoApproved",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Self::SelfNodeClient => {
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            }
            Self::NodeClient => {
                "Auto approving kubelet client certificate after SubjectAccessReview."
            }
        }
    }
}

/// What the approver does with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not for this approver: decided already, another signer, or a request it does not
    /// recognise.
    Ignore,
    /// Approve if the requestor holds one of these permissions (tried in order).
    Ask(Vec<Permission>),
    /// Approve without asking.
    Approve {
        reason: &'static str,
        message: &'static str,
    },
}

/// Decides about `csr`.
pub fn decide(csr: &CertificateSigningRequest) -> Decision {
    if has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
        || has_condition(csr, "Failed")
    {
        return Decision::Ignore;
    }
    let Ok(request) = request::parse(&csr.spec.request.0) else {
        return Decision::Ignore;
    };
    let Some(node) = request::node_of(&request) else {
        return Decision::Ignore;
    };
    let usages = csr.spec.usages.as_deref().unwrap_or_default();
    let only = |allowed: &[&str]| usages.iter().all(|usage| allowed.contains(&usage.as_str()));
    let has = |usage: &str| usages.iter().any(|u| u == usage);
    let requestor = csr.spec.username.as_deref().unwrap_or("");
    let by_itself = requestor == request.common_name;
    match csr.spec.signer_name.as_str() {
        csrsigning::KUBELET_CLIENT => {
            let client_usages = has("client auth")
                && only(&["digital signature", "key encipherment", "client auth"]);
            let no_sans =
                request.dns_names.is_empty() && request.ips.is_empty() && request.other_sans == 0;
            if !client_usages || !no_sans {
                return Decision::Ignore;
            }
            if by_itself {
                Decision::Ask(vec![Permission::SelfNodeClient, Permission::NodeClient])
            } else {
                Decision::Ask(vec![Permission::NodeClient])
            }
        }
        csrsigning::KUBELET_SERVING => {
            let in_nodes = csr
                .spec
                .groups
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|group| group == "system:nodes");
            let serving_usages = has("server auth")
                && only(&["digital signature", "key encipherment", "server auth"]);
            let sans = request.other_sans == 0
                && !(request.dns_names.is_empty() && request.ips.is_empty());
            if by_itself && in_nodes && !node.is_empty() && serving_usages && sans {
                Decision::Approve {
                    reason: "AutoApproved",
                    message: "Auto approving the kubelet serving certificate of its own node.",
                }
            } else {
                Decision::Ignore
            }
        }
        _ => Decision::Ignore,
    }
}
