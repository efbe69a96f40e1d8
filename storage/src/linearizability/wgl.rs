//! The Wing–Gong linearizability search with Lowe's memo, as Porcupine does it, for one key.
//!
//! The history becomes a list of call and return events in time order. Walking it, the
//! search tries to place ("linearize") the operation of each call it meets: if the model
//! accepts the operation in the current state and the pair (operations placed so far, new
//! state) has not been tried before, the operation's call and return leave the list and the
//! walk starts over from the front. Meeting a return means that operation should already have
//! been placed — every order tried so far is wrong — so the last placement is undone and the
//! next candidate after it tried. The history is linearizable when the list empties, and not
//! when there is nothing left to undo. Operations without an answer return "at the end of
//! time", so they may be placed anywhere after their call (or, as far as the model is
//! concerned, not happen at all).

use std::collections::HashSet;

use super::model::{apply, State, Step};
use super::Operation;

/// Steps the search may take before it gives up on a key.
const SEARCH_LIMIT: u64 = 5_000_000;

/// The search's verdict for one key.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    /// No order places this operation (an index into the history) before its return.
    Stuck {
        operation: usize,
    },
    GaveUp,
}

const NONE: usize = usize::MAX;

/// The doubly linked list of call and return events.
struct Events {
    /// For entry `e`: the operation (position in the key's list) and whether it is the call.
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// For a call entry, its return entry.
    matching: Vec<usize>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// `head` is a sentinel entry before the first event.
    head: usize,
}

impl Events {
    fn new(times: &[(u64, u64)]) -> Self {
        // (time, calls before returns at the same instant, operation)
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(times.len() * 2);
        for (index, &(call, returned)) in times.iter().enumerate() {
            order.push((call, false, index));
            order.push((returned, true, index));
        }
        order.sort();
        let entries = order.len() + 1;
        let head = order.len();
        let mut events = Events {
            op: vec![NONE; entries],
            is_call: vec![false; entries],
            matching: vec![NONE; entries],
            next: vec![NONE; entries],
            prev: vec![NONE; entries],
            head,
        };
        let mut call_entry = vec![NONE; times.len()];
        let mut previous = head;
        for (entry, &(_, is_return, index)) in order.iter().enumerate() {
            events.op[entry] = index;
            events.is_call[entry] = !is_return;
            if is_return {
                events.matching[call_entry[index]] = entry;
            } else {
                call_entry[index] = entry;
            }
            events.next[previous] = entry;
            events.prev[entry] = previous;
            previous = entry;
        }
        events
    }

    fn first(&self) -> usize {
        self.next[self.head]
    }

    fn unlink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = next;
        if next != NONE {
            self.prev[next] = prev;
        }
    }

    fn relink(&mut self, entry: usize) {
        let (prev, next) = (self.prev[entry], self.next[entry]);
        self.next[prev] = entry;
        if next != NONE {
            self.prev[next] = entry;
        }
    }

    /// Takes a call and its return out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.matching[call]);
    }

    /// Puts them back; undoes the `lift`s in reverse order.
    fn unlift(&mut self, call: usize) {
        self.relink(self.matching[call]);
        self.relink(call);
    }
}

/// A set of operations, as bits.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Placed(Vec<u64>);

impl Placed {
    fn new(size: usize) -> Self {
        Placed(vec![0; size.div_ceil(64)])
    }
    fn set(&mut self, index: usize) {
        self.0[index / 64] |= 1 << (index % 64);
    }
    fn clear(&mut self, index: usize) {
        self.0[index / 64] &= !(1 << (index % 64));
    }
}

struct Frame {
    call: usize,
    choice: usize,
    state: State,
}

/// Searches for a linearization of one key's operations, `(index into the history, step)`,
/// from an absent key.
pub fn search(operations: &[Operation], steps: &[(usize, Step)]) -> Outcome {
    let times: Vec<(u64, u64)> = steps
        .iter()
        .map(|(index, _)| {
            let op = &operations[*index];
            (op.call, op.returned.unwrap_or(u64::MAX))
        })
        .collect();
    search_from(steps, &times, State::default())
}

fn search_from(steps: &[(usize, Step)], times: &[(u64, u64)], initial: State) -> Outcome {
    let mut events = Events::new(times);
    let mut placed = Placed::new(steps.len());
    let mut tried: HashSet<(Placed, State)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut state = initial;
    let mut entry = events.first();
    let mut first_choice = 0;
    let mut budget = SEARCH_LIMIT;
    while entry != NONE {
        budget = match budget.checked_sub(1) {
            Some(left) => left,
            None => return Outcome::GaveUp,
        };
        let op = events.op[entry];
        if events.is_call[entry] {
            let candidates = apply(&state, &steps[op].1);
            let mut advanced = false;
            for (choice, next) in candidates.into_iter().enumerate().skip(first_choice) {
                let mut with_op = placed.clone();
                with_op.set(op);
                if tried.insert((with_op.clone(), next.clone())) {
                    stack.push(Frame {
                        call: entry,
                        choice,
                        state: std::mem::replace(&mut state, next),
                    });
                    placed = with_op;
                    events.lift(entry);
                    entry = events.first();
                    advanced = true;
                    break;
                }
            }
            first_choice = 0;
            if !advanced {
                entry = events.next[entry];
            }
        } else {
            let Some(frame) = stack.pop() else {
                return Outcome::Stuck {
                    operation: steps[op].0,
                };
            };
            events.unlift(frame.call);
            placed.clear(events.op[frame.call]);
            state = frame.state;
            entry = frame.call;
            first_choice = frame.choice + 1;
        }
    }
    Outcome::Linearizable
}
