//! The proxy's transactions against the real `nft` in a network namespace of the test's own:
//! the whole table, then diffs, are accepted by the kernel and leave what the rules say, and
//! cleanup removes only the proxy's table. Needs root, iproute2 and nftables; under `CI=true`
//! it fails when they are missing instead of skipping.

mod common;

use common::{services, slices, Netns};
use rudder_network::proxy::model::service_ports;
use rudder_network::proxy::nft::Nft;
use rudder_network::proxy::rules::{ruleset, skeleton, RuleConfig};
use rudder_network::proxy::ruleset::{diff, full};

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
