//! From Service ports to Rudder's iptables chains, in the shape of upstream's iptables mode:
//! `RUDDER-SERVICES` (nat) matches each cluster IP and external IP and port in turn and jumps
//! to the port's `RUDDER-SVC-<hash>` chain, which marks traffic from outside the pod network
//! for masquerading and picks an endpoint chain `RUDDER-SEP-<hash>` with
//! `-m statistic --mode random` (1/N, then 1/(N-1), …), after `-m recent` checks for
//! `sessionAffinity: ClientIP`; the endpoint chain marks hairpin traffic and DNATs.
//! `RUDDER-SVL-<hash>` holds the node's own endpoints for the Local traffic policies and
//! `RUDDER-EXT-<hash>` the NodePort and external-IP entry; `RUDDER-NODEPORTS` is reached last
//! for the node's own addresses. Traffic that nat left untouched — Services without endpoints,
//! or a Local policy without local endpoints — is rejected (ICMP port unreachable) or dropped
//! by the filter table's `RUDDER-SERVICES` and `RUDDER-EXTERNAL-SERVICES`, which see packets
//! after DNAT. `RUDDER-POSTROUTING` masquerades what was marked.

use std::collections::BTreeMap;

use crate::proxy::model::{Backend, ServicePort};
use crate::proxy::rules::{hash_name, Names, RuleConfig, MASQUERADE_MARK};

pub const SERVICES: &str = "RUDDER-SERVICES";
pub const EXTERNAL_SERVICES: &str = "RUDDER-EXTERNAL-SERVICES";
pub const NODEPORTS: &str = "RUDDER-NODEPORTS";
pub const POSTROUTING: &str = "RUDDER-POSTROUTING";
pub const MARK_MASQ: &str = "RUDDER-MARK-MASQ";
/// With more than one pod network: marks for masquerading unless the source is in one.
pub const MASQ_NON_POD: &str = "RUDDER-MASQ-NON-POD";
/// Every chain of Rudder's starts with this.
pub const PREFIX: &str = "RUDDER-";

/// A table's chains: name → rules, each the arguments after `-A <chain>` in
/// `iptables-restore` syntax.
pub type Chains = BTreeMap<String, Vec<String>>;

/// All of Rudder's chains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub nat: Chains,
    pub filter: Chains,
}

impl Tables {
    /// Rules in (nat, filter).
    pub fn rule_counts(&self) -> (usize, usize) {
        let count = |chains: &Chains| chains.values().map(Vec::len).sum();
        (count(&self.nat), count(&self.filter))
    }
}

/// A rule in a builtin chain that leads into one of Rudder's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jump {
    pub table: &'static str,
    pub chain: &'static str,
    /// The chain it jumps to.
    pub target: &'static str,
    /// Its arguments after `-A <chain>`, one word each.
    pub args: Vec<String>,
}

/// The jumps from the builtin chains (upstream's set: the filter checks only for new
/// connections).
pub fn jumps() -> Vec<Jump> {
    let jump = |table, chain, target, new_only: bool, comment: &str| {
        let mut args: Vec<String> = Vec::new();
        if new_only {
            args.extend(["-m", "conntrack", "--ctstate", "NEW"].map(String::from));
        }
        args.extend(["-m", "comment", "--comment", comment, "-j", target].map(String::from));
        Jump {
            table,
            chain,
            target,
            args,
        }
    };
    let portals = "rudder service portals";
    let external = "rudder externally-visible service portals";
    vec![
        jump("nat", "PREROUTING", SERVICES, false, portals),
        jump("nat", "OUTPUT", SERVICES, false, portals),
        jump(
            "nat",
            "POSTROUTING",
            POSTROUTING,
            false,
            "rudder postrouting rules",
        ),
        jump("filter", "INPUT", SERVICES, true, portals),
        jump("filter", "INPUT", EXTERNAL_SERVICES, true, external),
        jump("filter", "FORWARD", SERVICES, true, portals),
        jump("filter", "FORWARD", EXTERNAL_SERVICES, true, external),
        jump("filter", "OUTPUT", SERVICES, true, portals),
    ]
}

/// Matches the node's own addresses (NodePorts), loopback excepted as in the nftables mode.
const LOCAL_DESTINATION: &str = "! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL";

