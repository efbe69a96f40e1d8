//! What the cluster DNS Service's EndpointSlice and Endpoints should hold, from the Nodes: one
//! endpoint per node labelled [`NODE_LABEL`]`=true` with an IPv4 InternalIP, ready when the
//! Node is, on the Service's ports. Pure functions, and the comparisons that decide whether
//! what is stored needs a write.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Node, Service,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::endpoints::SERVICE_NAME;

/// The label (value `true`) of a node whose agent serves cluster DNS on its InternalIP.
pub const NODE_LABEL: &str = "rudder.dev/cluster-dns";
/// The cluster DNS Service's namespace.
pub const NAMESPACE: &str = "kube-system";
/// The cluster DNS Service, and its Endpoints.
pub const SERVICE: &str = "kube-dns";
/// The EndpointSlice this controller keeps.
pub const SLICE: &str = "kube-dns-nodes";
/// The `endpointslice.kubernetes.io/managed-by` value of that slice.
pub const MANAGED_BY: &str = "cluster-dns-endpoints.rudder.dev";
/// The most endpoints one EndpointSlice (and one Endpoints subset) may hold.
pub const MAX_ENDPOINTS: usize = 1000;

const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Tells the EndpointSlice mirroring of Endpoints to leave these alone (the slice is ours).
const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One node's DNS server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsServer {
    pub node: String,
    pub ip: String,
    pub ready: bool,
    pub zone: Option<String>,
}

/// One port the DNS servers answer on: `(name, protocol, port)` as the Service gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsPort {
    pub name: String,
    pub protocol: String,
    pub port: i32,
}

/// Whether `service` is the cluster DNS Service this controller keeps endpoints for: the
/// right name, not being deleted, and no selector (with one, the endpoints controllers own it).
pub fn is_managed(service: &Service) -> bool {
    let selector = service
        .spec
        .as_ref()
        .and_then(|spec| spec.selector.as_ref());
    service.name_any() == SERVICE
        && service.namespace().as_deref() == Some(NAMESPACE)
        && service.metadata.deletion_timestamp.is_none()
        && selector.is_none_or(BTreeMap::is_empty)
}

/// Whether the node's agent serves cluster DNS.
pub fn is_dns_node(node: &Node) -> bool {
    node.labels().get(NODE_LABEL).map(String::as_str) == Some("true")
}

/// The node's first InternalIP that is an IPv4 address.
pub fn internal_ipv4(node: &Node) -> Option<Ipv4Addr> {
    node.status
        .as_ref()?
        .addresses
        .iter()
        .flatten()
        .filter(|address| address.type_ == "InternalIP")
        .find_map(|address| address.address.parse::<Ipv4Addr>().ok())
}

pub use rudder_facts::nodes::is_ready;

/// The DNS servers of `nodes`, sorted by node name, at most [`MAX_ENDPOINTS`] (ready ones
/// kept first when there are more), and how many were left out.
pub fn servers(nodes: &[Arc<Node>]) -> (Vec<DnsServer>, usize) {
    let mut servers: Vec<DnsServer> = nodes
        .iter()
        .filter(|node| is_dns_node(node))
        .filter_map(|node| {
            Some(DnsServer {
                node: node.name_any(),
                ip: internal_ipv4(node)?.to_string(),
                ready: is_ready(node),
                zone: node.labels().get(ZONE_LABEL).cloned(),
            })
        })
        .collect();
    let left_out = servers.len().saturating_sub(MAX_ENDPOINTS);
    if left_out > 0 {
        servers.sort_by(|a, b| (!a.ready, &a.node).cmp(&(!b.ready, &b.node)));
        servers.truncate(MAX_ENDPOINTS);
    }
    servers.sort_by(|a, b| a.node.cmp(&b.node));
    (servers, left_out)
}

/// The Service's ports as the DNS servers answer them: a numeric target port, else the port.
pub fn ports(service: &Service) -> Vec<DnsPort> {
    service
        .spec
        .as_ref()
        .and_then(|spec| spec.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|port| DnsPort {
            name: port.name.clone().unwrap_or_default(),
            protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
            port: match port.target_port {
                Some(IntOrString::Int(target)) if target > 0 => target,
                _ => port.port,
            },
        })
        .collect()
}

fn owner(service: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.name_any(),
        uid: service.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn metadata(name: &str, service: &Service, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NAMESPACE.into()),
        labels: Some(
            labels
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        ),
        owner_references: Some(vec![owner(service)]),
        ..ObjectMeta::default()
    }
}

