//! etcd's model of one key, for the search: the key's state, and what each operation
//! (projected onto the key) may do to it.
//!
//! A key's state is its value with its mod revision, create revision and version — each
//! possibly unknown, after a write whose request failed — and a **floor**: the newest
//! revision of any operation placed before. Revisions are how keys hang together: in one
//! linearization the store's revision only grows, so a read placed after the floor must
//! answer at the floor or later, and a write must commit above it. That makes a list's
//! snapshot checkable key by key: a list at revision 12 that misses a key's write at
//! revision 11 cannot be placed before that write (11 would then commit below the floor 12)
//! nor after it (it would see it).

use std::collections::BTreeMap;

use super::{Input, Observed, Operation, Output};
use crate::types::Revision;

/// A key's value and revisions in the model; `None` where a write without an answer left
/// them unknown (the next read that sees the key fills them in).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Current {
    pub value: Vec<u8>,
    pub mod_revision: Option<Revision>,
    pub create_revision: Option<Revision>,
    pub version: Option<i64>,
}

/// One key in the model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    pub current: Option<Current>,
    pub floor: Revision,
}

/// An operation as one key sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A read (get, list, failed delete) that found the key so, at `revision`.
    Read {
        observed: Option<Observed>,
        revision: Revision,
    },
    /// A put; `revision` is `None` when the request got no answer.
    Put {
        value: Vec<u8>,
        revision: Option<Revision>,
    },
    /// A compare-and-swap that succeeded (or, without `revision`, may have).
    CasPut {
        expected: Revision,
        value: Vec<u8>,
        revision: Option<Revision>,
    },
    /// A compare-and-swap whose compare failed, having read the key so.
    CasFailed {
        expected: Revision,
        observed: Option<Observed>,
        revision: Revision,
    },
    /// A delete that removed the key (or, without `revision`, may have).
    Delete { revision: Option<Revision> },
}

/// Operations per key: for each key, the operations touching it as `(index, step)`, where
/// `index` points into the history. Reads without an answer are left out (they changed
/// nothing); a list becomes a read of every key it covers.
pub fn project(operations: &[Operation]) -> BTreeMap<Vec<u8>, Vec<(usize, Step)>> {
    let mut per_key: BTreeMap<Vec<u8>, Vec<(usize, Step)>> = BTreeMap::new();
    for (index, op) in operations.iter().enumerate() {
        let mut add = |key: &Vec<u8>, step: Step| {
            per_key.entry(key.clone()).or_default().push((index, step));
        };
        match (&op.input, &op.output) {
            (Input::Get { key }, Output::Get { kv, revision }) => add(
                key,
                Step::Read {
                    observed: kv.clone(),
                    revision: *revision,
                },
            ),
            (Input::List { keys }, Output::List { kvs, revision }) => {
                for key in keys {
                    add(
                        key,
                        Step::Read {
                            observed: kvs.get(key).cloned(),
                            revision: *revision,
                        },
                    );
                }
            }
            (Input::Put { key, value }, Output::Put { revision }) => add(
                key,
                Step::Put {
                    value: value.clone(),
                    revision: Some(*revision),
                },
            ),
            (Input::Put { key, value }, Output::Unknown { .. }) => add(
                key,
                Step::Put {
                    value: value.clone(),
                    revision: None,
                },
            ),
            (
                Input::Cas {
                    key,
                    expected,
                    value,
                },
                output,
            ) => match output {
                Output::Cas {
                    succeeded: true,
                    revision,
                    ..
                } => add(
                    key,
                    Step::CasPut {
                        expected: *expected,
                        value: value.clone(),
                        revision: Some(*revision),
                    },
                ),
                Output::Cas {
                    succeeded: false,
                    current,
                    revision,
                } => add(
                    key,
                    Step::CasFailed {
                        expected: *expected,
                        observed: current.clone(),
                        revision: *revision,
                    },
                ),
                _ => add(
                    key,
                    Step::CasPut {
                        expected: *expected,
                        value: value.clone(),
                        revision: None,
                    },
                ),
            },
            (Input::Delete { key }, Output::Delete { deleted, revision }) => {
                if *deleted {
                    add(
                        key,
                        Step::Delete {
                            revision: Some(*revision),
                        },
                    )
                } else {
                    add(
                        key,
                        Step::Read {
                            observed: None,
                            revision: *revision,
                        },
                    )
                }
            }
            (Input::Delete { key }, Output::Unknown { .. }) => {
                add(key, Step::Delete { revision: None })
            }
            // A read without an answer, or an answer that does not fit its request (the
            // recorder never makes one).
            _ => {}
        }
    }
    per_key
}

