//! A node's service networking as the agent runs it: the shared watch, the proxy (in the
//! mode asked for — nftables, or iptables where `nft` cannot program this network
//! namespace) and the DNS server on the node's address (when it can bind port 53 there). [`start`] returns once both have started or been left out, so
//! the agent can label its Node as a DNS server before registering it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::proxy::{iptables, nft, Backend, ProxyMode};
use crate::{dns, proxy, watch};

/// What the agent asked for.
#[derive(Clone, Debug)]
pub struct NodeNetwork {
    pub node_name: String,
    pub node_ip: IpAddr,
    /// The pod network(s), for the masquerade decision.
    pub cluster_cidrs: Vec<String>,
    pub cluster_domain: String,
    pub proxy: bool,
    pub dns: bool,
    /// The DNS server's port on the node address (53).
    pub dns_port: u16,
    /// Where names outside the cluster go (the node's resolvers).
    pub upstreams: Vec<SocketAddr>,
    /// nftables, iptables, or whichever works (nftables first).
    pub proxy_mode: ProxyMode,
    /// The nftables table.
    pub table: String,
    /// Where the proxy's metrics are served (none: not served).
    pub metrics_address: Option<SocketAddr>,
}

/// What is running.
pub struct Running {
    /// The DNS server's address, when one serves.
    pub dns: Option<SocketAddr>,
    /// Whether the proxy programs this node.
    pub proxy: bool,
    pub metrics: Arc<proxy::Metrics>,
}

/// Starts what `config` asks for and this node allows; the tasks stop with `shutdown`.
pub async fn start(
    config: NodeNetwork,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<Running> {
    let backend = if config.proxy {
        match Backend::choose(
            config.proxy_mode,
            nft::Cli::default(),
            iptables::Cli::default(),
        )
        .await
        {
            Ok(backend) => Some(backend),
            Err(why) => {
                tracing::warn!("{why}: Services are not routed on this node");
                None
            }
        }
    } else {
        None
    };
    let metrics = Arc::new(match &backend {
        Some(backend) => proxy::Metrics::for_backend(backend),
        None => proxy::Metrics::default(),
    });
    if !config.proxy && !config.dns {
        return Ok(Running {
            dns: None,
            proxy: false,
            metrics,
        });
    }
    let watched = watch(client, shutdown.clone());
    let proxying = backend.is_some();
    if let Some(backend) = backend {
        tracing::info!(
            asked = config.proxy_mode.as_str(),
            "service proxy mode: {}",
            backend.name()
        );
        remove_other_modes_rules(&backend, &config.table).await;
        let mut proxy_config = proxy::Config::new(&config.node_name, config.cluster_cidrs.clone());
        proxy_config.rules.table = config.table.clone();
        tracing::debug!("starting the service proxy");
        tokio::spawn(proxy::run(
            proxy_config,
            watched.clone(),
            backend,
            metrics.clone(),
            shutdown.clone(),
        ));
        if let Some(address) = config.metrics_address {
            let mut registry = prometheus_client::registry::Registry::default();
            metrics.register(&mut registry);
            match rudder_runtime::metrics_server::serve(address, registry, shutdown.clone()).await {
                Ok(bound) => tracing::info!(%bound, "service proxy metrics serving"),
                Err(error) => {
                    tracing::warn!(%error, %address, "the service proxy's metrics are not served")
                }
            }
        }
    }
    let mut dns_address = None;
    if config.dns {
        let mut dns_config = dns::Config::new(
            SocketAddr::new(config.node_ip, config.dns_port),
            config.upstreams.clone(),
        );
        dns_config.cluster_domain = config.cluster_domain.clone();
        match dns::Server::bind(dns_config).await {
            Ok(server) => {
                dns_address = Some(server.local_addr());
                let records = dns::follow(
                    watched.clone(),
                    config.cluster_domain.clone(),
                    shutdown.clone(),
                );
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    if let Err(error) = server.run(records, shutdown).await {
                        tracing::error!(%error, "the cluster DNS server stopped");
                    }
                });
            }
            Err(error) => tracing::warn!(
                %error,
                "no cluster DNS on this node (port {} on {} is taken or not allowed)",
                config.dns_port,
                config.node_ip
            ),
        }
    }
    Ok(Running {
        dns: dns_address,
        proxy: proxying,
        metrics,
    })
}

/// Rules the other mode left (an earlier run in it) would route Services too, and wrongly
/// once they go stale: removed, as upstream's kube-proxy does at start, when that mode's
/// program is here.
async fn remove_other_modes_rules(chosen: &Backend, table: &str) {
    let removed = match chosen {
        Backend::Nftables(_) => {
            let ipt = iptables::Cli::default();
            if !ipt.available().await {
                return;
            }
            iptables::cleanup(&ipt).await.map(|_| "iptables chains")
        }
        Backend::Iptables(_) => {
            let nft = nft::Cli::default();
            if !nft.available().await {
                return;
            }
            proxy::cleanup(&nft, table).await.map(|()| "nftables table")
        }
    };
    match removed {
        Ok(what) => tracing::debug!("removed any {what} of the other proxy mode"),
        Err(error) => tracing::warn!(%error, "removing the other proxy mode's rules failed"),
    }
}
