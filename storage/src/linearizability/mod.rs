//! A linearizability checker for stores, in the manner of etcd's robustness tests.
//!
//! [`record`] runs concurrent clients (get, put, compare-and-swap transaction, delete, and a
//! list of the whole key set) against any [`Storage`](crate::Storage) — a driver directly, or
//! the etcd driver pointed at Rudder's etcd gateway — and keeps, for every operation, when it
//! was called, when it returned and what it returned, plus one watch over the workload's keys.
//! [`check`] then decides whether the history is **linearizable**: whether there is one order
//! of the operations, consistent with real time (an operation that returned before another
//! was called comes first), in which each result is what etcd's model gives. It searches for
//! that order per key with the Wing–Gong/Lowe algorithm ([`wgl`]), the state of a key being its
//! value, revisions and version ([`model`]); revisions tie the keys together (each operation
//! must read or write at a revision no older than its predecessors' in that order), which is
//! also what makes a list's snapshot checkable key by key. An operation whose request failed
//! may or may not have happened; the search tries both. The watch is checked separately
//! ([`watch`]): ordered, no gap, no duplicate, every committed write delivered with the right
//! `prev_kv`, nothing delivered that was not written.
//!
//! `docs/linearizability.md` explains the model and what each anomaly means;
//! `rudder storage check-history` runs it against a storage URL.

pub mod model;
mod patch;
pub mod record;
mod watch;
mod wgl;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use crate::types::{Revision, WatchBatch};

pub use record::{record, watch_log, AfterFailure, Recorder, Workload};

/// Nanoseconds since a recording began.
pub type Nanos = u64;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Get {
        key: Vec<u8>,
    },
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// A transaction: if the key's mod revision is `expected` (0: the key is absent), put
    /// `value`; otherwise read the key.
    Cas {
        key: Vec<u8>,
        expected: Revision,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    /// One range over every key of the workload.
    List {
        keys: Vec<Vec<u8>>,
    },
}

/// A key's value and revisions as a response showed them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Observed {
    pub value: Vec<u8>,
    pub mod_revision: Revision,
    pub create_revision: Revision,
    pub version: i64,
}

/// What the store answered; `revision` is the response header's revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    Get {
        kv: Option<Observed>,
        revision: Revision,
    },
    Put {
        revision: Revision,
    },
    Cas {
        succeeded: bool,
        /// The key as the failure branch read it.
        current: Option<Observed>,
        revision: Revision,
    },
    Delete {
        deleted: bool,
        revision: Revision,
    },
    List {
        kvs: BTreeMap<Vec<u8>, Observed>,
        revision: Revision,
    },
    /// The request failed or timed out: it may or may not have taken effect.
    Unknown {
        error: String,
    },
}

/// One call and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub client: usize,
    pub call: Nanos,
    /// When the response arrived; `None` when there was none (an `Unknown` output).
    pub returned: Option<Nanos>,
    pub input: Input,
    pub output: Output,
}

impl Operation {
    /// The revision a successful write committed at.
    pub fn write_revision(&self) -> Option<Revision> {
        match self.output {
            Output::Put { revision } => Some(revision),
            Output::Cas {
                succeeded: true,
                revision,
                ..
            } => Some(revision),
            Output::Delete {
                deleted: true,
                revision,
            } => Some(revision),
            _ => None,
        }
    }

    /// The revision the response carried, for reads and writes alike.
    pub fn response_revision(&self) -> Option<Revision> {
        match self.output {
            Output::Get { revision, .. }
            | Output::Put { revision }
            | Output::Cas { revision, .. }
            | Output::Delete { revision, .. }
            | Output::List { revision, .. } => Some(revision),
            Output::Unknown { .. } => None,
        }
    }

    /// Whether this could have changed the store: a write, or a request without an answer
    /// that asked to write.
    pub fn may_write(&self) -> bool {
        self.write_revision().is_some()
            || (matches!(self.output, Output::Unknown { .. })
                && !matches!(self.input, Input::Get { .. } | Input::List { .. }))
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let returned = match self.returned {
            Some(at) => format!("{:.3} ms", at as f64 / 1e6),
            None => "never".to_string(),
        };
        write!(
            f,
            "client {} called {:.3} ms, returned {returned}: {} → {}",
            self.client,
            self.call as f64 / 1e6,
            describe_input(&self.input),
            describe_output(&self.output)
        )
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe_input(input: &Input) -> String {
    match input {
        Input::Get { key } => format!("get {}", text(key)),
        Input::Put { key, value } => format!("put {}={}", text(key), text(value)),
        Input::Cas {
            key,
            expected,
            value,
        } => format!(
            "if mod_revision({})=={expected} put {}",
            text(key),
            text(value)
        ),
        Input::Delete { key } => format!("delete {}", text(key)),
        Input::List { keys } => format!("list of {} keys", keys.len()),
    }
}

fn describe_observed(kv: &Option<Observed>) -> String {
    match kv {
        Some(kv) => format!(
            "{}@{} (created {}, version {})",
            text(&kv.value),
            kv.mod_revision,
            kv.create_revision,
            kv.version
        ),
        None => "absent".to_string(),
    }
}

fn describe_output(output: &Output) -> String {
    match output {
        Output::Get { kv, revision } => format!("{} at {revision}", describe_observed(kv)),
        Output::Put { revision } => format!("put at {revision}"),
        Output::Cas {
            succeeded: true,
            revision,
            ..
        } => format!("succeeded at {revision}"),
        Output::Cas {
            succeeded: false,
            current,
            revision,
        } => format!(
            "failed, current {} at {revision}",
            describe_observed(current)
        ),
        Output::Delete { deleted, revision } => format!("deleted={deleted} at {revision}"),
        Output::List { kvs, revision } => format!("{} keys at {revision}", kvs.len()),
        Output::Unknown { error } => format!("no answer ({error})"),
    }
}

/// What one watch over the workload's keys delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchLog {
    /// The revision the watch started from.
    pub start_revision: Revision,
    pub batches: Vec<WatchBatch>,
    /// Why the watch ended before it caught up, if it did.
    pub error: Option<String>,
}

/// A recorded history: the operations and the watch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub operations: Vec<Operation>,
    pub watch: Option<WatchLog>,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub operations: usize,
    /// Operations without an answer.
    pub unknown: usize,
    /// Of those, writes a complete watch shows happened, and writes it shows did not; the
    /// rest the search tries both ways.
    pub unknown_happened: usize,
    pub unknown_did_not: usize,
    pub keys: usize,
    pub watch_events: usize,
    /// Violations of linearizability or of the watch guarantees, each naming operations.
    pub anomalies: Vec<String>,
    /// Keys whose search gave up before deciding (the history was too concurrent).
    pub inconclusive: Vec<String>,
}

