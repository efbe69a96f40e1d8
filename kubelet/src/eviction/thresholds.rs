//! Eviction signals and thresholds as the kubelet's flags spell them: hard ones
//! (`--eviction-hard memory.available<100Mi,nodefs.available<10%`), soft ones with the time
//! the signal must stay over them (`--eviction-soft`, `--eviction-soft-grace-period
//! memory.available=1m30s`), and how far past a threshold the node must come back before it
//! no longer counts as met (`--eviction-minimum-reclaim memory.available=0.5Gi`); and what
//! the node's summary says of each signal.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

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
    /// For a soft threshold, how long the signal must stay over it before a pod is evicted;
    /// `None` for a hard one.
    pub grace_period: Option<Duration>,
    /// Once met, how much more than the threshold must be available before it is not.
    pub min_reclaim: Option<Amount>,
}

impl Amount {
    /// The amount in units, on `capacity`.
    pub fn of(self, capacity: u64) -> u64 {
        match self {
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

impl Threshold {
    /// The available amount below which the threshold is met, on `capacity`.
    pub fn limit(&self, capacity: u64) -> u64 {
        self.amount.of(capacity)
    }

    /// The available amount below which a threshold already met stays met: the limit plus
    /// the minimum reclaim.
    pub fn limit_while_met(&self, capacity: u64) -> u64 {
        let reclaim = self.min_reclaim.map_or(0, |r| r.of(capacity));
        self.limit(capacity).saturating_add(reclaim)
    }

    pub fn is_soft(&self) -> bool {
        self.grace_period.is_some()
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
        let signal = signal_named(name).map_err(|e| format!("{entry:?}: {e}"))?;
        let amount_text = amount.trim();
        let amount = parse_amount(amount_text).map_err(|e| format!("{entry:?}: {e}"))?;
        if out.iter().any(|t| t.signal == signal) {
            return Err(format!("{entry:?}: {} is given twice", signal.name()));
        }
        out.push(Threshold {
            signal,
            amount,
            text: amount_text.to_owned(),
            grace_period: None,
            min_reclaim: None,
        });
    }
    Ok(out)
}

/// A quantity (`100Mi`, `0.5Gi`, `1000`) or a percentage (`10%`).
fn parse_amount(text: &str) -> Result<Amount, String> {
    match text.strip_suffix('%') {
        Some(percent) => match percent.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(Amount::Percent(p)),
            _ => Err("a percentage is between 0% and 100%".into()),
        },
        None => {
            let starts_with_digit = text.starts_with(|c: char| c.is_ascii_digit());
            let value = rudder_facts::quantity::value(text);
            if !starts_with_digit || value < 0 {
                return Err(format!("{text:?} is not a quantity"));
            }
            Ok(Amount::Absolute(u64::try_from(value).unwrap_or(0)))
        }
    }
}

fn signal_named(name: &str) -> Result<Signal, String> {
    Signal::ALL
        .into_iter()
        .find(|s| s.name() == name.trim())
        .ok_or_else(|| {
            let known: Vec<&str> = Signal::ALL.iter().map(|s| s.name()).collect();
            format!("unknown signal {name:?} (one of {})", known.join(", "))
        })
}

/// `signal=value` pairs, comma-separated, as `--eviction-soft-grace-period` and
/// `--eviction-minimum-reclaim` spell them.
fn per_signal<T>(
    spec: &str,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<BTreeMap<Signal, T>, String> {
    let mut out = BTreeMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, text)) = entry.split_once('=') else {
            return Err(format!("{entry:?}: expected <signal>=<value>"));
        };
        let signal = signal_named(name).map_err(|e| format!("{entry:?}: {e}"))?;
        let parsed = value(text.trim()).map_err(|e| format!("{entry:?}: {e}"))?;
        if out.insert(signal, parsed).is_some() {
            return Err(format!("{entry:?}: {} is given twice", signal.name()));
        }
    }
    Ok(out)
}

/// A Go-style duration: `90s`, `1m30s`, `500ms`, `1h`.
fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (as 90s, 1m30s or 1h)");
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad());
    }
    let signed: jiff::SignedDuration = text.parse().map_err(|_| bad())?;
    Duration::try_from(signed).map_err(|_| bad())
}

