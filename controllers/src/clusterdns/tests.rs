//! Unit tests of what the cluster DNS EndpointSlice and Endpoints hold, from Nodes and the
//! kube-dns Service, and of when what is stored needs a write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, Node, NodeAddress, NodeCondition, NodeStatus, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::Selection;

/// One row of a table: what it is, its input, what comes out.
type Case<I, O> = (&'static str, I, O);
/// A port as `(name, protocol, number)`.
type Port<'a> = (&'a str, &'a str, i32);
/// A change made to a stored slice.
type SliceChange = Box<dyn Fn(&mut EndpointSlice)>;

/// A node: its name, its `rudder.dev/cluster-dns` label, its addresses (`type=address`),
/// its Ready condition (`None`: none reported).
fn node(name: &str, label: Option<&str>, addresses: &[&str], ready: Option<bool>) -> Arc<Node> {
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: label.map(|value| [(NODE_LABEL.to_string(), value.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .filter_map(|pair| pair.split_once('='))
                    .map(|(type_, address)| NodeAddress {
                        type_: type_.into(),
                        address: address.into(),
                    })
                    .collect(),
            ),
            conditions: ready.map(|ready| {
                vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..NodeCondition::default()
                }]
            }),
            ..NodeStatus::default()
        }),
    })
}

fn dns_node(name: &str, ip: &str, ready: bool) -> Arc<Node> {
    node(
        name,
        Some("true"),
        &[&format!("InternalIP={ip}")],
        Some(ready),
    )
}

fn port(name: &str, protocol: &str, port: i32, target: Option<IntOrString>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port,
        target_port: target,
        ..ServicePort::default()
    }
}

/// kube-dns as the apiserver creates it.
fn kube_dns() -> Service {
    service(vec![
        port("dns", "UDP", 53, Some(IntOrString::Int(53))),
        port("dns-tcp", "TCP", 53, Some(IntOrString::Int(53))),
    ])
}

