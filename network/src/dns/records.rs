//! The index the server answers from: every name of the zone that exists, keyed by its labels
//! below the zone (lowercased, joined by dots), with the records it holds, plus the reverse
//! (PTR) map from addresses to names. It is built in one pass over a snapshot of the Services
//! and EndpointSlices and never changes afterwards, so queries read it without locks; a change
//! in the cluster builds a new one (see follow.rs).
//!
//! Every ancestor of a name is present too (as an empty node), so that `svc.<zone>`,
//! `<ns>.svc.<zone>` or `_tcp.<svc>.<ns>.svc.<zone>` answer NODATA rather than NXDOMAIN when
//! anything lives below them. Pod names are not indexed: they are computed from the question.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::DEFAULT_CLUSTER_DOMAIN;

/// The label tying an EndpointSlice to its Service.
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What `dns-version.<zone>` answers (the version of the DNS spec served).
pub(super) const SPEC_VERSION: &str = "1.1.0";

/// The records one name holds.
#[derive(Debug, Default, Clone)]
pub(super) struct Node {
    pub(super) a: Vec<Ipv4Addr>,
    pub(super) aaaa: Vec<Ipv6Addr>,
    pub(super) cname: Option<Name>,
    pub(super) srv: Vec<Srv>,
    pub(super) txt: Vec<String>,
}

/// One SRV record's port and target; the weight is shared out when answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Srv {
    pub(super) port: u16,
    pub(super) target: Name,
    /// The target's key in the index, for the additional section.
    pub(super) target_key: String,
}

/// An immutable index of the zone's names, cheap to query (see [`Records::lookup`]).
#[derive(Debug, Clone)]
pub struct Records {
    /// The zone, lowercase and fully qualified.
    pub(super) zone: Name,
    /// The zone's labels, lowercase, in order.
    pub(super) zone_labels: Vec<Vec<u8>>,
    pub(super) nodes: HashMap<String, Node>,
    pub(super) ptr: HashMap<IpAddr, Vec<Name>>,
    /// The SOA's `mname` and `rname`.
    pub(super) mname: Name,
    pub(super) rname: Name,
    pub(super) serial: u32,
    /// False until built from the first full lists: names of the zone then answer SERVFAIL
    /// (rather than NXDOMAIN that clients would cache).
    pub(super) ready: bool,
}

