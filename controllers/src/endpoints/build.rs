//! What a Service's Endpoints and EndpointSlices should hold, from the pods it selects.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

/// The label that ties a slice to its Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The `endpointslice.kubernetes.io/managed-by` value of this controller's slices.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The label that keeps the mirroring controller off an Endpoints.
const SKIP_MIRROR: &str = crate::endpointslicemirroring::build::SKIP_MIRROR;
/// upstream's `--max-endpoints-per-slice` default.
const PER_SLICE: usize = 100;

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// The port a Service port reaches on `pod`: a number as is, a name looked up in its containers.
fn target_port(port: &ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(number)) => Some(*number),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|container| container.ports.iter().flatten())
            .find(|container_port| {
                container_port.name.as_deref() == Some(name.as_str())
                    && container_port.protocol.as_deref().unwrap_or("TCP")
                        == port.protocol.as_deref().unwrap_or("TCP")
            })
            .map(|container_port| container_port.container_port),
    }
}

fn pod_reference(pod: &Pod) -> ObjectReference {
    let mut reference = pod.object_ref(&());
    reference.api_version = None;
    reference.field_path = None;
    reference
}

fn service_reference(service: &Service, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.name_any(),
        uid: service.uid().unwrap_or_default(),
        controller: Some(controller),
        block_owner_deletion: Some(controller),
    }
}

fn ports(service: &Service) -> Vec<ServicePort> {
    service
        .spec
        .as_ref()
        .and_then(|spec| spec.ports.clone())
        .unwrap_or_default()
}

fn publish_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|spec| spec.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// Pods that count: an IP, not finished; (Endpoints) not being deleted.
fn counted(pods: &[Arc<Pod>], with_terminating: bool) -> Vec<&Arc<Pod>> {
    pods.iter()
        .filter(|pod| pod_ip(pod).is_some())
        .filter(|pod| !rudder_facts::pods::is_terminal(pod))
        .filter(|pod| with_terminating || pod.metadata.deletion_timestamp.is_none())
        .collect()
}

/// `(name, port, protocol)` a pod serves a Service port on.
type ServedPort = (String, i32, String);
/// Ready and not-ready addresses of one subset.
type Addresses = (Vec<EndpointAddress>, Vec<EndpointAddress>);

/// The Service's Endpoints: its pods grouped by the ports they serve.
pub fn endpoints_for(service: &Service, pods: &[Arc<Pod>]) -> Endpoints {
    let publish = publish_not_ready(service);
    // Pods serving the same ports share a subset (upstream's repacking).
    let mut subsets: BTreeMap<Vec<ServedPort>, Addresses> = BTreeMap::new();
    for pod in counted(pods, false) {
        let served: Vec<ServedPort> = ports(service)
            .iter()
            .filter_map(|port| {
                Some((
                    port.name.clone().unwrap_or_default(),
                    target_port(port, pod)?,
                    port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ))
            })
            .collect();
        if served.is_empty() {
            continue;
        }
        let address = EndpointAddress {
            ip: pod_ip(pod).unwrap_or_default(),
            hostname: pod.spec.as_ref().and_then(|spec| spec.hostname.clone()),
            node_name: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
            target_ref: Some(pod_reference(pod)),
        };
        let entry = subsets.entry(served).or_default();
        if publish || rudder_facts::pods::is_ready(pod) {
            entry.0.push(address);
        } else {
            entry.1.push(address);
        }
    }
    let subsets: Vec<EndpointSubset> = subsets
        .into_iter()
        .map(|(served, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: Some(
                    served
                        .into_iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: (!name.is_empty()).then_some(name),
                            port,
                            protocol: Some(protocol),
                            app_protocol: None,
                        })
                        .collect(),
                ),
            }
        })
        .collect();
    Endpoints {
        metadata: ObjectMeta {
            name: Some(service.name_any()),
            namespace: service.namespace(),
            // As upstream's: what this controller writes is mirrored by no one.
            labels: Some(
                service
                    .labels()
                    .clone()
                    .into_iter()
                    .chain([(SKIP_MIRROR.to_string(), "true".to_string())])
                    .collect(),
            ),
            // Not upstream's, which deletes Endpoints by name: an owner reference lets the
            // garbage collector remove them with their Service.
            owner_references: Some(vec![service_reference(service, false)]),
            ..ObjectMeta::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    }
}

/// The Service's EndpointSlices (IPv4), at most [`PER_SLICE`] endpoints each.
pub fn slices_for(service: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSlice> {
    let service_ports = ports(service);
    let publish = publish_not_ready(service);
    let mut endpoints: Vec<Endpoint> = Vec::new();
    let mut slice_ports = Vec::new();
    for pod in counted(pods, true) {
        let resolved: Vec<ServedPort> = service_ports
            .iter()
            .filter_map(|port| {
                Some((
                    port.name.clone().unwrap_or_default(),
                    target_port(port, pod)?,
                    port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ))
            })
            .collect();
        if resolved.is_empty() {
            continue;
        }
        if slice_ports.is_empty() {
            slice_ports = resolved;
        }
        let ready = rudder_facts::pods::is_ready(pod);
        let terminating = pod.metadata.deletion_timestamp.is_some();
        endpoints.push(Endpoint {
            addresses: vec![pod_ip(pod).unwrap_or_default()],
            conditions: Some(EndpointConditions {
                ready: Some((ready || publish) && !terminating),
                serving: Some(ready || publish),
                terminating: Some(terminating),
            }),
            hostname: pod.spec.as_ref().and_then(|spec| spec.hostname.clone()),
            node_name: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
            target_ref: Some(pod_reference(pod)),
            ..Endpoint::default()
        });
    }
    endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
    let labels: BTreeMap<String, String> = service
        .labels()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([
            (SERVICE_NAME.to_string(), service.name_any()),
            (
                "endpointslice.kubernetes.io/managed-by".to_string(),
                MANAGED_BY.to_string(),
            ),
        ])
        .collect();
    let ports: Vec<k8s_openapi::api::discovery::v1::EndpointPort> = slice_ports
        .into_iter()
        .map(
            |(name, port, protocol)| k8s_openapi::api::discovery::v1::EndpointPort {
                name: Some(name),
                port: Some(port),
                protocol: Some(protocol),
                app_protocol: None,
            },
        )
        .collect();
    let chunks: Vec<Vec<Endpoint>> = if endpoints.is_empty() {
        vec![Vec::new()]
    } else {
        endpoints
            .chunks(PER_SLICE)
            .map(<[Endpoint]>::to_vec)
            .collect()
    };
    chunks
        .into_iter()
        .map(|chunk| EndpointSlice {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", service.name_any())),
                namespace: service.namespace(),
                labels: Some(labels.clone()),
                owner_references: Some(vec![service_reference(service, true)]),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: chunk,
            ports: (!ports.is_empty()).then(|| ports.clone()),
        })
        .collect()
}
