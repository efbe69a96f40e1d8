//! The proxy's model, rules and transactions, table-driven from Service and EndpointSlice
//! objects; the run loop against the fake `nft`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::model::{service_ports, Backend, Protocol};
use super::rules::{
    ruleset, skeleton, RuleConfig, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, SERVICE_IPS,
    SERVICE_NODEPORTS,
};
use super::ruleset::{diff, full};
use super::*;

pub(super) fn service(name: &str, spec: serde_json::Value) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": spec,
        }))
        .expect("a Service"),
    )
}

/// An endpoint: address, node, ready, serving, terminating.
pub(super) type EndpointSpec<'a> = (&'a str, &'a str, bool, bool, bool);

/// A slice for `service` with endpoints `(ip, node, ready, serving, terminating)` on port
/// `http` → 8080.
pub(super) fn slice(
    service: &str,
    endpoints: &[(&str, &str, bool, bool, bool)],
) -> Arc<EndpointSlice> {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, node, ready, serving, terminating)| {
            json!({"addresses": [ip], "nodeName": node,
                "conditions": {"ready": ready, "serving": serving, "terminating": terminating}})
        })
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{service}-abc"), "namespace": "ns",
                "labels": {"kubernetes.io/service-name": service},
                "uid": format!("uid-{service}"), "resourceVersion": "1"},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .expect("an EndpointSlice"),
    )
}

