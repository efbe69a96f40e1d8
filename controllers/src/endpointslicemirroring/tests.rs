//! Unit tests of what an Endpoints object is mirrored into.

use k8s_openapi::api::core::v1::Endpoints;
use serde_json::json;

use super::build::{group_of, mirror, same, wants_mirroring, MANAGED_BY};

fn endpoints(value: serde_json::Value) -> Endpoints {
    serde_json::from_value(value).expect("an Endpoints")
}

/// A slice as `(address type, first port, [(address, ready)])`.
type SliceSummary = (String, Option<i32>, Vec<(String, bool)>);

fn addresses(slice: &k8s_openapi::api::discovery::v1::EndpointSlice) -> Vec<(String, bool)> {
    slice
        .endpoints
        .iter()
        .map(|e| {
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
            (e.addresses.join(","), ready)
        })
        .collect()
}

#[test]
fn subsets_become_one_slice_per_address_type_and_ports() {
    let source = endpoints(json!({
        "metadata": {"name": "db", "namespace": "prod", "uid": "u-1",
                     "labels": {"team": "data"},
                     "annotations": {"note": "kept",
                                     "endpoints.kubernetes.io/last-change-trigger-time": "x"}},
        "subsets": [
            {"addresses": [{"ip": "10.0.0.2", "hostname": "db-a"}, {"ip": "fd00::1"}],
             "notReadyAddresses": [{"ip": "10.0.0.1"}],
             "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}]},
            {"addresses": [{"ip": "10.0.0.3"}],
             "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}]},
            {"addresses": [{"ip": "10.0.0.9"}],
             "ports": [{"name": "metrics", "port": 9187}]},
        ],
    }));
    let mirrored = mirror(&source, 1000);
    assert_eq!((mirrored.invalid, mirrored.over_capacity), (0, 0));
    let summary: Vec<SliceSummary> = mirrored
        .slices
        .iter()
        .map(|s| {
            let port = s
                .ports
                .as_ref()
                .and_then(|p| p.first())
                .and_then(|p| p.port);
            (s.address_type.clone(), port, addresses(s))
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("IPv4".into(), Some(9187), vec![("10.0.0.9".into(), true)]),
            (
                "IPv4".into(),
                Some(5432),
                vec![
                    ("10.0.0.1".into(), false),
                    ("10.0.0.2".into(), true),
                    ("10.0.0.3".into(), true)
                ]
            ),
            ("IPv6".into(), Some(5432), vec![("fd00::1".into(), true)]),
        ]
    );
    let slice = &mirrored.slices[1];
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["kubernetes.io/service-name"], "db");
    assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], MANAGED_BY);
    assert_eq!(labels["team"], "data");
    let annotations = slice.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.len(), 1, "{annotations:?}");
    assert_eq!(annotations["note"], "kept");
    assert_eq!(slice.metadata.generate_name.as_deref(), Some("db-"));
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Endpoints", "u-1")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(slice.endpoints[1].hostname.as_deref(), Some("db-a"));
    // The port's protocol is filled in where the Endpoints left it out.
    let metrics = &mirrored.slices[0].ports.as_ref().unwrap()[0];
    assert_eq!(metrics.protocol.as_deref(), Some("TCP"));
}

#[test]
fn invalid_addresses_and_those_beyond_the_limit_are_left_out() {
    let source = endpoints(json!({
        "metadata": {"name": "db", "namespace": "prod"},
        "subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "not-an-ip"}, {"ip": "10.0.0.2"},
                          {"ip": "10.0.0.3"}],
            "notReadyAddresses": [{"ip": "10.0.0.4"}],
            "ports": [{"port": 80}],
        }],
    }));
    let mirrored = mirror(&source, 2);
    assert_eq!((mirrored.invalid, mirrored.over_capacity), (1, 2));
    assert_eq!(
        addresses(&mirrored.slices[0]),
        vec![("10.0.0.1".into(), true), ("10.0.0.2".into(), true)]
    );
}

#[test]
fn an_unchanged_mirror_is_the_same_and_groups_match_across_writes() {
    let source = endpoints(json!({
        "metadata": {"name": "db", "namespace": "prod"},
        "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}],
    }));
    let first = mirror(&source, 1000).slices.remove(0);
    let mut stored = first.clone();
    stored.metadata.name = Some("db-abcde".into());
    stored.metadata.generate_name = None;
    assert!(same(&stored, &first));
    assert_eq!(group_of(&stored), group_of(&first));
    let moved = endpoints(json!({
        "metadata": {"name": "db", "namespace": "prod"},
        "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"port": 80}]}],
    }));
    assert!(!same(&stored, &mirror(&moved, 1000).slices[0]));
}

#[test]
fn skip_mirror_and_leader_locks_are_not_mirrored() {
    let plain = endpoints(json!({"metadata": {"name": "a"}}));
    assert!(wants_mirroring(&plain));
    let skipped = endpoints(json!({"metadata": {"name": "a",
        "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}}));
    assert!(!wants_mirroring(&skipped));
    let lock = endpoints(json!({"metadata": {"name": "a",
        "annotations": {"control-plane.alpha.kubernetes.io/leader": "{}"}}}));
    assert!(!wants_mirroring(&lock));
}
