//! Eviction signals and hard thresholds, as `--eviction-hard` spells them
//! (`memory.available<100Mi,nodefs.available<10%`), and what the node's summary says of each.

use std::collections::BTreeMap;
use std::fmt;

use crate::stats::summary::Summary;

/// Upstream's Linux defaults for `--eviction-hard`.
pub const DEFAULT_HARD: &str =
    "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%";

/// What the eviction manager watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

/// The node condition a signal's pressure sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The resource named in eviction messages.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable => Condition::MemoryPressure,
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// Whether freeing unused images may relieve it.
    pub fn is_disk(self) -> bool {
        self.condition() == Condition::DiskPressure
    }
}

/// A threshold's value: an amount, or a share of the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// Bytes, inodes or processes.
    Absolute(u64),
    /// Percent of the capacity (0–100).
    Percent(f64),
}

/// `signal < amount`.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub amount: Amount,
    /// As given (`100Mi`, `10%`), for messages.
    pub text: String,
}

impl Threshold {
    /// The available amount below which the threshold is met, on `capacity`.
    pub fn limit(&self, capacity: u64) -> u64 {
        match self.amount {
            Amount::Absolute(v) => v,
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            Amount::Percent(p) => (capacity as f64 * p / 100.0) as u64,
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}<{}", self.signal.name(), self.text)
    }
}

/// Parses `--eviction-hard`: comma-separated `signal<amount`, the amount a quantity or a
/// percentage; an empty list turns hard eviction off.
pub fn parse(spec: &str) -> Result<Vec<Threshold>, String> {
    let mut out: Vec<Threshold> = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, amount)) = entry.split_once('<') else {
            return Err(format!(
                "{entry:?}: a threshold is <signal><<amount>, as memory.available<100Mi"
            ));
        };
        let Some(signal) = Signal::ALL.into_iter().find(|s| s.name() == name.trim()) else {
            let known: Vec<&str> = Signal::ALL.iter().map(|s| s.name()).collect();
            return Err(format!(
                "{entry:?}: unknown signal {name:?} (one of {})",
                known.join(", ")
            ));
        };
        let amount_text = amount.trim();
        let amount = match amount_text.strip_suffix('%') {
            Some(percent) => match percent.parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => Amount::Percent(p),
                _ => return Err(format!("{entry:?}: a percentage is between 0% and 100%")),
            },
            None => {
                let starts_with_digit = amount_text.starts_with(|c: char| c.is_ascii_digit());
                let value = rudder_facts::quantity::value(amount_text);
                if !starts_with_digit || value < 0 {
                    return Err(format!("{entry:?}: {amount_text:?} is not a quantity"));
                }
                Amount::Absolute(u64::try_from(value).unwrap_or(0))
            }
        };
        if out.iter().any(|t| t.signal == signal) {
            return Err(format!("{entry:?}: {} is given twice", signal.name()));
        }
        out.push(Threshold {
            signal,
            amount,
            text: amount_text.to_owned(),
        });
    }
    Ok(out)
}

/// What a signal stands at: what is available of what capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: u64,
    pub capacity: u64,
}

/// Every signal the summary has numbers for.
pub fn observe(summary: &Summary) -> BTreeMap<Signal, Observation> {
    let mut out = BTreeMap::new();
    let node = &summary.node;
    if let Some(m) = &node.memory {
        if let (Some(available), Some(working_set)) = (m.available_bytes, m.working_set_bytes) {
            out.insert(
                Signal::MemoryAvailable,
                Observation {
                    available,
                    capacity: available + working_set,
                },
            );
        }
    }
    let filesystems = [
        (
            node.fs.as_ref(),
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        ),
        (
            node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()),
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ),
    ];
    for (fs, bytes, inodes) in filesystems {
        let Some(fs) = fs else { continue };
        if let (Some(available), Some(capacity)) = (fs.available_bytes, fs.capacity_bytes) {
            out.insert(
                bytes,
                Observation {
                    available,
                    capacity,
                },
            );
        }
        if let (Some(available), Some(capacity)) = (fs.inodes_free, fs.inodes) {
            out.insert(
                inodes,
                Observation {
                    available,
                    capacity,
                },
            );
        }
    }
    if let Some(r) = &node.rlimit {
        if let (Some(max), Some(current)) = (r.maxpid, r.curproc) {
            out.insert(
                Signal::PidAvailable,
                Observation {
                    available: max.saturating_sub(current),
                    capacity: max,
                },
            );
        }
    }
    out
}

