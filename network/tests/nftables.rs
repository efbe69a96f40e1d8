//! The proxy's transactions against the real `nft` in a network namespace of the test's own:
//! the whole table, then diffs, are accepted by the kernel and leave what the rules say, and
//! cleanup removes only the proxy's table. Needs root, iproute2 and nftables; under `CI=true`
//! it fails when they are missing instead of skipping.

use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_network::proxy::model::service_ports;
use rudder_network::proxy::nft::{Cli, Nft};
use rudder_network::proxy::rules::{ruleset, skeleton, RuleConfig};
use rudder_network::proxy::ruleset::{diff, full};
use serde_json::json;

struct Netns(String);

impl Netns {
    fn create(name: &str) -> Option<Netns> {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        let made = Command::new("ip").args(["netns", "add", name]).output();
        match made {
            Ok(output) if output.status.success() => Some(Netns(name.to_owned())),
            other => {
                let why = format!("cannot create a network namespace: {other:?}");
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
                eprintln!("skipping (not CI): {why}");
                None
            }
        }
    }

    fn nft(&self) -> Cli {
        Cli {
            command: ["ip", "netns", "exec", &self.0, "nft"]
                .map(String::from)
                .to_vec(),
        }
    }

    fn list(&self) -> String {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.0, "nft", "list", "ruleset"])
            .output()
            .expect("nft list ruleset");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn services() -> Vec<Arc<Service>> {
    let specs = [
        (
            "web",
            json!({"clusterIP": "10.96.0.20", "type": "NodePort", "sessionAffinity": "ClientIP",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
        ),
        (
            "dns",
            json!({"clusterIP": "10.96.0.10", "externalTrafficPolicy": "Local", "type": "NodePort",
            "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                      {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
        ),
        (
            "empty",
            json!({"clusterIP": "10.96.0.30", "ports": [{"name": "http", "port": 80}]}),
        ),
        (
            "sctp",
            json!({"clusterIP": "10.96.0.40", "internalTrafficPolicy": "Local",
            "ports": [{"name": "s", "port": 9, "protocol": "SCTP"}]}),
        ),
    ];
    specs
        .into_iter()
        .map(|(name, spec)| {
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}),
                )
                .expect("a Service"),
            )
        })
        .collect()
}

fn slices(web_ips: &[&str]) -> Vec<Arc<EndpointSlice>> {
    let slice = |service: &str, ips: &[&str], ports: serde_json::Value| -> Arc<EndpointSlice> {
        let endpoints: Vec<_> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "nodeName": "node-a", "conditions": {"ready": true}}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("{service}-x"), "namespace": "ns",
                    "labels": {"kubernetes.io/service-name": service}},
                "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
            }))
            .expect("an EndpointSlice"),
        )
    };
    vec![
        slice(
            "web",
            web_ips,
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}]),
        ),
        slice(
            "dns",
            &["10.244.1.5"],
            json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]),
        ),
        slice(
            "sctp",
            &["10.244.1.6"],
            json!([{"name": "s", "port": 9, "protocol": "SCTP"}]),
        ),
    ]
}

#[tokio::test]
async fn the_kernel_takes_the_whole_table_then_diffs_and_cleanup_removes_only_ours() {
    let Some(ns) = Netns::create(&format!("rdr-nft-{}", std::process::id())) else {
        return;
    };
    let nft = ns.nft();
    // Someone else's table, which must survive everything below.
    nft.apply("add table ip other\nadd chain ip other keep\n")
        .await
        .expect("another table");
    let config = RuleConfig {
        table: "rudder".into(),
        cluster_cidrs: vec!["10.244.0.0/16".into()],
    };
    let skeleton = skeleton(&config);
    let first = ruleset(
        &service_ports(
            &services(),
            &slices(&["10.244.1.1", "10.244.1.2"]),
            "node-a",
        ),
        &config,
    );
    nft.apply(&full(&skeleton, &first))
        .await
        .expect("the whole table");
    let listed = ns.list();
    for expected in [
        "dnat to 10.244.1.1:8080",
        "dnat to 10.244.1.2:8080",
        "numgen random mod 2",
        "10.96.0.20 . tcp . 80 : goto service-",
        "10.96.0.30 . tcp . 80 : goto reject-chain",
        "tcp . 30080 : goto external-",
        "meta l4proto sctp dnat to 10.244.1.6:9",
        "flags dynamic,timeout",
        "table ip other",
    ] {
        assert!(
            listed.contains(expected),
            "{expected:?} missing from:\n{listed}"
        );
    }
    // The same table written again from scratch is accepted (a restart).
    nft.apply(&full(&skeleton, &first))
        .await
        .expect("rewritten whole");

    // One endpoint replaced, one service gone: a diff.
    let mut fewer = services();
    fewer.retain(|s| s.metadata.name.as_deref() != Some("sctp"));
    let second = ruleset(
        &service_ports(&fewer, &slices(&["10.244.1.1", "10.244.1.3"]), "node-a"),
        &config,
    );
    let script = diff(&skeleton, &first, &second);
    assert!(!script.contains("delete table"));
    nft.apply(&script)
        .await
        .unwrap_or_else(|e| panic!("the diff {script}: {e}"));
    let listed = ns.list();
    assert!(listed.contains("dnat to 10.244.1.3:8080"), "{listed}");
    assert!(!listed.contains("10.244.1.2:8080"), "{listed}");
    assert!(!listed.contains("sctp"), "{listed}");
    // Back again, and to nothing.
    nft.apply(&diff(&skeleton, &second, &first))
        .await
        .expect("diff back");
    let none = ruleset(&[], &config);
    nft.apply(&diff(&skeleton, &first, &none))
        .await
        .expect("diff to nothing");
    assert!(!ns.list().contains("dnat to"), "{}", ns.list());

    rudder_network::proxy::cleanup(&nft, "rudder")
        .await
        .expect("cleanup");
    rudder_network::proxy::cleanup(&nft, "rudder")
        .await
        .expect("cleanup twice");
    let listed = ns.list();
    assert!(!listed.contains("table ip rudder"), "{listed}");
    assert!(listed.contains("table ip other"), "{listed}");
}
