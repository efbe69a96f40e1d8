//! kube-proxy's role: every Service's cluster IPs, NodePorts and external IPs routed to its
//! endpoints. In nftables mode (the default) from one table of Rudder's own (`ip rudder` by
//! default; no other table is touched): each change of Services or EndpointSlices is turned
//! into the desired [`ruleset::Ruleset`] and only the difference is applied, in one `nft -f`
//! transaction. In iptables mode ([`iptables`], where nftables cannot be used) from chains
//! of Rudder's own, only the changed ones rewritten by `iptables-restore`. Either way the
//! rules are written whole at start, after a failure and every `full_sync_period`, from the
//! same [`model`]. `cleanup` deletes the table (`rudder agent --cleanup`), and
//! [`iptables::cleanup`] the chains.

pub mod backend;
pub mod iptables;
pub mod metrics;
pub mod model;
pub mod nft;
pub mod rules;
pub mod ruleset;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::Watched;
pub use backend::{Backend, ProxyMode};
pub use metrics::Metrics;
pub use rules::RuleConfig;

/// The annotation the EndpointSlice controller stamps with the time of the change that
/// triggered a write (network programming latency is measured from it).
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

#[derive(Clone, Debug)]
pub struct Config {
    pub node_name: String,
    pub rules: RuleConfig,
    /// The least time between two syncs (a burst of changes becomes one transaction).
    pub min_sync_period: Duration,
    /// How often the table is rewritten whole even when nothing seemed to change.
    pub full_sync_period: Duration,
}

impl Config {
    pub fn new(node_name: &str, cluster_cidrs: Vec<String>) -> Self {
        Self {
            node_name: node_name.to_owned(),
            rules: RuleConfig {
                table: "rudder".into(),
                cluster_cidrs,
            },
            min_sync_period: Duration::from_millis(100),
            full_sync_period: Duration::from_secs(3600),
        }
    }
}

/// Deletes the proxy's table (and nothing else).
pub async fn cleanup(nft: &dyn nft::Nft, table: &str) -> anyhow::Result<()> {
    nft.apply(&format!("add table ip {table}\ndelete table ip {table}\n"))
        .await
}

/// Keeps the rules in step with `watched` until `shutdown`.
pub async fn run(
    config: Config,
    mut watched: Watched,
    backend: Backend,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    tracing::debug!("service proxy waiting for the first lists");
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        _ = watched.ready() => {}
    }
    tracing::info!(mode = backend.name(), table = %config.rules.table, "service proxy started");
    let mut programmer = backend::Programmer::new(&backend, &config.rules);
    let mut last_full = Instant::now();
    let mut seen_slices: HashMap<String, String> = HashMap::new();
    loop {
        let started = Instant::now();
        let generation = *watched.changes.borrow_and_update();
        let services = watched.services.state();
        let slices = watched.slices.state();
        let ports = model::service_ports(&services, &slices, &config.node_name);
        let full = programmer.fresh() || last_full.elapsed() >= config.full_sync_period;
        match programmer.program(&ports, full).await {
            Ok(lines) => {
                if full {
                    last_full = Instant::now();
                }
                metrics.synced(started.elapsed(), full, ports.len(), generation);
                if let Some((nat, filter)) = programmer.iptables_rules() {
                    metrics.iptables_rules(nat, filter);
                }
                tracing::debug!(
                    full,
                    service_ports = ports.len(),
                    lines,
                    took_ms = started.elapsed().as_millis() as u64,
                    "service rules synced"
                );
                observe_programming(&metrics, &slices, &mut seen_slices);
            }
            Err(error) => {
                tracing::warn!(%error, full, mode = backend.name(), "programming the service rules failed; rewriting them whole next");
                metrics.failed();
                programmer.forget();
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        }
        let next_full = config.full_sync_period.saturating_sub(last_full.elapsed());
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            changed = watched.changes.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            _ = tokio::time::sleep(next_full) => {}
        }
        let since = started.elapsed();
        if since < config.min_sync_period {
            tokio::time::sleep(config.min_sync_period - since).await;
        }
    }
}

/// For each slice written since the last sync, the time from the change that triggered it
/// to its rules being in place.
fn observe_programming(
    metrics: &Metrics,
    slices: &[Arc<k8s_openapi::api::discovery::v1::EndpointSlice>],
    seen: &mut HashMap<String, String>,
) {
    let first = seen.is_empty();
    let now = unix_now();
    let mut current = HashMap::with_capacity(slices.len());
    for slice in slices {
        let (Some(uid), Some(version)) = (
            slice.metadata.uid.clone(),
            slice.metadata.resource_version.clone(),
        ) else {
            continue;
        };
        let changed = seen.get(&uid) != Some(&version);
        if changed && !first {
            let trigger = slice
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRIGGER_TIME_ANNOTATION))
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
            if let Some(trigger) = trigger {
                let seconds = (now - trigger.as_millisecond() as f64 / 1000.0).max(0.0);
                metrics.programmed(seconds);
            }
        }
        current.insert(uid, version);
    }
    *seen = current;
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}
