//! `--controllers`: which controllers run, in upstream's syntax — `*` for every controller on by
//! default, `name` to turn one on, `-name` to turn one off (`*,-namespace` runs all but the
//! namespace controller).

use std::collections::BTreeSet;

use crate::error::{Error, Result};

/// The controllers this manager has, in the order they start.
pub const ALL: &[&str] = &[
    "serviceaccount",
    "root-ca-cert-publisher",
    "namespace",
    "garbage-collector",
    "replicaset",
    "deployment",
    "statefulset",
    "daemonset",
    "endpoints",
    "endpointslice",
    "endpointslicemirroring",
    "cluster-dns-endpoints",
    "job",
    "cronjob",
    "ttl-after-finished",
    "clusterrole-aggregation",
    "pod-garbage-collector",
    "serviceaccount-token",
    "disruption",
    "resourcequota",
    "csrapproving",
    "csrsigning",
    "node-lifecycle",
    "taint-eviction-controller",
    "nodeipam",
    "persistentvolume-binder",
    "local-path-provisioner",
    "pvc-protection",
    "pv-protection",
];

/// The controllers that run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection(BTreeSet<&'static str>);

impl Selection {
    /// Parses `--controllers` (comma-separated).
    pub fn parse(text: &str) -> Result<Self> {
        let mut on: BTreeSet<&'static str> = BTreeSet::new();
        let mut off: BTreeSet<&'static str> = BTreeSet::new();
        let mut star = false;
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            if item == "*" {
                star = true;
                continue;
            }
            let (negated, name) = match item.strip_prefix('-') {
                Some(name) => (true, name),
                None => (false, item),
            };
            let known = ALL
                .iter()
                .find(|known| **known == name)
                .ok_or_else(|| Error::UnknownController(name.to_string(), ALL.join(", ")))?;
            if negated {
                off.insert(known);
            } else {
                on.insert(known);
            }
        }
        if star {
            on.extend(ALL.iter().copied());
        }
        Ok(Self(on.difference(&off).copied().collect()))
    }

    /// Every controller.
    pub fn all() -> Self {
        Self(ALL.iter().copied().collect())
    }

    pub fn includes(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The selected names, in [`ALL`]'s order.
    pub fn names(&self) -> Vec<&'static str> {
        ALL.iter()
            .copied()
            .filter(|name| self.0.contains(name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_syntax_star_names_and_negations() {
        assert_eq!(Selection::parse("*").unwrap(), Selection::all());
        let some = Selection::parse("*,-namespace").unwrap();
        assert!(!some.includes("namespace") && some.includes("deployment"));
        let only = Selection::parse("replicaset").unwrap();
        assert_eq!(only.names(), vec!["replicaset"]);
        assert!(Selection::parse("").unwrap().names().is_empty());
        let error = Selection::parse("*,-nope").unwrap_err().to_string();
        assert!(error.contains("unknown controller \"nope\""), "{error}");
    }
}