/// The chains for every Service port.
pub fn tables(ports: &[ServicePort], config: &RuleConfig) -> Tables {
    let mut tables = Tables::default();
    for fixed in [SERVICES, NODEPORTS] {
        tables.nat.insert(fixed.to_owned(), Vec::new());
    }
    for fixed in [SERVICES, EXTERNAL_SERVICES] {
        tables.filter.insert(fixed.to_owned(), Vec::new());
    }
    tables.nat.insert(
        POSTROUTING.to_owned(),
        vec![
            format!("-m mark ! --mark {MASQUERADE_MARK}/{MASQUERADE_MARK} -j RETURN"),
            format!("-j MARK --xor-mark {MASQUERADE_MARK}"),
            "-m comment --comment \"rudder service traffic requiring SNAT\" -j MASQUERADE --random-fully"
                .to_owned(),
        ],
    );
    tables.nat.insert(
        MARK_MASQ.to_owned(),
        vec![format!("-j MARK --or-mark {MASQUERADE_MARK}")],
    );
    if config.cluster_cidrs.len() > 1 {
        let mut body: Vec<String> = config
            .cluster_cidrs
            .iter()
            .map(|cidr| format!("-s {cidr} -j RETURN"))
            .collect();
        body.push(format!("-j {MARK_MASQ}"));
        tables.nat.insert(MASQ_NON_POD.to_owned(), body);
    }
    for port in ports {
        add_port(&mut tables, port, config);
    }
    // Last: whatever is left for the node's own addresses may be a NodePort.
    nat(&mut tables, SERVICES).push(format!(
        "-m comment --comment \"rudder service nodeports; must be last\" {LOCAL_DESTINATION} -j {NODEPORTS}"
    ));
    tables
}

fn nat<'a>(tables: &'a mut Tables, chain: &str) -> &'a mut Vec<String> {
    tables.nat.entry(chain.to_owned()).or_default()
}

fn filter<'a>(tables: &'a mut Tables, chain: &str) -> &'a mut Vec<String> {
    tables.filter.entry(chain.to_owned()).or_default()
}

/// A Service port's chain names in iptables: a 16-letter hash of its key, as upstream's (28
/// characters at most, iptables' limit).
fn names(port: &ServicePort) -> Names {
    let hash = hash_name(&port.key(), 16);
    Names {
        service: format!("RUDDER-SVC-{hash}"),
        local: format!("RUDDER-SVL-{hash}"),
        external: format!("RUDDER-EXT-{hash}"),
    }
}

/// An endpoint's chain, also the name of its `-m recent` list for session affinity.
fn endpoint_chain(port: &ServicePort, backend: &Backend) -> String {
    let key = format!("{}__{}/{}", port.key(), backend.ip, backend.port);
    format!("RUDDER-SEP-{}", hash_name(&key, 16))
}

/// `ns/name:port` (or `ns/name` for an unnamed port), as upstream's comments.
fn display(port: &ServicePort) -> String {
    if port.port_name.is_empty() {
        format!("{}/{}", port.namespace, port.name)
    } else {
        format!("{}/{}:{}", port.namespace, port.name, port.port_name)
    }
}

/// `-p <proto> -m <proto> --dport <port>`.
fn dport(port: &ServicePort, number: u16) -> String {
    let proto = port.protocol.nft();
    format!("-p {proto} -m {proto} --dport {number}")
}

/// Traffic to a cluster IP from outside the pod network is marked for masquerading.
fn masquerade_unless_from_pods(port: &ServicePort, config: &RuleConfig) -> Vec<String> {
    let comment = display(port);
    let (source, target) = match config.cluster_cidrs.as_slice() {
        [] => (String::new(), MARK_MASQ),
        [one] => (format!("! -s {one} "), MARK_MASQ),
        _ => (String::new(), MASQ_NON_POD),
    };
    port.cluster_ips
        .iter()
        .map(|ip| {
            format!(
                "-m comment --comment \"{comment} cluster IP\" -d {ip}/32 {} {source}-j {target}",
                dport(port, port.port)
            )
        })
        .collect()
}

/// A Service (or local-endpoints) chain: affinity first, then a random pick.
fn spread(port: &ServicePort, backends: &[Backend], config: &RuleConfig) -> Vec<String> {
    let comment = display(port);
    let mut body = masquerade_unless_from_pods(port, config);
    if let Some(seconds) = port.affinity_seconds {
        for backend in backends {
            let chain = endpoint_chain(port, backend);
            body.push(format!(
                "-m comment --comment \"{comment} -> {}:{}\" -m recent --name {chain} --rcheck --seconds {seconds} --reap -j {chain}",
                backend.ip, backend.port
            ));
        }
    }
    let count = backends.len();
    for (index, backend) in backends.iter().enumerate() {
        let chain = endpoint_chain(port, backend);
        let left = count - index;
        let pick = if left > 1 {
            format!(
                "-m statistic --mode random --probability {:.10} ",
                1.0 / left as f64
            )
        } else {
            String::new()
        };
        body.push(format!(
            "-m comment --comment \"{comment} -> {}:{}\" {pick}-j {chain}",
            backend.ip, backend.port
        ));
    }
    body
}

