//! Node IPAM (`nodeipam`, upstream's range allocator): every Node without `spec.podCIDR` gets
//! the next free block of `--node-cidr-mask-size` (24) bits out of `--cluster-cidr`
//! (10.42.0.0/16) as `spec.podCIDR` and `spec.podCIDRs`. The blocks in use are rebuilt from the
//! existing nodes before anything is handed out, and a node's block is free again once the
//! node is gone. A node that cannot get one (the range is full) gets a `CIDRNotAvailable`
//! event. IPv4 only.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

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

/// The pod ranges to hand out.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The cluster's pod network (`--cluster-cidr`).
    pub cluster_cidr: String,
    /// The prefix length of each node's block (`--node-cidr-mask-size`).
    pub node_mask_size: u8,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster_cidr: "10.42.0.0/16".into(),
            node_mask_size: 24,
        }
    }
}

/// Parses `a.b.c.d/len` into its network address and prefix length.
fn parse_cidr(text: &str) -> Result<(u32, u8)> {
    let invalid = || Error::Invalid(format!("{text:?} is not an IPv4 CIDR"));
    let (address, length) = text.split_once('/').ok_or_else(invalid)?;
    let address: Ipv4Addr = address.trim().parse().map_err(|_| invalid())?;
    let length: u8 = length.trim().parse().map_err(|_| invalid())?;
    if length > 32 {
        return Err(invalid());
    }
    let mask = u32::MAX.checked_shl(u32::from(32 - length)).unwrap_or(0);
    Ok((u32::from(address) & mask, length))
}

/// The blocks of one cluster CIDR, and which are taken.
#[derive(Debug)]
pub struct RangeAllocator {
    base: u32,
    prefix: u8,
    mask_size: u8,
    blocks: u64,
    used: BTreeSet<u64>,
}

impl RangeAllocator {
    pub fn new(settings: &Settings) -> Result<Self> {
        let (base, prefix) = parse_cidr(&settings.cluster_cidr)?;
        let mask_size = settings.node_mask_size;
        if mask_size < prefix || mask_size > 32 {
            return Err(Error::Invalid(format!(
                "--node-cidr-mask-size {mask_size} does not fit in --cluster-cidr {}",
                settings.cluster_cidr
            )));
        }
        Ok(Self {
            base,
            prefix,
            mask_size,
            blocks: 1u64 << (mask_size - prefix),
            used: BTreeSet::new(),
        })
    }

    fn block_of(&self, cidr: &str) -> Option<u64> {
        let (address, length) = parse_cidr(cidr).ok()?;
        if length != self.mask_size {
            return None;
        }
        let offset = address.checked_sub(self.base)?;
        let index = u64::from(offset >> (32 - u32::from(self.mask_size)));
        (index < self.blocks).then_some(index)
    }

    fn cidr_of(&self, index: u64) -> String {
        let shift = 32 - u32::from(self.mask_size);
        let offset = u32::try_from(index)
            .unwrap_or(0)
            .checked_shl(shift)
            .unwrap_or(0);
        format!("{}/{}", Ipv4Addr::from(self.base + offset), self.mask_size)
    }

    /// Marks a block in use (a node already has it); false if it is not one of ours.
    pub fn occupy(&mut self, cidr: &str) -> bool {
        match self.block_of(cidr) {
            Some(index) => {
                self.used.insert(index);
                true
            }
            None => false,
        }
    }

    /// Frees a block.
    pub fn release(&mut self, cidr: &str) {
        if let Some(index) = self.block_of(cidr) {
            self.used.remove(&index);
        }
    }

    /// The lowest free block, now taken; `None` when the range is full.
    pub fn allocate(&mut self) -> Option<String> {
        let index = (0..self.blocks).find(|index| !self.used.contains(index))?;
        self.used.insert(index);
        Some(self.cidr_of(index))
    }

    /// The cluster range, for messages.
    pub fn range(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.base), self.prefix)
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
    allocator: &mut RangeAllocator,
    node: &Node,
) -> Option<String> {
    let name = node.name_any();
    let Some(cidr) = allocator.allocate() else {
        tracing::warn!(node = %name, range = %allocator.range(), "no pod CIDR left for the node");
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
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    let api: Api<Node> = Api::all(client.clone());
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %name, %cidr, "pod CIDR assigned");
            Some(cidr)
        }
        Err(error) => {
            // Given back; the node's next change tries again.
            allocator.release(&cidr);
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
        let mut allocator = match RangeAllocator::new(&settings) {
            Ok(allocator) => allocator,
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
                if !allocator.occupy(&cidr) {
                    tracing::info!(node = %node.name_any(), %cidr, "pod CIDR outside the cluster range; left alone");
                }
            }
        }
        // Blocks written to nodes whose change showing them has not arrived yet.
        let mut assigned: HashMap<String, String> = HashMap::new();
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
                for cidr in cidrs.iter().chain(assigned.remove(&name).as_ref()) {
                    allocator.release(cidr);
                }
            } else if cidrs.is_empty() {
                // A change from before our write shows no block yet: the node has one.
                if let Entry::Vacant(slot) = assigned.entry(name) {
                    if let Some(cidr) =
                        assign(&client, &recorder, &mut allocator, &change.object).await
                    {
                        slot.insert(cidr);
                    }
                }
            } else {
                assigned.remove(&name);
                for cidr in &cidrs {
                    allocator.occupy(cidr);
                }
            }
        }
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(cidr: &str, mask: u8) -> RangeAllocator {
        RangeAllocator::new(&Settings {
            cluster_cidr: cidr.into(),
            node_mask_size: mask,
        })
        .expect("a valid range")
    }

    #[test]
    fn blocks_are_handed_out_lowest_first_and_reused() {
        let mut range = allocator("10.42.0.0/16", 24);
        assert!(range.occupy("10.42.0.0/24"), "an existing node's block");
        assert_eq!(range.allocate().as_deref(), Some("10.42.1.0/24"));
        assert_eq!(range.allocate().as_deref(), Some("10.42.2.0/24"));
        range.release("10.42.1.0/24");
        assert_eq!(range.allocate().as_deref(), Some("10.42.1.0/24"));
        assert!(!range.occupy("10.43.0.0/24"), "not ours");
        assert!(!range.occupy("10.42.5.0/25"), "another size");
    }

    #[test]
    fn a_full_range_has_nothing_left() {
        let mut range = allocator("192.168.0.0/23", 24);
        assert_eq!(range.allocate().as_deref(), Some("192.168.0.0/24"));
        assert_eq!(range.allocate().as_deref(), Some("192.168.1.0/24"));
        assert_eq!(range.allocate(), None);
    }

    #[test]
    fn bad_settings_are_refused() {
        for (cidr, mask) in [("10.42.0.0/16", 8), ("nonsense", 24), ("10.42.0.0/16", 33)] {
            let settings = Settings {
                cluster_cidr: cidr.into(),
                node_mask_size: mask,
            };
            assert!(RangeAllocator::new(&settings).is_err(), "{cidr} {mask}");
        }
        // A host address in the flag is taken as its network.
        let mut range = allocator("10.42.7.9/16", 24);
        assert_eq!(range.allocate().as_deref(), Some("10.42.0.0/24"));
    }
}
