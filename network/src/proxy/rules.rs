//! From Service ports to the proxy's nftables rules, in the shape of upstream's nftables
//! mode: one verdict map from `address . protocol . port` to a per-Service chain (so the
//! per-packet work is one lookup whatever the number of Services), one for NodePorts, a
//! chain per endpoint doing the DNAT, `numgen random` to spread new connections, per-endpoint
//! dynamic sets for `sessionAffinity: ClientIP`, and maps that reject traffic to Services
//! without endpoints at once (or drop it when only a Local policy leaves none).

use sha2::{Digest, Sha256};

use super::model::{Backend, ServicePort};
use super::ruleset::{Ruleset, Skeleton};

/// The packet mark that asks for masquerading, as upstream's.
pub const MASQUERADE_MARK: &str = "0x4000";

/// What the rules depend on besides the Services.
#[derive(Clone, Debug)]
pub struct RuleConfig {
    /// The nftables table (family `ip`).
    pub table: String,
    /// The pod network(s): traffic from elsewhere to a cluster IP is masqueraded. Empty
    /// masquerades all Service traffic.
    pub cluster_cidrs: Vec<String>,
}

pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const CLUSTER_IPS: &str = "cluster-ips";

/// The fixed part of the table.
pub fn skeleton(config: &RuleConfig) -> Skeleton {
    let map = |name: &'static str, key: &str| {
        (
            "map",
            name.to_owned(),
            format!("{{ type {key} : verdict ; }}"),
        )
    };
    let base = |name: &str, kind: &str, hook: &str, priority: &str| {
        (
            "chain",
            name.to_owned(),
            format!("{{ type {kind} hook {hook} priority {priority} ; policy accept ; }}"),
        )
    };
    let chain = |name: &str| ("chain", name.to_owned(), String::new());
    let declarations = vec![
        map(SERVICE_IPS, "ipv4_addr . inet_proto . inet_service"),
        map(SERVICE_NODEPORTS, "inet_proto . inet_service"),
        map(
            NO_ENDPOINT_SERVICES,
            "ipv4_addr . inet_proto . inet_service",
        ),
        map(NO_ENDPOINT_NODEPORTS, "inet_proto . inet_service"),
        (
            "set",
            CLUSTER_IPS.to_owned(),
            "{ type ipv4_addr ; }".to_owned(),
        ),
        chain("services"),
        chain("masquerading"),
        chain("mark-for-masquerade"),
        chain("service-endpoints-check"),
        chain("nodeport-endpoints-check"),
        chain("cluster-ips-check"),
        chain("reject-chain"),
        base("nat-prerouting", "nat", "prerouting", "dstnat"),
        base("nat-output", "nat", "output", "-100"),
        base("nat-postrouting", "nat", "postrouting", "srcnat"),
        base("filter-input", "filter", "input", "-110"),
        base("filter-forward", "filter", "forward", "-110"),
        base("filter-output", "filter", "output", "-110"),
        base("filter-output-post-dnat", "filter", "output", "-90"),
    ];
    let local_nodeport = "fib daddr type local ip daddr != 127.0.0.0/8";
    let rules = [
        ("nat-prerouting", "jump services".to_owned()),
        ("nat-output", "jump services".to_owned()),
        ("nat-postrouting", "jump masquerading".to_owned()),
        (
            "filter-input",
            "ct state new jump nodeport-endpoints-check".to_owned(),
        ),
        (
            "filter-input",
            "ct state new jump service-endpoints-check".to_owned(),
        ),
        (
            "filter-forward",
            "ct state new jump service-endpoints-check".to_owned(),
        ),
        (
            "filter-forward",
            "ct state new jump cluster-ips-check".to_owned(),
        ),
        (
            "filter-output",
            "ct state new jump service-endpoints-check".to_owned(),
        ),
        (
            "filter-output-post-dnat",
            "ct state new jump cluster-ips-check".to_owned(),
        ),
        (
            "services",
            format!("ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"),
        ),
        (
            "services",
            format!("{local_nodeport} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"),
        ),
        (
            "masquerading",
            format!("meta mark & {MASQUERADE_MARK} == 0 return"),
        ),
        (
            "masquerading",
            format!("meta mark set meta mark ^ {MASQUERADE_MARK}"),
        ),
        ("masquerading", "masquerade fully-random".to_owned()),
        (
            "mark-for-masquerade",
            format!("meta mark set meta mark | {MASQUERADE_MARK}"),
        ),
        (
            "service-endpoints-check",
            format!("ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
        ),
        (
            "nodeport-endpoints-check",
            format!("{local_nodeport} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"),
        ),
        (
            "cluster-ips-check",
            format!("ip daddr @{CLUSTER_IPS} reject"),
        ),
        ("reject-chain", "reject".to_owned()),
    ]
    .into_iter()
    .map(|(chain, rule)| (chain.to_owned(), rule))
    .collect();
    Skeleton {
        family: "ip",
        table: config.table.clone(),
        declarations,
        rules,
        maps: vec![
            SERVICE_IPS,
            SERVICE_NODEPORTS,
            NO_ENDPOINT_SERVICES,
            NO_ENDPOINT_NODEPORTS,
        ],
        sets: vec![CLUSTER_IPS],
    }
}

