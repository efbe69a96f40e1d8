//! The CSR signing controller (upstream's `csrsigning`): approved CertificateSigningRequests
//! addressed to the built-in client and kubelet signers get a certificate from the cluster CA
//! in `status.certificate`; a request its signer cannot issue gets a `Failed` condition.
//!
//! ```text
//!   CSR Approved ─▶ parse spec.request ─▶ the signer's rules ─▶ sign (CA) ─▶ /status certificate
//!                        └── unparseable / not for this signer ──────────▶ /status Failed
//! ```

pub mod der;
pub mod request;
pub mod signer;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;
pub use request::Request;
pub use signer::{Signer, SignerError};

/// The signers this controller issues for.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

pub struct Context {
    pub client: Client,
    pub signer: Arc<Signer>,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    signer: Arc<Signer>,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let requests = informers.get::<CertificateSigningRequest>();
    let context = Arc::new(Context { client, signer });
    let controller = Controller::for_shared_stream(
        counted(
            requests.changes,
            queue.clone(),
            |csr: &CertificateSigningRequest| Some(key_of(csr)),
        ),
        requests.store,
    );
    runner::run(
        "csrsigning",
        controller,
        context,
        queue,
        2,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// Whether the request carries a condition of `kind`.
pub fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == kind))
}

/// What the signer does with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not this controller's business (pending, denied, failed, issued, another signer).
    Ignore,
    /// Issue a certificate for this request.
    Sign(Request),
    /// The signer cannot issue it; the reason goes into a Failed condition.
    Fail(String),
}

/// Decides what to do with `csr`.
pub fn verdict(csr: &CertificateSigningRequest) -> Verdict {
    let issued = csr
        .status
        .as_ref()
        .and_then(|status| status.certificate.as_ref())
        .is_some_and(|certificate| !certificate.0.is_empty());
    if !has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
        || has_condition(csr, "Failed")
        || issued
    {
        return Verdict::Ignore;
    }
    let signer = csr.spec.signer_name.as_str();
    if ![KUBE_APISERVER_CLIENT, KUBELET_CLIENT, KUBELET_SERVING].contains(&signer) {
        return Verdict::Ignore;
    }
    let request = match request::parse(&csr.spec.request.0) {
        Ok(request) => request,
        Err(error) => return Verdict::Fail(error),
    };
    match fits(
        signer,
        &request,
        csr.spec.usages.as_deref().unwrap_or_default(),
    ) {
        Ok(()) => Verdict::Sign(request),
        Err(error) => Verdict::Fail(error),
    }
}

/// What each signer issues.
fn fits(signer: &str, request: &Request, usages: &[String]) -> Result<(), String> {
    let purpose = if signer == KUBELET_SERVING {
        "server auth"
    } else {
        "client auth"
    };
    let allowed = ["digital signature", "key encipherment", purpose];
    if !usages.iter().any(|usage| usage == purpose)
        || !usages.iter().all(|usage| allowed.contains(&usage.as_str()))
    {
        return Err(format!(
            "{signer} issues only the usages {allowed:?}, including {purpose:?}"
        ));
    }
    if request.other_sans > 0 {
        return Err(format!(
            "{signer} issues only DNS and IP subject alternative names"
        ));
    }
    match signer {
        KUBELET_CLIENT | KUBELET_SERVING if request::node_of(request).is_none() => Err(format!(
            "{signer} issues only certificates for system:node:<name> in system:nodes"
        )),
        KUBELET_CLIENT if !request.dns_names.is_empty() || !request.ips.is_empty() => {
            Err(format!("{signer} issues no subject alternative names"))
        }
        KUBELET_SERVING if request.dns_names.is_empty() && request.ips.is_empty() => Err(format!(
            "{signer} needs a DNS or IP subject alternative name"
        )),
        KUBE_APISERVER_CLIENT if request.organizations.iter().any(|o| o == "system:masters") => {
            Err(format!(
                "{signer} does not issue certificates for system:masters"
            ))
        }
        _ => Ok(()),
    }
}

pub async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    context: Arc<Context>,
) -> Result<Action> {
    let verdict = verdict(&csr);
    if verdict == Verdict::Ignore {
        return Ok(Action::await_change());
    }
    let mut updated = csr.as_ref().clone();
    let status = updated.status.get_or_insert_with(Default::default);
    match verdict {
        Verdict::Sign(request) => {
            let duration = context.signer.duration_for(csr.spec.expiration_seconds);
            let usages = csr.spec.usages.clone().unwrap_or_default();
            match context.signer.sign(&request, &usages, duration) {
                Ok(pem) => status.certificate = Some(ByteString(pem.into_bytes())),
                Err(SignerError::Request(error)) => failed(status, error),
                Err(error @ SignerError::Ca(_)) => {
                    return Err(crate::Error::Invalid(error.to_string()))
                }
            }
        }
        Verdict::Fail(error) => failed(status, error),
        Verdict::Ignore => return Ok(Action::await_change()),
    }
    let api = Api::<CertificateSigningRequest>::all(context.client.clone());
    match api
        .replace_status(&csr.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(_) => {
            tracing::info!(csr = %csr.name_any(), signer = %csr.spec.signer_name, "signed");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}

fn failed(
    status: &mut k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus,
    message: String,
) {
    tracing::info!(%message, "a request its signer does not issue");
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("SignerValidationFailure".into()),
            message: Some(message),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
}

#[cfg(test)]
mod tests;