fn service(ports: Vec<ServicePort>) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(SERVICE.into()),
            namespace: Some(NAMESPACE.into()),
            uid: Some("dns-uid".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn server(node: &str, ip: &str, ready: bool) -> DnsServer {
    DnsServer {
        node: node.into(),
        ip: ip.into(),
        ready,
        zone: None,
    }
}

#[test]
fn servers_are_the_labelled_nodes_with_an_ipv4_internal_ip_sorted_by_name() {
    let cases: Vec<Case<Vec<Arc<Node>>, Vec<DnsServer>>> = vec![
        ("no nodes", vec![], vec![]),
        (
            "ready and not ready",
            vec![
                dns_node("b", "10.0.0.2", false),
                dns_node("a", "10.0.0.1", true),
            ],
            vec![
                server("a", "10.0.0.1", true),
                server("b", "10.0.0.2", false),
            ],
        ),
        (
            "no Ready condition is not ready",
            vec![node("a", Some("true"), &["InternalIP=10.0.0.1"], None)],
            vec![server("a", "10.0.0.1", false)],
        ),
        (
            "unlabelled or labelled otherwise",
            vec![
                node("a", None, &["InternalIP=10.0.0.1"], Some(true)),
                node("b", Some("false"), &["InternalIP=10.0.0.2"], Some(true)),
                dns_node("c", "10.0.0.3", true),
            ],
            vec![server("c", "10.0.0.3", true)],
        ),
        (
            "no InternalIP, or only an IPv6 one",
            vec![
                node(
                    "a",
                    Some("true"),
                    &["ExternalIP=1.2.3.4", "Hostname=a"],
                    Some(true),
                ),
                node("b", Some("true"), &["InternalIP=fd00::2"], Some(true)),
                node("c", Some("true"), &[], Some(true)),
            ],
            vec![],
        ),
        (
            "the first IPv4 InternalIP",
            vec![node(
                "a",
                Some("true"),
                &[
                    "ExternalIP=1.2.3.4",
                    "InternalIP=fd00::1",
                    "InternalIP=10.0.0.1",
                    "InternalIP=10.0.0.9",
                ],
                Some(true),
            )],
            vec![server("a", "10.0.0.1", true)],
        ),
        (
            "sorted by name, not address",
            vec![
                dns_node("node-c", "10.0.0.1", true),
                dns_node("node-a", "10.0.0.3", true),
                dns_node("node-b", "10.0.0.2", true),
            ],
            vec![
                server("node-a", "10.0.0.3", true),
                server("node-b", "10.0.0.2", true),
                server("node-c", "10.0.0.1", true),
            ],
        ),
    ];
    for (case, nodes, expected) in cases {
        assert_eq!(servers(&nodes), (expected, 0), "{case}");
    }
}

#[test]
fn servers_keep_the_zone_label() {
    let mut zoned = dns_node("a", "10.0.0.1", true).as_ref().clone();
    zoned
        .metadata
        .labels
        .get_or_insert_default()
        .insert("topology.kubernetes.io/zone".into(), "z1".into());
    let (servers, _) = servers(&[Arc::new(zoned)]);
    assert_eq!(servers[0].zone.as_deref(), Some("z1"));
    let slice = slice_for(&kube_dns(), &servers);
    assert_eq!(slice.endpoints[0].zone.as_deref(), Some("z1"));
}

#[test]
fn at_most_a_thousand_servers_ready_ones_first() {
    let nodes: Vec<Arc<Node>> = (0..MAX_ENDPOINTS + 5)
        .map(|i| {
            dns_node(
                &format!("node-{i:04}"),
                &format!("10.1.{}.{}", i / 250, i % 250),
                i >= 5,
            )
        })
        .collect();
    let (kept, left_out) = servers(&nodes);
    assert_eq!((kept.len(), left_out), (MAX_ENDPOINTS, 5));
    assert!(kept.iter().all(|server| server.ready), "not-ready ones go");
    assert!(kept.windows(2).all(|pair| pair[0].node < pair[1].node));
    assert_eq!(slice_for(&kube_dns(), &kept).endpoints.len(), MAX_ENDPOINTS);
}

#[test]
fn ports_follow_the_service() {
    let cases: Vec<Case<Vec<ServicePort>, Vec<Port>>> = vec![
        (
            "kube-dns as created",
            kube_dns().spec.unwrap().ports.unwrap(),
            vec![("dns", "UDP", 53), ("dns-tcp", "TCP", 53)],
        ),
        (
            "a numeric target port",
            vec![port("dns", "UDP", 53, Some(IntOrString::Int(5353)))],
            vec![("dns", "UDP", 5353)],
        ),
        (
            "a named or no target port: the port",
            vec![
                port("dns", "UDP", 53, Some(IntOrString::String("dns".into()))),
                port("dns-tcp", "TCP", 54, None),
            ],
            vec![("dns", "UDP", 53), ("dns-tcp", "TCP", 54)],
        ),
        (
            "no protocol is TCP",
            vec![ServicePort {
                name: Some("dns-tcp".into()),
                port: 53,
                ..ServicePort::default()
            }],
            vec![("dns-tcp", "TCP", 53)],
        ),
    ];
    for (case, service_ports, expected) in cases {
        let service = service(service_ports);
        let expected: Vec<DnsPort> = expected
            .into_iter()
            .map(|(name, protocol, port)| DnsPort {
                name: name.into(),
                protocol: protocol.into(),
                port,
            })
            .collect();
        assert_eq!(ports(&service), expected, "{case}");
        let slice = slice_for(&service, &[]);
        let slice_ports: Vec<(String, String, i32)> = slice
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone().unwrap(),
                    p.protocol.clone().unwrap(),
                    p.port.unwrap(),
                )
            })
            .collect();
        let endpoints = endpoints_for(&service, &[server("a", "10.0.0.1", true)]);
        let endpoints_ports: Vec<(String, String, i32)> = endpoints.subsets.unwrap()[0]
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap(), p.protocol.clone().unwrap(), p.port))
            .collect();
        let expected: Vec<(String, String, i32)> = expected
            .into_iter()
            .map(|p| (p.name, p.protocol, p.port))
            .collect();
        assert_eq!(slice_ports, expected, "{case}: slice");
        assert_eq!(endpoints_ports, expected, "{case}: endpoints");
    }
}

