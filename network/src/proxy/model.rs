//! What the proxy programs, read off Services and EndpointSlices: one [`ServicePort`] per
//! port of every Service that has a cluster IP (headless, ExternalName and Services that name
//! another proxy through `service.kubernetes.io/service-proxy-name` get none), with the
//! endpoints upstream's proxy would use for it — ready ones, or when none is ready the serving
//! terminating ones — cluster-wide and on this node.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

/// The label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Services with this label are programmed by the proxy it names, not by this one.
pub const PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Session affinity's default timeout (3 h), as upstream.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// A transport protocol a Service port can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn parse(text: Option<&str>) -> Option<Self> {
        match text.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// nftables' name for it.
    pub fn nft(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// One endpoint (address and port) of a Service port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// One port of one Service, with what its traffic may go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    /// The port's name (empty for a Service's only, unnamed port).
    pub port_name: String,
    pub protocol: Protocol,
    pub cluster_ips: Vec<Ipv4Addr>,
    /// spec.externalIPs and LoadBalancer ingress IPs: treated as external traffic.
    pub external_ips: Vec<Ipv4Addr>,
    pub port: u16,
    pub node_port: Option<u16>,
    /// `sessionAffinity: ClientIP`'s timeout.
    pub affinity_seconds: Option<u32>,
    /// `externalTrafficPolicy: Local` (for NodePorts and external IPs).
    pub external_local: bool,
    /// `internalTrafficPolicy: Local` (for the cluster IPs).
    pub internal_local: bool,
    /// What cluster-wide traffic goes to.
    pub cluster: Vec<Backend>,
    /// What node-local traffic goes to: the endpoints on this node.
    pub local: Vec<Backend>,
    /// Some endpoint exists at all, ready or not (upstream says "no endpoints" otherwise).
    pub has_endpoints: bool,
}

impl ServicePort {
    /// `namespace/name/protocol/port-name`: the key chains are named after.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.namespace,
            self.name,
            self.protocol.nft(),
            self.port_name
        )
    }
}

/// Every programmable Service port, ordered by key.
pub fn service_ports(
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    node_name: &str,
) -> Vec<ServicePort> {
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in slices {
        let (Some(namespace), Some(service)) = (
            slice.metadata.namespace.as_ref(),
            slice
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(SERVICE_NAME_LABEL)),
        ) else {
            continue;
        };
        if slice.address_type != "IPv4" {
            continue;
        }
        by_service
            .entry((namespace.clone(), service.clone()))
            .or_default()
            .push(slice);
    }
    let mut ports = Vec::new();
    for service in services {
        let key = (
            service.metadata.namespace.clone().unwrap_or_default(),
            service.metadata.name.clone().unwrap_or_default(),
        );
        let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        ports.extend(ports_of(service, slices, node_name));
    }
    ports.sort_by_key(ServicePort::key);
    ports
}

fn ports_of(service: &Service, slices: &[&EndpointSlice], node_name: &str) -> Vec<ServicePort> {
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let proxied_elsewhere = service
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(PROXY_NAME_LABEL));
    if proxied_elsewhere || spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let cluster_ips: Vec<Ipv4Addr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if cluster_ips.is_empty() {
        // Headless (or not yet allocated): DNS's business, not the proxy's.
        return Vec::new();
    }
    let ingress = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    let external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .cloned()
        .chain(ingress.into_iter().flatten().filter_map(|i| i.ip.clone()))
        .filter_map(|ip| ip.parse().ok())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_SECONDS)
    });
    let node_ports_wanted = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let mut ports = Vec::new();
    for port in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
            continue;
        };
        let Ok(number) = u16::try_from(port.port) else {
            continue;
        };
        let port_name = port.name.clone().unwrap_or_default();
        let endpoints = endpoints_for(slices, &port_name, protocol);
        let pick = |mine: bool| {
            choose(
                endpoints
                    .iter()
                    .filter(|e| !mine || e.node.as_deref() == Some(node_name)),
            )
        };
        ports.push(ServicePort {
            namespace: service.metadata.namespace.clone().unwrap_or_default(),
            name: service.metadata.name.clone().unwrap_or_default(),
            port_name,
            protocol,
            cluster_ips: cluster_ips.clone(),
            external_ips: external_ips.clone(),
            port: number,
            node_port: port
                .node_port
                .filter(|_| node_ports_wanted)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0),
            affinity_seconds,
            external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            cluster: pick(false),
            local: pick(true),
            has_endpoints: !endpoints.is_empty(),
        });
    }
    ports
}

/// An endpoint as the slices describe it for one port.
#[derive(Debug)]
struct Candidate {
    backend: Backend,
    ready: bool,
    serving: bool,
    terminating: bool,
    node: Option<String>,
}

fn endpoints_for(slices: &[&EndpointSlice], port_name: &str, protocol: Protocol) -> Vec<Candidate> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for slice in slices {
        let number = slice.ports.iter().flatten().find_map(|p| {
            let same_name = p.name.as_deref().unwrap_or("") == port_name;
            let same_protocol = Protocol::parse(p.protocol.as_deref()) == Some(protocol);
            (same_name && same_protocol)
                .then_some(p.port)
                .flatten()
                .and_then(|n| u16::try_from(n).ok())
        });
        let Some(number) = number else { continue };
        for endpoint in &slice.endpoints {
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let backend = Backend { ip, port: number };
            if !seen.insert(backend) {
                continue;
            }
            found.push(candidate(endpoint, backend));
        }
    }
    found
}

fn candidate(endpoint: &Endpoint, backend: Backend) -> Candidate {
    let conditions = endpoint.conditions.as_ref();
    let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
    Candidate {
        backend,
        ready,
        serving: conditions.and_then(|c| c.serving).unwrap_or(ready),
        terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
        node: endpoint.node_name.clone(),
    }
}

/// Ready endpoints; when none is ready, the serving ones that are terminating.
fn choose<'a>(candidates: impl Iterator<Item = &'a Candidate> + Clone) -> Vec<Backend> {
    let ready: Vec<Backend> = candidates
        .clone()
        .filter(|c| c.ready)
        .map(|c| c.backend)
        .collect();
    let mut chosen = if ready.is_empty() {
        candidates
            .filter(|c| c.serving && c.terminating)
            .map(|c| c.backend)
            .collect()
    } else {
        ready
    };
    chosen.sort();
    chosen
}
