//! One identity per controller (upstream's `--use-service-account-credentials`): the manager
//! keeps its own (the shared informers, leader election, the tokens controller) and gives each
//! controller a client that authenticates as the ServiceAccount `kube-system/<account>`, so the
//! API holds each controller to its own `system:controller:<account>` role.
//!
//! [`SERVICE_ACCOUNTS`] is the one table of which controller runs as which account: a new
//! controller adds a line there (and its role goes in the apiserver's default policy,
//! `authz/rbac/defaults/controllers.rs`); a controller not in the table runs as the manager.
//! For each account the manager makes sure the ServiceAccount exists, obtains a token for it
//! with a TokenRequest and renews it before it expires; every client of that account reads the
//! current token on each request.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// Which ServiceAccount (in [`NAMESPACE`]) each controller runs as, by controller name (as
/// `--controllers` names them). The tokens controller is left out on purpose: it runs as the
/// manager, as upstream's, since it makes the credentials the others use.
pub const SERVICE_ACCOUNTS: &[(&str, &str)] = &[
    ("serviceaccount", "service-account-controller"),
    ("root-ca-cert-publisher", "root-ca-cert-publisher"),
    ("namespace", "namespace-controller"),
    ("garbage-collector", "generic-garbage-collector"),
    ("replicaset", "replicaset-controller"),
    ("deployment", "deployment-controller"),
    ("statefulset", "statefulset-controller"),
    ("daemonset", "daemon-set-controller"),
    ("endpoints", "endpoint-controller"),
    ("endpointslice", "endpointslice-controller"),
    (
        "endpointslicemirroring",
        "endpointslicemirroring-controller",
    ),
    ("cluster-dns-endpoints", "cluster-dns-endpoints-controller"),
    ("job", "job-controller"),
    ("cronjob", "cronjob-controller"),
    ("ttl-after-finished", "ttl-after-finished-controller"),
    (
        "clusterrole-aggregation",
        "clusterrole-aggregation-controller",
    ),
    ("pod-garbage-collector", "pod-garbage-collector"),
    ("disruption", "disruption-controller"),
    ("resourcequota", "resourcequota-controller"),
    ("csrapproving", "certificate-controller"),
    ("csrsigning", "certificate-controller"),
    ("node-lifecycle", "node-controller"),
    ("taint-eviction-controller", "node-controller"),
    ("nodeipam", "node-controller"),
    ("persistentvolume-binder", "persistent-volume-binder"),
    // Rudder's in-process provisioner writes the volumes the binder binds.
    ("local-path-provisioner", "persistent-volume-binder"),
    ("pvc-protection", "pvc-protection-controller"),
    ("pv-protection", "pv-protection-controller"),
];

/// Where the controllers' ServiceAccounts are.
pub const NAMESPACE: &str = "kube-system";

/// How long a requested token lives (upstream's controller tokens: an hour).
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// How long to wait before asking again after a failed TokenRequest.
const RETRY: Duration = Duration::from_secs(5);

/// The ServiceAccount `controller` runs as, if it has one.
pub fn service_account(controller: &str) -> Option<&'static str> {
    SERVICE_ACCOUNTS
        .iter()
        .find(|(name, _)| *name == controller)
        .map(|(_, account)| *account)
}

/// When to renew a token that lives `lifetime`: at 80% of it, as client-go's token source
/// does, so a slow or failing renewal has a fifth of the lifetime to succeed.
pub fn renew_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(0.8)
}

/// The clients controllers work with.
pub struct Clients {
    /// The manager's own.
    manager: Client,
    /// The cluster's connection settings without the manager's credentials; `None`: every
    /// controller uses the manager's client.
    base: Option<kube::Config>,
    /// Each account's current token, shared by its clients and renewed in the background.
    tokens: tokio::sync::Mutex<HashMap<&'static str, Arc<RwLock<String>>>>,
}