#[test]
fn the_slice_is_labelled_owned_and_lists_every_server() {
    let servers = vec![
        server("a", "10.0.0.1", true),
        server("b", "10.0.0.2", false),
    ];
    let slice = slice_for(&kube_dns(), &servers);
    assert_eq!(slice.metadata.name.as_deref(), Some(SLICE));
    assert_eq!(slice.metadata.namespace.as_deref(), Some(NAMESPACE));
    let labels = slice.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "kube-dns");
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        "cluster-dns-endpoints.rudder.dev"
    );
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Service", "kube-dns", "dns-uid")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(slice.address_type, "IPv4");
    let endpoints: Vec<(&str, &str, bool, bool, bool)> = slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.as_ref().unwrap();
            (
                e.addresses[0].as_str(),
                e.node_name.as_deref().unwrap(),
                c.ready.unwrap(),
                c.serving.unwrap(),
                c.terminating.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        endpoints,
        vec![
            ("10.0.0.1", "a", true, true, false),
            ("10.0.0.2", "b", false, false, false)
        ]
    );
    assert!(slice.endpoints.iter().all(|e| e.target_ref.is_none()));
    let empty = slice_for(&kube_dns(), &[]);
    assert!(empty.endpoints.is_empty());
    assert_eq!(
        empty.ports.as_ref().map(Vec::len),
        Some(2),
        "ports still set"
    );
    let json = serde_json::to_value(&empty).unwrap();
    assert_eq!(
        json["endpoints"],
        serde_json::json!([]),
        "empty, not absent"
    );
}