/// A stable, name-safe hash of `text`: the first `letters` (at most 51) base32 letters of
/// its SHA-256.
pub(super) fn hash_name(text: &str, letters: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(text.as_bytes());
    (0..letters.min(51))
        .map(|i| {
            let (byte, shift) = (i * 5 / 8, i * 5 % 8);
            let window = (u16::from(digest[byte]) << 8)
                | u16::from(digest.get(byte + 1).copied().unwrap_or(0));
            char::from(ALPHABET[usize::from((window >> (11 - shift)) & 31)])
        })
        .collect()
}

/// A short hash (8 letters) for nftables names, which carry the readable key beside it.
fn short_hash(text: &str) -> String {
    hash_name(text, 8)
}

/// Chain names for one Service port: all endpoints, this node's, and the external entry.
/// nftables' names are upstream's scheme there: a hash for uniqueness, then the readable key.
pub(super) struct Names {
    pub(super) service: String,
    pub(super) local: String,
    pub(super) external: String,
}

impl Names {
    fn of(port: &ServicePort) -> Self {
        let key = port.key();
        let hash = short_hash(&key);
        Self {
            service: format!("service-{hash}-{key}"),
            local: format!("local-{hash}-{key}"),
            external: format!("external-{hash}-{key}"),
        }
    }
}

/// One endpoint's chain and session-affinity set, named from one key and one hash.
struct EndpointNames {
    chain: String,
    affinity: String,
}

impl EndpointNames {
    fn of(port_key: &str, backend: &Backend) -> Self {
        let key = format!("{port_key}__{}/{}", backend.ip, backend.port);
        let hash = short_hash(&key);
        Self {
            chain: format!("endpoint-{hash}-{key}"),
            affinity: format!("affinity-{hash}"),
        }
    }
}

/// The rules for every Service port.
pub fn ruleset(ports: &[ServicePort], config: &RuleConfig) -> Ruleset {
    let mut rules = Ruleset::default();
    for map in [
        SERVICE_IPS,
        SERVICE_NODEPORTS,
        NO_ENDPOINT_SERVICES,
        NO_ENDPOINT_NODEPORTS,
    ] {
        rules.maps.insert(map, Default::default());
    }
    rules.sets.insert(CLUSTER_IPS, Default::default());
    for port in ports {
        add_port(&mut rules, port, config);
    }
    rules
}

/// Traffic to a cluster IP from outside the pod network is masqueraded (the match on the
/// destination keeps NodePort traffic, which reaches the same chains, out of it).
fn masquerade_unless_from_pods(port: &ServicePort, config: &RuleConfig) -> Vec<String> {
    let source = match config.cluster_cidrs.as_slice() {
        [] => String::new(),
        [one] => format!("ip saddr != {one} "),
        many => format!("ip saddr != {{ {} }} ", many.join(" , ")),
    };
    port.cluster_ips
        .iter()
        .map(|ip| {
            format!(
                "ip daddr {ip} {} dport {} {source}jump mark-for-masquerade",
                port.protocol.nft(),
                port.port
            )
        })
        .collect()
}

fn from_pods(config: &RuleConfig) -> Option<String> {
    match config.cluster_cidrs.as_slice() {
        [] => None,
        [one] => Some(format!("ip saddr {one}")),
        many => Some(format!("ip saddr {{ {} }}", many.join(" , "))),
    }
}

