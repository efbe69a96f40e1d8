//! The node agent's service networking flags (`rudder agent` and `rudder server`'s own
//! agent): the proxy and cluster DNS of rudder-network, what pods' resolv.conf then points
//! at, and `--cleanup`.

use std::net::{IpAddr, SocketAddr};

use anyhow::Result;
use tokio_util::sync::CancellationToken;

/// The nftables table the proxy owns.
pub const TABLE: &str = "rudder";
/// The pod network when none is given (k3s' default; the default --pod-cidr lies in it).
pub const DEFAULT_CLUSTER_CIDR: &str = "10.42.0.0/16";
/// The cluster DNS address in the default service range (its tenth address).
pub const DEFAULT_CLUSTER_DNS: &str = "10.96.0.10";
/// The label that tells the controller-manager this node serves cluster DNS.
pub const DNS_NODE_LABEL: &str = "rudder.dev/cluster-dns";

#[derive(clap::Args, Clone, Debug)]
pub struct NetworkArgs {
    /// The pod network(s) of the cluster, comma-separated (an IPv4 and an IPv6 one make it
    /// dual-stack): node IPAM hands nodes' ranges out of them, and Service traffic from
    /// elsewhere is masqueraded.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CLUSTER_CIDR)]
    pub cluster_cidr: Vec<String>,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Do not route Services on this node (no nftables or iptables rules).
    #[arg(long)]
    pub disable_kube_proxy: bool,
    /// How Services are routed: `nftables`, `iptables`, or `auto` (nftables when `nft` works
    /// here, else iptables).
    #[arg(long, default_value = "auto", value_parser = proxy_mode())]
    pub proxy_mode: rudder_network::proxy::ProxyMode,
    /// Do not serve cluster DNS on this node's address.
    #[arg(long)]
    pub disable_cluster_dns: bool,
    /// Where the service proxy's metrics (`/metrics`, `/healthz`) are served, as
    /// kube-proxy's `--metrics-bind-address`; empty serves none.
    #[arg(long, default_value = "127.0.0.1:10249", value_parser = optional_address)]
    pub proxy_metrics_bind_address: std::option::Option<SocketAddr>,
}

/// `--proxy-mode`'s values, listed in `--help`.
fn proxy_mode() -> impl clap::builder::TypedValueParser<Value = rudder_network::proxy::ProxyMode> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["auto", "nftables", "iptables"])
        .map(|mode| mode.parse().unwrap_or_default())
}

/// Serves what `register` puts in a registry on `--metrics-bind-address` (when given) for
/// `component` (the standalone scheduler and controller-manager) until `shutdown`.
pub(crate) async fn serve_metrics(
    address: Option<SocketAddr>,
    component: &str,
    register: impl FnOnce(&mut prometheus_client::registry::Registry),
    shutdown: CancellationToken,
) -> Result<()> {
    let Some(address) = address else {
        return Ok(());
    };
    let mut registry = prometheus_client::registry::Registry::default();
    register(&mut registry);
    let bound = rudder_runtime::metrics_server::serve(address, registry, shutdown)
        .await
        .map_err(|error| {
            anyhow::anyhow!("serving the {component}'s metrics on {address}: {error}")
        })?;
    tracing::info!(%bound, component, "metrics serving");
    Ok(())
}

pub(crate) fn optional_address(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|error| format!("{text:?} is not HOST:PORT: {error}"))
}

impl NetworkArgs {
    /// The networking config for a node.
    pub fn node(&self, node_name: &str, node_ip: IpAddr) -> rudder_network::node::NodeNetwork {
        rudder_network::node::NodeNetwork {
            node_name: node_name.to_owned(),
            node_ip,
            // The service proxy routes IPv4 only; an IPv6 pod network is node IPAM's alone.
            cluster_cidrs: self
                .cluster_cidr
                .iter()
                .filter(|cidr| !cidr.contains(':'))
                .cloned()
                .collect(),
            cluster_domain: self.cluster_domain.clone(),
            proxy: !self.disable_kube_proxy,
            dns: !self.disable_cluster_dns,
            dns_port: 53,
            upstreams: rudder_network::dns::resolv_conf_upstreams(
                &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
            ),
            proxy_mode: self.proxy_mode,
            table: TABLE.into(),
            metrics_address: self.proxy_metrics_bind_address,
        }
    }
}

/// Starts the node's networking; returns it with the labels its Node should carry and the
/// DNS servers pods get (`given`, else `default_dns` when the proxy routes the DNS Service).
pub async fn start(
    args: &NetworkArgs,
    client: kube::Client,
    node_name: &str,
    node_ip: IpAddr,
    given_dns: &[String],
    default_dns: &str,
    shutdown: CancellationToken,
) -> Result<(
    rudder_network::node::Running,
    Vec<(String, String)>,
    Vec<String>,
)> {
    let running =
        rudder_network::node::start(args.node(node_name, node_ip), client, shutdown).await?;
    let mut labels = Vec::new();
    if running.dns.is_some() {
        labels.push((DNS_NODE_LABEL.to_owned(), "true".to_owned()));
    }
    let cluster_dns = if !given_dns.is_empty() {
        given_dns.to_vec()
    } else if running.proxy {
        vec![default_dns.to_owned()]
    } else {
        Vec::new()
    };
    if let Some(address) = running.dns {
        tracing::info!(%address, "cluster DNS serving");
    }
    Ok((running, labels, cluster_dns))
}

/// `rudder agent --cleanup`: deletes the proxy's nftables table and its iptables chains
/// (nothing else), with whichever of the two programs is here, and returns.
pub async fn cleanup() -> Result<()> {
    let nft = rudder_network::proxy::nft::Cli::default();
    let ipt = rudder_network::proxy::iptables::Cli::default();
    let (has_nft, has_ipt) = (nft.available().await, ipt.available().await);
    if !has_nft && !has_ipt {
        anyhow::bail!(
            "neither nft nor iptables can change this network namespace's rules (run as root)"
        );
    }
    if has_nft {
        rudder_network::proxy::cleanup(&nft, TABLE).await?;
        println!("deleted the nftables table ip {TABLE}");
    }
    if has_ipt {
        if rudder_network::proxy::iptables::cleanup(&ipt).await? {
            println!("deleted the iptables chains RUDDER-* and the jumps into them");
        } else {
            println!("no iptables chains RUDDER-* to delete");
        }
    }
    Ok(())
}
