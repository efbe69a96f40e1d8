//! Hand-made histories, each with the verdict etcd's model gives it.

use std::collections::BTreeMap;

use super::*;
use crate::types::{Event, EventKind, KeyValue, WatchBatch};

fn op(client: usize, call: u64, returned: Option<u64>, input: Input, output: Output) -> Operation {
    Operation {
        client,
        call,
        returned,
        input,
        output,
    }
}

fn put(
    client: usize,
    call: u64,
    returned: u64,
    key: &str,
    value: &str,
    revision: i64,
) -> Operation {
    op(
        client,
        call,
        Some(returned),
        Input::Put {
            key: key.into(),
            value: value.into(),
        },
        Output::Put { revision },
    )
}

fn seen(value: &str, mod_revision: i64, create_revision: i64, version: i64) -> Observed {
    Observed {
        value: value.into(),
        mod_revision,
        create_revision,
        version,
    }
}

fn get(
    client: usize,
    call: u64,
    returned: u64,
    key: &str,
    kv: Option<Observed>,
    revision: i64,
) -> Operation {
    op(
        client,
        call,
        Some(returned),
        Input::Get { key: key.into() },
        Output::Get { kv, revision },
    )
}

fn verdict(operations: Vec<Operation>) -> Report {
    check(&History {
        operations,
        watch: None,
    })
}

#[test]
fn a_sequential_history_of_etcds_model_is_linearizable() {
    let report = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        get(0, 20, 30, "k", Some(seen("a", 2, 2, 1)), 2),
        put(0, 40, 50, "k", "b", 3),
        get(1, 60, 70, "k", Some(seen("b", 3, 2, 2)), 3),
    ]);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, 1);
}

#[test]
fn a_read_after_an_acknowledged_write_that_misses_it_is_caught() {
    let report = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        get(1, 20, 30, "k", None, 2),
    ]);
    assert_eq!(report.anomalies.len(), 1, "{report}");
    assert!(report.anomalies[0].contains("no order"), "{report}");
}

#[test]
fn a_read_overlapping_a_write_may_see_either_state() {
    for kv in [None, Some(seen("a", 2, 2, 1))] {
        let revision = if kv.is_some() { 2 } else { 1 };
        let report = verdict(vec![
            put(0, 0, 10, "k", "a", 2),
            get(1, 5, 8, "k", kv, revision),
        ]);
        assert!(report.is_clean(), "{report}");
    }
}

#[test]
fn a_lost_update_is_caught() {
    let report = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        put(1, 20, 30, "k", "b", 3),
        get(2, 40, 50, "k", Some(seen("a", 2, 2, 1)), 3),
    ]);
    assert!(!report.anomalies.is_empty(), "{report}");
}

#[test]
fn a_write_without_an_answer_may_or_may_not_have_happened_but_not_before_it_was_made() {
    let unknown = op(
        0,
        10,
        None,
        Input::Put {
            key: "k".into(),
            value: "x".into(),
        },
        Output::Unknown {
            error: "connection reset".into(),
        },
    );
    let happened = verdict(vec![
        unknown.clone(),
        get(1, 100, 110, "k", Some(seen("x", 2, 2, 1)), 2),
    ]);
    assert!(happened.is_clean(), "{happened}");
    assert_eq!(happened.unknown, 1);
    let did_not = verdict(vec![unknown.clone(), get(1, 100, 110, "k", None, 1)]);
    assert!(did_not.is_clean(), "{did_not}");
    let too_early = verdict(vec![
        get(1, 0, 5, "k", Some(seen("x", 2, 2, 1)), 2),
        unknown,
    ]);
    assert!(!too_early.anomalies.is_empty(), "{too_early}");
}

