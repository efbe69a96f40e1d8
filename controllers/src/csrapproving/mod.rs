//! The CSR approving controller (upstream's `csrapproving`): approves kubelets' client
//! requests (`kubernetes.io/kube-apiserver-client-kubelet`) when the requestor may create the
//! subresource upstream uses as the permission — `certificatesigningrequests/nodeclient` for a
//! new node (a bootstrap token), `…/selfnodeclient` for a node renewing its own certificate —
//! as a SubjectAccessReview says; and, as many distributions do, kubelets' serving requests
//! (`kubernetes.io/kubelet-serving`) that a node makes for its own name with only DNS and IP
//! SANs. Anything else it leaves alone, pending for a person or another approver.
//!
//! ```text
//!   CSR (pending) ─▶ decide ─▶ Ask(subresource…) ─▶ SubjectAccessReview ─allowed─▶ /approval Approved
//!                          └─▶ Approve(reason) ──────────────────────────────────▶ /approval Approved
//!                          └─▶ Ignore
//! ```

mod decide;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;
pub use decide::{decide, Decision, Permission};

pub struct Context {
    pub client: Client,
}

pub fn controller(
    informers: &Informers,
    client: Client,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let requests = informers.get::<CertificateSigningRequest>();
    let context = Arc::new(Context { client });
    let controller = Controller::for_shared_stream(
        counted(
            requests.changes,
            queue.clone(),
            |csr: &CertificateSigningRequest| Some(key_of(csr)),
        ),
        requests.store,
    );
    runner::run(
        "csrapproving",
        controller,
        context,
        queue,
        2,
        shutdown,
        reconcile,
    )
    .boxed()
}

/// Whether the requestor of `csr` may create the subresource `permission` names.
async fn permitted(
    client: &Client,
    csr: &CertificateSigningRequest,
    permission: Permission,
) -> Result<bool> {
    let spec = &csr.spec;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: spec.username.clone(),
            uid: spec.uid.clone(),
            groups: spec.groups.clone(),
            extra: spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(permission.subresource().into()),
                verb: Some("create".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

pub async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    context: Arc<Context>,
) -> Result<Action> {
    let (reason, message) = match decide(&csr) {
        Decision::Ignore => return Ok(Action::await_change()),
        Decision::Approve { reason, message } => (reason, message),
        Decision::Ask(permissions) => {
            let mut granted = None;
            for permission in permissions {
                if permitted(&context.client, &csr, permission).await? {
                    granted = Some(permission);
                    break;
                }
            }
            match granted {
                Some(permission) => (permission.reason(), permission.message()),
                None => {
                    tracing::debug!(csr = %csr.name_any(), "the requestor may not have it auto-approved");
                    return Ok(Action::await_change());
                }
            }
        }
    };
    let mut approved = csr.as_ref().clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    approved
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    let api = Api::<CertificateSigningRequest>::all(context.client.clone());
    match api
        .replace_subresource(
            "approval",
            &csr.name_any(),
            &PostParams::default(),
            &approved,
        )
        .await
    {
        Ok(_) => {
            tracing::info!(csr = %csr.name_any(), requestor = ?csr.spec.username, reason, "approved");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
pub(crate) mod tests;
