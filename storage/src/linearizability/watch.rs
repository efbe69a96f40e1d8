//! The watch guarantees, checked against the operations: events in revision order with no
//! duplicate, every write that committed at or after the watch's start revision delivered
//! (up to where the watch got to), nothing delivered that no request wrote, each batch's
//! revision covering its events, and each event's `kv` and `prev_kv` what the events before
//! it make them.

use std::collections::{BTreeMap, HashMap};

use super::{text, Input, Operation, WatchLog};
use crate::types::{Event, EventKind, KeyValue, Revision};

/// What a write (or a request without an answer that may have written) would put in an event.
struct Expected<'a> {
    op: &'a Operation,
    key: &'a [u8],
    /// The value written; `None` for a delete.
    value: Option<&'a [u8]>,
}

fn expected(op: &Operation) -> Option<Expected<'_>> {
    let (key, value) = match &op.input {
        Input::Put { key, value } | Input::Cas { key, value, .. } => (key, Some(value.as_slice())),
        Input::Delete { key } => (key, None),
        Input::Get { .. } | Input::List { .. } => return None,
    };
    op.may_write().then_some(Expected { op, key, value })
}

fn matches(expected: &Expected<'_>, event: &Event) -> bool {
    expected.key == event.kv.key.as_slice()
        && match (expected.value, event.kind) {
            (Some(value), EventKind::Put) => value == event.kv.value.as_slice(),
            (None, EventKind::Delete) => true,
            _ => false,
        }
}

pub fn check(operations: &[Operation], log: &WatchLog) -> Vec<String> {
    let mut anomalies = Vec::new();
    let events: Vec<&Event> = log.batches.iter().flat_map(|b| &b.events).collect();

    // Order and batch revisions.
    let mut last: Option<(Revision, &[u8])> = None;
    let mut last_batch = 0;
    for batch in &log.batches {
        if batch.revision < last_batch {
            anomalies.push(format!(
                "watch batch revision went back from {last_batch} to {}",
                batch.revision
            ));
        }
        last_batch = last_batch.max(batch.revision);
        for event in &batch.events {
            let at = (event.kv.mod_revision, event.kv.key.as_slice());
            if event.kv.mod_revision > batch.revision {
                anomalies.push(format!(
                    "watch batch at revision {} carries an event at {}",
                    batch.revision, event.kv.mod_revision
                ));
            }
            if event.kv.mod_revision < log.start_revision {
                anomalies.push(format!(
                    "watch from revision {} delivered an event at {}",
                    log.start_revision, event.kv.mod_revision
                ));
            }
            if let Some(previous) = last {
                if at <= previous {
                    anomalies.push(format!(
                        "watch event {} at revision {} came after {} at {}",
                        text(at.1),
                        at.0,
                        text(previous.1),
                        previous.0
                    ));
                }
            }
            last = Some(at);
        }
    }
    let reached = last_batch.max(last.map_or(0, |(revision, _)| revision));

    // Every committed write delivered, and nothing else.
    let by_revision: HashMap<(Revision, &[u8]), &Event> = events
        .iter()
        .map(|event| ((event.kv.mod_revision, event.kv.key.as_slice()), *event))
        .collect();
    let mut unanswered: Vec<Expected<'_>> = Vec::new();
    let mut committed: HashMap<Revision, Expected<'_>> = HashMap::new();
    for op in operations {
        let Some(write) = expected(op) else { continue };
        match op.write_revision() {
            Some(revision) => {
                committed.insert(revision, write);
            }
            None => unanswered.push(write),
        }
    }
    let mut newest_write = 0;
    for (revision, write) in &committed {
        newest_write = newest_write.max(*revision);
        if *revision < log.start_revision || *revision > reached {
            continue;
        }
        match by_revision.get(&(*revision, write.key)) {
            Some(event) if matches(write, event) => {}
            Some(event) => anomalies.push(format!(
                "watch event at revision {revision} is a {:?} of {}={}, but {} committed there",
                event.kind,
                text(&event.kv.key),
                text(&event.kv.value),
                write.op
            )),
            None => anomalies.push(format!(
                "watch never delivered the write at revision {revision}: {}",
                write.op
            )),
        }
    }
    if reached < newest_write {
        anomalies.push(format!(
            "watch stopped at revision {reached} before the last write at {newest_write}{}",
            log.error
                .as_ref()
                .map(|error| format!(" ({error})"))
                .unwrap_or_default()
        ));
    }
    for event in &events {
        let revision = event.kv.mod_revision;
        let known = match committed.get(&revision) {
            Some(write) => write.key == event.kv.key.as_slice(),
            None => unanswered.iter().any(|write| matches(write, event)),
        };
        if !known {
            anomalies.push(format!(
                "watch delivered a {:?} of {}={} at revision {revision} that no request wrote",
                event.kind,
                text(&event.kv.key),
                text(&event.kv.value)
            ));
        }
    }

    // kv and prev_kv, replayed from the (fresh) keys' first event on.
    let mut keys: BTreeMap<&[u8], KeyValue> = BTreeMap::new();
    for event in &events {
        let key = event.kv.key.as_slice();
        let before = keys.get(key);
        if event.prev_kv.as_ref() != before {
            anomalies.push(format!(
                "watch event {} at revision {} has prev_kv {:?}, the key was {:?}",
                text(key),
                event.kv.mod_revision,
                event.prev_kv.as_ref().map(describe),
                before.map(describe)
            ));
        }
        match event.kind {
            EventKind::Put => {
                let (create_revision, version) = match before {
                    Some(before) => (before.create_revision, before.version + 1),
                    None => (event.kv.mod_revision, 1),
                };
                if event.kv.create_revision != create_revision || event.kv.version != version {
                    anomalies.push(format!(
                        "watch event {} at revision {} says created {} version {}, expected created {create_revision} version {version}",
                        text(key),
                        event.kv.mod_revision,
                        event.kv.create_revision,
                        event.kv.version
                    ));
                }
                keys.insert(key, event.kv.clone());
            }
            EventKind::Delete => {
                if before.is_none() {
                    anomalies.push(format!(
                        "watch delivered a delete of {} at revision {} while it did not exist",
                        text(key),
                        event.kv.mod_revision
                    ));
                }
                keys.remove(key);
            }
        }
    }
    anomalies
}

fn describe(kv: &KeyValue) -> String {
    format!(
        "{}@{} (created {}, version {})",
        text(&kv.value),
        kv.mod_revision,
        kv.create_revision,
        kv.version
    )
}