#[test]
fn a_compare_and_swap_must_fail_and_succeed_as_the_mod_revision_says() {
    let cas = |call, expected, succeeded, current, revision| {
        op(
            1,
            call,
            Some(call + 5),
            Input::Cas {
                key: "k".into(),
                expected,
                value: format!("c{call}").into_bytes(),
            },
            Output::Cas {
                succeeded,
                current,
                revision,
            },
        )
    };
    let good = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        cas(20, 2, true, None, 3),
        cas(30, 2, false, Some(seen("c20", 3, 2, 2)), 3),
    ]);
    assert!(good.is_clean(), "{good}");
    // A compare that failed although the key's mod revision was the one expected.
    let bad = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        cas(20, 2, false, Some(seen("a", 2, 2, 1)), 2),
    ]);
    assert!(!bad.anomalies.is_empty(), "{bad}");
    // Two compare-and-swaps on the same mod revision cannot both succeed.
    let both = verdict(vec![
        put(0, 0, 10, "k", "a", 2),
        cas(20, 2, true, None, 3),
        cas(21, 2, true, None, 4),
    ]);
    assert!(!both.anomalies.is_empty(), "{both}");
}

#[test]
fn a_list_that_is_not_one_snapshot_is_caught() {
    let list = |kvs: Vec<(&str, Observed)>, revision| {
        op(
            2,
            40,
            Some(50),
            Input::List {
                keys: vec!["a".into(), "b".into()],
            },
            Output::List {
                kvs: kvs
                    .into_iter()
                    .map(|(key, kv)| (key.as_bytes().to_vec(), kv))
                    .collect::<BTreeMap<_, _>>(),
                revision,
            },
        )
    };
    // b's write at 3 seen, a's earlier write at 2 missing: no revision has that state.
    let torn = verdict(vec![
        put(0, 0, 10, "a", "x", 2),
        put(1, 0, 10, "b", "y", 3),
        list(vec![("b", seen("y", 3, 3, 1))], 3),
    ]);
    assert!(!torn.anomalies.is_empty(), "{torn}");
    let whole = verdict(vec![
        put(0, 0, 10, "a", "x", 2),
        put(1, 0, 10, "b", "y", 3),
        list(
            vec![("a", seen("x", 2, 2, 1)), ("b", seen("y", 3, 3, 1))],
            3,
        ),
    ]);
    assert!(whole.is_clean(), "{whole}");
}

#[test]
fn revisions_that_go_back_in_real_time_or_repeat_are_caught() {
    let back = verdict(vec![
        get(0, 0, 5, "a", None, 5),
        get(1, 10, 15, "b", None, 4),
    ]);
    assert_eq!(back.anomalies.len(), 1, "{back}");
    assert!(back.anomalies[0].contains("back in time"), "{back}");
    let twice = verdict(vec![put(0, 0, 10, "a", "x", 2), put(1, 0, 10, "b", "y", 2)]);
    assert!(
        twice.anomalies.iter().any(|a| a.contains("two writes")),
        "{twice}"
    );
}

#[test]
fn many_overlapping_writes_are_decided_quickly() {
    let mut operations: Vec<Operation> = (0..12)
        .map(|i| {
            put(
                i,
                i as u64,
                1000 + i as u64,
                "k",
                &format!("v{i}"),
                2 + i as i64,
            )
        })
        .collect();
    operations.push(get(20, 2000, 2010, "k", Some(seen("v11", 13, 2, 12)), 13));
    let report = verdict(operations);
    assert!(report.is_clean(), "{report}");
}

fn kv(key: &str, value: &str, mod_revision: i64, create_revision: i64, version: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision,
        mod_revision,
        version,
        lease: 0,
    }
}

fn event(kind: EventKind, kv: KeyValue, prev_kv: Option<KeyValue>) -> Event {
    Event { kind, kv, prev_kv }
}

/// Three writes on one key and the watch that saw them.
fn watched(batches: Vec<Vec<Event>>) -> Report {
    let delete = op(
        0,
        40,
        Some(50),
        Input::Delete { key: "k".into() },
        Output::Delete {
            deleted: true,
            revision: 4,
        },
    );
    let batches = batches
        .into_iter()
        .map(|events| WatchBatch {
            revision: events.iter().map(|e| e.kv.mod_revision).max().unwrap_or(0),
            events,
        })
        .collect();
    check(&History {
        operations: vec![
            put(0, 0, 10, "k", "a", 2),
            put(0, 20, 30, "k", "b", 3),
            delete,
        ],
        watch: Some(WatchLog {
            start_revision: 2,
            batches,
            error: None,
        }),
    })
}

