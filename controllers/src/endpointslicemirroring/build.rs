//! The EndpointSlices an Endpoints object is mirrored into — pure, so it is tested without an
//! API. Addresses sharing an address type and a port list share one slice (subsets with the
//! same ports merge); ready addresses are `ready: true`, not-ready ones `ready: false`; at most
//! [`MAX_PER_SUBSET`] addresses of each subset are mirrored, and addresses that are not IPs are
//! skipped. Slices carry the Endpoints' labels and annotations (less the change-trigger time
//! and kubectl's last-applied configuration), the service-name and managed-by labels, and the
//! Endpoints as their controlling owner.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

/// The `endpointslice.kubernetes.io/managed-by` value of mirrored slices.
pub const MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";
/// Endpoints labelled with this set to `"true"` are not mirrored (the Endpoints controller's).
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// An Endpoints used as a leader-election lock carries this; it is not mirrored.
pub const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";
/// Upstream's default `--mirroring-max-endpoints-per-subset`.
pub const MAX_PER_SUBSET: usize = 1000;
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const SERVICE_NAME: &str = "kubernetes.io/service-name";
const NOT_COPIED: &[&str] = &[
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// What mirroring wants, and what it had to leave out.
#[derive(Debug, Default)]
pub struct Mirror {
    /// One slice per (address type, ports), without a name (`generateName` is set).
    pub slices: Vec<EndpointSlice>,
    /// Addresses that are not IPs.
    pub invalid: usize,
    /// Addresses beyond [`MAX_PER_SUBSET`] in their subset.
    pub over_capacity: usize,
}

/// Whether `endpoints` may be mirrored at all (its Service is checked elsewhere).
pub fn wants_mirroring(endpoints: &Endpoints) -> bool {
    endpoints.labels().get(SKIP_MIRROR).map(String::as_str) != Some("true")
        && !endpoints.annotations().contains_key(LEADER_ANNOTATION)
}

/// The label selector that finds the slices mirrored from the Endpoints `name`.
pub fn selector(name: &str) -> String {
    format!("{SERVICE_NAME}={name},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The grouping key of a slice: its address type and its ports (as JSON, to be ordered).
pub fn group_of(slice: &EndpointSlice) -> (String, String) {
    group_key(
        &slice.address_type,
        slice.ports.as_deref().unwrap_or_default(),
    )
}

fn group_key(family: &str, ports: &[EndpointPort]) -> (String, String) {
    let ports = serde_json::to_string(ports).unwrap_or_default();
    (family.to_string(), ports)
}

fn endpoint(address: &EndpointAddress, ready: bool) -> Option<(String, Endpoint)> {
    let ip: IpAddr = address.ip.parse().ok()?;
    let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let endpoint = Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: None,
            terminating: None,
        }),
        hostname: address.hostname.clone().filter(|h| !h.is_empty()),
        node_name: address.node_name.clone(),
        target_ref: address.target_ref.clone(),
        ..Endpoint::default()
    };
    Some((family.to_string(), endpoint))
}

/// The slices `endpoints` mirrors into.
pub fn mirror(endpoints: &Endpoints, max_per_subset: usize) -> Mirror {
    let mut mirror = Mirror::default();
    let mut groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)> =
        BTreeMap::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|port| EndpointPort {
                name: Some(port.name.clone().unwrap_or_default()),
                port: Some(port.port),
                protocol: Some(port.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: port.app_protocol.clone(),
            })
            .collect();
        let addresses = subset.addresses.iter().flatten().map(|a| (a, true)).chain(
            subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false)),
        );
        let mut added = 0;
        for (address, ready) in addresses {
            if added >= max_per_subset {
                mirror.over_capacity += 1;
                continue;
            }
            match endpoint(address, ready) {
                Some((family, endpoint)) => {
                    groups
                        .entry(group_key(&family, &ports))
                        .or_insert_with(|| (ports.clone(), Vec::new()))
                        .1
                        .push(endpoint);
                    added += 1;
                }
                None => mirror.invalid += 1,
            }
        }
    }
    for ((family, _), (ports, mut list)) in groups {
        list.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        list.dedup_by(|a, b| a.addresses == b.addresses);
        mirror.slices.push(EndpointSlice {
            metadata: metadata(endpoints),
            address_type: family,
            endpoints: list,
            ports: Some(ports),
        });
    }
    mirror
}

fn metadata(endpoints: &Endpoints) -> ObjectMeta {
    let name = endpoints.name_any();
    let mut labels = endpoints.labels().clone();
    labels.insert(SERVICE_NAME.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let mut annotations = endpoints.annotations().clone();
    for key in NOT_COPIED {
        annotations.remove(*key);
    }
    ObjectMeta {
        generate_name: Some(format!("{name}-")),
        namespace: endpoints.namespace(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Endpoints".into(),
            name,
            uid: endpoints.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    }
}

/// Whether the stored slice `current` already says what `wanted` does.
pub fn same(current: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    current.endpoints == wanted.endpoints
        && current.ports == wanted.ports
        && current.metadata.labels == wanted.metadata.labels
        && current.metadata.annotations.clone().unwrap_or_default()
            == wanted.metadata.annotations.clone().unwrap_or_default()
}
