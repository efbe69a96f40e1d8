//! Settling requests without an answer from the watch, as etcd's robustness tests do before
//! they search.
//!
//! Every write that commits shows in a complete watch over the workload's keys, at its
//! revision — a put with its (unique) value. So when the watch is complete, a put or
//! compare-and-swap without an answer whose value the watch delivered happened, at that
//! event's revision; one whose value it never delivered did not happen. A delete event no
//! acknowledged delete explains is given to a delete without an answer on that key whose time
//! allows that revision (above every revision answered before it was called, not above any
//! answered to a request called after it was decided); the others did not happen. Settled this way, the search no longer has to
//! try each such request both ways at every place — which, after an outage with hundreds of
//! them, it could not finish. The watch itself is checked on its own, so a watch that lies
//! cannot hide a fault here: it shows up there.

use std::collections::{HashMap, HashSet};

use super::{Input, Operation, Output, WatchLog};
use crate::types::{EventKind, Revision};

/// What settling did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    pub operations: Vec<Operation>,
    /// Requests without an answer that the watch shows happened.
    pub happened: usize,
    /// Those it shows did not.
    pub did_not: usize,
}

/// Settles the writes without an answer in `operations` from a complete watch `log`.
pub fn settle(operations: &[Operation], log: &WatchLog) -> Settled {
    let mut puts: HashMap<(&[u8], &[u8]), Revision> = HashMap::new();
    let mut deletes: Vec<(&[u8], Revision)> = Vec::new();
    for event in log.batches.iter().flat_map(|batch| &batch.events) {
        match event.kind {
            EventKind::Put => {
                puts.insert(
                    (event.kv.key.as_slice(), event.kv.value.as_slice()),
                    event.kv.mod_revision,
                );
            }
            EventKind::Delete => deletes.push((event.kv.key.as_slice(), event.kv.mod_revision)),
        }
    }
    let acknowledged: HashSet<Revision> = operations
        .iter()
        .filter_map(Operation::write_revision)
        .collect();
    // Delete events no acknowledged delete explains, per key, oldest first.
    let mut unexplained: HashMap<&[u8], Vec<Revision>> = HashMap::new();
    for (key, revision) in deletes {
        if !acknowledged.contains(&revision) {
            unexplained.entry(key).or_default().push(revision);
        }
    }
    let mut order: Vec<usize> = (0..operations.len()).collect();
    order.sort_by_key(|&index| operations[index].call);
    let mut keep = vec![true; operations.len()];
    let mut settled = Settled {
        operations: operations.to_vec(),
        ..Settled::default()
    };
    for index in order {
        let op = &operations[index];
        if !matches!(op.output, Output::Unknown { .. }) {
            continue;
        }
        let outcome = match &op.input {
            Input::Put { key, value } => puts
                .get(&(key.as_slice(), value.as_slice()))
                .map(|&revision| Output::Put { revision }),
            Input::Cas { key, value, .. } => {
                puts.get(&(key.as_slice(), value.as_slice()))
                    .map(|&revision| Output::Cas {
                        succeeded: true,
                        current: None,
                        revision,
                    })
            }
            Input::Delete { key } => {
                let (after, upto) = window(operations, op);
                unexplained.get_mut(key.as_slice()).and_then(|revisions| {
                    let position = revisions.iter().position(|&r| r > after && r <= upto)?;
                    Some(Output::Delete {
                        deleted: true,
                        revision: revisions.remove(position),
                    })
                })
            }
            // Reads without an answer are left for the search, which ignores them.
            Input::Get { .. } | Input::List { .. } => continue,
        };
        match outcome {
            Some(output) => {
                settled.operations[index].output = output;
                settled.happened += 1;
            }
            None => {
                keep[index] = false;
                settled.did_not += 1;
            }
        }
    }
    let mut index = 0;
    settled.operations.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    settled
}

/// The revisions `op` could have committed at, judging by time: above every revision
/// answered before it was called, and at most any answered to a request called after it was
/// decided (its `returned`, when it has one).
fn window(operations: &[Operation], op: &Operation) -> (Revision, Revision) {
    let mut after = 0;
    let mut upto = Revision::MAX;
    for other in operations {
        let Some(revision) = other.response_revision() else {
            continue;
        };
        if other.returned.is_some_and(|at| at < op.call) {
            after = after.max(revision);
        }
        if op.returned.is_some_and(|decided| other.call > decided) {
            upto = upto.min(revision);
        }
    }
    (after, upto)
}