/// The states `step` may lead to from `state`: none when the step cannot happen there, two
/// when a write without an answer may or may not have happened.
pub fn apply(state: &State, step: &Step) -> Vec<State> {
    match step {
        Step::Read { observed, revision } => read(state, observed, *revision).into_iter().collect(),
        Step::Put { value, revision } => write(state, value, *revision),
        Step::CasPut {
            expected,
            value,
            revision,
        } => {
            let Some(state_if_matched) = compare_holds(state, *expected) else {
                // The compare fails here: only "it never happened" is left, and only for a
                // request without an answer.
                return if revision.is_none() {
                    vec![state.clone()]
                } else {
                    Vec::new()
                };
            };
            write(&state_if_matched, value, *revision)
                .into_iter()
                .filter(|next| revision.is_some() || next != &state_if_matched)
                .chain(revision.is_none().then(|| state.clone()))
                .collect()
        }
        Step::CasFailed {
            expected,
            observed,
            revision,
        } => {
            // The failure branch read the key the compare looked at: it must not match.
            let compare_held = match observed {
                None => *expected == 0,
                Some(seen) => seen.mod_revision == *expected,
            };
            if compare_held {
                return Vec::new();
            }
            read(state, observed, *revision).into_iter().collect()
        }
        Step::Delete { revision } => {
            if state.current.is_none() {
                return if revision.is_none() {
                    vec![state.clone()]
                } else {
                    Vec::new()
                };
            }
            match revision {
                Some(revision) if *revision <= state.floor => Vec::new(),
                Some(revision) => vec![State {
                    current: None,
                    floor: *revision,
                }],
                None => vec![
                    state.clone(),
                    State {
                        current: None,
                        floor: state.floor,
                    },
                ],
            }
        }
    }
}

/// A read at `revision` that saw `observed`: possible when no newer operation came before
/// and the key is as seen (unknown parts of the model then take the seen values).
fn read(state: &State, observed: &Option<Observed>, revision: Revision) -> Option<State> {
    if revision < state.floor {
        return None;
    }
    let current = match (&state.current, observed) {
        (None, None) => None,
        (Some(current), Some(seen)) => {
            let agrees = current.value == seen.value
                && current.mod_revision.is_none_or(|r| r == seen.mod_revision)
                && current
                    .create_revision
                    .is_none_or(|r| r == seen.create_revision)
                && current.version.is_none_or(|v| v == seen.version);
            if !agrees || seen.mod_revision > revision {
                return None;
            }
            Some(Current {
                value: seen.value.clone(),
                mod_revision: Some(seen.mod_revision),
                create_revision: Some(seen.create_revision),
                version: Some(seen.version),
            })
        }
        _ => return None,
    };
    Some(State {
        current,
        floor: revision,
    })
}

/// A put at `revision` (`None`: maybe, at a revision nobody saw).
fn write(state: &State, value: &[u8], revision: Option<Revision>) -> Vec<State> {
    let (create_revision, version) = match &state.current {
        Some(current) => (current.create_revision, current.version.map(|v| v + 1)),
        None => (revision, Some(1)),
    };
    match revision {
        Some(revision) if revision <= state.floor => Vec::new(),
        Some(revision) => vec![State {
            current: Some(Current {
                value: value.to_vec(),
                mod_revision: Some(revision),
                create_revision,
                version,
            }),
            floor: revision,
        }],
        None => vec![
            state.clone(),
            State {
                current: Some(Current {
                    value: value.to_vec(),
                    mod_revision: None,
                    create_revision,
                    version,
                }),
                floor: state.floor,
            },
        ],
    }
}

/// The state in which a compare of the mod revision against `expected` holds, filling in an
/// unknown mod revision; `None` when it cannot hold.
fn compare_holds(state: &State, expected: Revision) -> Option<State> {
    match &state.current {
        None => (expected == 0).then(|| state.clone()),
        Some(_) if expected == 0 => None,
        Some(current) => match current.mod_revision {
            Some(revision) => (revision == expected).then(|| state.clone()),
            None => {
                let mut known = state.clone();
                if let Some(current) = &mut known.current {
                    current.mod_revision = Some(expected);
                }
                Some(known)
            }
        },
    }
}
