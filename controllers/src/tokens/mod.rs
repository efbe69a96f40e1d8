//! The tokens controller, as upstream's: a Secret of type `kubernetes.io/service-account-token`
//! naming a ServiceAccount (annotation `kubernetes.io/service-account.name`) gets a long-lived
//! token of that account in `data.token`, with `ca.crt` and `namespace`, and the account's uid
//! in the `kubernetes.io/service-account.uid` annotation; the apiserver accepts the token while
//! the Secret holds it. A Secret whose account is gone (or was recreated with another uid) is
//! deleted, so its token dies with the account. The token is minted by the cluster's
//! ServiceAccount key, which the manager is handed (it never leaves the process).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::informers::Informers;
use crate::runner::{self, counted, key_of};
use crate::workqueue::Queue;

/// The Secret type this controller fills.
pub const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the account.
pub const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
/// The annotation holding the account's uid.
pub const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";

/// What a legacy token is minted for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyToken {
    pub namespace: String,
    pub secret: String,
    pub account: String,
    pub account_uid: String,
}

/// Mints a legacy token with the cluster's ServiceAccount key.
pub type Minter = Arc<dyn Fn(&LegacyToken) -> std::result::Result<String, String> + Send + Sync>;

pub struct Context {
    pub client: Client,
    pub accounts: Store<ServiceAccount>,
    pub mint: Minter,
    pub ca_bundle: Option<String>,
}

fn account_of(secret: &Secret) -> Option<String> {
    (secret.type_.as_deref() == Some(TOKEN_TYPE))
        .then(|| secret.annotations().get(ACCOUNT_NAME).cloned())
        .flatten()
}

pub fn controller(
    informers: &Informers,
    client: Client,
    mint: Minter,
    ca_bundle: Option<String>,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let secrets = informers.get::<Secret>();
    let accounts = informers.get::<ServiceAccount>();
    let secret_store = secrets.store.clone();
    let context = Arc::new(Context {
        client,
        accounts: accounts.store.clone(),
        mint,
        ca_bundle,
    });
    let controller = Controller::for_shared_stream(
        counted(secrets.changes, queue.clone(), |secret: &Secret| {
            account_of(secret).map(|_| key_of(secret))
        }),
        secrets.store,
    )
    // An account that changes or goes wakes its token Secrets.
    .watches_shared_stream(accounts.changes, move |account: Arc<ServiceAccount>| {
        let (name, namespace) = (account.name_any(), account.namespace());
        secret_store
            .state()
            .iter()
            .filter(|secret| {
                secret.namespace() == namespace && account_of(secret).as_deref() == Some(&name)
            })
            .map(|secret| ObjectRef::from_obj(secret.as_ref()))
            .collect::<Vec<_>>()
    });
    runner::run(
        "serviceaccount-token",
        controller,
        context,
        queue,
        1,
        shutdown,
        reconcile,
    )
    .boxed()
}

pub async fn reconcile(secret: Arc<Secret>, context: Arc<Context>) -> Result<Action> {
    let Some(account_name) = account_of(&secret) else {
        return Ok(Action::await_change());
    };
    if secret.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = secret.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
    // The informer may be behind: a missing account is looked up live before it counts.
    let account = match context
        .accounts
        .get(&ObjectRef::new(&account_name).within(&namespace))
    {
        Some(account) => Some(account.as_ref().clone()),
        None => {
            Api::<ServiceAccount>::namespaced(context.client.clone(), &namespace)
                .get_opt(&account_name)
                .await?
        }
    };
    let pinned = secret.annotations().get(ACCOUNT_UID).cloned();
    let account = account.filter(|account| {
        pinned
            .as_deref()
            .is_none_or(|uid| account.uid().as_deref() == Some(uid))
    });
    let Some(account) = account else {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match secrets.delete(&secret.name_any(), &params).await {
            Ok(_) => {
                tracing::info!(secret = %secret.name_any(), %namespace, "deleted a token of a gone ServiceAccount")
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
        return Ok(Action::await_change());
    };
    let data = secret.data.clone().unwrap_or_default();
    let filled = ["token", "namespace"]
        .iter()
        .all(|key| data.get(*key).is_some_and(|value| !value.0.is_empty()))
        && (context.ca_bundle.is_none() || data.contains_key("ca.crt"))
        && pinned.is_some();
    if filled {
        return Ok(Action::await_change());
    }
    let uid = account.uid().unwrap_or_default();
    let token = (context.mint)(&LegacyToken {
        namespace: namespace.clone(),
        secret: secret.name_any(),
        account: account_name,
        account_uid: uid.clone(),
    })
    .map_err(crate::error::Error::Invalid)?;
    let mut updated = secret.as_ref().clone();
    let mut data: BTreeMap<String, ByteString> = data;
    data.insert("token".into(), ByteString(token.into_bytes()));
    data.insert(
        "namespace".into(),
        ByteString(namespace.clone().into_bytes()),
    );
    if let Some(bundle) = &context.ca_bundle {
        data.insert("ca.crt".into(), ByteString(bundle.clone().into_bytes()));
    }
    updated.data = Some(data);
    updated.string_data = None;
    updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ACCOUNT_UID.into(), uid);
    match secrets
        .replace(&secret.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Changed meanwhile: the next change brings it back.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Action::await_change()),
        Err(error) => Err(error.into()),
    }
}