impl Report {
    /// Linearizable, with every watch guarantee held, and nothing left undecided.
    pub fn is_clean(&self) -> bool {
        self.anomalies.is_empty() && self.inconclusive.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settled = if self.unknown_happened + self.unknown_did_not > 0 {
            format!(
                ", of which the watch shows {} happened and {} did not",
                self.unknown_happened, self.unknown_did_not
            )
        } else {
            String::new()
        };
        writeln!(
            f,
            "{} operations ({} without an answer{settled}) on {} keys, {} watch events: {} anomalies, {} undecided",
            self.operations,
            self.unknown,
            self.keys,
            self.watch_events,
            self.anomalies.len(),
            self.inconclusive.len()
        )?;
        for anomaly in &self.anomalies {
            writeln!(f, "  anomaly: {anomaly}")?;
        }
        for key in &self.inconclusive {
            writeln!(f, "  undecided: {key}")?;
        }
        Ok(())
    }
}

/// Checks a history: linearizability key by key, the revisions' order against real time,
/// and the watch.
pub fn check(history: &History) -> Report {
    let operations = &history.operations;
    let mut report = Report {
        operations: operations.len(),
        unknown: operations
            .iter()
            .filter(|op| matches!(op.output, Output::Unknown { .. }))
            .count(),
        ..Report::default()
    };
    // Settle the writes without an answer from the watch, when it is complete.
    let settled = match &history.watch {
        Some(log) if log.error.is_none() => patch::settle(operations, log),
        _ => patch::Settled {
            operations: operations.to_vec(),
            ..patch::Settled::default()
        },
    };
    report.unknown_happened = settled.happened;
    report.unknown_did_not = settled.did_not;
    let operations = &settled.operations;
    report.anomalies.extend(check_revisions(operations));
    let per_key = model::project(operations);
    report.keys = per_key.len();
    for (key, ops) in &per_key {
        match wgl::search(operations, ops) {
            wgl::Outcome::Linearizable => {}
            wgl::Outcome::Stuck { operation } => report.anomalies.push(format!(
                "key {}: no order consistent with real time explains {}",
                text(key),
                operations[operation]
            )),
            wgl::Outcome::GaveUp => report.inconclusive.push(text(key)),
        }
    }
    if let Some(log) = &history.watch {
        report.watch_events = log.batches.iter().map(|batch| batch.events.len()).sum();
        report
            .anomalies
            .extend(watch::check(&history.operations, log));
    }
    report
}

/// Revisions against real time and each other: two writes never share a revision, and an
/// operation called after another returned never answers at an older revision (a newer one,
/// for a write).
fn check_revisions(operations: &[Operation]) -> Vec<String> {
    let mut anomalies = Vec::new();
    let mut writers: BTreeMap<Revision, usize> = BTreeMap::new();
    for (index, op) in operations.iter().enumerate() {
        if let Some(revision) = op.write_revision() {
            if let Some(other) = writers.insert(revision, index) {
                anomalies.push(format!(
                    "two writes committed at revision {revision}: {} and {op}",
                    operations[other]
                ));
            }
        }
    }
    // Sweep the calls in time order, folding in every operation that returned before.
    let mut by_call: Vec<usize> = (0..operations.len()).collect();
    by_call.sort_by_key(|&index| operations[index].call);
    let mut by_return: Vec<(Nanos, usize)> = operations
        .iter()
        .enumerate()
        .filter_map(|(index, op)| {
            op.response_revision()?;
            op.returned.map(|at| (at, index))
        })
        .collect();
    by_return.sort();
    let mut returned = by_return.into_iter().peekable();
    let mut newest: Option<usize> = None;
    for index in by_call {
        let op = &operations[index];
        while let Some(&(at, earlier)) = returned.peek() {
            if at >= op.call {
                break;
            }
            returned.next();
            let revision = operations[earlier].response_revision();
            if newest.is_none_or(|best| operations[best].response_revision() < revision) {
                newest = Some(earlier);
            }
        }
        let (Some(revision), Some(before)) = (op.response_revision(), newest) else {
            continue;
        };
        let floor = operations[before].response_revision().unwrap_or(0);
        let too_old = if op.write_revision().is_some() {
            revision <= floor
        } else {
            revision < floor
        };
        if too_old {
            anomalies.push(format!(
                "revision went back in time: {op} was called after {} returned",
                operations[before]
            ));
        }
    }
    anomalies
}
