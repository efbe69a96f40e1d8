//! Service ClusterIP and NodePort allocation. Each allocated IP or port is a key in storage
//! (`/registry/rudder/serviceips/<ip>`, `/registry/rudder/servicenodeports/<port>`), created
//! with create-if-absent, so several apiservers on one store never hand out the same one.
//! Both are released when the Service is deleted.

use std::net::Ipv4Addr;
use std::sync::Arc;

use rand::Rng;
use rudder_storage::{CreateOutcome, KeyRange, RangeRequest, Storage};
use serde_json::Value;

use super::object;
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result};

const IP_PREFIX: &str = "/registry/rudder/serviceips/";
const PORT_PREFIX: &str = "/registry/rudder/servicenodeports/";

/// An IPv4 CIDR such as `10.96.0.0/12`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub base: Ipv4Addr,
    pub bits: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (ip, bits) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR (a.b.c.d/n)"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let bits: u8 = bits
            .parse()
            .map_err(|_| format!("{bits:?} is not a prefix length"))?;
        if !(8..=30).contains(&bits) {
            return Err(format!("prefix length /{bits} must be between /8 and /30"));
        }
        let mask = u32::MAX << (32 - bits);
        Ok(Self {
            base: Ipv4Addr::from(u32::from(ip) & mask),
            bits,
        })
    }

    fn size(&self) -> u32 {
        1u32 << (32 - self.bits)
    }

    /// The n-th address (0 = the network address).
    pub fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + n)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(u32::from(self.base));
        offset < self.size()
    }

    /// Usable service addresses: all but the network and broadcast addresses.
    fn usable(&self) -> std::ops::Range<u32> {
        1..self.size() - 1
    }
}

/// Hands out ClusterIPs and NodePorts.
pub struct Allocators {
    storage: Arc<dyn Storage>,
    pub service_cidr: Cidr,
    pub node_ports: std::ops::RangeInclusive<u16>,
}

/// One reservation, to release when a write fails.
#[derive(Clone, Debug)]
pub struct Allocation(Vec<u8>);

/// Random picks tried before the used items are listed and a free one searched for.
const RANDOM_TRIES: u32 = 8;

fn is_service(info: &ResourceInfo) -> bool {
    info.strategy.allocates_service_addresses()
}

fn wants_cluster_ip(service: &Value) -> bool {
    service["spec"]["type"].as_str() != Some("ExternalName")
}

fn wants_node_ports(service: &Value) -> bool {
    matches!(
        service["spec"]["type"].as_str(),
        Some("NodePort" | "LoadBalancer")
    )
}

impl Allocators {
    pub fn new(
        storage: Arc<dyn Storage>,
        service_cidr: Cidr,
        node_ports: std::ops::RangeInclusive<u16>,
    ) -> Self {
        Self {
            storage,
            service_cidr,
            node_ports,
        }
    }

    /// The address of the `kubernetes` Service: the range's first usable address.
    pub fn first_service_ip(&self) -> Ipv4Addr {
        self.service_cidr.nth(1)
    }

    /// The cluster DNS Service's address: the range's tenth, as kubeadm and k3s choose it.
    pub fn cluster_dns_ip(&self) -> Ipv4Addr {
        self.service_cidr.nth(10)
    }

    async fn used(&self, prefix: &str) -> Result<Vec<String>> {
        let response = self
            .storage
            .range(RangeRequest::new(KeyRange::prefix(prefix.as_bytes().to_vec())).keys_only())
            .await?;
        Ok(response
            .kvs
            .iter()
            .filter_map(|kv| std::str::from_utf8(&kv.key).ok())
            .filter_map(|key| key.strip_prefix(prefix))
            .map(str::to_string)
            .collect())
    }

    async fn reserve(&self, prefix: &str, item: &str, owner: &str) -> Result<Option<Allocation>> {
        let key = format!("{prefix}{item}").into_bytes();
        match self.storage.create(&key, owner.as_bytes(), 0).await? {
            CreateOutcome::Created { .. } => Ok(Some(Allocation(key))),
            CreateOutcome::AlreadyExists { .. } => Ok(None),
        }
    }

    /// Reserves a specific IP or port, failing with 422 when it is taken.
    async fn reserve_specific(
        &self,
        prefix: &str,
        item: &str,
        owner: &str,
        field: &str,
        dry_run: bool,
    ) -> Result<Option<Allocation>> {
        if dry_run {
            return if self.used(prefix).await?.iter().any(|used| used == item) {
                Err(taken(owner, field, item))
            } else {
                Ok(None)
            };
        }
        match self.reserve(prefix, item, owner).await? {
            Some(allocation) => Ok(Some(allocation)),
            None => Err(taken(owner, field, item)),
        }
    }

