//! Starting an apiserver: open the storage, load or create the cluster PKI, bind, bootstrap
//! the cluster's namespaces and `kubernetes` Service, write the admin kubeconfig, and serve
//! HTTPS until shutdown.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use rudder_admission::{
    Chain, DefaultTolerationSeconds, NamespaceLifecycle, Priority, ServiceAccount,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::authn::{Authenticator, TokenFile};
use crate::authz::AlwaysAllow;
use crate::http::{router, AppState};
use crate::limits::Limits;
use crate::pki::{self, Pki};
use crate::registry::{self, Allocators, Registry};

/// How to run an apiserver.
#[derive(Clone, Debug)]
pub struct Config {
    pub storage_url: String,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub tls_sans: Vec<String>,
    pub token_auth_file: Option<PathBuf>,
    pub service_cluster_ip_range: String,
    pub service_node_port_range: String,
    /// Request and connection limits (upstream's defaults).
    pub limits: Limits,
}

impl Config {
    /// Defaults for a data dir and a storage URL (listen on 6443 everywhere).
    pub fn new(storage_url: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            storage_url: storage_url.into(),
            data_dir: data_dir.into(),
            listen: SocketAddr::from(([0, 0, 0, 0], 6443)),
            tls_sans: Vec::new(),
            token_auth_file: None,
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: "30000-32767".into(),
            limits: Limits::default(),
        }
    }
}

/// A running apiserver.
pub struct Running {
    /// The address it listens on (the real port when `listen` asked for port 0).
    pub addr: SocketAddr,
    /// The admin kubeconfig it wrote.
    pub kubeconfig: PathBuf,
    pub pki: Pki,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
    storage: Arc<dyn rudder_storage::Storage>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, and closes the storage.
    pub async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        self.task.await.context("apiserver task")??;
        self.storage.close().await;
        Ok(())
    }

    /// Waits until the server stops (after `shutdown` is cancelled elsewhere).
    pub async fn wait(self) -> Result<()> {
        self.task.await.context("apiserver task")??;
        self.storage.close().await;
        Ok(())
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

fn parse_port_range(text: &str) -> Result<std::ops::RangeInclusive<u16>> {
    let (low, high) = text
        .split_once('-')
        .with_context(|| format!("--service-node-port-range {text:?}: expected LOW-HIGH"))?;
    let low: u16 = low
        .trim()
        .parse()
        .with_context(|| format!("bad port {low:?}"))?;
    let high: u16 = high
        .trim()
        .parse()
        .with_context(|| format!("bad port {high:?}"))?;
    anyhow::ensure!(
        low <= high,
        "--service-node-port-range {text:?}: LOW exceeds HIGH"
    );
    Ok(low..=high)
}

/// The address other components reach this server at.
fn advertise_ip(listen: &SocketAddr) -> IpAddr {
    if !listen.ip().is_unspecified() {
        return listen.ip();
    }
    pki::host::local_addresses()
        .into_iter()
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// File descriptors kept for the store, the data dir and the process itself.
const RESERVED_FILES: u64 = 256;

/// Raises the soft open-file limit to the hard limit (a default soft limit of 1024 would let
/// a thousand idle sockets starve the server); returns the soft limit in force.
pub fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(error) => {
            tracing::warn!(%error, "could not raise the open-file limit");
            None
        }
    }
}

/// The connection cap: the configured one, lowered to what the open-file limit allows.
fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(open_files) = open_files else {
        return configured;
    };
    let allowed = usize::try_from(open_files.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX);
    if allowed < configured {
        tracing::info!(
            configured,
            allowed,
            "the open-file limit lowers the connection cap"
        );
    }
    configured.min(allowed).max(1)
}

/// Starts an apiserver.
pub async fn start(config: Config) -> Result<Running> {
    let cidr = registry::allocator_cidr(&config.service_cluster_ip_range)
        .map_err(|error| anyhow::anyhow!("--service-cluster-ip-range: {error}"))?;
    let node_ports = parse_port_range(&config.service_node_port_range)?;
    crate::data_dir::prepare(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    crate::data_dir::protect_sqlite_files(&config.storage_url)
        .context("making the SQLite database private")?;
    let mut limits = config.limits.clone();
    limits.max_connections = connection_cap(limits.max_connections, raise_open_file_limit());
    let storage = rudder_storage::open(&config.storage_url)
        .await
        .with_context(|| {
            format!(
                "opening storage {}",
                rudder_storage::config::redact(&config.storage_url)
            )
        })?;
    let allocators = Allocators::new(storage.clone(), cidr, node_ports);
    let first_service_ip = allocators.first_service_ip();
    let pki = Pki::load_or_create(
        &config.data_dir,
        &config.tls_sans,
        &[IpAddr::V4(first_service_ip)],
    )
    .context("loading the cluster PKI")?;
    let tls = pki.server_config().context("TLS configuration")?;
    let tokens = match &config.token_auth_file {
        Some(path) => Some(
            TokenFile::load(path)
                .with_context(|| format!("--token-auth-file {}", path.display()))?,
        ),
        None => None,
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;

    let namespaces = registry::StoredNamespaces::default();
    // Upstream's default order: NamespaceLifecycle first, then the pod plugins.
    let admission = Chain::new()
        .with_mutating(ServiceAccount)
        .with_mutating(Priority::new(namespaces.clone()))
        .with_mutating(DefaultTolerationSeconds)
        .with_validating(NamespaceLifecycle::new(namespaces.clone()));
    let registry = Registry::new(storage.clone(), Arc::new(admission), allocators);
    let _ = namespaces.registry.set(registry.clone());

    let advertise = advertise_ip(&addr);
    let state = AppState::new(
        registry.clone(),
        Authenticator::new(tokens),
        Arc::new(AlwaysAllow),
        SocketAddr::new(advertise, addr.port()).to_string(),
        &limits,
    );
    registry::bootstrap(&registry, addr.port(), &advertise.to_string())
        .await
        .map_err(|error| anyhow::anyhow!("bootstrapping the cluster: {error}"))?;
    state.mark_bootstrapped();

    let host = if addr.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        addr.ip()
    };
    let server_url = format!("https://{}", SocketAddr::new(host, addr.port()));
    let kubeconfig = config.data_dir.join("kubeconfig.yaml");
    pki::write_private_file(&kubeconfig, &pki::admin_kubeconfig(&pki, &server_url))
        .context("writing the admin kubeconfig")?;

    let shutdown = CancellationToken::new();
    let app = router(state);
    let task = tokio::spawn(crate::tls::serve(
        listener,
        tls,
        app,
        shutdown.clone(),
        limits,
    ));
    tracing::info!(%addr, url = %server_url, kubeconfig = %kubeconfig.display(), "apiserver listening");
    Ok(Running {
        addr,
        kubeconfig,
        pki,
        shutdown,
        task,
        storage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
        let raised = raise_open_file_limit().expect("getrlimit works here");
        let (soft, hard) = rlimit::Resource::NOFILE.get().expect("getrlimit");
        assert_eq!(soft, hard);
        assert_eq!(raised, soft);
    }

    #[test]
    fn the_connection_cap_leaves_room_for_the_store() {
        assert_eq!(connection_cap(10_000, Some(1024)), 768);
        assert_eq!(connection_cap(500, Some(1_000_000)), 500);
        assert_eq!(connection_cap(500, None), 500);
    }
}
