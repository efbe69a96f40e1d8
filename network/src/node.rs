//! A node's service networking as the agent runs it: the shared watch, the proxy (when
//! `nft` can program this network namespace) and the DNS server on the node's address (when
//! it can bind port 53 there). [`start`] returns once both have started or been left out, so
//! the agent can label its Node as a DNS server before registering it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::proxy::nft::{Cli, Nft};
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
    let metrics = Arc::new(proxy::Metrics::default());
    if !config.proxy && !config.dns {
        return Ok(Running {
            dns: None,
            proxy: false,
            metrics,
        });
    }
    let watched = watch(client, shutdown.clone());
    let mut proxying = false;
    if config.proxy {
        let nft = Cli::default();
        if nft.available().await {
            let mut proxy_config =
                proxy::Config::new(&config.node_name, config.cluster_cidrs.clone());
            proxy_config.rules.table = config.table.clone();
            let nft: Arc<dyn Nft> = Arc::new(nft);
            tracing::debug!("starting the service proxy");
            tokio::spawn(proxy::run(
                proxy_config,
                watched.clone(),
                nft,
                metrics.clone(),
                shutdown.clone(),
            ));
            proxying = true;
            if let Some(address) = config.metrics_address {
                match crate::metrics_server::serve(address, metrics.clone(), shutdown.clone()).await
                {
                    Ok(bound) => tracing::info!(%bound, "service proxy metrics serving"),
                    Err(error) => {
                        tracing::warn!(%error, %address, "the service proxy's metrics are not served")
                    }
                }
            }
        } else {
            tracing::warn!(
                "nftables is missing or may not be changed here (install the nftables package, \
                 run as root): Services are not routed on this node"
            );
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
