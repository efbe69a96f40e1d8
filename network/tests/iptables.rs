//! The proxy's iptables mode against the real `iptables-restore`/`iptables` in a network
//! namespace of the test's own: the whole set of chains, then only changes, are accepted and
//! leave what the rules say; a connection from inside the namespace to a cluster IP reaches
//! its endpoint and one to a Service without endpoints is refused at once; restarts neither
//! duplicate the jumps nor keep stale chains; cleanup removes Rudder's chains and jumps and
//! nothing else. Needs root, iproute2 and iptables; under `CI=true` it fails when they are
//! missing instead of skipping.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{services, slices, Netns};
use rudder_network::proxy::iptables::{self, Iptables, Programmer};
use rudder_network::proxy::model::service_ports;
use rudder_network::proxy::rules::RuleConfig;

fn config() -> RuleConfig {
    RuleConfig {
        table: "rudder".into(),
        cluster_cidrs: vec!["10.244.0.0/16".into()],
    }
}

/// A connection to `service` from inside the namespace, answered by a listener on
/// `endpoint` there: what the listener read, or the connection's error kind.
fn connect_through(ns: &Netns, service: &str, endpoint: &str) -> Result<String, ErrorKind> {
    let (service, endpoint): (SocketAddr, SocketAddr) = (
        service.parse().expect("address"),
        endpoint.parse().expect("address"),
    );
    ns.within(move || {
        let listener = TcpListener::bind(endpoint).expect("listening on the endpoint");
        let mut client =
            TcpStream::connect_timeout(&service, Duration::from_secs(3)).map_err(|e| e.kind())?;
        client.write_all(b"hello").expect("written");
        drop(client);
        let (mut accepted, _) = listener.accept().expect("accepted");
        let mut read = String::new();
        accepted.read_to_string(&mut read).expect("read");
        Ok(read)
    })
}

#[tokio::test]
async fn iptables_takes_the_chains_then_changes_routes_and_cleanup_removes_only_ours() {
    let Some(ns) = Netns::create(&format!("rdr-ipt-{}", std::process::id())) else {
        return;
    };
    let ipt = ns.iptables();
    if !ipt.available().await {
        let why = "iptables and iptables-restore cannot program a network namespace here";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipping (not CI): {why}");
        return;
    }
    // Someone else's chain and jump, and a chain an earlier run of Rudder's left behind.
    ipt.restore(
        "*nat\n:OTHER - [0:0]\n:RUDDER-SEP-STALESTALESTALE - [0:0]\n-A OTHER -j RETURN\n-A POSTROUTING -j OTHER\nCOMMIT\n",
    )
    .await
    .expect("another chain");
    let save = |table: &str| ns.run("iptables-save", &["-t", table]);

    let ports = service_ports(
        &services(),
        &slices(&["10.244.1.1", "10.244.1.2"]),
        "node-a",
    );
    let shared = std::sync::Arc::new(ipt.clone());
    let mut programmer = Programmer::new(shared.clone(), config());
    programmer
        .program(&ports, true)
        .await
        .expect("the whole set");
    let nat = save("nat");
    let filter = save("filter");
    for expected in [
        "-A PREROUTING -m comment --comment \"rudder service portals\" -j RUDDER-SERVICES",
        "-A POSTROUTING -m comment --comment \"rudder postrouting rules\" -j RUDDER-POSTROUTING",
        "--to-destination 10.244.1.1:8080",
        "--to-destination 10.244.1.2:8080",
        "-m statistic --mode random --probability 0.50000000000",
        "-m recent --rcheck --seconds 10800 --reap --name RUDDER-SEP-",
        "-m sctp -j DNAT --to-destination 10.244.1.6:9",
        "--dport 30080 -j RUDDER-EXT-",
        "-A POSTROUTING -j OTHER",
        ":OTHER - [0:0]",
    ] {
        assert!(nat.contains(expected), "{expected:?} missing from:\n{nat}");
    }
    assert!(
        !nat.contains("STALESTALE"),
        "the stale chain is gone:\n{nat}"
    );
    for expected in [
        "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"rudder service portals\" -j RUDDER-SERVICES",
        "-A RUDDER-SERVICES -d 10.96.0.30/32 -p tcp -m comment --comment \"ns/empty:http has no endpoints\" -m tcp --dport 80 -j REJECT",
    ] {
        assert!(filter.contains(expected), "{expected:?} missing from:\n{filter}");
    }

    // Packets: a connection to the DNS Service's TCP port reaches its endpoint, one to the
    // Service without endpoints is refused at once.
    ns.run("ip", &["link", "set", "lo", "up"]);
    ns.run(
        "ip",
        &[
            "link", "add", "svc0", "type", "veth", "peer", "name", "svc1",
        ],
    );
    ns.run("ip", &["addr", "add", "10.244.1.5/32", "dev", "svc0"]);
    ns.run("ip", &["link", "set", "svc0", "up"]);
    ns.run("ip", &["link", "set", "svc1", "up"]);
    ns.run("ip", &["route", "add", "10.96.0.0/16", "dev", "svc0"]);
    assert_eq!(
        connect_through(&ns, "10.96.0.10:53", "10.244.1.5:53"),
        Ok("hello".to_owned()),
        "the cluster IP reaches its endpoint"
    );
    let started = Instant::now();
    assert_eq!(
        connect_through(&ns, "10.96.0.30:80", "10.244.1.5:8081"),
        Err(ErrorKind::ConnectionRefused)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once"
    );

    // A restart writes everything again: accepted, and the jumps are not doubled.
    let mut restarted = Programmer::new(shared.clone(), config());
    restarted
        .program(&ports, true)
        .await
        .expect("rewritten whole");
    let nat = save("nat");
    assert_eq!(nat.matches("-j RUDDER-SERVICES").count(), 2, "{nat}");

    // One endpoint replaced, one Service gone: only changes.
    let mut fewer = services();
    fewer.retain(|s| s.metadata.name.as_deref() != Some("sctp"));
    let changed = service_ports(&fewer, &slices(&["10.244.1.1", "10.244.1.3"]), "node-a");
    let lines = restarted
        .program(&changed, false)
        .await
        .expect("the changes");
    assert!(lines > 0);
    let nat = save("nat");
    assert!(nat.contains("--to-destination 10.244.1.3:8080"), "{nat}");
    assert!(!nat.contains("10.244.1.2:8080"), "{nat}");
    assert!(!nat.contains("sctp"), "{nat}");
    let chains = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with(":RUDDER-SEP-"))
            .count()
    };
    // web: 2 endpoints; dns: one per port (UDP and TCP).
    assert_eq!(chains(&nat), 4, "no stale endpoint chains:\n{nat}");
    // And to nothing.
    restarted.program(&[], false).await.expect("to nothing");
    let nat = save("nat");
    assert!(!nat.contains("DNAT"), "{nat}");
    assert_eq!(chains(&nat), 0, "{nat}");

    assert!(iptables::cleanup(&ipt).await.expect("cleanup"));
    assert!(!iptables::cleanup(&ipt).await.expect("cleanup twice"));
    let (nat, filter) = (save("nat"), save("filter"));
    assert!(
        !nat.contains("RUDDER") && !filter.contains("RUDDER"),
        "{nat}\n{filter}"
    );
    assert!(nat.contains("-A POSTROUTING -j OTHER"), "{nat}");
}
