//! One cluster CIDR (IPv4 or IPv6) cut into equal blocks of a node's prefix length, and which
//! of them are taken. Addresses are held as `u128` so that both families share the arithmetic.
//! As upstream's CIDR sets, a range holds at most 2^16 blocks: a node prefix more than 16 bits
//! longer than the cluster's is refused.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};

/// The most bits a node's prefix may add to the cluster's (upstream's limit).
const MAX_EXTRA_BITS: u8 = 16;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

/// A parsed CIDR, its address reduced to the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub family: Family,
    pub network: u128,
    pub length: u8,
}

impl Cidr {
    /// Parses `address/length`; a host address is taken as its network.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = || Error::Invalid(format!("{text:?} is not a CIDR"));
        let (address, length) = text.trim().split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let length: u8 = length.parse().map_err(|_| invalid())?;
        let (family, value) = match address {
            IpAddr::V4(v4) => (Family::V4, u128::from(u32::from(v4))),
            IpAddr::V6(v6) => (Family::V6, u128::from(v6)),
        };
        if length > family.bits() {
            return Err(invalid());
        }
        Ok(Self {
            family,
            network: value & mask(family, length),
            length,
        })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let address = match self.family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(
                u32::try_from(self.network).unwrap_or_default(),
            )),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(self.network)),
        };
        write!(f, "{address}/{}", self.length)
    }
}

/// The network mask of `length` bits within the family's width.
fn mask(family: Family, length: u8) -> u128 {
    let width = u32::from(family.bits());
    let host_bits = width - u32::from(length);
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    all.checked_shr(host_bits)
        .and_then(|ones| ones.checked_shl(host_bits))
        .unwrap_or(0)
        & all
}

/// The blocks of one cluster CIDR, and which are taken.
#[derive(Debug)]
pub struct RangeAllocator {
    cluster: Cidr,
    mask_size: u8,
    blocks: u64,
    used: BTreeSet<u64>,
}

impl RangeAllocator {
    /// The blocks of `mask_size` bits in the CIDR `cluster_cidr`.
    pub fn new(cluster_cidr: &str, mask_size: u8) -> Result<Self> {
        let cluster = Cidr::parse(cluster_cidr)?;
        if mask_size < cluster.length || mask_size > cluster.family.bits() {
            return Err(Error::Invalid(format!(
                "a node mask size of {mask_size} does not fit in the cluster CIDR {cluster_cidr}"
            )));
        }
        if mask_size - cluster.length > MAX_EXTRA_BITS {
            return Err(Error::Invalid(format!(
                "a node mask size of {mask_size} cuts {cluster_cidr} into more than 2^{MAX_EXTRA_BITS} blocks; \
                 use a longer cluster prefix or a shorter node mask"
            )));
        }
        Ok(Self {
            cluster,
            mask_size,
            blocks: 1u64 << (mask_size - cluster.length),
            used: BTreeSet::new(),
        })
    }

    pub fn family(&self) -> Family {
        self.cluster.family
    }

    /// Host bits below a block.
    fn shift(&self) -> u32 {
        u32::from(self.cluster.family.bits() - self.mask_size)
    }

    fn block_of(&self, cidr: &str) -> Option<u64> {
        let cidr = Cidr::parse(cidr).ok()?;
        if cidr.family != self.cluster.family || cidr.length != self.mask_size {
            return None;
        }
        let offset = cidr.network.checked_sub(self.cluster.network)?;
        let index = u64::try_from(offset.checked_shr(self.shift())?).ok()?;
        (index < self.blocks).then_some(index)
    }

    fn cidr_of(&self, index: u64) -> String {
        let offset = u128::from(index).checked_shl(self.shift()).unwrap_or(0);
        Cidr {
            family: self.cluster.family,
            network: self.cluster.network + offset,
            length: self.mask_size,
        }
        .to_string()
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
        self.cluster.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(cidr: &str, mask: u8) -> RangeAllocator {
        RangeAllocator::new(cidr, mask).expect("a valid range")
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
        assert!(!range.occupy("fd00::/64"), "another family");
    }

    #[test]
    fn ipv6_ranges_are_cut_the_same_way() {
        let mut range = allocator("fd42:1::/48", 64);
        assert_eq!(range.family(), Family::V6);
        assert_eq!(range.allocate().as_deref(), Some("fd42:1::/64"));
        assert!(range.occupy("fd42:1:0:1::/64"));
        assert_eq!(range.allocate().as_deref(), Some("fd42:1:0:2::/64"));
        assert!(!range.occupy("fd42:2::/64"), "outside the range");
        assert!(!range.occupy("10.42.0.0/24"), "another family");
        range.release("fd42:1::/64");
        assert_eq!(range.allocate().as_deref(), Some("fd42:1::/64"));
        // The last block of a range, at the top of the address space.
        let mut top = allocator("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126", 127);
        assert_eq!(
            top.allocate().as_deref(),
            Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/127")
        );
        assert_eq!(
            top.allocate().as_deref(),
            Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127")
        );
        assert_eq!(top.allocate(), None);
        assert_eq!(allocator("::/0", 16).range(), "::/0");
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
        for (cidr, mask) in [
            ("10.42.0.0/16", 8),
            ("nonsense", 24),
            ("10.42.0.0/16", 33),
            ("10.42.0.0/33", 33),
            ("10.0.0.0/8", 25),
            ("fd00::/48", 129),
            ("fd00::/32", 64),
        ] {
            assert!(RangeAllocator::new(cidr, mask).is_err(), "{cidr} {mask}");
        }
        // A host address in the flag is taken as its network.
        let mut range = allocator("10.42.7.9/16", 24);
        assert_eq!(range.allocate().as_deref(), Some("10.42.0.0/24"));
        let mut range = allocator("fd00::1234/112", 120);
        assert_eq!(range.allocate().as_deref(), Some("fd00::/120"));
    }
}