#[test]
fn the_endpoints_split_ready_and_not_ready_servers() {
    let servers = vec![
        server("a", "10.0.0.1", true),
        server("b", "10.0.0.2", false),
        server("c", "10.0.0.3", true),
    ];
    let endpoints = endpoints_for(&kube_dns(), &servers);
    assert_eq!(endpoints.metadata.name.as_deref(), Some(SERVICE));
    assert_eq!(
        endpoints.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/skip-mirror"],
        "true"
    );
    assert_eq!(
        endpoints.metadata.owner_references.as_ref().unwrap()[0].uid,
        "dns-uid"
    );
    let subsets = endpoints.subsets.unwrap();
    assert_eq!(subsets.len(), 1);
    let listed = |addresses: &Option<Vec<EndpointAddress>>| {
        addresses
            .iter()
            .flatten()
            .map(|a| (a.ip.clone(), a.node_name.clone().unwrap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listed(&subsets[0].addresses),
        vec![
            ("10.0.0.1".into(), "a".into()),
            ("10.0.0.3".into(), "c".into())
        ]
    );
    assert_eq!(
        listed(&subsets[0].not_ready_addresses),
        vec![("10.0.0.2".to_string(), "b".to_string())]
    );
    assert!(endpoints_for(&kube_dns(), &[]).subsets.is_none());
}

/// What the API hands back: the object as written, with the server's metadata on it.
fn stored<T: Clone>(object: &T, meta: impl Fn(&mut T) -> &mut ObjectMeta) -> T {
    let mut stored = object.clone();
    let metadata = meta(&mut stored);
    metadata.resource_version = Some("42".into());
    metadata.uid = Some("slice-uid".into());
    metadata.creation_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    metadata
        .labels
        .get_or_insert_default()
        .insert("someone/else".into(), "x".into());
    stored
}

#[test]
fn only_a_change_of_what_is_managed_needs_a_write() {
    let servers = vec![
        server("a", "10.0.0.1", true),
        server("b", "10.0.0.2", false),
    ];
    let wanted = slice_for(&kube_dns(), &servers);
    let same = stored(&wanted, |s| &mut s.metadata);
    let cases: Vec<Case<SliceChange, bool>> = vec![
        ("as written, with server metadata", Box::new(|_| {}), false),
        ("absent ports", Box::new(|s| s.ports = None), true),
        (
            "an endpoint gone",
            Box::new(|s| {
                s.endpoints.pop();
            }),
            true,
        ),
        (
            "readiness changed",
            Box::new(|s| s.endpoints[1].conditions.as_mut().unwrap().ready = Some(true)),
            true,
        ),
        (
            "a port changed",
            Box::new(|s| s.ports.as_mut().unwrap()[0].port = Some(5353)),
            true,
        ),
        (
            "managed-by removed",
            Box::new(|s| {
                s.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .remove("endpointslice.kubernetes.io/managed-by");
            }),
            true,
        ),
        (
            "owned by an older Service",
            Box::new(|s| s.metadata.owner_references.as_mut().unwrap()[0].uid = "old".into()),
            true,
        ),
    ];
    for (case, change, differs) in cases {
        let mut current = same.clone();
        change(&mut current);
        assert_eq!(slice_differs(&current, &wanted), differs, "{case}");
    }
    assert!(!slice_differs(
        &stored(&slice_for(&kube_dns(), &[]), |s| &mut s.metadata),
        &slice_for(&kube_dns(), &[])
    ));

    let wanted = endpoints_for(&kube_dns(), &servers);
    let same = stored(&wanted, |e| &mut e.metadata);
    assert!(!endpoints_differ(&same, &wanted), "as written");
    let mut moved = same.clone();
    moved.subsets.as_mut().unwrap()[0]
        .addresses
        .as_mut()
        .unwrap()[0]
        .ip = "10.0.0.9".into();
    assert!(endpoints_differ(&moved, &wanted), "an address changed");
    let mut unlabelled = same.clone();
    unlabelled.metadata.labels = None;
    assert!(
        endpoints_differ(&unlabelled, &wanted),
        "skip-mirror removed"
    );
    let empty = endpoints_for(&kube_dns(), &[]);
    let mut stored_empty = stored(&empty, |e| &mut e.metadata);
    stored_empty.subsets = Some(Vec::new());
    assert!(!endpoints_differ(&stored_empty, &empty), "[] is no subsets");
    assert!(endpoints_differ(&same, &empty), "every server gone");
}

#[test]
fn an_update_keeps_foreign_metadata_and_takes_the_controller_owner() {
    let wanted = slice_for(&kube_dns(), &[server("a", "10.0.0.1", true)]);
    let mut current = stored(&slice_for(&kube_dns(), &[]), |s| &mut s.metadata);
    current.metadata.owner_references = Some(vec![
        OwnerReference {
            uid: "old".into(),
            controller: Some(true),
            ..OwnerReference::default()
        },
        OwnerReference {
            uid: "other".into(),
            controller: Some(false),
            ..OwnerReference::default()
        },
    ]);
    let updated = slice_update(&current, &wanted);
    assert_eq!(updated.endpoints, wanted.endpoints);
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(
        updated.metadata.labels.as_ref().unwrap()["someone/else"],
        "x"
    );
    let owners: Vec<&str> = updated
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.as_str())
        .collect();
    assert_eq!(owners, vec!["other", "dns-uid"]);
    assert!(!slice_differs(&updated, &wanted));

    let wanted = endpoints_for(&kube_dns(), &[server("a", "10.0.0.1", true)]);
    let current = stored(&endpoints_for(&kube_dns(), &[]), |e| &mut e.metadata);
    let updated = endpoints_update(&current, &wanted);
    assert_eq!(updated.subsets, wanted.subsets);
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("42"));
    assert!(!endpoints_differ(&updated, &wanted));
}

#[test]
fn only_kube_dns_without_a_selector_is_managed() {
    let with = |change: fn(&mut Service)| {
        let mut service = kube_dns();
        change(&mut service);
        service
    };
    let cases: Vec<Case<Service, bool>> = vec![
        ("as created", kube_dns(), true),
        (
            "an empty selector",
            with(|s| s.spec.as_mut().unwrap().selector = Some(Default::default())),
            true,
        ),
        (
            "a selector",
            with(|s| {
                s.spec.as_mut().unwrap().selector =
                    Some([("k8s-app".to_string(), "kube-dns".to_string())].into())
            }),
            false,
        ),
        (
            "being deleted",
            with(|s| s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH))),
            false,
        ),
        (
            "another name",
            with(|s| s.metadata.name = Some("dns".into())),
            false,
        ),
        (
            "another namespace",
            with(|s| s.metadata.namespace = Some("default".into())),
            false,
        ),
    ];
    for (case, service, managed) in cases {
        assert_eq!(is_managed(&service), managed, "{case}");
    }
}

#[test]
fn runs_by_default_under_its_name() {
    assert!(Selection::parse("*").unwrap().includes(NAME));
    assert!(!Selection::parse("*,-cluster-dns-endpoints")
        .unwrap()
        .includes(NAME));
}