    /// Whether `item` is taken (one key read).
    async fn is_used(&self, prefix: &str, item: &str) -> Result<bool> {
        let key = format!("{prefix}{item}").into_bytes();
        let response = self
            .storage
            .range(RangeRequest::new(KeyRange::key(key)).count_only())
            .await?;
        Ok(response.count > 0)
    }

    /// Picks and reserves a free item from `candidates`: random ones first (each an atomic
    /// create, so no listing), then, when the range is nearly full, a scan from a random place
    /// over what is not listed as used. (Listing every free address of a /12 range for each
    /// create once made a Service create cost seconds, and listing the used ones made creating
    /// 10,000 Services quadratic.)
    async fn reserve_any(
        &self,
        prefix: &str,
        candidates: std::ops::Range<u32>,
        render: impl Fn(u32) -> String,
        owner: &str,
        dry_run: bool,
    ) -> Result<(String, Option<Allocation>)> {
        let size = candidates.end.saturating_sub(candidates.start);
        let full = || ApiError::internal("range is full: no free addresses or ports left");
        if size == 0 {
            return Err(full());
        }
        for _ in 0..RANDOM_TRIES {
            let candidate = render(candidates.start + rand::rng().random_range(0..size));
            if dry_run {
                if !self.is_used(prefix, &candidate).await? {
                    return Ok((candidate, None));
                }
            } else if let Some(allocation) = self.reserve(prefix, &candidate, owner).await? {
                return Ok((candidate, Some(allocation)));
            }
        }
        let used: std::collections::HashSet<String> =
            self.used(prefix).await?.into_iter().collect();
        if u32::try_from(used.len()).unwrap_or(u32::MAX) >= size {
            return Err(full());
        }
        let start = rand::rng().random_range(0..size);
        for offset in 0..size {
            let candidate = render(candidates.start + (start + offset) % size);
            if used.contains(&candidate) {
                continue;
            }
            if dry_run {
                return Ok((candidate, None));
            }
            if let Some(allocation) = self.reserve(prefix, &candidate, owner).await? {
                return Ok((candidate, Some(allocation)));
            }
        }
        Err(full())
    }

