//! The iptables mode's chains and `iptables-restore` inputs, table-driven from Service and
//! EndpointSlice objects (the fixtures of the nftables tests); the run loop and cleanup
//! against the fake programs.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::restore::{self, Existing};
use super::rules::{tables, Tables, EXTERNAL_SERVICES, MASQ_NON_POD, NODEPORTS, SERVICES};
use super::{Fake, Iptables, RuleOp};
use crate::proxy::model::{service_ports, Protocol, ServicePort};
use crate::proxy::rules::{hash_name, RuleConfig};
use crate::proxy::tests::{
    config, numbered_services, numbered_slices, slice, store, web, EndpointSpec,
};
use crate::proxy::{run, Backend, Config, Metrics};
use crate::Watched;

fn ports_for(svc: Arc<Service>, endpoints: &[EndpointSpec]) -> Vec<ServicePort> {
    service_ports(&[svc], &[slice("web", endpoints)], "node-a")
}

fn tables_for(svc: Arc<Service>, endpoints: &[EndpointSpec]) -> Tables {
    tables(&ports_for(svc, endpoints), &config())
}

/// The one nat chain whose name starts with `prefix`.
fn nat_chain<'a>(tables: &'a Tables, prefix: &str) -> (&'a String, &'a Vec<String>) {
    let mut found = tables
        .nat
        .iter()
        .filter(|(name, _)| name.starts_with(prefix));
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no chain {prefix}* in {:#?}", tables.nat));
    assert!(found.next().is_none(), "more than one {prefix}*");
    first
}

const READY_A: EndpointSpec = ("10.244.1.1", "node-a", true, true, false);
const READY_B: EndpointSpec = ("10.244.2.1", "node-b", true, true, false);
const READY_C: EndpointSpec = ("10.244.3.1", "node-c", true, true, false);

#[test]
fn chain_names_hash_as_upstream_base32_of_sha256() {
    // base64.b32encode(sha256(text))[:16], computed independently.
    assert_eq!(hash_name("ns/web/tcp/http", 16), "Y6QD5CCTVWLXICXR");
    assert_eq!(
        hash_name("ns/web/tcp/http__10.244.1.1/8080", 16),
        "LI5V4JOAYQBUVX2L"
    );
    // The nftables names keep their 8 letters, the same prefix.
    assert_eq!(hash_name("ns/web/tcp/http", 8), "Y6QD5CCT");
    let tables = tables_for(web(json!({})), &[READY_A]);
    assert!(tables.nat.contains_key("RUDDER-SVC-Y6QD5CCTVWLXICXR"));
    assert!(tables.nat.contains_key("RUDDER-SEP-LI5V4JOAYQBUVX2L"));
    assert!(tables.nat.keys().all(|name| name.len() <= 28));
}

#[test]
fn a_cluster_ip_spreads_with_falling_probabilities_and_endpoints_masquerade_hairpins() {
    let tables = tables_for(web(json!({})), &[READY_A, READY_B, READY_C]);
    assert_eq!(
        tables.nat[SERVICES],
        vec![
            "-m comment --comment \"ns/web:http cluster IP\" -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j RUDDER-SVC-Y6QD5CCTVWLXICXR".to_owned(),
            "-m comment --comment \"rudder service nodeports; must be last\" ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j RUDDER-NODEPORTS".to_owned(),
        ]
    );
    let (_, body) = nat_chain(&tables, "RUDDER-SVC-");
    assert_eq!(body.len(), 4, "{body:#?}");
    assert_eq!(
        body[0],
        "-m comment --comment \"ns/web:http cluster IP\" -d 10.96.0.20/32 -p tcp -m tcp --dport 80 ! -s 10.244.0.0/16 -j RUDDER-MARK-MASQ"
    );
    let cases = [
        (1, "10.244.1.1:8080", Some("0.3333333333")),
        (2, "10.244.2.1:8080", Some("0.5000000000")),
        (3, "10.244.3.1:8080", None),
    ];
    for (index, endpoint, probability) in cases {
        let rule = &body[index];
        assert!(rule.contains(&format!("-> {endpoint}\"")), "{rule}");
        match probability {
            Some(p) => assert!(
                rule.contains(&format!(
                    "-m statistic --mode random --probability {p} -j RUDDER-SEP-"
                )),
                "{rule}"
            ),
            None => assert!(
                !rule.contains("statistic") && rule.contains("-j RUDDER-SEP-"),
                "{rule}"
            ),
        }
    }
    let sep = format!(
        "RUDDER-SEP-{}",
        hash_name("ns/web/tcp/http__10.244.2.1/8080", 16)
    );
    assert_eq!(
        tables.nat[&sep],
        vec![
            "-m comment --comment \"ns/web:http\" -s 10.244.2.1/32 -j RUDDER-MARK-MASQ".to_owned(),
            "-m comment --comment \"ns/web:http\" -p tcp -m tcp -j DNAT --to-destination 10.244.2.1:8080".to_owned(),
        ],
        "hairpin traffic is masqueraded, then DNAT"
    );
    assert!(
        tables.filter.values().all(Vec::is_empty),
        "{:#?}",
        tables.filter
    );
}

/// A Service spec, its endpoints, and the filter table's `RUDDER-SERVICES` and
/// `RUDDER-EXTERNAL-SERVICES` rules expected.
type FilterCase<'a> = (
    serde_json::Value,
    &'a [EndpointSpec<'a>],
    Vec<String>,
    Vec<String>,
);

