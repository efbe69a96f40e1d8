//! The proxy's nftables state as data, and the transactions that take the kernel from one
//! state to the next: a full one (the table deleted and written whole, in one atomic `nft -f`)
//! at start and after a failure, and otherwise only what changed — chains added, rewritten or
//! deleted, map and set elements added or removed — so the work per change does not grow
//! with the number of Services.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Everything the proxy keeps in its table besides the fixed skeleton.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// Regular chains by name, each with its rules in order.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Verdict-map elements: map → key → verdict.
    pub maps: BTreeMap<&'static str, BTreeMap<String, String>>,
    /// Plain set elements: set → elements.
    pub sets: BTreeMap<&'static str, BTreeSet<String>>,
    /// Session-affinity sets by name, with their timeout in seconds.
    pub affinity: BTreeMap<String, u32>,
}

/// The table's fixed part: maps, sets and chains that depend only on the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skeleton {
    pub family: &'static str,
    pub table: String,
    /// What `add <kind> <table> <name> <spec>` declares: (kind, name, spec), e.g.
    /// `("chain", "nat-prerouting", "{ type nat hook prerouting priority dstnat ; }")`.
    pub declarations: Vec<(&'static str, String, String)>,
    /// (chain, rule) pairs for the fixed chains.
    pub rules: Vec<(String, String)>,
    /// The map and set names the skeleton declares (so the diff knows them).
    pub maps: Vec<&'static str>,
    pub sets: Vec<&'static str>,
}

impl Skeleton {
    fn prefix(&self) -> String {
        format!("{} {}", self.family, self.table)
    }
}

/// The whole table, written from nothing: `add table` first so the `delete` never fails.
pub fn full(skeleton: &Skeleton, rules: &Ruleset) -> String {
    let t = skeleton.prefix();
    let mut out = String::new();
    let _ = writeln!(out, "add table {t}");
    let _ = writeln!(out, "delete table {t}");
    let _ = writeln!(
        out,
        "add table {t} {{ comment \"rudder: service proxy\" ; }}"
    );
    for (kind, name, spec) in &skeleton.declarations {
        let _ = writeln!(out, "add {kind} {t} {name} {spec}");
    }
    for (name, timeout) in &rules.affinity {
        let _ = writeln!(out, "{}", affinity_set(&t, name, *timeout));
    }
    for name in rules.chains.keys() {
        let _ = writeln!(out, "add chain {t} {name}");
    }
    for (chain, rule) in &skeleton.rules {
        let _ = writeln!(out, "add rule {t} {chain} {rule}");
    }
    for (name, body) in &rules.chains {
        for rule in body {
            let _ = writeln!(out, "add rule {t} {name} {rule}");
        }
    }
    for (map, elements) in &rules.maps {
        for (key, verdict) in elements {
            let _ = writeln!(out, "add element {t} {map} {{ {key} : {verdict} }}");
        }
    }
    for (set, elements) in &rules.sets {
        for element in elements {
            let _ = writeln!(out, "add element {t} {set} {{ {element} }}");
        }
    }
    out
}

/// The statements that turn `old` into `new` (empty when nothing changed).
pub fn diff(skeleton: &Skeleton, old: &Ruleset, new: &Ruleset) -> String {
    let t = skeleton.prefix();
    let mut out = String::new();
    // New sets and chains first: later rules and elements may name them.
    for (name, timeout) in &new.affinity {
        if old.affinity.get(name) != Some(timeout) {
            if old.affinity.contains_key(name) {
                // A changed timeout: the chains naming it are rewritten below.
                let _ = writeln!(out, "flush set {t} {name}");
            } else {
                let _ = writeln!(out, "{}", affinity_set(&t, name, *timeout));
            }
        }
    }
    for name in new.chains.keys() {
        if !old.chains.contains_key(name) {
            let _ = writeln!(out, "add chain {t} {name}");
        }
    }
    // Elements going away or changing verdict, before the chains they name go.
    let empty = BTreeMap::new();
    for map in skeleton.maps.iter() {
        let before = old.maps.get(map).unwrap_or(&empty);
        let after = new.maps.get(map).unwrap_or(&empty);
        for (key, verdict) in before {
            if after.get(key) != Some(verdict) {
                let _ = writeln!(out, "delete element {t} {map} {{ {key} }}");
            }
        }
    }
    let none = BTreeSet::new();
    for set in skeleton.sets.iter() {
        let before = old.sets.get(set).unwrap_or(&none);
        let after = new.sets.get(set).unwrap_or(&none);
        for element in before.difference(after) {
            let _ = writeln!(out, "delete element {t} {set} {{ {element} }}");
        }
        for element in after.difference(before) {
            let _ = writeln!(out, "add element {t} {set} {{ {element} }}");
        }
    }
    // Changed chains are rewritten; removed ones emptied (so no rule still jumps to another).
    for (name, body) in &new.chains {
        match old.chains.get(name) {
            Some(previous) if previous == body => {}
            previous => {
                if previous.is_some() {
                    let _ = writeln!(out, "flush chain {t} {name}");
                }
                for rule in body {
                    let _ = writeln!(out, "add rule {t} {name} {rule}");
                }
            }
        }
    }
    for name in old.chains.keys() {
        if !new.chains.contains_key(name) {
            let _ = writeln!(out, "flush chain {t} {name}");
        }
    }
    for map in skeleton.maps.iter() {
        let before = old.maps.get(map).unwrap_or(&empty);
        let after = new.maps.get(map).unwrap_or(&empty);
        for (key, verdict) in after {
            if before.get(key) != Some(verdict) {
                let _ = writeln!(out, "add element {t} {map} {{ {key} : {verdict} }}");
            }
        }
    }
    for name in old.chains.keys() {
        if !new.chains.contains_key(name) {
            let _ = writeln!(out, "delete chain {t} {name}");
        }
    }
    for name in old.affinity.keys() {
        if !new.affinity.contains_key(name) {
            let _ = writeln!(out, "delete set {t} {name}");
        }
    }
    out
}

fn affinity_set(table: &str, name: &str, timeout: u32) -> String {
    format!("add set {table} {name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}")
}