fn add_port(tables: &mut Tables, port: &ServicePort, config: &RuleConfig) {
    let names = names(port);
    let comment = display(port);
    let proto = port.protocol.nft();
    // The endpoints' own chains, each once.
    let mut seen = std::collections::BTreeSet::new();
    for backend in port.cluster.iter().chain(&port.local) {
        if !seen.insert(*backend) {
            continue;
        }
        let affinity = if port.affinity_seconds.is_some() {
            format!("-m recent --name {} --set ", endpoint_chain(port, backend))
        } else {
            String::new()
        };
        tables.nat.insert(
            endpoint_chain(port, backend),
            vec![
                format!(
                    "-m comment --comment \"{comment}\" -s {}/32 -j {MARK_MASQ}",
                    backend.ip
                ),
                format!(
                    "-m comment --comment \"{comment}\" {affinity}-p {proto} -m {proto} -j DNAT --to-destination {}:{}",
                    backend.ip, backend.port
                ),
            ],
        );
    }
    let has_cluster = !port.cluster.is_empty();
    if has_cluster {
        tables
            .nat
            .insert(names.service.clone(), spread(port, &port.cluster, config));
    }
    if has_cluster && (port.internal_local || port.external_local) {
        tables
            .nat
            .insert(names.local.clone(), spread(port, &port.local, config));
    }
    // Cluster IPs.
    for ip in &port.cluster_ips {
        let destination = format!("-d {ip}/32 {}", dport(port, port.port));
        if !has_cluster {
            filter(tables, SERVICES).push(format!(
                "-m comment --comment \"{comment} has no endpoints\" {destination} -j REJECT"
            ));
        } else if port.internal_local && port.local.is_empty() {
            filter(tables, SERVICES).push(format!(
                "-m comment --comment \"{comment} has no local endpoints\" {destination} -j DROP"
            ));
        } else {
            let target = if port.internal_local {
                &names.local
            } else {
                &names.service
            };
            nat(tables, SERVICES).push(format!(
                "-m comment --comment \"{comment} cluster IP\" {destination} -j {target}"
            ));
        }
    }
    // External traffic: NodePorts and external IPs.
    if port.node_port.is_none() && port.external_ips.is_empty() {
        return;
    }
    if has_cluster {
        let body = if port.external_local {
            let mut body: Vec<String> = config
                .cluster_cidrs
                .iter()
                .map(|cidr| {
                    format!(
                        "-m comment --comment \"pod traffic for {comment} external destinations\" -s {cidr} -j {}",
                        names.service
                    )
                })
                .collect();
            body.push(format!(
                "-m comment --comment \"masquerade LOCAL traffic for {comment} external destinations\" -m addrtype --src-type LOCAL -j {MARK_MASQ}"
            ));
            body.push(format!(
                "-m comment --comment \"route LOCAL traffic for {comment} external destinations\" -m addrtype --src-type LOCAL -j {}",
                names.service
            ));
            body.push(format!("-j {}", names.local));
            body
        } else {
            vec![
                format!(
                    "-m comment --comment \"masquerade traffic for {comment} external destinations\" -j {MARK_MASQ}"
                ),
                format!("-j {}", names.service),
            ]
        };
        tables.nat.insert(names.external.clone(), body);
    }
    // What nat leaves addressed to the Service: refused without endpoints, dropped when a
    // Local policy leaves none (pod and node traffic went to all endpoints above).
    let unserved = if !has_cluster {
        Some(("has no endpoints", "REJECT"))
    } else if port.external_local && port.local.is_empty() {
        Some(("has no local endpoints", "DROP"))
    } else {
        None
    };
    for ip in &port.external_ips {
        let destination = format!("-d {ip}/32 {}", dport(port, port.port));
        if has_cluster {
            nat(tables, SERVICES).push(format!(
                "-m comment --comment \"{comment} external IP\" {destination} -j {}",
                names.external
            ));
        }
        if let Some((why, verdict)) = unserved {
            filter(tables, EXTERNAL_SERVICES).push(format!(
                "-m comment --comment \"{comment} {why}\" {destination} -j {verdict}"
            ));
        }
    }
    if let Some(node_port) = port.node_port {
        if has_cluster {
            nat(tables, NODEPORTS).push(format!(
                "-m comment --comment \"{comment}\" {} -j {}",
                dport(port, node_port),
                names.external
            ));
        }
        if let Some((why, verdict)) = unserved {
            filter(tables, EXTERNAL_SERVICES).push(format!(
                "-m comment --comment \"{comment} {why}\" {LOCAL_DESTINATION} {} -j {verdict}",
                dport(port, node_port)
            ));
        }
    }
}