impl Records {
    /// The index of these Services and their EndpointSlices for `cluster_domain` (e.g.
    /// `cluster.local`; an invalid domain falls back to that one).
    pub fn build(
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
        cluster_domain: &str,
    ) -> Self {
        let mut slices_of: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for slice in slices {
            let namespace = slice.metadata.namespace.as_deref();
            let service = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(SERVICE_NAME_LABEL));
            if let (Some(namespace), Some(service)) = (namespace, service) {
                slices_of
                    .entry((namespace, service.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        let mut builder = Builder::new(Self::unready(cluster_domain));
        for service in services {
            let (Some(name), Some(namespace)) = (
                service.metadata.name.as_deref(),
                service.metadata.namespace.as_deref(),
            ) else {
                continue;
            };
            let slices = slices_of
                .get(&(namespace, name))
                .map(Vec::as_slice)
                .unwrap_or_default();
            builder.service(name, namespace, service.spec.as_ref(), slices);
        }
        builder.finish()
    }

    /// An index that knows nothing yet: names of the zone answer SERVFAIL until the first
    /// [`Records::build`].
    pub fn unready(cluster_domain: &str) -> Self {
        let (zone, zone_labels) = zone_of(cluster_domain);
        let under = |prefix: &str| {
            Name::from_ascii(prefix)
                .and_then(|prefix| prefix.append_domain(&zone))
                .unwrap_or_else(|_| zone.clone())
        };
        Self {
            mname: under("ns.dns"),
            rname: under("hostmaster"),
            zone,
            zone_labels,
            nodes: HashMap::new(),
            ptr: HashMap::new(),
            serial: 0,
            ready: false,
        }
    }

    /// The same index with this SOA serial.
    pub fn with_serial(mut self, serial: u32) -> Self {
        self.serial = serial;
        self
    }

    /// The zone served, fully qualified and lowercase (e.g. `cluster.local.`).
    pub fn zone(&self) -> &Name {
        &self.zone
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Whether this index was built from the stores (see [`Records::unready`]).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// How many names of the zone exist (ancestors included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no name exists (only for an unready index).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The zone's name and lowercase labels for a configured domain.
fn zone_of(cluster_domain: &str) -> (Name, Vec<Vec<u8>>) {
    let parse = |domain: &str| {
        let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
        let mut name = Name::from_ascii(&domain).ok()?;
        name.set_fqdn(true);
        (!domain.is_empty() && domain.split('.').all(|label| plain_label(label).is_some()))
            .then_some(name)
    };
    let zone = parse(cluster_domain)
        .or_else(|| {
            tracing::warn!(
                cluster_domain,
                "invalid cluster domain, serving cluster.local"
            );
            parse(DEFAULT_CLUSTER_DOMAIN)
        })
        .unwrap_or_else(Name::root);
    let labels = zone.iter().map(<[u8]>::to_ascii_lowercase).collect();
    (zone, labels)
}

/// A label as the index keys it: lowercase, 1 to 63 letters, digits, `-` or `_`.
pub(super) fn plain_label(label: &str) -> Option<String> {
    let ok = !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| label.to_ascii_lowercase())
}

/// An address as one label: `10-1-2-3`, or the IPv6 text form with `-` for `:`.
pub(super) fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// What a Service publishes.
enum Kind<'a> {
    ExternalName(&'a str),
    Headless,
    ClusterIp(Vec<IpAddr>),
    /// No address yet (or none valid): the name exists with no records.
    Unassigned,
}

fn kind(spec: &ServiceSpec) -> Kind<'_> {
    if spec.type_.as_deref() == Some("ExternalName") {
        return match spec.external_name.as_deref() {
            Some(target) if !target.is_empty() => Kind::ExternalName(target),
            _ => Kind::Unassigned,
        };
    }
    let cluster_ip = spec.cluster_ip.as_deref().unwrap_or_default();
    if cluster_ip == "None" {
        return Kind::Headless;
    }
    let listed = spec.cluster_ips.as_deref().unwrap_or_default();
    let texts: Vec<&str> = if listed.is_empty() {
        vec![cluster_ip]
    } else {
        listed.iter().map(String::as_str).collect()
    };
    let ips: Vec<IpAddr> = texts.iter().filter_map(|ip| ip.parse().ok()).collect();
    if ips.is_empty() {
        Kind::Unassigned
    } else {
        Kind::ClusterIp(ips)
    }
}

/// A Service port's protocol as an SRV label (`tcp`, `udp`, `sctp`).
fn protocol_label(protocol: Option<&str>) -> String {
    protocol.unwrap_or("TCP").to_ascii_lowercase()
}

struct Builder {
    records: Records,
}

impl Builder {
    fn new(mut records: Records) -> Self {
        records.ready = true;
        let mut builder = Self { records };
        builder.node("");
        builder.node("dns-version").txt = vec![SPEC_VERSION.to_string()];
        builder.node("ns.dns");
        builder.node("pod");
        builder
    }

    /// The node at `key`, created with its ancestors if new.
    fn node(&mut self, key: &str) -> &mut Node {
        let nodes = &mut self.records.nodes;
        if !nodes.contains_key(key) {
            let mut rest = key;
            while let Some((_, parent)) = rest.split_once('.') {
                nodes.entry(parent.to_string()).or_default();
                rest = parent;
            }
            nodes.entry(String::new()).or_default();
        }
        nodes.entry(key.to_string()).or_default()
    }

    /// The fully qualified name of `key`, if it makes a valid name.
    fn fqdn(&self, key: &str) -> Option<Name> {
        Name::from_ascii(key)
            .and_then(|name| name.append_domain(&self.records.zone))
            .ok()
    }

    fn service(
        &mut self,
        name: &str,
        namespace: &str,
        spec: Option<&ServiceSpec>,
        slices: &[&EndpointSlice],
    ) {
        let (Some(name), Some(namespace)) = (plain_label(name), plain_label(namespace)) else {
            return;
        };
        let base = format!("{name}.{namespace}.svc");
        let Some(target) = self.fqdn(&base) else {
            return;
        };
        self.node(&base);
        let default = ServiceSpec::default();
        let spec = spec.unwrap_or(&default);
        match kind(spec) {
            Kind::ExternalName(external) => {
                if let Ok(mut cname) = Name::from_ascii(external.trim_end_matches('.')) {
                    cname.set_fqdn(true);
                    self.node(&base).cname = Some(cname);
                }
            }
            Kind::ClusterIp(ips) => self.cluster_ip(&base, &target, &ips, spec),
            Kind::Headless => {
                let all = spec.publish_not_ready_addresses.unwrap_or(false);
                self.headless(&base, slices, all);
            }
            Kind::Unassigned => {}
        }
    }

    fn cluster_ip(&mut self, base: &str, target: &Name, ips: &[IpAddr], spec: &ServiceSpec) {
        for ip in ips {
            let node = self.node(base);
            match ip {
                IpAddr::V4(v4) => node.a.push(*v4),
                IpAddr::V6(v6) => node.aaaa.push(*v6),
            }
            self.records
                .ptr
                .entry(*ip)
                .or_default()
                .push(target.clone());
        }
        for port in spec.ports.as_deref().unwrap_or_default() {
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let srv = Srv {
                port: number,
                target: target.clone(),
                target_key: base.to_string(),
            };
            self.node(base).srv.push(srv.clone());
            let port_name = port.name.as_deref().and_then(plain_label);
            if let Some(port_name) = port_name {
                let protocol = protocol_label(port.protocol.as_deref());
                self.node(&format!("_{port_name}._{protocol}.{base}"))
                    .srv
                    .push(srv);
            }
        }
    }

    fn headless(&mut self, base: &str, slices: &[&EndpointSlice], all: bool) {
        for slice in slices {
            let ports: Vec<(Option<String>, String, u16)> = slice
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .filter_map(|port| {
                    let number = u16::try_from(port.port?).ok()?;
                    let name = port.name.as_deref().and_then(plain_label);
                    Some((name, protocol_label(port.protocol.as_deref()), number))
                })
                .collect();
            for endpoint in &slice.endpoints {
                let ready = endpoint.conditions.as_ref().and_then(|c| c.ready) != Some(false);
                if !ready && !all {
                    continue;
                }
                let hostname = endpoint.hostname.as_deref().and_then(plain_label);
                for address in &endpoint.addresses {
                    let Ok(ip) = address.parse::<IpAddr>() else {
                        continue;
                    };
                    self.endpoint(base, ip, hostname.as_deref(), &ports);
                }
            }
        }
    }

    /// One ready address of a headless Service, under the Service's name and its own.
    fn endpoint(
        &mut self,
        base: &str,
        ip: IpAddr,
        hostname: Option<&str>,
        ports: &[(Option<String>, String, u16)],
    ) {
        let host = hostname.map_or_else(|| dashed(ip), str::to_string);
        let host_key = format!("{host}.{base}");
        let Some(host_name) = self.fqdn(&host_key) else {
            return;
        };
        for key in [base, host_key.as_str()] {
            let node = self.node(key);
            match ip {
                IpAddr::V4(v4) => node.a.push(v4),
                IpAddr::V6(v6) => node.aaaa.push(v6),
            }
        }
        if hostname.is_some() {
            self.records
                .ptr
                .entry(ip)
                .or_default()
                .push(host_name.clone());
        }
        for (port_name, protocol, number) in ports {
            let srv = Srv {
                port: *number,
                target: host_name.clone(),
                target_key: host_key.clone(),
            };
            self.node(base).srv.push(srv.clone());
            if let Some(port_name) = port_name {
                self.node(&format!("_{port_name}._{protocol}.{base}"))
                    .srv
                    .push(srv);
            }
        }
    }

    /// Sorts and de-duplicates every list (addresses seen in several slices, targets reached
    /// through several addresses).
    fn finish(mut self) -> Records {
        for node in self.records.nodes.values_mut() {
            node.a.sort_unstable();
            node.a.dedup();
            node.aaaa.sort_unstable();
            node.aaaa.dedup();
            node.srv
                .sort_by(|x, y| x.target_key.cmp(&y.target_key).then(x.port.cmp(&y.port)));
            node.srv
                .dedup_by(|x, y| x.target_key == y.target_key && x.port == y.port);
        }
        for names in self.records.ptr.values_mut() {
            names.sort();
            names.dedup();
        }
        self.records
    }
}