/// The EndpointSlice `kube-system/kube-dns-nodes`: every server, on the Service's ports.
pub fn slice_for(service: &Service, servers: &[DnsServer]) -> EndpointSlice {
    let endpoints = servers
        .iter()
        .map(|server| Endpoint {
            addresses: vec![server.ip.clone()],
            conditions: Some(EndpointConditions {
                ready: Some(server.ready),
                serving: Some(server.ready),
                terminating: Some(false),
            }),
            node_name: Some(server.node.clone()),
            zone: server.zone.clone(),
            ..Endpoint::default()
        })
        .collect();
    let ports = ports(service)
        .into_iter()
        .map(|port| SlicePort {
            name: Some(port.name),
            protocol: Some(port.protocol),
            port: Some(port.port),
            app_protocol: None,
        })
        .collect();
    EndpointSlice {
        metadata: metadata(
            SLICE,
            service,
            &[(SERVICE_NAME, SERVICE), (MANAGED_BY_LABEL, MANAGED_BY)],
        ),
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    }
}

/// The Endpoints `kube-system/kube-dns`: ready servers in `addresses`, the others in
/// `notReadyAddresses`, in one subset (none without servers).
pub fn endpoints_for(service: &Service, servers: &[DnsServer]) -> Endpoints {
    let address = |server: &DnsServer| EndpointAddress {
        ip: server.ip.clone(),
        node_name: Some(server.node.clone()),
        ..EndpointAddress::default()
    };
    let ready: Vec<EndpointAddress> = servers.iter().filter(|s| s.ready).map(address).collect();
    let not_ready: Vec<EndpointAddress> =
        servers.iter().filter(|s| !s.ready).map(address).collect();
    let ports: Vec<EndpointPort> = ports(service)
        .into_iter()
        .map(|port| EndpointPort {
            name: (!port.name.is_empty()).then_some(port.name),
            protocol: Some(port.protocol),
            port: port.port,
            app_protocol: None,
        })
        .collect();
    let subsets = (!servers.is_empty()).then(|| {
        vec![EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then_some(ports),
        }]
    });
    Endpoints {
        metadata: metadata(SERVICE, service, &[(SKIP_MIRROR_LABEL, "true")]),
        subsets,
    }
}

/// Whether `current`'s metadata lacks what `wanted` sets: its labels, its owner.
fn metadata_differs(current: &ObjectMeta, wanted: &ObjectMeta) -> bool {
    let labels = current.labels.as_ref();
    let labelled = wanted
        .labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.and_then(|labels| labels.get(key)) == Some(value));
    let owners = current.owner_references.as_deref().unwrap_or_default();
    let owned = wanted.owner_references.iter().flatten().all(|wanted| {
        owners
            .iter()
            .any(|owner| owner.uid == wanted.uid && owner.controller == Some(true))
    });
    !labelled || !owned
}

/// `current`'s metadata with `wanted`'s labels and owner added (another controller owner
/// dropped: there can be one only); everything else, the resource version included, kept.
fn merged_metadata(current: &ObjectMeta, wanted: &ObjectMeta) -> ObjectMeta {
    let mut merged = current.clone();
    let labels = merged.labels.get_or_insert_with(BTreeMap::new);
    for (key, value) in wanted.labels.iter().flatten() {
        labels.insert(key.clone(), value.clone());
    }
    let wanted_owners = wanted.owner_references.clone().unwrap_or_default();
    let mut owners: Vec<OwnerReference> = current
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| owner.controller != Some(true))
        .filter(|owner| wanted_owners.iter().all(|wanted| wanted.uid != owner.uid))
        .cloned()
        .collect();
    owners.extend(wanted_owners);
    merged.owner_references = Some(owners);
    merged
}

/// Whether the stored slice needs a write to become `wanted`.
pub fn slice_differs(current: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    current.address_type != wanted.address_type
        || current.endpoints != wanted.endpoints
        || current.ports.as_deref().unwrap_or_default()
            != wanted.ports.as_deref().unwrap_or_default()
        || metadata_differs(&current.metadata, &wanted.metadata)
}

/// `wanted` as a replacement of the stored `current`.
pub fn slice_update(current: &EndpointSlice, wanted: &EndpointSlice) -> EndpointSlice {
    EndpointSlice {
        metadata: merged_metadata(&current.metadata, &wanted.metadata),
        ..wanted.clone()
    }
}

/// A subset with absent and empty lists alike.
type Subset = (
    Vec<EndpointAddress>,
    Vec<EndpointAddress>,
    Vec<EndpointPort>,
);

fn subsets(endpoints: &Endpoints) -> Vec<Subset> {
    endpoints
        .subsets
        .iter()
        .flatten()
        .map(|subset| {
            (
                subset.addresses.clone().unwrap_or_default(),
                subset.not_ready_addresses.clone().unwrap_or_default(),
                subset.ports.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Whether the stored Endpoints need a write to become `wanted`.
pub fn endpoints_differ(current: &Endpoints, wanted: &Endpoints) -> bool {
    subsets(current) != subsets(wanted) || metadata_differs(&current.metadata, &wanted.metadata)
}

/// `wanted` as a replacement of the stored `current`.
pub fn endpoints_update(current: &Endpoints, wanted: &Endpoints) -> Endpoints {
    Endpoints {
        metadata: merged_metadata(&current.metadata, &wanted.metadata),
        subsets: wanted.subsets.clone(),
    }
}
