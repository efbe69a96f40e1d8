//! Tests of the cluster DNS. This file: the index, table-driven over one small cluster of
//! Services and EndpointSlices built here (ClusterIP, dual-stack, headless with ready, unready
//! and published-unready endpoints, StatefulSet hostnames, ExternalName), plus
//! [`follow`](super::follow) over real reflector stores. tests/server.rs: the server over real
//! sockets, forwarding to fake upstreams, and the load generator.

mod server;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{reflector, watcher};
use tokio_util::sync::CancellationToken;

use super::{follow, resolv_conf_upstreams, Answer, Lookup, Records};
use crate::Watched;

const TTL: u32 = 5;

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectMeta::default()
    }
}

fn ports(ports: &[(&str, i32, &str)]) -> Option<Vec<ServicePort>> {
    Some(
        ports
            .iter()
            .map(|(name, port, protocol)| ServicePort {
                name: (!name.is_empty()).then(|| name.to_string()),
                port: *port,
                protocol: Some(protocol.to_string()),
                ..ServicePort::default()
            })
            .collect(),
    )
}

/// A ClusterIP Service with these addresses and ports (name, port, protocol).
pub(super) fn cluster_ip(
    namespace: &str,
    name: &str,
    ips: &[&str],
    service_ports: &[(&str, i32, &str)],
) -> Arc<Service> {
    Arc::new(Service {
        metadata: meta(namespace, name),
        spec: Some(ServiceSpec {
            cluster_ip: ips.first().map(|ip| ip.to_string()),
            cluster_ips: Some(ips.iter().map(|ip| ip.to_string()).collect()),
            ports: ports(service_ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

pub(super) fn headless(
    namespace: &str,
    name: &str,
    publish_not_ready: bool,
    service_ports: &[(&str, i32, &str)],
) -> Arc<Service> {
    Arc::new(Service {
        metadata: meta(namespace, name),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            cluster_ips: Some(vec!["None".to_string()]),
            publish_not_ready_addresses: publish_not_ready.then_some(true),
            ports: ports(service_ports),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn external_name(namespace: &str, name: &str, target: &str) -> Arc<Service> {
    Arc::new(Service {
        metadata: meta(namespace, name),
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".to_string()),
            external_name: Some(target.to_string()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// An endpoint: address, `conditions.ready`, hostname.
pub(super) type Ep<'a> = (&'a str, Option<bool>, Option<&'a str>);

/// An EndpointSlice of `service` with these ports (name, port) and endpoints.
pub(super) fn slice(
    namespace: &str,
    service: &str,
    name: &str,
    slice_ports: &[(&str, i32)],
    endpoints: &[Ep<'_>],
) -> Arc<EndpointSlice> {
    let mut metadata = meta(namespace, name);
    metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/service-name".to_string(),
        service.to_string(),
    )]));
    let v6 = endpoints
        .iter()
        .any(|(address, _, _)| address.contains(':'));
    Arc::new(EndpointSlice {
        metadata,
        address_type: if v6 { "IPv6" } else { "IPv4" }.to_string(),
        endpoints: endpoints
            .iter()
            .map(|(address, ready, hostname)| Endpoint {
                addresses: vec![address.to_string()],
                conditions: Some(EndpointConditions {
                    ready: *ready,
                    ..EndpointConditions::default()
                }),
                hostname: hostname.map(str::to_string),
                ..Endpoint::default()
            })
            .collect(),
        ports: Some(
            slice_ports
                .iter()
                .map(|(name, port)| EndpointPort {
                    name: Some(name.to_string()),
                    port: Some(*port),
                    protocol: Some("TCP".to_string()),
                    ..EndpointPort::default()
                })
                .collect(),
        ),
    })
}

/// The cluster of the table below.
fn cluster() -> Records {
    let services = vec![
        cluster_ip(
            "default",
            "web",
            &["10.96.0.10"],
            &[("http", 80, "TCP"), ("dns", 53, "UDP"), ("", 8080, "TCP")],
        ),
        cluster_ip("default", "dual", &["10.96.0.11", "fd00::11"], &[]),
        headless("default", "db", false, &[("pg", 5432, "TCP")]),
        headless("default", "early", true, &[]),
        headless("default", "six", false, &[]),
        external_name("other", "ext", "example.com"),
    ];
    let slices = vec![
        slice(
            "default",
            "db",
            "db-a",
            &[("pg", 15432)],
            &[
                ("10.1.0.1", Some(true), Some("db-0")),
                ("10.1.0.2", None, Some("db-1")),
                ("10.1.0.3", Some(false), Some("db-2")),
                ("10.1.0.4", Some(true), None),
            ],
        ),
        // The same address again in a second slice.
        slice(
            "default",
            "db",
            "db-b",
            &[("pg", 15432)],
            &[("10.1.0.1", Some(true), Some("db-0"))],
        ),
        slice(
            "default",
            "early",
            "early-a",
            &[],
            &[("10.2.0.1", Some(false), Some("e-0"))],
        ),
        slice("default", "six", "six-a", &[], &[("fd00::1:5", None, None)]),
        // Same service name, other namespace, no Service: must not leak into default/db.
        slice(
            "kube-system",
            "db",
            "db-x",
            &[],
            &[("10.9.9.9", None, None)],
        ),
    ];
    Records::build(&services, &slices, "cluster.local").with_serial(7)
}

fn name(text: &str) -> Name {
    let mut name = Name::from_ascii(text).unwrap();
    name.set_fqdn(true);
    name
}

fn ask(records: &Records, text: &str, qtype: RecordType) -> Answer {
    match records.lookup(&name(text), qtype, TTL) {
        Lookup::Answer(answer) => answer,
        Lookup::Forward => panic!("{text} {qtype} was not answered from the zone"),
    }
}

/// The sorted text of the records' data.
fn data(records: &[Record]) -> Vec<String> {
    let mut texts: Vec<String> = records.iter().map(|r| r.data().to_string()).collect();
    texts.sort();
    texts
}

#[test]
fn records_table() {
    let records = cluster();
    let nodata: &[&str] = &[];
    let cases: &[(&str, RecordType, ResponseCode, &[&str])] = &[
        // ClusterIP, IPv4 only: A, and AAAA NODATA.
        (
            "web.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.96.0.10"],
        ),
        (
            "web.default.svc.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            nodata,
        ),
        (
            "WEB.Default.Svc.CLUSTER.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.96.0.10"],
        ),
        // Dual-stack.
        (
            "dual.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.96.0.11"],
        ),
        (
            "dual.default.svc.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            &["fd00::11"],
        ),
        // Headless: ready and unset-ready endpoints, de-duplicated; not the unready one.
        (
            "db.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.1.0.1", "10.1.0.2", "10.1.0.4"],
        ),
        (
            "db-0.db.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.1.0.1"],
        ),
        (
            "db-1.db.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.1.0.2"],
        ),
        (
            "db-2.db.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "10-1-0-4.db.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.1.0.4"],
        ),
        // publishNotReadyAddresses.
        (
            "early.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.2.0.1"],
        ),
        (
            "e-0.early.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.2.0.1"],
        ),
        // Headless IPv6.
        (
            "six.default.svc.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            &["fd00::1:5"],
        ),
        (
            "fd00--1-5.six.default.svc.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            &["fd00::1:5"],
        ),
        // SRV: ClusterIP named ports, all ports on the service name, headless.
        (
            "_http._tcp.web.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NoError,
            &["0 100 80 web.default.svc.cluster.local."],
        ),
        (
            "_dns._udp.web.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NoError,
            &["0 100 53 web.default.svc.cluster.local."],
        ),
        (
            "_http._udp.web.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "_udp.web.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NoError,
            nodata,
        ),
        (
            "web.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NoError,
            &[
                "0 33 53 web.default.svc.cluster.local.",
                "0 33 80 web.default.svc.cluster.local.",
                "0 33 8080 web.default.svc.cluster.local.",
            ],
        ),
        (
            "_pg._tcp.db.default.svc.cluster.local",
            RecordType::SRV,
            ResponseCode::NoError,
            &[
                "0 33 15432 10-1-0-4.db.default.svc.cluster.local.",
                "0 33 15432 db-0.db.default.svc.cluster.local.",
                "0 33 15432 db-1.db.default.svc.cluster.local.",
            ],
        ),
        // ExternalName: a CNAME whatever the type.
        (
            "ext.other.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["example.com."],
        ),
        (
            "ext.other.svc.cluster.local",
            RecordType::CNAME,
            ResponseCode::NoError,
            &["example.com."],
        ),
        // Pods, any namespace.
        (
            "10-244-1-5.anything.pod.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            &["10.244.1.5"],
        ),
        (
            "10-244-1-5.default.pod.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            nodata,
        ),
        (
            "fd00--5.default.pod.cluster.local",
            RecordType::AAAA,
            ResponseCode::NoError,
            &["fd00::5"],
        ),
        (
            "not-an-ip.default.pod.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        // The spec version, the apex.
        (
            "dns-version.cluster.local",
            RecordType::TXT,
            ResponseCode::NoError,
            &["1.1.0"],
        ),
        (
            "cluster.local",
            RecordType::SOA,
            ResponseCode::NoError,
            &["ns.dns.cluster.local. hostmaster.cluster.local. 7 7200 1800 86400 5"],
        ),
        (
            "cluster.local",
            RecordType::NS,
            ResponseCode::NoError,
            &["ns.dns.cluster.local."],
        ),
        (
            "cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            nodata,
        ),
        // NXDOMAIN versus NODATA for names with something below them.
        (
            "nothing.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            nodata,
        ),
        (
            "svc.cluster.local",
            RecordType::A,
            ResponseCode::NoError,
            nodata,
        ),
        (
            "db.kube-system.svc.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "kube-system.svc.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "foo.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
        (
            "a.b.web.default.svc.cluster.local",
            RecordType::A,
            ResponseCode::NXDomain,
            nodata,
        ),
    ];
    for (text, qtype, rcode, expected) in cases {
        let answer = ask(&records, text, *qtype);
        let case = format!("{text} {qtype}");
        assert_eq!(answer.rcode, *rcode, "{case}: {answer:?}");
        assert_eq!(data(&answer.answers), *expected, "{case}");
        for record in &answer.answers {
            assert_eq!(record.ttl(), TTL, "{case}");
            // The owner is the name as asked, case included.
            assert_eq!(record.name().to_ascii(), format!("{text}."), "{case}");
        }
        if expected.is_empty() {
            // NXDOMAIN and NODATA carry the zone's SOA.
            let soa = &answer.authority;
            assert_eq!(soa.len(), 1, "{case}: {soa:?}");
            assert_eq!(soa[0].record_type(), RecordType::SOA, "{case}");
            assert_eq!(soa[0].name().to_ascii(), "cluster.local.", "{case}");
            assert_eq!(
                soa[0].data().to_string(),
                "ns.dns.cluster.local. hostmaster.cluster.local. 7 7200 1800 86400 5",
                "{case}"
            );
        } else {
            assert!(
                answer.authority.is_empty(),
                "{case}: {:?}",
                answer.authority
            );
        }
    }
}

#[test]
fn srv_answers_carry_their_targets_addresses() {
    let records = cluster();
    let answer = ask(
        &records,
        "_http._tcp.web.default.svc.cluster.local",
        RecordType::SRV,
    );
    let additional: Vec<(String, String)> = answer
        .additionals
        .iter()
        .map(|r| (r.name().to_ascii(), r.data().to_string()))
        .collect();
    assert_eq!(
        additional,
        [(
            "web.default.svc.cluster.local.".to_string(),
            "10.96.0.10".to_string()
        )]
    );

    let answer = ask(
        &records,
        "_pg._tcp.db.default.svc.cluster.local",
        RecordType::SRV,
    );
    let mut additional: Vec<(String, String)> = answer
        .additionals
        .iter()
        .map(|r| (r.name().to_ascii(), r.data().to_string()))
        .collect();
    additional.sort();
    let expected = [
        ("10-1-0-4.db.default.svc.cluster.local.", "10.1.0.4"),
        ("db-0.db.default.svc.cluster.local.", "10.1.0.1"),
        ("db-1.db.default.svc.cluster.local.", "10.1.0.2"),
    ]
    .map(|(n, ip)| (n.to_string(), ip.to_string()));
    assert_eq!(additional, expected);
}

#[test]
fn ptr_for_cluster_ips_and_hostnames_only() {
    let records = cluster();
    let cases: &[(&str, Option<&str>)] = &[
        (
            "10.0.96.10.in-addr.arpa",
            Some("web.default.svc.cluster.local."),
        ),
        (
            "10.0.96.10.IN-ADDR.ARPA",
            Some("web.default.svc.cluster.local."),
        ),
        (
            "1.0.1.10.in-addr.arpa",
            Some("db-0.db.default.svc.cluster.local."),
        ),
        (
            "1.0.2.10.in-addr.arpa",
            Some("e-0.early.default.svc.cluster.local."),
        ),
        (
            "1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa",
            Some("dual.default.svc.cluster.local."),
        ),
        // An endpoint without hostname, an unready one, and an address not ours: forwarded.
        ("4.0.1.10.in-addr.arpa", None),
        ("3.0.1.10.in-addr.arpa", None),
        ("8.8.8.8.in-addr.arpa", None),
        ("96.10.in-addr.arpa", None),
        ("010.0.96.10.in-addr.arpa", None),
    ];
    for (text, expected) in cases {
        let lookup = records.lookup(&name(text), RecordType::PTR, TTL);
        match (lookup, expected) {
            (Lookup::Answer(answer), Some(target)) => {
                assert_eq!(answer.rcode, ResponseCode::NoError, "{text}");
                assert_eq!(data(&answer.answers), [target.to_string()], "{text}");
                assert!(matches!(answer.answers[0].data(), RData::PTR(_)), "{text}");
            }
            (Lookup::Forward, None) => {}
            (lookup, expected) => panic!("{text}: {lookup:?}, expected {expected:?}"),
        }
    }
    // Our reverse name, another type: NODATA.
    let answer = ask(&records, "10.0.96.10.in-addr.arpa", RecordType::A);
    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert!(answer.answers.is_empty());
    assert_eq!(answer.authority.len(), 1);
}

#[test]
fn outside_the_zone_is_forwarded_and_unready_is_servfail() {
    let records = cluster();
    for text in [
        "example.com",
        "local",
        "cluster.local.example.com",
        "xcluster.local",
    ] {
        assert_eq!(
            records.lookup(&name(text), RecordType::A, TTL),
            Lookup::Forward,
            "{text}"
        );
    }
    let unready = Records::unready("cluster.local");
    let answer = ask(&unready, "web.default.svc.cluster.local", RecordType::A);
    assert_eq!(answer.rcode, ResponseCode::ServFail);
    assert_eq!(
        unready.lookup(&name("example.com"), RecordType::A, TTL),
        Lookup::Forward
    );
}

#[test]
fn another_cluster_domain() {
    let services = vec![cluster_ip("default", "web", &["10.96.0.10"], &[])];
    let records = Records::build(&services, &[], "Corp.Example.");
    assert_eq!(records.zone().to_ascii(), "corp.example.");
    let answer = ask(&records, "web.default.svc.corp.example", RecordType::A);
    assert_eq!(data(&answer.answers), ["10.96.0.10"]);
    assert_eq!(
        records.lookup(&name("web.default.svc.cluster.local"), RecordType::A, TTL),
        Lookup::Forward
    );
}

#[tokio::test]
async fn follow_rebuilds_on_changes() {
    let (services, mut services_writer) = reflector::store::<Service>();
    let (slices, mut slices_writer) = reflector::store::<EndpointSlice>();
    let (changes_tx, changes) = tokio::sync::watch::channel(0u64);
    let watched = Watched::new(services, slices, changes);
    let shutdown = CancellationToken::new();
    let mut records = follow(watched, "cluster.local".to_string(), shutdown.clone());
    assert!(!records.borrow().is_ready());

    let web = cluster_ip("default", "web", &["10.96.0.10"], &[]);
    services_writer.apply_watcher_event(&watcher::Event::Init);
    services_writer.apply_watcher_event(&watcher::Event::InitApply((*web).clone()));
    services_writer.apply_watcher_event(&watcher::Event::InitDone);
    slices_writer.apply_watcher_event(&watcher::Event::Init);
    slices_writer.apply_watcher_event(&watcher::Event::InitDone);

    let ready = tokio::time::timeout(Duration::from_secs(5), records.wait_for(|r| r.is_ready()))
        .await
        .unwrap()
        .unwrap()
        .clone();
    let answer = ask(&ready, "web.default.svc.cluster.local", RecordType::A);
    assert_eq!(data(&answer.answers), ["10.96.0.10"]);

    // A burst of changes: the index follows.
    for i in 1..=20 {
        let api = cluster_ip("default", &format!("api-{i}"), &["10.96.0.20"], &[]);
        services_writer.apply_watcher_event(&watcher::Event::Apply((*api).clone()));
        changes_tx.send_modify(|generation| *generation += 1);
    }
    let rebuilt = tokio::time::timeout(
        Duration::from_secs(5),
        records.wait_for(|r| {
            matches!(
                r.lookup(&name("api-20.default.svc.cluster.local"), RecordType::A, TTL),
                Lookup::Answer(Answer { ref answers, .. }) if !answers.is_empty()
            )
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .clone();
    assert_eq!(rebuilt.serial(), 20);
    shutdown.cancel();
}

#[test]
fn upstreams_from_resolv_conf() {
    let text = "# comment\nsearch example.com\nnameserver 192.0.2.53\nnameserver  2001:db8::53\n\
                nameserver fe80::1%eth0\nnameserver\noptions ndots:5\n";
    let upstreams: Vec<String> = resolv_conf_upstreams(text)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(upstreams, ["192.0.2.53:53", "[2001:db8::53]:53"]);
}