/// Parses `--eviction-soft` with `--eviction-soft-grace-period`: every soft threshold needs
/// a grace period, as upstream's kubelet insists.
pub fn parse_soft(spec: &str, grace_periods: &str) -> Result<Vec<Threshold>, String> {
    let mut soft = parse(spec)?;
    let mut graces = per_signal(grace_periods, parse_go_duration)
        .map_err(|e| format!("--eviction-soft-grace-period: {e}"))?;
    for threshold in &mut soft {
        let Some(grace) = graces.remove(&threshold.signal) else {
            return Err(format!(
                "--eviction-soft {threshold}: no grace period for {} in --eviction-soft-grace-period",
                threshold.signal.name()
            ));
        };
        threshold.grace_period = Some(grace);
    }
    if let Some(signal) = graces.keys().next() {
        return Err(format!(
            "--eviction-soft-grace-period: {} has no soft threshold",
            signal.name()
        ));
    }
    Ok(soft)
}

/// Applies `--eviction-minimum-reclaim` to the thresholds of the signals it names.
pub fn apply_minimum_reclaim(thresholds: &mut [Threshold], spec: &str) -> Result<(), String> {
    let reclaim =
        per_signal(spec, parse_amount).map_err(|e| format!("--eviction-minimum-reclaim: {e}"))?;
    for threshold in thresholds {
        threshold.min_reclaim = reclaim.get(&threshold.signal).copied();
    }
    Ok(())
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
    met_after(thresholds, observations, |_| false)
}

/// As [`met`], where a threshold `was_met` says was met in the last round stays met until
/// its minimum reclaim is available too.
pub fn met_after<'a>(
    thresholds: &'a [Threshold],
    observations: &BTreeMap<Signal, Observation>,
    was_met: impl Fn(&Threshold) -> bool,
) -> Vec<(&'a Threshold, Observation)> {
    thresholds
        .iter()
        .filter_map(|t| {
            let seen = observations.get(&t.signal)?;
            let limit = if was_met(t) {
                t.limit_while_met(seen.capacity)
            } else {
                t.limit(seen.capacity)
            };
            (seen.available < limit).then_some((t, *seen))
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
    fn soft_thresholds_need_a_grace_period_and_take_a_minimum_reclaim() {
        let soft = parse_soft(
            "memory.available<1.5Gi,nodefs.available<15%",
            "memory.available=1m30s,nodefs.available=2m",
        )
        .unwrap();
        assert_eq!(soft[0].grace_period, Some(Duration::from_secs(90)));
        assert_eq!(soft[1].grace_period, Some(Duration::from_secs(120)));
        assert!(soft.iter().all(Threshold::is_soft));
        assert!(parse("memory.available<1Gi")
            .unwrap()
            .iter()
            .all(|t| !t.is_soft()));

        let missing = parse_soft("memory.available<1Gi", "").unwrap_err();
        assert!(
            missing.contains("no grace period for memory.available"),
            "{missing}"
        );
        let orphan = parse_soft("", "memory.available=1m").unwrap_err();
        assert!(orphan.contains("has no soft threshold"), "{orphan}");
        let bad = parse_soft("memory.available<1Gi", "memory.available=soon").unwrap_err();
        assert!(bad.contains("is not a duration"), "{bad}");

        let mut hard = parse("memory.available<100Mi,nodefs.available<10%").unwrap();
        apply_minimum_reclaim(&mut hard, "memory.available=0.5Gi,nodefs.available=5%").unwrap();
        assert_eq!(hard[0].limit_while_met(1 << 40), (100 << 20) + (512 << 20));
        assert_eq!(hard[1].limit_while_met(1000), 150);
        assert!(apply_minimum_reclaim(&mut hard, "memory.available").is_err());
        assert!(apply_minimum_reclaim(&mut hard, "cpu.available=1").is_err());
    }

    #[test]
    fn a_met_threshold_stays_met_until_its_minimum_reclaim_is_available() {
        let mut hard = parse("memory.available<100").unwrap();
        apply_minimum_reclaim(&mut hard, "memory.available=50").unwrap();
        let at = |available| {
            BTreeMap::from([(
                Signal::MemoryAvailable,
                Observation {
                    available,
                    capacity: 1000,
                },
            )])
        };
        assert_eq!(met(&hard, &at(120)).len(), 0);
        assert_eq!(met_after(&hard, &at(120), |_| true).len(), 1);
        assert_eq!(met_after(&hard, &at(150), |_| true).len(), 0);
        assert_eq!(met(&hard, &at(99)).len(), 1);
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