/// The thresholds that `observations` meet, with what was observed.
pub fn met<'a>(
    thresholds: &'a [Threshold],
    observations: &BTreeMap<Signal, Observation>,
) -> Vec<(&'a Threshold, Observation)> {
    thresholds
        .iter()
        .filter_map(|t| {
            let seen = observations.get(&t.signal)?;
            (seen.available < t.limit(seen.capacity)).then_some((t, *seen))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{FsStats, MemoryStats, NodeStats, RlimitStats, RuntimeStats};

    #[test]
    fn upstreams_defaults_parse() {
        let defaults = parse(DEFAULT_HARD).unwrap();
        assert_eq!(defaults.len(), 4);
        assert_eq!(defaults[0].signal, Signal::MemoryAvailable);
        assert_eq!(defaults[0].limit(1 << 40), 100 * 1024 * 1024);
        assert_eq!(defaults[1].limit(1000), 100);
        assert_eq!(defaults[3].to_string(), "nodefs.inodesFree<5%");
        assert_eq!(parse("").unwrap(), Vec::new());
    }

    #[test]
    fn bad_thresholds_say_what_is_wrong() {
        for (spec, says) in [
            ("memory.available>1Gi", "a threshold is"),
            ("memory.free<1Gi", "unknown signal"),
            ("nodefs.available<120%", "between 0% and 100%"),
            ("nodefs.available<lots", "not a quantity"),
            ("memory.available<1Gi,memory.available<2Gi", "given twice"),
        ] {
            let error = parse(spec).unwrap_err();
            assert!(error.contains(says), "{spec}: {error}");
        }
    }

    #[test]
    fn signals_are_read_from_the_summary_and_compared_with_their_thresholds() {
        let time = String::new();
        let summary = Summary {
            node: NodeStats {
                memory: Some(MemoryStats {
                    time: time.clone(),
                    available_bytes: Some(50 << 20),
                    working_set_bytes: Some(950 << 20),
                    ..Default::default()
                }),
                fs: Some(FsStats {
                    time: time.clone(),
                    available_bytes: Some(30),
                    capacity_bytes: Some(100),
                    inodes_free: Some(90),
                    inodes: Some(100),
                    ..Default::default()
                }),
                runtime: Some(RuntimeStats {
                    image_fs: Some(FsStats {
                        time: time.clone(),
                        available_bytes: Some(10),
                        capacity_bytes: Some(100),
                        ..Default::default()
                    }),
                    container_fs: None,
                }),
                rlimit: Some(RlimitStats {
                    time,
                    maxpid: Some(1000),
                    curproc: Some(990),
                }),
                ..Default::default()
            },
            pods: Vec::new(),
        };
        let observed = observe(&summary);
        assert_eq!(
            observed[&Signal::MemoryAvailable],
            Observation {
                available: 50 << 20,
                capacity: 1000 << 20
            }
        );
        assert_eq!(observed[&Signal::PidAvailable].available, 10);
        let thresholds = parse(&format!("{DEFAULT_HARD},pid.available<20")).unwrap();
        let hit: Vec<Signal> = met(&thresholds, &observed)
            .into_iter()
            .map(|(t, _)| t.signal)
            .collect();
        // Memory under 100Mi, imagefs under 15%, pids under 20; nodefs (30%) and its
        // inodes (90%) are fine.
        assert_eq!(
            hit,
            vec![
                Signal::MemoryAvailable,
                Signal::ImageFsAvailable,
                Signal::PidAvailable
            ]
        );
    }
}
