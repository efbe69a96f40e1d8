//! Index ranges, per-index failure counts and success policies.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{SuccessPolicy, SuccessPolicyRule};

use super::*;
use crate::job::indexes::{compress, held_back, next_failure_counts, parse};
use crate::job::reconcile::wanted;
use crate::job::success_policy::met;

#[test]
fn completed_indexes_are_written_as_ranges() {
    let set: BTreeSet<i32> = [0, 1, 2, 4, 6, 7].into();
    assert_eq!(compress(&set), "0-2,4,6-7");
    assert_eq!(compress(&BTreeSet::new()), "");
    assert_eq!(compress(&[5].into()), "5");
}

#[test]
fn ranges_are_read_back_within_completions() {
    let cases: Vec<(&str, i32, Vec<i32>)> = vec![
        ("0-2,4,6-7", 10, vec![0, 1, 2, 4, 6, 7]),
        ("", 10, vec![]),
        ("3-9", 5, vec![3, 4]),
        ("x,2,5-3,-1", 10, vec![2]),
    ];
    for (ranges, completions, want) in cases {
        let want: BTreeSet<i32> = want.into_iter().collect();
        assert_eq!(parse(ranges, completions), want, "{ranges:?}");
    }
}

#[test]
fn active_pods_are_bounded_by_parallelism_and_what_remains() {
    let none = BTreeSet::new();
    assert_eq!(wanted(2, Some(3), false, 0, &none, &none).0, 2);
    assert_eq!(wanted(2, Some(3), false, 2, &none, &none).0, 1);
    assert_eq!(wanted(2, Some(3), false, 3, &none, &none).0, 0);
    // A work queue (no completions): no new pods once one succeeded.
    assert_eq!(wanted(4, None, false, 0, &none, &none).0, 4);
    assert_eq!(wanted(4, None, false, 1, &none, &none).0, 0);
    // Indexed: the lowest indexes neither done (succeeded or failed) nor running are started.
    let done: BTreeSet<i32> = [0, 2].into();
    let running: BTreeSet<i32> = [1].into();
    let (count, missing) = wanted(2, Some(5), true, 2, &done, &running);
    assert_eq!((count, missing), (2, vec![3, 4]));
}

#[test]
fn a_replacement_starts_from_its_index_latest_failure_count() {
    let rules = policy(vec![condition_rule("Ignore", "DisruptionTarget", "True")]);
    let spec = JobSpec {
        pod_failure_policy: Some(rules),
        ..indexed(3)
    };
    let job = job(spec, JobStatus::default());
    let failed = arcs(vec![
        with_index(pod("a", "Failed"), 0, 0),
        with_index(pod("b", "Failed"), 0, 1),
        // An ignored failure does not add to the count.
        with_condition(
            with_index(pod("c", "Failed"), 1, 2),
            "DisruptionTarget",
            "True",
        ),
    ]);
    let counts = next_failure_counts(&job, &failed);
    assert_eq!(counts.get(&0), Some(&2));
    assert_eq!(counts.get(&1), Some(&2));
    assert_eq!(counts.get(&2), None);
}

#[test]
fn the_latest_failed_pod_of_an_index_waiting_for_its_replacement_is_held() {
    let failed = arcs(vec![
        with_index(pod("a", "Failed"), 0, 0),
        with_index(pod("b", "Failed"), 0, 1),
        with_index(pod("c", "Failed"), 1, 0),
        with_index(pod("d", "Failed"), 2, 0),
        with_index(pod("e", "Failed"), 3, 0),
    ]);
    let running: BTreeSet<i32> = [1].into();
    let succeeded: BTreeSet<i32> = [2].into();
    let failed_indexes: BTreeSet<i32> = [3].into();
    let held = held_back(&failed, &running, &succeeded, &failed_indexes);
    assert_eq!(held, ["b".to_string()].into());
}

fn rule(indexes: Option<&str>, count: Option<i32>) -> SuccessPolicyRule {
    SuccessPolicyRule {
        succeeded_indexes: indexes.map(Into::into),
        succeeded_count: count,
    }
}

#[test]
fn success_policies_match_as_upstream() {
    // A case table: one tuple per case reads best.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Vec<SuccessPolicyRule>, Vec<i32>, Option<&str>)> = vec![
        (
            "all named indexes succeeded",
            vec![rule(Some("0,2-3"), None)],
            vec![0, 2, 3],
            Some("Matched rules at index 0"),
        ),
        (
            "one named index missing",
            vec![rule(Some("0,2-3"), None)],
            vec![0, 2, 4],
            None,
        ),
        (
            "a count within the named indexes",
            vec![rule(Some("0-4"), Some(2))],
            vec![1, 4, 7],
            Some("Matched rules at index 0"),
        ),
        (
            "too few within the named indexes",
            vec![rule(Some("0-4"), Some(2))],
            vec![4, 7, 8],
            None,
        ),
        (
            "a count alone",
            vec![rule(None, Some(3))],
            vec![5, 6, 9],
            Some("Matched rules at index 0"),
        ),
        (
            "the second rule holds",
            vec![rule(None, Some(9)), rule(Some("1"), None)],
            vec![1],
            Some("Matched rules at index 1"),
        ),
        ("nothing succeeded", vec![rule(None, Some(0))], vec![], None),
        (
            "unreadable indexes never hold",
            vec![rule(Some("x"), None)],
            vec![0],
            None,
        ),
    ];
    for (name, rules, succeeded, want) in cases {
        let succeeded: BTreeSet<i32> = succeeded.into_iter().collect();
        let policy = SuccessPolicy { rules };
        assert_eq!(
            met(Some(&policy), 10, &succeeded).as_deref(),
            want,
            "{name}"
        );
    }
    assert_eq!(met(None, 10, &[1].into()), None);
}
