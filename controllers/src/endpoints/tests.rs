//! Unit tests of what Endpoints and EndpointSlices hold.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodCondition, PodSpec, PodStatus, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{endpoints_for, slices_for};

fn service(target: IntOrString, publish: bool) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("svc-uid".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some([("app".to_string(), "web".to_string())].into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(target),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            publish_not_ready_addresses: Some(publish),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn pod(name: &str, ip: Option<&str>, ready: bool) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("web".into()),
                    container_port: 8080,
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            node_name: Some("node-1".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: ip.map(str::to_string),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    })
}

#[test]
fn endpoints_split_ready_and_not_ready_addresses_and_resolve_named_ports() {
    let pods = vec![
        pod("a", Some("10.0.0.2"), true),
        pod("b", Some("10.0.0.1"), false),
        pod("c", None, true),
    ];
    let endpoints = endpoints_for(&service(IntOrString::String("web".into()), false), &pods);
    let subsets = endpoints.subsets.unwrap();
    assert_eq!(subsets.len(), 1);
    let ready: Vec<String> = subsets[0]
        .addresses
        .iter()
        .flatten()
        .map(|a| a.ip.clone())
        .collect();
    let not_ready: Vec<String> = subsets[0]
        .not_ready_addresses
        .iter()
        .flatten()
        .map(|a| a.ip.clone())
        .collect();
    assert_eq!(ready, vec!["10.0.0.2"]);
    assert_eq!(not_ready, vec!["10.0.0.1"]);
    assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);
    let published = endpoints_for(&service(IntOrString::Int(9000), true), &pods);
    let subsets = published.subsets.unwrap();
    assert_eq!(
        subsets[0].addresses.as_ref().unwrap().len(),
        2,
        "publishNotReadyAddresses"
    );
    assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 9000);
}

#[test]
fn slices_carry_conditions_and_are_owned_by_the_service() {
    let pods = vec![
        pod("a", Some("10.0.0.2"), true),
        pod("b", Some("10.0.0.1"), false),
    ];
    let slices = slices_for(&service(IntOrString::Int(8080), false), &pods);
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    assert_eq!(
        slice.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"],
        "web"
    );
    assert_eq!(
        slice.metadata.owner_references.as_ref().unwrap()[0].controller,
        Some(true)
    );
    let conditions: Vec<(String, bool)> = slice
        .endpoints
        .iter()
        .map(|e| {
            (
                e.addresses[0].clone(),
                e.conditions.as_ref().unwrap().ready.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        conditions,
        vec![("10.0.0.1".into(), false), ("10.0.0.2".into(), true)]
    );
    let many: Vec<Arc<Pod>> = (0..250)
        .map(|i| {
            pod(
                &format!("p{i}"),
                Some(&format!("10.1.{}.{}", i / 200, i % 200)),
                true,
            )
        })
        .collect();
    assert_eq!(
        slices_for(&service(IntOrString::Int(8080), false), &many).len(),
        3
    );
}