fn add_port(rules: &mut Ruleset, port: &ServicePort, config: &RuleConfig) {
    let names = Names::of(port);
    let proto = port.protocol.nft();
    let reject = "goto reject-chain".to_owned();
    // The endpoints' own chains, each named once.
    let port_key = port.key();
    let mut endpoints: std::collections::BTreeMap<Backend, EndpointNames> = Default::default();
    for backend in port.cluster.iter().chain(&port.local) {
        if endpoints.contains_key(backend) {
            continue;
        }
        let named = EndpointNames::of(&port_key, backend);
        let mut body = vec![format!("ip saddr {} jump mark-for-masquerade", backend.ip)];
        if let Some(timeout) = port.affinity_seconds {
            body.push(format!("update @{} {{ ip saddr }}", named.affinity));
            rules.affinity.insert(named.affinity.clone(), timeout);
        }
        body.push(format!(
            "meta l4proto {proto} dnat to {}:{}",
            backend.ip, backend.port
        ));
        rules.chains.insert(named.chain.clone(), body);
        endpoints.insert(*backend, named);
    }
    let chain_of = |backend: &Backend| endpoints.get(backend).map_or("", |n| n.chain.as_str());
    let spread = |backends: &[Backend]| -> Vec<String> {
        let mut body = masquerade_unless_from_pods(port, config);
        if backends.is_empty() {
            body.push("drop".to_owned());
            return body;
        }
        if port.affinity_seconds.is_some() {
            for backend in backends {
                let affinity = endpoints.get(backend).map_or("", |n| n.affinity.as_str());
                body.push(format!("ip saddr @{affinity} goto {}", chain_of(backend)));
            }
        }
        if let [only] = backends {
            body.push(format!("goto {}", chain_of(only)));
        } else {
            let arms: Vec<String> = backends
                .iter()
                .enumerate()
                .map(|(i, b)| format!("{i} : goto {}", chain_of(b)))
                .collect();
            body.push(format!(
                "numgen random mod {} vmap {{ {} }}",
                backends.len(),
                arms.join(" , ")
            ));
        }
        body
    };
    let has_cluster = !port.cluster.is_empty();
    if has_cluster {
        rules
            .chains
            .insert(names.service.clone(), spread(&port.cluster));
    }
    let wants_local = port.internal_local || port.external_local;
    if has_cluster && wants_local {
        rules
            .chains
            .insert(names.local.clone(), spread(&port.local));
    }
    // Cluster IPs.
    for ip in &port.cluster_ips {
        let key = format!("{ip} . {proto} . {}", port.port);
        rules
            .sets
            .entry(CLUSTER_IPS)
            .or_default()
            .insert(ip.to_string());
        if !has_cluster {
            rules
                .maps
                .entry(NO_ENDPOINT_SERVICES)
                .or_default()
                .insert(key, reject.clone());
        } else if port.internal_local && port.local.is_empty() {
            rules
                .maps
                .entry(NO_ENDPOINT_SERVICES)
                .or_default()
                .insert(key, "drop".to_owned());
        } else {
            let target = if port.internal_local {
                &names.local
            } else {
                &names.service
            };
            rules
                .maps
                .entry(SERVICE_IPS)
                .or_default()
                .insert(key, format!("goto {target}"));
        }
    }
    // External traffic: NodePorts and external IPs.
    let external = port.node_port.is_some() || !port.external_ips.is_empty();
    if !external {
        return;
    }
    if has_cluster {
        let body = if port.external_local {
            let mut body = Vec::new();
            if let Some(pods) = from_pods(config) {
                body.push(format!("{pods} goto {}", names.service));
            }
            body.push("fib saddr type local jump mark-for-masquerade".to_owned());
            body.push(format!("fib saddr type local goto {}", names.service));
            body.push(format!("goto {}", names.local));
            body
        } else {
            vec![
                "jump mark-for-masquerade".to_owned(),
                format!("goto {}", names.service),
            ]
        };
        rules.chains.insert(names.external.clone(), body);
    }
    let verdict = if has_cluster {
        format!("goto {}", names.external)
    } else {
        reject
    };
    let (ips_map, ports_map) = if has_cluster {
        (SERVICE_IPS, SERVICE_NODEPORTS)
    } else {
        (NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS)
    };
    for ip in &port.external_ips {
        rules
            .maps
            .entry(ips_map)
            .or_default()
            .insert(format!("{ip} . {proto} . {}", port.port), verdict.clone());
    }
    if let Some(node_port) = port.node_port {
        rules
            .maps
            .entry(ports_map)
            .or_default()
            .insert(format!("{proto} . {node_port}"), verdict);
    }
}
