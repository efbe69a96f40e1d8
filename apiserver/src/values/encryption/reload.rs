//! `--encryption-provider-config-automatic-reload`: the file is read again every interval
//! and, when its text changed and the new configuration is valid, takes effect at once for
//! every write and read after it. An invalid file is reported (log and metric) and the
//! configuration in force stays, as upstream does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use std::sync::atomic::AtomicU64;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::kms::KmsContext;
use super::shared::Shared;
use super::{Current, Encryption};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    apiserver_id_hash: String,
    status: String,
}

/// Upstream's reload metrics.
#[derive(Default)]
pub struct ReloadMetrics {
    reloads: Family<ReloadLabels, Counter>,
    last: Family<ReloadLabels, Gauge<f64, AtomicU64>>,
    id_hash: String,
}

impl ReloadMetrics {
    /// Metrics labelled with the hash of this server's identity.
    pub fn new(server_id: &str) -> Self {
        let digest = Sha256::digest(server_id.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Self {
            id_hash: format!("sha256:{hex}"),
            ..Self::default()
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apiserver_encryption_config_controller_automatic_reloads",
            "Total number of reload successes and failures of encryption configuration split by apiserver identity",
            self.reloads.clone(),
        );
        registry.register(
            "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
            "Timestamp of the last successful or failed automatic reload of encryption configuration split by apiserver identity",
            self.last.clone(),
        );
    }

    fn record(&self, success: bool) {
        let labels = ReloadLabels {
            apiserver_id_hash: self.id_hash.clone(),
            status: if success { "success" } else { "failure" }.into(),
        };
        self.reloads.get_or_create(&labels).inc();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last.get_or_create(&labels).set(now);
    }
}

/// What to reload, how often, and what the configurations it builds share.
pub struct Reload {
    pub path: PathBuf,
    /// The text in force.
    pub loaded: String,
    pub interval: Duration,
    /// The server's KMS metrics and intervals, for the KMS providers of a new configuration.
    pub kms_context: KmsContext,
}

/// Re-reads `reload.path` every `reload.interval` until `shutdown`. A new configuration is
/// published to `shared` too, for the cluster's servers that follow it.
pub fn spawn_reload(
    current: Arc<Current>,
    reload: Reload,
    metrics: Arc<ReloadMetrics>,
    shared: Option<Shared>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) {
    let Reload {
        path,
        loaded,
        interval,
        kms_context,
    } = reload;
    tasks.spawn(async move {
        let mut in_force = loaded;
        let mut failed_text: Option<String> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let text = match tokio::fs::read_to_string(&path).await {
                Ok(text) => text,
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "reloading the encryption configuration: the file cannot be read; the one in force stays");
                    metrics.record(false);
                    continue;
                }
            };
            if text == in_force || failed_text.as_ref() == Some(&text) {
                continue;
            }
            match Encryption::parse_with(&text, &kms_context) {
                Ok(encryption) => {
                    current.replace(encryption);
                    failed_text = None;
                    metrics.record(true);
                    tracing::info!(path = %path.display(), "the encryption configuration was reloaded");
                    if let Some(shared) = &shared {
                        if let Err(error) = shared.publish(&text).await {
                            tracing::warn!(%error, "the cluster's other servers keep the encryption configuration they have");
                        }
                    }
                    in_force = text;
                }
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "the changed encryption configuration is invalid; the one in force stays");
                    failed_text = Some(text);
                    metrics.record(false);
                }
            }
        }
    });
}
