//! The machine's own name and addresses, read from procfs (Linux) without libc or extra crates.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The machine's hostname: the kernel's view first, then `/etc/hostname`, then `$HOSTNAME`.
/// `None` when none of them yields a non-empty name.
pub fn hostname() -> Option<String> {
    let from_file = |path: &str| std::fs::read_to_string(path).ok();
    [
        from_file("/proc/sys/kernel/hostname"),
        from_file("/etc/hostname"),
        std::env::var("HOSTNAME").ok(),
    ]
    .into_iter()
    .flatten()
    .map(|name| name.trim().to_ascii_lowercase())
    .find(|name| !name.is_empty() && name.is_ascii() && !name.contains(char::is_whitespace))
}

/// The machine's unicast addresses (IPv4 from `/proc/net/fib_trie`, IPv6 from
/// `/proc/net/if_inet6`), without loopback and link-local addresses. Empty when procfs is absent.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut out = BTreeSet::new();
    if let Ok(text) = std::fs::read_to_string("/proc/net/fib_trie") {
        out.extend(parse_fib_trie(&text).into_iter().map(IpAddr::V4));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/if_inet6") {
        out.extend(parse_if_inet6(&text).into_iter().map(IpAddr::V6));
    }
    out.into_iter().collect()
}

/// Local IPv4 addresses: in the routing trie each local address is a leaf line `|-- a.b.c.d`
/// followed by a `/32 host LOCAL` line.
fn parse_fib_trie(text: &str) -> BTreeSet<Ipv4Addr> {
    let mut out = BTreeSet::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let trimmed = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(addr) = trimmed.parse::<Ipv4Addr>() {
            last = Some(addr);
            continue;
        }
        if trimmed.starts_with("/32 host LOCAL") {
            if let Some(addr) = last {
                if !addr.is_loopback() && !addr.is_link_local() && !addr.is_unspecified() {
                    out.insert(addr);
                }
            }
        }
    }
    out
}

/// Global-scope IPv6 addresses: `if_inet6` lines are `<32 hex digits> <ifindex> <prefix>
/// <scope> <flags> <name>`; scope 00 is global (0x10 host, 0x20 link).
fn parse_if_inet6(text: &str) -> BTreeSet<Ipv6Addr> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(hex), Some(scope)) = (fields.first(), fields.get(3)) else {
            continue;
        };
        if *scope != "00" || hex.len() != 32 {
            continue;
        }
        if let Ok(bits) = u128::from_str_radix(hex, 16) {
            let addr = Ipv6Addr::from(bits);
            if !addr.is_loopback() && !addr.is_unspecified() {
                out.insert(addr);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fib_trie_local_addresses() {
        let text =
            "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     \
                    +-- 10.0.2.0/24 2 0 2\n        |-- 10.0.2.15\n           /32 host LOCAL\n     \
                    |-- 10.0.2.255\n           /32 link BROADCAST\n     \
                    +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n\
                    Local:\n        |-- 10.0.2.15\n           /32 host LOCAL\n";
        let got: Vec<_> = parse_fib_trie(text).into_iter().collect();
        assert_eq!(got, vec![Ipv4Addr::new(10, 0, 2, 15)]);
    }

    #[test]
    fn if_inet6_global_only() {
        let text = "fd000000000000000000000000000002 04 40 00 82     eth0\n\
                    fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n\
                    00000000000000000000000000000001 01 80 10 80       lo\n";
        let got: Vec<_> = parse_if_inet6(text).into_iter().collect();
        assert_eq!(got, vec!["fd00::2".parse::<Ipv6Addr>().unwrap()]);
    }

    #[test]
    fn this_machine() {
        // Must not panic; on Linux there is always a hostname.
        let _ = local_addresses();
        if cfg!(target_os = "linux") {
            assert!(hostname().is_some());
        }
    }
}
