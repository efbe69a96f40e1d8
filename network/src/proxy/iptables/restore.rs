//! `iptables-restore --noflush` inputs that take the kernel from one state of Rudder's chains
//! to the next. A chain named in a `:CHAIN - [0:0]` line is created if missing and emptied,
//! then written whole; chains not named are left as they are, and so is every chain that is
//! not Rudder's. A full input names every chain Rudder wants and deletes (`-X`) the other
//! `RUDDER-` chains the kernel has (left by an earlier run); a diff names only the chains
//! whose rules changed and deletes the ones no longer wanted.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::rules::{Chains, Tables, PREFIX};

/// Rudder's chains the kernel has, per table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Existing {
    pub nat: BTreeSet<String>,
    pub filter: BTreeSet<String>,
}

/// The names of the `RUDDER-` chains in one table's `iptables-save` output.
pub fn rudder_chains(saved: &str) -> BTreeSet<String> {
    saved
        .lines()
        .filter_map(|line| line.strip_prefix(':'))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|name| name.starts_with(PREFIX))
        .map(str::to_owned)
        .collect()
}

/// One table's part: declares `write` (emptied and rewritten) and `delete`, writes the rules
/// of `write`, then deletes `delete`. Nothing when both are empty.
fn section<'a>(
    out: &mut String,
    table: &str,
    write: &[(&'a String, &'a Vec<String>)],
    delete: &[&String],
) {
    if write.is_empty() && delete.is_empty() {
        return;
    }
    let _ = writeln!(out, "*{table}");
    for name in write
        .iter()
        .map(|(name, _)| *name)
        .chain(delete.iter().copied())
    {
        let _ = writeln!(out, ":{name} - [0:0]");
    }
    for (name, body) in write {
        for rule in *body {
            let _ = writeln!(out, "-A {name} {rule}");
        }
    }
    for name in delete {
        let _ = writeln!(out, "-X {name}");
    }
    let _ = writeln!(out, "COMMIT");
}

/// Every wanted chain written whole, every other `RUDDER-` chain in `existing` deleted.
pub fn full(existing: &Existing, desired: &Tables) -> String {
    let mut out = String::new();
    for (table, chains, present) in [
        ("nat", &desired.nat, &existing.nat),
        ("filter", &desired.filter, &existing.filter),
    ] {
        let write: Vec<_> = chains.iter().collect();
        let delete: Vec<_> = present
            .iter()
            .filter(|name| !chains.contains_key(*name))
            .collect();
        section(&mut out, table, &write, &delete);
    }
    out
}

/// Only the chains whose rules changed, and the deletion of those no longer wanted (empty
/// when nothing changed).
pub fn diff(old: &Tables, new: &Tables) -> String {
    let mut out = String::new();
    for (table, before, after) in [
        ("nat", &old.nat, &new.nat),
        ("filter", &old.filter, &new.filter),
    ] {
        let write: Vec<_> = changed(before, after);
        let delete: Vec<_> = before
            .keys()
            .filter(|name| !after.contains_key(*name))
            .collect();
        section(&mut out, table, &write, &delete);
    }
    out
}

fn changed<'a>(before: &Chains, after: &'a Chains) -> Vec<(&'a String, &'a Vec<String>)> {
    after
        .iter()
        .filter(|(name, body)| before.get(*name) != Some(*body))
        .collect()
}

/// Deletes every chain in `existing` (the jumps into them must be gone first).
pub fn cleanup(existing: &Existing) -> String {
    let mut out = String::new();
    section(
        &mut out,
        "nat",
        &[],
        &existing.nat.iter().collect::<Vec<_>>(),
    );
    section(
        &mut out,
        "filter",
        &[],
        &existing.filter.iter().collect::<Vec<_>>(),
    );
    out
}
