//! One encryption configuration for every server of a cluster. A server started with
//! `--encryption-provider-config` publishes the file's text to the store, sealed with the
//! cluster token as the cluster's CA is (`pki/cluster.rs`); a server of the same cluster
//! started without the flag takes the published configuration, and every such server follows
//! later publications (checked every reload interval, a minute by default). So a key is added,
//! moved first or dropped on one server's file (with automatic reload) and the others follow,
//! and no server of the cluster writes Secrets in the clear beside servers that encrypt them.
//!
//! A server's own file always wins on that server. A KMS provider's socket is a path on each
//! server's machine: every server that takes such a configuration needs its plugin there.

use std::sync::Arc;
use std::time::Duration;

use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::kms::KmsContext;
use super::{Current, Encryption};
use crate::pki::cluster;

/// Where the sealed configuration lives in the store.
pub const KEY: &str = "/registry/rudder/cluster/encryption-config";

/// The store and the token a configuration is published with.
#[derive(Clone)]
pub struct Shared {
    pub storage: Arc<dyn Storage>,
    pub token: String,
}

impl Shared {
    /// Publishes `text` (a configuration already checked) for the cluster's other servers.
    pub async fn publish(&self, text: &str) -> Result<(), String> {
        let sealed = cluster::seal(text.as_bytes(), &self.token, KEY)
            .map_err(|error| format!("sealing the encryption configuration: {error}"))?;
        self.storage
            .put(KEY.as_bytes(), &sealed, 0)
            .await
            .map_err(|error| format!("publishing the encryption configuration: {error}"))?;
        Ok(())
    }

    /// The configuration text another server published, if any.
    pub async fn fetch(&self) -> Result<Option<String>, String> {
        let Some(kv) =
            self.storage.get(KEY.as_bytes(), 0).await.map_err(|error| {
                format!("reading the cluster's encryption configuration: {error}")
            })?
        else {
            return Ok(None);
        };
        let opened = cluster::open(&kv.value, &self.token, KEY)
            .map_err(|error| format!("the cluster's encryption configuration: {error}"))?;
        String::from_utf8(opened)
            .map(Some)
            .map_err(|_| "the cluster's encryption configuration is not text".to_string())
    }
}

/// Follows the published configuration until `shutdown`: every `interval`, a changed text
/// that parses replaces the one in force (`loaded`); one that does not is logged and the one
/// in force stays.
pub fn spawn_follow(
    current: Arc<Current>,
    shared: Shared,
    loaded: String,
    interval: Duration,
    kms_context: KmsContext,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) {
    tasks.spawn(async move {
        let mut in_force = loaded;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let text = match shared.fetch().await {
                Ok(Some(text)) => text,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, "following the cluster's encryption configuration; the one in force stays");
                    continue;
                }
            };
            if text == in_force {
                continue;
            }
            match Encryption::parse_with(&text, &kms_context) {
                Ok(encryption) => {
                    current.replace(encryption);
                    in_force = text;
                    tracing::info!("took the cluster's changed encryption configuration");
                }
                Err(error) => {
                    tracing::error!(%error, "the cluster's changed encryption configuration is invalid; the one in force stays");
                    in_force = text;
                }
            }
        }
    });
}
