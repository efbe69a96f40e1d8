//! Node IPAM (`nodeipam`, upstream's range allocator): every Node without `spec.podCIDR` gets
//! the next free block out of each `--cluster-cidr` (one IPv4 and/or one IPv6 network; both
//! make a dual-stack cluster) as `spec.podCIDRs`, in the order the flag lists them, and the
//! first of them as `spec.podCIDR`. Blocks are `--node-cidr-mask-size-ipv4` (24) and
//! `--node-cidr-mask-size-ipv6` (64) bits long ([`range`]). The blocks in use are rebuilt from
//! the existing nodes before anything is handed out, and a node's blocks are free again once
//! the node is gone. A node that cannot get one of every family (a range is full) gets none
//! and a `CIDRNotAvailable` event.

pub mod range;

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{EventType, Recorder};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::informers::Informers;
use range::{Cidr, Family, RangeAllocator};

/// The pod ranges to hand out.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The cluster's pod networks (`--cluster-cidr`): at most one of each family.
    pub cluster_cidrs: Vec<String>,
    /// The prefix length of each node's IPv4 block (`--node-cidr-mask-size-ipv4`).
    pub node_mask_size_ipv4: u8,
    /// The prefix length of each node's IPv6 block (`--node-cidr-mask-size-ipv6`).
    pub node_mask_size_ipv6: u8,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster_cidrs: vec!["10.42.0.0/16".into()],
            node_mask_size_ipv4: 24,
            node_mask_size_ipv6: 64,
        }
    }
}

impl Settings {
    /// One allocator per cluster CIDR, checked as upstream checks the flags: one or two
    /// networks, and two only when they are of different families.
    pub fn ranges(&self) -> Result<Ranges> {
        if self.cluster_cidrs.is_empty() || self.cluster_cidrs.len() > 2 {
            return Err(Error::Invalid(format!(
                "--cluster-cidr takes one network, or two of different families (dual-stack); got {:?}",
                self.cluster_cidrs
            )));
        }
        let mut ranges = Vec::new();
        for cidr in &self.cluster_cidrs {
            let family = Cidr::parse(cidr)?.family;
            let mask = match family {
                Family::V4 => self.node_mask_size_ipv4,
                Family::V6 => self.node_mask_size_ipv6,
            };
            ranges.push(RangeAllocator::new(cidr, mask)?);
        }
        if let [first, second] = ranges.as_slice() {
            if first.family() == second.family() {
                return Err(Error::Invalid(format!(
                    "--cluster-cidr {:?}: a dual-stack cluster needs one IPv4 and one IPv6 network",
                    self.cluster_cidrs
                )));
            }
        }
        Ok(Ranges(ranges))
    }
}

/// The allocators of every cluster CIDR, in the flag's order.
#[derive(Debug)]
pub struct Ranges(Vec<RangeAllocator>);

impl Ranges {
    /// Marks a node's block taken in whichever range holds it; false if none does.
    pub fn occupy(&mut self, cidr: &str) -> bool {
        self.0.iter_mut().any(|range| range.occupy(cidr))
    }

    pub fn release(&mut self, cidr: &str) {
        for range in &mut self.0 {
            range.release(cidr);
        }
    }

    /// One free block of every range, now taken; `None` (and nothing taken) when a range is
    /// full.
    pub fn allocate(&mut self) -> Option<Vec<String>> {
        let mut taken = Vec::new();
        for range in &mut self.0 {
            match range.allocate() {
                Some(cidr) => taken.push(cidr),
                None => {
                    for cidr in &taken {
                        self.release(cidr);
                    }
                    return None;
                }
            }
        }
        Some(taken)
    }

    /// The cluster ranges, for messages.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self.0.iter().map(RangeAllocator::range).collect();
        names.join(",")
    }
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let mut cidrs: Vec<String> = spec
        .and_then(|spec| spec.pod_cidrs.clone())
        .unwrap_or_default();
    if let Some(single) = spec.and_then(|spec| spec.pod_cidr.clone()) {
        if !cidrs.contains(&single) {
            cidrs.push(single);
        }
    }
    cidrs
}