#[test]
fn unserved_traffic_is_rejected_or_dropped_by_the_filter_table() {
    let node_port = json!({"type": "NodePort",
        "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]});
    let mut local_both = node_port.clone();
    local_both["externalTrafficPolicy"] = json!("Local");
    local_both["internalTrafficPolicy"] = json!("Local");
    let to_cluster_ip = "-d 10.96.0.20/32 -p tcp -m tcp --dport 80";
    let to_node_port = "! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 30080";
    // (service, endpoints, filter RUDDER-SERVICES, filter RUDDER-EXTERNAL-SERVICES)
    let cases: Vec<FilterCase> = vec![
        (
            node_port.clone(),
            &[],
            vec![format!("-m comment --comment \"ns/web:http has no endpoints\" {to_cluster_ip} -j REJECT")],
            vec![format!("-m comment --comment \"ns/web:http has no endpoints\" {to_node_port} -j REJECT")],
        ),
        // Only a not-ready endpoint: no endpoints either.
        (
            node_port.clone(),
            &[("10.244.1.1", "node-a", false, false, false)],
            vec![format!("-m comment --comment \"ns/web:http has no endpoints\" {to_cluster_ip} -j REJECT")],
            vec![format!("-m comment --comment \"ns/web:http has no endpoints\" {to_node_port} -j REJECT")],
        ),
        // Local policies with only a remote endpoint: dropped.
        (
            local_both.clone(),
            &[READY_B],
            vec![format!("-m comment --comment \"ns/web:http has no local endpoints\" {to_cluster_ip} -j DROP")],
            vec![format!("-m comment --comment \"ns/web:http has no local endpoints\" {to_node_port} -j DROP")],
        ),
        // A local endpoint: nothing for the filter.
        (local_both, &[READY_A, READY_B], vec![], vec![]),
        (node_port, &[READY_B], vec![], vec![]),
    ];
    for (spec, endpoints, services, external) in cases {
        let tables = tables_for(web(spec.clone()), endpoints);
        assert_eq!(tables.filter[SERVICES], services, "{spec} {endpoints:?}");
        assert_eq!(
            tables.filter[EXTERNAL_SERVICES], external,
            "{spec} {endpoints:?}"
        );
        let routed = tables.nat[SERVICES]
            .iter()
            .any(|r| r.contains(to_cluster_ip));
        assert_eq!(
            routed,
            services.is_empty(),
            "nat routes the cluster IP only when served"
        );
    }
}

#[test]
fn node_ports_masquerade_under_cluster_policy_and_keep_the_source_under_local() {
    let mut spec = json!({"type": "NodePort", "externalIPs": ["192.0.2.200"],
        "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]});
    let tables = tables_for(web(spec.clone()), &[READY_A, READY_B]);
    let (external, body) = nat_chain(&tables, "RUDDER-EXT-");
    assert_eq!(
        tables.nat[NODEPORTS],
        vec![format!(
            "-m comment --comment \"ns/web:http\" -p tcp -m tcp --dport 30080 -j {external}"
        )]
    );
    assert!(
        tables.nat[SERVICES].contains(&format!(
            "-m comment --comment \"ns/web:http external IP\" -d 192.0.2.200/32 -p tcp -m tcp --dport 80 -j {external}"
        )),
        "{:#?}",
        tables.nat[SERVICES]
    );
    assert_eq!(body.len(), 2);
    assert!(body[0].ends_with("-j RUDDER-MARK-MASQ"), "{body:?}");
    assert_eq!(body[1], "-j RUDDER-SVC-Y6QD5CCTVWLXICXR");
    assert!(!tables.nat.keys().any(|n| n.starts_with("RUDDER-SVL-")));

    spec["externalTrafficPolicy"] = json!("Local");
    let tables = tables_for(web(spec), &[READY_A, READY_B]);
    let (_, body) = nat_chain(&tables, "RUDDER-EXT-");
    let expected = [
        "-s 10.244.0.0/16 -j RUDDER-SVC-",
        "-m addrtype --src-type LOCAL -j RUDDER-MARK-MASQ",
        "-m addrtype --src-type LOCAL -j RUDDER-SVC-",
        "-j RUDDER-SVL-",
    ];
    assert_eq!(body.len(), expected.len(), "{body:#?}");
    for (rule, part) in body.iter().zip(expected) {
        assert!(rule.contains(part), "{rule} lacks {part}");
    }
    let (_, local) = nat_chain(&tables, "RUDDER-SVL-");
    let picks: Vec<_> = local
        .iter()
        .filter(|r| r.contains("-j RUDDER-SEP-"))
        .collect();
    assert_eq!(picks.len(), 1, "only the local endpoint: {local:#?}");
    assert!(picks[0].contains("-> 10.244.1.1:8080"));
    // The cluster IP still goes to every endpoint (internal policy Cluster).
    assert!(tables.nat[SERVICES][0].ends_with("-j RUDDER-SVC-Y6QD5CCTVWLXICXR"));
}

#[test]
fn session_affinity_checks_the_recent_lists_before_picking() {
    let tables = tables_for(
        web(json!({"sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}})),
        &[READY_A, READY_B],
    );
    let (_, body) = nat_chain(&tables, "RUDDER-SVC-");
    for (index, ip) in [(1, "10.244.1.1"), (2, "10.244.2.1")] {
        let sep = format!(
            "RUDDER-SEP-{}",
            hash_name(&format!("ns/web/tcp/http__{ip}/8080"), 16)
        );
        assert!(
            body[index].ends_with(&format!(
                "-m recent --name {sep} --rcheck --seconds 60 --reap -j {sep}"
            )),
            "{body:#?}"
        );
        assert!(
            tables.nat[&sep][1].contains(&format!("-m recent --name {sep} --set -p tcp")),
            "{:?}",
            tables.nat[&sep]
        );
    }
    assert!(body[3].contains("--probability 0.5000000000"), "{body:#?}");
}

#[test]
fn udp_sctp_terminating_fallback_and_several_pod_networks() {
    // (protocol, endpoints, cluster CIDRs, a rule expected in some nat chain)
    const TERMINATING: EndpointSpec = ("10.244.1.9", "node-a", false, true, true);
    let cases: Vec<(Protocol, &[EndpointSpec], Vec<&str>, &str)> = vec![
        (
            Protocol::Udp,
            &[READY_A],
            vec!["10.244.0.0/16"],
            "-p udp -m udp -j DNAT --to-destination 10.244.1.1:8080",
        ),
        (
            Protocol::Sctp,
            &[READY_A],
            vec!["10.244.0.0/16"],
            "-p sctp -m sctp -j DNAT --to-destination 10.244.1.1:8080",
        ),
        (
            Protocol::Udp,
            &[READY_A],
            vec![],
            "-p udp -m udp --dport 80 -j RUDDER-MARK-MASQ",
        ),
        (
            Protocol::Tcp,
            &[TERMINATING],
            vec!["10.244.0.0/16"],
            "-j DNAT --to-destination 10.244.1.9:8080",
        ),
        (
            Protocol::Tcp,
            &[READY_A],
            vec!["10.244.0.0/16", "10.45.0.0/16"],
            "--dport 80 -j RUDDER-MASQ-NON-POD",
        ),
    ];
    for (protocol, endpoints, cidrs, expected) in cases {
        let mut ports = ports_for(web(json!({})), endpoints);
        ports[0].protocol = protocol;
        let config = RuleConfig {
            cluster_cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
            ..config()
        };
        let tables = tables(&ports, &config);
        assert!(
            tables.nat.values().flatten().any(|r| r.ends_with(expected)),
            "{protocol:?} {cidrs:?}: no rule ending {expected:?} in {:#?}",
            tables.nat
        );
        assert_eq!(tables.nat.contains_key(MASQ_NON_POD), cidrs.len() > 1);
    }
}

#[test]
fn restores_write_changed_chains_only_and_delete_stale_ones() {
    let services = numbered_services(20);
    let slices = |seventh: &str| numbered_slices(20, seventh);
    let before = tables(
        &service_ports(&services, &slices("10.244.3.7"), "node-a"),
        &config(),
    );
    let after = tables(
        &service_ports(&services, &slices("10.244.9.9"), "node-a"),
        &config(),
    );
    assert_eq!(restore::diff(&before, &before), "", "no change, no restore");

    let changed = restore::diff(&before, &after);
    let svc7 = format!("RUDDER-SVC-{}", hash_name("ns/s7/tcp/http", 16));
    let old_sep = format!(
        "RUDDER-SEP-{}",
        hash_name("ns/s7/tcp/http__10.244.3.7/8080", 16)
    );
    let new_sep = format!(
        "RUDDER-SEP-{}",
        hash_name("ns/s7/tcp/http__10.244.9.9/8080", 16)
    );
    let expected_declarations = [
        format!(":{new_sep} - [0:0]"),
        format!(":{svc7} - [0:0]"),
        format!(":{old_sep} - [0:0]"),
    ];
    let declared: Vec<_> = changed.lines().filter(|l| l.starts_with(':')).collect();
    assert_eq!(declared.len(), 3, "{changed}");
    for line in &expected_declarations {
        assert!(declared.contains(&line.as_str()), "{line} not in {changed}");
    }
    assert!(
        changed.starts_with("*nat\n") && changed.ends_with(&format!("-X {old_sep}\nCOMMIT\n")),
        "{changed}"
    );
    assert!(!changed.contains("*filter"), "{changed}");
    assert!(
        !changed.contains(":RUDDER-SERVICES"),
        "the services chain did not change: {changed}"
    );

    // A Service gone: the services chain rewritten, its chains deleted after.
    let fewer = tables(
        &service_ports(&services[1..], &slices("10.244.3.7"), "node-a"),
        &config(),
    );
    let removed = restore::diff(&before, &fewer);
    let svc0 = format!("RUDDER-SVC-{}", hash_name("ns/s0/tcp/http", 16));
    let rewrite = removed
        .find(":RUDDER-SERVICES - [0:0]")
        .expect("services rewritten");
    let delete = removed
        .find(&format!("-X {svc0}"))
        .expect("s0's chain deleted");
    assert!(rewrite < delete, "{removed}");
    assert_eq!(
        removed.matches("-A RUDDER-SERVICES ").count(),
        20,
        "19 services and the nodeports jump"
    );

    // A whole restore: every chain, and the RUDDER- chains of an earlier run deleted.
    let existing = Existing {
        nat: [svc0.clone(), "RUDDER-SVC-GONEGONEGONEGONE".to_owned()].into(),
        filter: ["RUDDER-OLD".to_owned()].into(),
    };
    let whole = restore::full(&existing, &after);
    assert_eq!(
        whole.lines().filter(|l| l.starts_with(':')).count(),
        after.nat.len() + after.filter.len() + 2
    );
    assert!(
        whole.contains("-X RUDDER-SVC-GONEGONEGONEGONE\nCOMMIT\n*filter"),
        "{whole}"
    );
    assert!(!whole.contains(&format!("-X {svc0}")), "{whole}");
    assert!(whole.contains("-X RUDDER-OLD\nCOMMIT\n"), "{whole}");
    assert_eq!(whole.matches("-j DNAT").count(), 20, "{whole}");
}

#[test]
fn saved_chains_are_read_and_only_rudders_are_cleaned() {
    let saved = "# Generated by iptables-save\n*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:RUDDER-SERVICES - [0:0]\n:RUDDER-SEP-ABC - [0:0]\n-A PREROUTING -j RUDDER-SERVICES\nCOMMIT\n";
    let chains = restore::rudder_chains(saved);
    assert_eq!(
        chains.iter().map(String::as_str).collect::<Vec<_>>(),
        ["RUDDER-SEP-ABC", "RUDDER-SERVICES"]
    );
    let input = restore::cleanup(&Existing {
        nat: chains,
        filter: Default::default(),
    });
    assert_eq!(
        input,
        "*nat\n:RUDDER-SEP-ABC - [0:0]\n:RUDDER-SERVICES - [0:0]\n-X RUDDER-SEP-ABC\n-X RUDDER-SERVICES\nCOMMIT\n"
    );
    assert_eq!(restore::cleanup(&Existing::default()), "");
}

async fn restored(fake: &Fake, count: usize) -> Vec<String> {
    for _ in 0..500 {
        let restored = fake.restored.lock().expect("lock").clone();
        if restored.len() >= count {
            return restored;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "fewer than {count} restores: {:?}",
        fake.restored.lock().expect("lock")
    );
}

#[tokio::test]
async fn the_loop_restores_everything_then_changes_and_cleanup_takes_it_all_away() {
    let (services, _services_writer) = store(vec![(*web(json!({}))).clone()]);
    let (slices, mut slices_writer) = store(vec![(*slice("web", &[READY_A])).clone()]);
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let fake = Arc::new(Fake::default());
    // An earlier run left a chain behind.
    fake.saved.lock().expect("lock").insert(
        "nat".into(),
        "*nat\n:RUDDER-SEP-LEFTOVERLEFTOVER - [0:0]\nCOMMIT\n".into(),
    );
    let backend = Backend::Iptables(fake.clone());
    let metrics = Arc::new(Metrics::for_backend(&backend));
    let shutdown = CancellationToken::new();
    let mut config = Config::new("node-a", vec!["10.244.0.0/16".into()]);
    config.min_sync_period = Duration::from_millis(1);
    let task = tokio::spawn(run(
        config,
        Watched::new(services, slices, rx),
        backend,
        metrics.clone(),
        shutdown.clone(),
    ));
    let first = restored(&fake, 1).await;
    assert!(
        first[0].contains("-j DNAT --to-destination 10.244.1.1:8080"),
        "{}",
        first[0]
    );
    assert!(
        first[0].contains("-X RUDDER-SEP-LEFTOVERLEFTOVER"),
        "{}",
        first[0]
    );
    // The jumps follow the first restore.
    for _ in 0..100 {
        if fake.builtin.lock().expect("lock").len() == super::rules::jumps().len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let jumps = fake.builtin.lock().expect("lock").clone();
    assert_eq!(jumps.len(), super::rules::jumps().len(), "{jumps:?}");
    assert!(jumps.contains(&(
        "nat".into(),
        "PREROUTING".into(),
        [
            "-m",
            "comment",
            "--comment",
            "rudder service portals",
            "-j",
            "RUDDER-SERVICES"
        ]
        .map(String::from)
        .to_vec()
    )));

    slices_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
        (*slice("web", &[("10.244.1.2", "node-a", true, true, false)])).clone(),
    ));
    tx.send_modify(|g| *g += 1);
    let second = restored(&fake, 2).await;
    assert!(
        second[1].contains("--to-destination 10.244.1.2:8080"),
        "{}",
        second[1]
    );
    assert!(
        !second[1].contains(":RUDDER-SERVICES"),
        "only the changed chains: {}",
        second[1]
    );

    *fake.fail_next.lock().expect("lock") = true;
    slices_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(
        (*slice("web", &[("10.244.1.3", "node-a", true, true, false)])).clone(),
    ));
    tx.send_modify(|g| *g += 1);
    let third = restored(&fake, 3).await;
    assert!(
        third[2].contains(":RUDDER-SERVICES - [0:0]"),
        "rewritten whole after a failure: {}",
        third[2]
    );
    assert!(third[2].contains("--to-destination 10.244.1.3:8080"));
    shutdown.cancel();
    task.await.expect("the loop's task").expect("the loop");

    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
    for name in [
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1",
        "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"}",
        "kubeproxy_sync_proxy_rules_duration_seconds_count",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }

    // Cleanup: the jumps, then the chains `iptables-save` shows.
    fake.saved.lock().expect("lock").insert(
        "nat".into(),
        "*nat\n:RUDDER-SERVICES - [0:0]\n:RUDDER-POSTROUTING - [0:0]\nCOMMIT\n".into(),
    );
    fake.saved.lock().expect("lock").insert(
        "filter".into(),
        "*filter\n:RUDDER-SERVICES - [0:0]\n:RUDDER-EXTERNAL-SERVICES - [0:0]\nCOMMIT\n".into(),
    );
    assert!(super::cleanup(&*fake).await.expect("cleanup"));
    assert!(fake.builtin.lock().expect("lock").is_empty());
    let last = fake
        .restored
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(
        last.contains("-X RUDDER-POSTROUTING") && last.contains("-X RUDDER-EXTERNAL-SERVICES"),
        "{last}"
    );
    assert!(!fake
        .rule("nat", RuleOp::Check, "PREROUTING", &[])
        .await
        .expect("check"));
}