impl Clients {
    /// Controllers use `manager` unless `per_controller` gives the connection settings (the
    /// manager's kubeconfig) to make clients of their own accounts from.
    pub fn new(manager: Client, per_controller: Option<kube::Config>) -> Self {
        let base = per_controller.map(|mut config| {
            config.auth_info = kube::config::AuthInfo::default();
            config
        });
        Self {
            manager,
            base,
            tokens: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The client `controller` works with: its account's, or the manager's when it has none
    /// or accounts are off. Waits for a first token (retrying) until `shutdown`; `None` then.
    pub async fn for_controller(
        &self,
        controller: &str,
        shutdown: &CancellationToken,
    ) -> Option<Client> {
        let (Some(base), Some(account)) = (&self.base, service_account(controller)) else {
            return Some(self.manager.clone());
        };
        let token = self.token(account, shutdown).await?;
        match bearer_client(base, token) {
            Ok(client) => Some(client),
            Err(error) => {
                tracing::error!(controller, account, %error, "no client for the controller's account; it runs as the manager");
                Some(self.manager.clone())
            }
        }
    }

    /// The shared token of `account`: obtained on first use, then renewed in the background
    /// until `shutdown`.
    async fn token(
        &self,
        account: &'static str,
        shutdown: &CancellationToken,
    ) -> Option<Arc<RwLock<String>>> {
        let mut tokens = self.tokens.lock().await;
        if let Some(token) = tokens.get(account) {
            return Some(token.clone());
        }
        let first = loop {
            match request_token(&self.manager, account).await {
                Ok(token) => break token,
                Err(error) => {
                    tracing::warn!(account, %error, "no token for the controller's ServiceAccount yet");
                    tokio::select! {
                        () = shutdown.cancelled() => return None,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
        let token = Arc::new(RwLock::new(first));
        tokens.insert(account, token.clone());
        tokio::spawn(renew(
            self.manager.clone(),
            account,
            token.clone(),
            shutdown.clone(),
        ));
        Some(token)
    }
}

/// Renews `account`'s token before it expires, until `shutdown`.
async fn renew(
    manager: Client,
    account: &'static str,
    token: Arc<RwLock<String>>,
    shutdown: CancellationToken,
) {
    let mut wait = renew_after(TOKEN_LIFETIME);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        match request_token(&manager, account).await {
            Ok(renewed) => {
                if let Ok(mut current) = token.write() {
                    *current = renewed;
                }
                tracing::debug!(account, "renewed the controller's token");
                wait = renew_after(TOKEN_LIFETIME);
            }
            Err(error) => {
                tracing::warn!(account, %error, "renewing the controller's token failed; retrying");
                wait = RETRY;
            }
        }
    }
}

/// Makes sure `kube-system/<account>` exists and asks for a token of it.
async fn request_token(manager: &Client, account: &str) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(manager.clone(), NAMESPACE);
    if accounts.get_opt(account).await?.is_none() {
        let wanted = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(account.to_string()),
                namespace: Some(NAMESPACE.to_string()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match accounts.create(&PostParams::default(), &wanted).await {
            Ok(_) => tracing::info!(account, "created the controller's ServiceAccount"),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_LIFETIME.as_secs() as i64),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await?;
    answer
        .status
        .map(|status| status.token)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| Error::Invalid(format!("the TokenRequest for {account} gave no token")))
}

/// A client of `base`'s cluster that sends the current `token` as its bearer token.
fn bearer_client(base: &kube::Config, token: Arc<RwLock<String>>) -> Result<Client> {
    let builder = kube::client::ClientBuilder::try_from(base.clone())?;
    let layer =
        tower::util::MapRequestLayer::new(move |mut request: http::Request<kube::client::Body>| {
            let current = token.read().map(|token| token.clone()).unwrap_or_default();
            if let Ok(mut value) = http::HeaderValue::from_str(&format!("Bearer {current}")) {
                value.set_sensitive(true);
                request
                    .headers_mut()
                    .insert(http::header::AUTHORIZATION, value);
            }
            request
        });
    Ok(builder.with_layer(&layer).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_in_the_table_is_known() {
        for (controller, account) in SERVICE_ACCOUNTS {
            assert!(crate::selection::ALL.contains(controller), "{controller}");
            assert!(!account.is_empty());
        }
        // The tokens controller makes credentials: it keeps the manager's own.
        assert_eq!(service_account("serviceaccount-token"), None);
        assert_eq!(service_account("replicaset"), Some("replicaset-controller"));
        assert_eq!(
            service_account("csrsigning"),
            service_account("csrapproving")
        );
    }

    #[test]
    fn every_running_controller_but_the_tokens_one_has_an_account() {
        for controller in crate::selection::ALL {
            assert_eq!(
                service_account(controller).is_none(),
                *controller == "serviceaccount-token",
                "{controller}"
            );
        }
    }

    #[test]
    fn tokens_are_renewed_at_four_fifths_of_their_lifetime() {
        assert_eq!(
            renew_after(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        assert!(renew_after(TOKEN_LIFETIME) < TOKEN_LIFETIME);
    }
}