pub(super) fn web(extra: serde_json::Value) -> Arc<Service> {
    let mut spec = json!({"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    service("web", spec)
}

pub(super) fn config() -> RuleConfig {
    RuleConfig {
        table: "rudder".into(),
        cluster_cidrs: vec!["10.244.0.0/16".into()],
    }
}

fn backend(ip: &str) -> Backend {
    Backend {
        ip: ip.parse().expect("an IPv4 address"),
        port: 8080,
    }
}

#[test]
fn endpoints_ready_first_then_serving_terminating_and_local_ones() {
    let cases: &[(&[EndpointSpec], &[&str], &[&str])] = &[
        // (endpoints, cluster, local on node-a)
        (
            &[
                ("10.244.1.1", "node-a", true, true, false),
                ("10.244.2.1", "node-b", true, true, false),
            ],
            &["10.244.1.1", "10.244.2.1"],
            &["10.244.1.1"],
        ),
        // A not-ready endpoint is not used while a ready one exists, terminating or not.
        (
            &[
                ("10.244.1.1", "node-a", false, true, true),
                ("10.244.2.1", "node-b", true, true, false),
            ],
            &["10.244.2.1"],
            &["10.244.1.1"],
        ),
        // Only terminating ones left: the serving ones are used.
        (
            &[
                ("10.244.1.1", "node-a", false, true, true),
                ("10.244.2.1", "node-b", false, false, true),
            ],
            &["10.244.1.1"],
            &["10.244.1.1"],
        ),
        // Not ready and not terminating: nothing.
        (&[("10.244.1.1", "node-a", false, false, false)], &[], &[]),
    ];
    for (endpoints, cluster, local) in cases {
        let ports = service_ports(&[web(json!({}))], &[slice("web", endpoints)], "node-a");
        assert_eq!(ports.len(), 1, "{endpoints:?}");
        let port = &ports[0];
        let expect = |ips: &[&str]| ips.iter().map(|ip| backend(ip)).collect::<Vec<_>>();
        assert_eq!(
            port.cluster,
            expect(cluster),
            "cluster endpoints of {endpoints:?}"
        );
        assert_eq!(
            port.local,
            expect(local),
            "local endpoints of {endpoints:?}"
        );
        assert!(port.has_endpoints);
        assert_eq!(port.protocol, Protocol::Tcp);
        assert_eq!(port.port, 80);
    }
}

#[test]
fn headless_external_name_and_other_proxies_services_get_no_rules() {
    let headless = service("h", json!({"clusterIP": "None", "ports": [{"port": 80}]}));
    let external = service(
        "e",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let mut other: Service = (*web(json!({}))).clone();
    other.metadata.labels = Some(
        [(
            "service.kubernetes.io/service-proxy-name".to_owned(),
            "other".to_owned(),
        )]
        .into(),
    );
    let ports = service_ports(&[headless, external, Arc::new(other)], &[], "node-a");
    assert!(ports.is_empty(), "{ports:?}");
}

#[test]
fn a_port_without_a_matching_slice_port_has_no_endpoints() {
    let svc = service(
        "web",
        json!({"clusterIP": "10.96.0.20",
        "ports": [{"name": "metrics", "port": 9090, "protocol": "TCP"}]}),
    );
    let ports = service_ports(
        &[svc],
        &[slice("web", &[("10.244.1.1", "a", true, true, false)])],
        "a",
    );
    assert!(ports[0].cluster.is_empty());
    assert!(!ports[0].has_endpoints);
}

fn rules_for(svc: Arc<Service>, endpoints: &[(&str, &str, bool, bool, bool)]) -> Ruleset {
    let ports = service_ports(&[svc], &[slice("web", endpoints)], "node-a");
    ruleset(&ports, &config())
}

use super::ruleset::Ruleset;

fn chain<'a>(rules: &'a Ruleset, prefix: &str) -> (&'a String, &'a Vec<String>) {
    rules
        .chains
        .iter()
        .find(|(name, _)| name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no chain {prefix}* in {:#?}", rules.chains))
}

#[test]
fn a_cluster_ip_spreads_over_its_endpoints_and_masquerades_non_pod_sources() {
    let rules = rules_for(
        web(json!({})),
        &[
            ("10.244.1.1", "node-a", true, true, false),
            ("10.244.2.1", "node-b", true, true, false),
        ],
    );
    let (service_chain, body) = chain(&rules, "service-");
    assert!(
        service_chain.ends_with("-ns/web/tcp/http"),
        "{service_chain}"
    );
    assert_eq!(
        rules.maps[SERVICE_IPS].get("10.96.0.20 . tcp . 80"),
        Some(&format!("goto {service_chain}"))
    );
    assert_eq!(
        body[0],
        "ip daddr 10.96.0.20 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade"
    );
    assert!(
        body[1].starts_with("numgen random mod 2 vmap { 0 : goto endpoint-"),
        "{body:?}"
    );
    let endpoints: Vec<_> = rules
        .chains
        .iter()
        .filter(|(n, _)| n.starts_with("endpoint-"))
        .collect();
    assert_eq!(endpoints.len(), 2);
    let (_, first) = endpoints
        .iter()
        .find(|(n, _)| n.ends_with("__10.244.1.1/8080"))
        .expect("the first endpoint's chain");
    assert_eq!(
        **first,
        vec![
            "ip saddr 10.244.1.1 jump mark-for-masquerade".to_owned(),
            "meta l4proto tcp dnat to 10.244.1.1:8080".to_owned()
        ],
        "hairpin traffic is masqueraded, then DNAT"
    );
    assert!(rules.sets["cluster-ips"].contains("10.96.0.20"));
    assert!(rules.maps[NO_ENDPOINT_SERVICES].is_empty());
}

#[test]
fn no_endpoints_rejects_and_a_local_policy_without_local_endpoints_drops() {
    let rules = rules_for(
        web(
            json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}),
        ),
        &[],
    );
    assert_eq!(
        rules.maps[NO_ENDPOINT_SERVICES]
            .get("10.96.0.20 . tcp . 80")
            .map(String::as_str),
        Some("goto reject-chain")
    );
    assert_eq!(
        rules.maps[NO_ENDPOINT_NODEPORTS]
            .get("tcp . 30080")
            .map(String::as_str),
        Some("goto reject-chain")
    );
    assert!(rules.maps[SERVICE_IPS].is_empty());
    assert!(!rules.chains.keys().any(|n| n.starts_with("service-")));

    let rules = rules_for(
        web(json!({"internalTrafficPolicy": "Local"})),
        &[("10.244.2.1", "node-b", true, true, false)],
    );
    assert_eq!(
        rules.maps[NO_ENDPOINT_SERVICES]
            .get("10.96.0.20 . tcp . 80")
            .map(String::as_str),
        Some("drop")
    );
}

#[test]
fn node_ports_masquerade_under_cluster_policy_and_keep_the_source_under_local() {
    let nodeport = json!({"type": "NodePort",
        "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]});
    let rules = rules_for(
        web(nodeport.clone()),
        &[("10.244.1.1", "node-a", true, true, false)],
    );
    let (external, body) = chain(&rules, "external-");
    assert_eq!(
        rules.maps[SERVICE_NODEPORTS].get("tcp . 30080"),
        Some(&format!("goto {external}"))
    );
    assert_eq!(body[0], "jump mark-for-masquerade");
    assert!(body[1].starts_with("goto service-"));

    let mut local = nodeport;
    local["externalTrafficPolicy"] = json!("Local");
    let rules = rules_for(
        web(local),
        &[
            ("10.244.1.1", "node-a", true, true, false),
            ("10.244.2.1", "node-b", true, true, false),
        ],
    );
    let (_, body) = chain(&rules, "external-");
    assert!(
        body[0].starts_with("ip saddr 10.244.0.0/16 goto service-"),
        "{body:?}"
    );
    assert_eq!(body[1], "fib saddr type local jump mark-for-masquerade");
    assert!(
        body.last().is_some_and(|r| r.starts_with("goto local-")),
        "{body:?}"
    );
    let (_, local_body) = chain(&rules, "local-");
    assert!(
        local_body
            .iter()
            .any(|r| r.starts_with("goto endpoint-") && r.ends_with("__10.244.1.1/8080")),
        "only the local endpoint: {local_body:?}"
    );
}

#[test]
fn session_affinity_remembers_clients_per_endpoint() {
    let rules = rules_for(
        web(json!({"sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}})),
        &[
            ("10.244.1.1", "node-a", true, true, false),
            ("10.244.2.1", "node-b", true, true, false),
        ],
    );
    assert_eq!(rules.affinity.len(), 2);
    assert!(rules.affinity.values().all(|t| *t == 60));
    let (_, body) = chain(&rules, "service-");
    assert!(body[1].starts_with("ip saddr @affinity-") && body[1].contains(" goto endpoint-"));
    let (_, endpoint) = chain(&rules, "endpoint-");
    assert!(endpoint[1].starts_with("update @affinity-"), "{endpoint:?}");
}

/// `count` Services `s<i>` (cluster IP 10.96.1.<i>, port 80).
pub(super) fn numbered_services(count: usize) -> Vec<Arc<Service>> {
    (0..count)
        .map(|i| {
            service(
                &format!("s{i}"),
                json!({"clusterIP": format!("10.96.1.{i}"),
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
            )
        })
        .collect()
}

/// A slice for each of [`numbered_services`]: one endpoint 10.244.3.<i>, but `seventh` for s7.
pub(super) fn numbered_slices(count: usize, seventh: &str) -> Vec<Arc<EndpointSlice>> {
    (0..count)
        .map(|i| {
            let ip = if i == 7 {
                seventh.to_owned()
            } else {
                format!("10.244.3.{i}")
            };
            slice(
                &format!("s{i}"),
                &[(ip.as_str(), "node-a", true, true, false)],
            )
        })
        .collect()
}

#[test]
fn a_change_to_one_service_touches_only_its_chains() {
    let services = numbered_services(50);
    let slices = |third: &str| numbered_slices(50, third);
    let skeleton = skeleton(&config());
    let before = ruleset(
        &service_ports(&services, &slices("10.244.3.7"), "node-a"),
        &config(),
    );
    let after = ruleset(
        &service_ports(&services, &slices("10.244.9.9"), "node-a"),
        &config(),
    );
    assert_eq!(
        diff(&skeleton, &before, &before),
        "",
        "no change, no transaction"
    );
    let script = diff(&skeleton, &before, &after);
    assert!(script.contains("10.244.9.9"), "{script}");
    assert!(
        script.contains("delete chain ip rudder endpoint-"),
        "{script}"
    );
    for line in script.lines() {
        assert!(
            line.contains("/s7/") || line.contains("s7/tcp"),
            "only s7's chains change: {line}"
        );
    }
    // Whole-table scripts hold everything.
    let whole = full(&skeleton, &after);
    assert!(whole.starts_with("add table ip rudder\ndelete table ip rudder\n"));
    let service_chains = whole
        .lines()
        .filter(|l| l.starts_with("add chain ip rudder service-") && l.ends_with("/tcp/http"))
        .count();
    assert_eq!(service_chains, 50);
}

#[test]
fn removing_a_service_removes_its_elements_before_its_chains() {
    let skeleton = skeleton(&config());
    let before = rules_for(
        web(json!({})),
        &[("10.244.1.1", "node-a", true, true, false)],
    );
    let after = ruleset(&[], &config());
    let script = diff(&skeleton, &before, &after);
    let element = script
        .find("delete element ip rudder service-ips")
        .expect("element deleted");
    let flush = script
        .find("flush chain ip rudder service-")
        .expect("chain flushed");
    let delete = script
        .find("delete chain ip rudder service-")
        .expect("chain deleted");
    assert!(element < delete && flush < delete, "{script}");
    assert!(script.contains("delete element ip rudder cluster-ips { 10.96.0.20 }"));
}

pub(super) fn store<K>(objects: Vec<K>) -> (reflector::Store<K>, reflector::store::Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    (reader, writer)
}

#[tokio::test]
async fn the_loop_writes_the_table_whole_then_only_changes_and_rewrites_after_a_failure() {
    let (services, _services_writer) = store(vec![(*web(json!({}))).clone()]);
    let (slices, mut slices_writer) = store(vec![(*slice(
        "web",
        &[("10.244.1.1", "node-a", true, true, false)],
    ))
    .clone()]);
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let watched = Watched::new(services, slices, rx);
    let nft = Arc::new(nft::Fake::default());
    let metrics = Arc::new(Metrics::default());
    let shutdown = CancellationToken::new();
    let mut config = Config::new("node-a", vec!["10.244.0.0/16".into()]);
    config.min_sync_period = Duration::from_millis(1);
    let task = tokio::spawn(run(
        config,
        watched,
        super::Backend::Nftables(nft.clone()),
        metrics.clone(),
        shutdown.clone(),
    ));
    let applied = |n: usize| {
        let nft = nft.clone();
        async move {
            for _ in 0..500 {
                if nft.applied.lock().expect("lock").len() >= n {
                    return nft.applied.lock().expect("lock").clone();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!(
                "fewer than {n} transactions: {:?}",
                nft.applied.lock().expect("lock")
            );
        }
    };
    let first = applied(1).await;
    assert!(first[0].starts_with("add table ip rudder\ndelete table ip rudder"));
    assert!(first[0].contains("dnat to 10.244.1.1:8080"));

    slices_writer.apply_watcher_event(&Event::Apply(
        (*slice("web", &[("10.244.1.2", "node-a", true, true, false)])).clone(),
    ));
    tx.send_modify(|g| *g += 1);
    let second = applied(2).await;
    assert!(
        !second[1].contains("delete table"),
        "a diff, not a rewrite: {}",
        second[1]
    );
    assert!(second[1].contains("dnat to 10.244.1.2:8080"));

    *nft.fail_next.lock().expect("lock") = true;
    slices_writer.apply_watcher_event(&Event::Apply(
        (*slice("web", &[("10.244.1.3", "node-a", true, true, false)])).clone(),
    ));
    tx.send_modify(|g| *g += 1);
    let third = applied(3).await;
    assert!(
        third[2].starts_with("add table ip rudder\ndelete table ip rudder"),
        "{}",
        third[2]
    );
    assert!(third[2].contains("dnat to 10.244.1.3:8080"));
    shutdown.cancel();
    task.await.expect("the loop's task").expect("the loop");
}