fn good_events() -> Vec<Event> {
    vec![
        event(EventKind::Put, kv("k", "a", 2, 2, 1), None),
        event(
            EventKind::Put,
            kv("k", "b", 3, 2, 2),
            Some(kv("k", "a", 2, 2, 1)),
        ),
        event(
            EventKind::Delete,
            KeyValue {
                key: "k".into(),
                mod_revision: 4,
                ..KeyValue::default()
            },
            Some(kv("k", "b", 3, 2, 2)),
        ),
    ]
}

#[test]
fn a_watch_that_delivers_every_write_in_order_passes() {
    let events = good_events();
    let report = watched(vec![events[..1].to_vec(), events[1..].to_vec()]);
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.watch_events, 3);
}

#[test]
fn a_watch_gap_duplicate_reorder_or_phantom_is_caught() {
    let events = good_events();
    let gap = watched(vec![vec![events[0].clone(), events[2].clone()]]);
    assert!(
        gap.anomalies.iter().any(|a| a.contains("never delivered")),
        "{gap}"
    );
    let duplicate = watched(vec![events.clone(), vec![events[2].clone()]]);
    assert!(!duplicate.anomalies.is_empty(), "{duplicate}");
    let reordered = watched(vec![vec![
        events[1].clone(),
        events[0].clone(),
        events[2].clone(),
    ]]);
    assert!(
        reordered.anomalies.iter().any(|a| a.contains("came after")),
        "{reordered}"
    );
    let mut phantom = events.clone();
    phantom.push(event(EventKind::Put, kv("k", "z", 5, 5, 1), None));
    let phantom = watched(vec![phantom]);
    assert!(
        phantom
            .anomalies
            .iter()
            .any(|a| a.contains("no request wrote")),
        "{phantom}"
    );
}

#[test]
fn a_wrong_prev_kv_or_a_stalled_watch_is_caught() {
    let mut events = good_events();
    events[1].prev_kv = None;
    let report = watched(vec![events]);
    assert!(
        report.anomalies.iter().any(|a| a.contains("prev_kv")),
        "{report}"
    );
    let stalled = watched(vec![good_events()[..2].to_vec()]);
    assert!(
        stalled.anomalies.iter().any(|a| a.contains("stopped")),
        "{stalled}"
    );
}

#[test]
fn a_complete_watch_settles_writes_without_an_answer() {
    let unknown_put = |client, call, value: &str| {
        op(
            client,
            call,
            Some(100),
            Input::Put {
                key: "k".into(),
                value: value.into(),
            },
            Output::Unknown {
                error: "connection refused".into(),
            },
        )
    };
    let history = |read: Operation| History {
        operations: vec![
            put(0, 0, 10, "k", "a", 2),
            unknown_put(1, 20, "x"),
            unknown_put(2, 30, "y"),
            read,
        ],
        watch: Some(WatchLog {
            start_revision: 2,
            batches: vec![WatchBatch {
                revision: 3,
                events: vec![
                    event(EventKind::Put, kv("k", "a", 2, 2, 1), None),
                    event(
                        EventKind::Put,
                        kv("k", "x", 3, 2, 2),
                        Some(kv("k", "a", 2, 2, 1)),
                    ),
                ],
            }],
            error: None,
        }),
    };
    // x happened at 3 (the watch says so), y did not.
    let report = check(&history(get(3, 200, 210, "k", Some(seen("x", 3, 2, 2)), 3)));
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.unknown_happened, report.unknown_did_not), (1, 1));
    // A read of y, which the watch never delivered, is explained by nothing.
    let report = check(&history(get(3, 200, 210, "k", Some(seen("y", 4, 2, 3)), 4)));
    assert!(!report.anomalies.is_empty(), "{report}");
}