/// Gives `node` the next free block; returns it once the node holds it.
async fn assign(
    client: &Client,
    recorder: &Recorder,
    ranges: &mut Ranges,
    node: &Node,
) -> Option<Vec<String>> {
    let name = node.name_any();
    let Some(cidrs) = ranges.allocate() else {
        tracing::warn!(node = %name, range = %ranges.describe(), "no pod CIDR left for the node");
        crate::events::publish(
            recorder,
            node,
            EventType::Normal,
            "CIDRNotAvailable",
            "AllocateCIDR",
            format!("Node {name} status is now: CIDRNotAvailable"),
        )
        .await;
        return None;
    };
    let patch = json!({"spec": {"podCIDR": cidrs.first(), "podCIDRs": cidrs}});
    let api: Api<Node> = Api::all(client.clone());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %name, cidrs = %cidrs.join(","), "pod CIDRs assigned");
            Some(cidrs)
        }
        Err(error) => {
            // Given back; the node's next change tries again.
            for cidr in &cidrs {
                ranges.release(cidr);
            }
            tracing::warn!(node = %name, %error, "assigning a pod CIDR failed");
            None
        }
    }
}

pub fn controller(
    informers: &Informers,
    client: Client,
    identity: &str,
    settings: Settings,
    shutdown: CancellationToken,
) -> BoxFuture<'static, ()> {
    let watched = informers.watch::<Node>();
    let recorder = crate::events::recorder(client.clone(), "node-controller", identity);
    async move {
        let mut ranges = match settings.ranges() {
            Ok(ranges) => ranges,
            Err(error) => {
                tracing::error!(%error, "node IPAM does not run");
                return;
            }
        };
        let store = watched.store;
        let mut changes = watched.changes;
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = store.wait_until_ready() => {}
        }
        // What the nodes hold is taken before anything is handed out.
        for node in store.state() {
            for cidr in pod_cidrs(&node) {
                if !ranges.occupy(&cidr) {
                    tracing::info!(node = %node.name_any(), %cidr, "pod CIDR outside the cluster range; left alone");
                }
            }
        }
        // Blocks written to nodes whose change showing them has not arrived yet.
        let mut assigned: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.next() => match change {
                    Some(change) => change,
                    None => return,
                },
            };
            let name = change.object.name_any();
            let cidrs = pod_cidrs(&change.object);
            if change.deleted {
                for cidr in cidrs.iter().chain(assigned.remove(&name).iter().flatten()) {
                    ranges.release(cidr);
                }
            } else if cidrs.is_empty() {
                // A change from before our write shows no block yet: the node has one.
                if let Entry::Vacant(slot) = assigned.entry(name) {
                    if let Some(cidrs) =
                        assign(&client, &recorder, &mut ranges, &change.object).await
                    {
                        slot.insert(cidrs);
                    }
                }
            } else {
                assigned.remove(&name);
                for cidr in &cidrs {
                    ranges.occupy(cidr);
                }
            }
        }
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(cidrs: &[&str]) -> Settings {
        Settings {
            cluster_cidrs: cidrs.iter().map(|cidr| cidr.to_string()).collect(),
            ..Settings::default()
        }
    }

    #[test]
    fn dual_stack_nodes_get_one_block_of_each_family_in_flag_order() {
        let mut ranges = settings(&["fd42::/48", "10.42.0.0/16"])
            .ranges()
            .expect("valid");
        assert!(ranges.occupy("10.42.0.0/24"));
        assert!(ranges.occupy("fd42::/64"));
        assert_eq!(
            ranges.allocate(),
            Some(vec![
                "fd42:0:0:1::/64".to_string(),
                "10.42.1.0/24".to_string()
            ])
        );
        assert!(!ranges.occupy("10.43.0.0/24"));
    }

    #[test]
    fn a_full_range_takes_nothing_from_the_other() {
        let mut ranges = settings(&["10.42.0.0/24", "fd42::/64"])
            .ranges()
            .expect("valid");
        // 10.42.0.0/24 holds one /24 block; the IPv6 one holds one /64.
        assert_eq!(ranges.allocate().map(|cidrs| cidrs.len()), Some(2));
        assert_eq!(ranges.allocate(), None);
        ranges.release("10.42.0.0/24");
        assert_eq!(ranges.allocate(), None, "the IPv6 range is still full");
        ranges.release("fd42::/64");
        assert_eq!(
            ranges.allocate(),
            Some(vec!["10.42.0.0/24".to_string(), "fd42::/64".to_string()])
        );
    }

    #[test]
    fn cluster_cidrs_are_checked_as_upstream() {
        for cidrs in [
            &[][..],
            &["10.42.0.0/16", "10.43.0.0/16"][..],
            &["fd00::/48", "fd01::/48"][..],
            &["10.42.0.0/16", "fd00::/48", "10.43.0.0/16"][..],
            &["10.42.0.0/16", "nonsense"][..],
        ] {
            assert!(settings(cidrs).ranges().is_err(), "{cidrs:?}");
        }
        let wide = Settings {
            cluster_cidrs: vec!["fd00::/32".into()],
            ..Settings::default()
        };
        assert!(wide.ranges().is_err(), "2^32 blocks of /64");
    }
}