    /// Fills in a Service's ClusterIP and NodePorts (keeping those of `old` on update) and
    /// reserves them. Other kinds pass through.
    pub async fn allocate(
        &self,
        info: &ResourceInfo,
        service: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<Vec<Allocation>> {
        if !is_service(info) {
            return Ok(Vec::new());
        }
        let owner = format!("{}/{}", object::namespace(service), object::name(service));
        let mut reserved = Vec::new();
        let result = self
            .allocate_into(service, old, dry_run, &owner, &mut reserved)
            .await;
        if let Err(error) = result {
            self.release_all(reserved).await;
            return Err(error);
        }
        Ok(reserved)
    }

    async fn allocate_into(
        &self,
        service: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
        owner: &str,
        reserved: &mut Vec<Allocation>,
    ) -> Result<()> {
        let old_ip = old
            .and_then(|old| old["spec"]["clusterIP"].as_str())
            .filter(|ip| !ip.is_empty())
            .map(str::to_string);
        if wants_cluster_ip(service) {
            let requested = service["spec"]["clusterIP"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let ip = match (requested.as_str(), &old_ip) {
                ("", Some(old_ip)) => old_ip.clone(),
                (requested, Some(old_ip)) if requested == old_ip => old_ip.clone(),
                ("None", None) => "None".to_string(),
                ("", None) => {
                    let cidr = self.service_cidr;
                    let (ip, allocation) = self
                        .reserve_any(
                            IP_PREFIX,
                            cidr.usable(),
                            |n| cidr.nth(n).to_string(),
                            owner,
                            dry_run,
                        )
                        .await?;
                    reserved.extend(allocation);
                    ip
                }
                (requested, None) => {
                    let parsed: Ipv4Addr = requested.parse().map_err(|_| {
                        invalid(
                            owner,
                            "spec.clusterIPs[0]",
                            requested,
                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        )
                    })?;
                    if !self.service_cidr.contains(parsed) {
                        return Err(invalid(
                            owner,
                            "spec.clusterIPs[0]",
                            requested,
                            &format!(
                                "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}/{}",
                                self.service_cidr.base, self.service_cidr.bits
                            ),
                        ));
                    }
                    reserved.extend(
                        self.reserve_specific(
                            IP_PREFIX,
                            requested,
                            owner,
                            "spec.clusterIPs",
                            dry_run,
                        )
                        .await?,
                    );
                    requested.to_string()
                }
                (_, Some(_)) => {
                    return Err(invalid(
                        owner,
                        "spec.clusterIPs[0]",
                        &requested,
                        "may not change once set",
                    ))
                }
            };
            service["spec"]["clusterIP"] = ip.clone().into();
            service["spec"]["clusterIPs"] = serde_json::json!([ip]);
        }
        if wants_node_ports(service) {
            let old_ports: Vec<i64> = old
                .and_then(|old| old["spec"]["ports"].as_array())
                .map(|ports| {
                    ports
                        .iter()
                        .filter_map(|p| p["nodePort"].as_i64())
                        .collect()
                })
                .unwrap_or_default();
            let count = service["spec"]["ports"].as_array().map_or(0, Vec::len);
            for index in 0..count {
                let given = service["spec"]["ports"][index]["nodePort"].as_i64();
                let port = match given {
                    Some(port) if old_ports.contains(&port) => port,
                    Some(port) => {
                        if !(i64::from(*self.node_ports.start())
                            ..=i64::from(*self.node_ports.end()))
                            .contains(&port)
                        {
                            return Err(invalid(owner, &format!("spec.ports[{index}].nodePort"), &port.to_string(),
                                &format!("provided port is not in the valid range. The range of valid ports is {}-{}", self.node_ports.start(), self.node_ports.end())));
                        }
                        reserved.extend(
                            self.reserve_specific(
                                PORT_PREFIX,
                                &port.to_string(),
                                owner,
                                &format!("spec.ports[{index}].nodePort"),
                                dry_run,
                            )
                            .await?,
                        );
                        port
                    }
                    None => {
                        let range = u32::from(*self.node_ports.start())
                            ..u32::from(*self.node_ports.end()) + 1;
                        let (port, allocation) = self
                            .reserve_any(PORT_PREFIX, range, |n| n.to_string(), owner, dry_run)
                            .await?;
                        reserved.extend(allocation);
                        port.parse::<i64>().unwrap_or(0)
                    }
                };
                service["spec"]["ports"][index]["nodePort"] = port.into();
            }
        }
        Ok(())
    }

    pub async fn release_all(&self, allocations: Vec<Allocation>) {
        for Allocation(key) in allocations {
            if let Err(error) = self.storage.delete(&key, None).await {
                tracing::warn!(%error, key = %String::from_utf8_lossy(&key), "could not release allocation");
            }
        }
    }

    /// Releases what a deleted Service held.
    pub async fn release_for(&self, info: &ResourceInfo, service: &Value) {
        if !is_service(info) {
            return;
        }
        let mut keys = Vec::new();
        if let Some(ip) = service["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty() && *ip != "None")
        {
            keys.push(Allocation(format!("{IP_PREFIX}{ip}").into_bytes()));
        }
        for port in service["spec"]["ports"].as_array().into_iter().flatten() {
            if let Some(node_port) = port["nodePort"].as_i64() {
                keys.push(Allocation(format!("{PORT_PREFIX}{node_port}").into_bytes()));
            }
        }
        self.release_all(keys).await;
    }
}

fn invalid(owner: &str, field: &str, value: &str, detail: &str) -> ApiError {
    let name = owner.rsplit('/').next().unwrap_or(owner);
    ApiError::invalid(
        "Service",
        "",
        name,
        vec![crate::error::Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: \"{value}\": {detail}"),
            field: field.to_string(),
        }],
    )
}

fn taken(owner: &str, field: &str, item: &str) -> ApiError {
    invalid(owner, field, item, "provided IP is already allocated")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_bound_their_addresses() {
        let cidr = Cidr::parse("10.96.0.0/12").expect("valid");
        assert_eq!(cidr.nth(1), Ipv4Addr::new(10, 96, 0, 1));
        assert!(cidr.contains(Ipv4Addr::new(10, 111, 255, 254)));
        assert!(!cidr.contains(Ipv4Addr::new(10, 112, 0, 0)));
        assert!(Cidr::parse("10.96.0.0").is_err());
        assert!(Cidr::parse("10.96.0.0/33").is_err());
        assert!(Cidr::parse("banana/12").is_err());
    }
}
