//! The uncounted-pods ledger: record, release, count — each end exactly once.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::batch::v1::UncountedTerminatedPods;

use super::*;
use crate::job::orphans::{owner, Owner};
use crate::job::tracking::{harvest, is_failed, Ending, Ledger, Removals};

fn ledger(succeeded: i32, failed: i32, us: &[&str], uf: &[&str]) -> Ledger {
    Ledger {
        succeeded,
        failed,
        uncounted_succeeded: us.iter().map(|s| s.to_string()).collect(),
        uncounted_failed: uf.iter().map(|s| s.to_string()).collect(),
    }
}

fn uids(pods: &[Arc<Pod>]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect()
}

#[test]
fn finished_pods_are_recorded_before_they_are_released() {
    let job = job(JobSpec::default(), JobStatus::default());
    let none: BTreeSet<String> = BTreeSet::new();
    let no_indexes: BTreeSet<i32> = BTreeSet::new();
    // (case, tracked pods, ledger before, ending, ledger after, released)
    // A case table: one tuple per case reads best.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Vec<Pod>, Ledger, Ending, Ledger, Vec<&str>)> = vec![
        (
            "a success and a failure are recorded and released",
            vec![
                pod("s", "Succeeded"),
                pod("f", "Failed"),
                pod("r", "Running"),
            ],
            ledger(0, 0, &[], &[]),
            Ending::No,
            ledger(0, 0, &["s"], &["f"]),
            vec!["s", "f"],
        ),
        (
            "an end already recorded is released, not recorded twice",
            vec![pod("s", "Succeeded")],
            ledger(2, 0, &["s"], &[]),
            Ending::No,
            ledger(2, 0, &["s"], &[]),
            vec!["s"],
        ),
        (
            "a pod deleted before it finished counts as failed",
            vec![deleted(pod("d", "Running"))],
            ledger(0, 0, &[], &[]),
            Ending::No,
            ledger(0, 0, &[], &["d"]),
            vec!["d"],
        ),
        (
            "when the Job fails, running pods count as failed",
            vec![pod("r", "Running")],
            ledger(0, 1, &[], &[]),
            Ending::Failure,
            ledger(0, 1, &[], &["r"]),
            vec!["r"],
        ),
        (
            "when the Job succeeds, running pods are let go uncounted",
            vec![pod("r", "Running")],
            ledger(3, 0, &[], &[]),
            Ending::Success,
            ledger(3, 0, &[], &[]),
            vec!["r"],
        ),
    ];
    for (name, pods, mut before, ending, after, released) in cases {
        let pods = arcs(pods);
        let harvest = harvest(
            &job,
            &pods,
            &mut before,
            ending,
            &none,
            &no_indexes,
            Timestamp::now(),
        );
        assert_eq!(before, after, "{name}");
        assert_eq!(uids(&harvest.release), released, "{name}");
    }
}

#[test]
fn ignored_failures_are_released_without_being_counted() {
    let spec = JobSpec {
        pod_failure_policy: Some(policy(vec![condition_rule(
            "Ignore",
            "DisruptionTarget",
            "True",
        )])),
        ..JobSpec::default()
    };
    let job = job(spec, JobStatus::default());
    let pods = arcs(vec![with_condition(
        pod("i", "Failed"),
        "DisruptionTarget",
        "True",
    )]);
    let mut book = ledger(0, 0, &[], &[]);
    let none: BTreeSet<String> = BTreeSet::new();
    let no_indexes: BTreeSet<i32> = BTreeSet::new();
    let harvest = harvest(
        &job,
        &pods,
        &mut book,
        Ending::No,
        &none,
        &no_indexes,
        Timestamp::now(),
    );
    assert_eq!(book, ledger(0, 0, &[], &[]));
    assert_eq!(uids(&harvest.release), ["i"]);
}

#[test]
fn indexed_successes_go_to_completed_indexes_and_held_pods_stay() {
    let job = job(indexed(4), JobStatus::default());
    let pods = arcs(vec![
        with_index(pod("a", "Succeeded"), 0, 0),
        with_index(pod("b", "Succeeded"), 1, 0),
        with_index(pod("c", "Failed"), 2, 0),
        with_index(pod("z", "Succeeded"), 9, 0),
    ]);
    let completed: BTreeSet<i32> = [1].into();
    let held: BTreeSet<String> = ["c".to_string()].into();
    let mut book = ledger(1, 0, &[], &[]);
    let harvest = harvest(
        &job,
        &pods,
        &mut book,
        Ending::No,
        &held,
        &completed,
        Timestamp::now(),
    );
    assert_eq!(
        harvest.new_indexes,
        [0].into(),
        "index 9 is out of range, 1 was known"
    );
    assert_eq!(
        book,
        ledger(1, 0, &[], &[]),
        "no uids for Indexed successes"
    );
    assert_eq!(
        uids(&harvest.release),
        ["a", "b", "z"],
        "c is held for its index"
    );
}

#[test]
fn uncounted_uids_are_counted_once_their_finalizer_is_gone() {
    let mut book = ledger(1, 1, &["s1", "s2"], &["f1"]);
    // s1 still carries the finalizer; s2 and f1 were released or deleted.
    let with: HashSet<String> = ["s1".to_string()].into();
    assert!(book.settle(&with));
    assert_eq!(book, ledger(2, 2, &["s1"], &[]));
    assert!(!book.settle(&with), "nothing left to move");
    assert!(book.settle(&HashSet::new()));
    assert_eq!(book, ledger(3, 2, &[], &[]));
}

#[test]
fn the_ledger_round_trips_through_status() {
    let book = ledger(3, 1, &["a"], &[]);
    let mut status = JobStatus::default();
    book.write(&mut status);
    assert_eq!(
        status.uncounted_terminated_pods,
        Some(UncountedTerminatedPods {
            succeeded: Some(vec!["a".into()]),
            failed: None
        })
    );
    assert_eq!(Ledger::from_status(&status), book);
}

#[test]
fn pending_removals_last_until_the_informer_shows_them() {
    let removals = Removals::default();
    removals.expect("ns/j", "a".into());
    removals.expect("ns/j", "b".into());
    removals.expect("ns/j", "c".into());
    removals.failed("ns/j", "c");
    let pods = arcs(vec![
        pod("a", "Succeeded"),
        without_finalizer(pod("b", "Succeeded")),
    ]);
    assert_eq!(removals.pending("ns/j", &pods), ["a".to_string()].into());
    assert!(removals.pending("ns/j", &[]).is_empty(), "a is gone");
    assert!(removals.pending("ns/other", &pods).is_empty());
}

#[test]
fn deleted_pods_fail_at_once_unless_only_failed_pods_are_replaced() {
    let plain = job(JobSpec::default(), JobStatus::default());
    let with_policy = job(
        JobSpec {
            pod_failure_policy: Some(policy(vec![])),
            ..JobSpec::default()
        },
        JobStatus::default(),
    );
    let now = Timestamp::now();
    let mut bound = deleted(pod("b", "Running"));
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    bound.metadata.deletion_timestamp =
        Some(Time(now + k8s_openapi::jiff::SignedDuration::from_secs(30)));
    let unbound = deleted(pod("u", "Pending"));
    assert!(is_failed(&plain, &bound, now));
    assert!(
        !is_failed(&with_policy, &bound, now),
        "the kubelet will say how it ended"
    );
    assert!(
        is_failed(&with_policy, &unbound, now),
        "nobody will ever run it"
    );
    assert!(!is_failed(&plain, &deleted(pod("s", "Succeeded")), now));
    assert!(is_failed(&with_policy, &pod("f", "Failed"), now));
}

#[test]
fn orphans_are_told_apart_by_their_controller() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let reference = |kind: &str, api_version: &str| OwnerReference {
        kind: kind.into(),
        api_version: api_version.into(),
        name: "o".into(),
        uid: "u".into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let mut p = pod("p", "Succeeded");
    assert_eq!(owner(&p), Owner::None);
    p.metadata.owner_references = Some(vec![reference("ReplicaSet", "apps/v1")]);
    assert_eq!(owner(&p), Owner::Other);
    p.metadata.owner_references = Some(vec![reference("Job", "batch/v1")]);
    assert_eq!(
        owner(&p),
        Owner::Job {
            name: "o".into(),
            uid: "u".into()
        }
    );
}

#[test]
fn a_sync_records_at_most_max_uncounted_ends() {
    use crate::job::tracking::MAX_UNCOUNTED;
    let job = job(JobSpec::default(), JobStatus::default());
    let pods = arcs(
        (0..MAX_UNCOUNTED + 3)
            .map(|i| pod(&format!("p{i}"), "Succeeded"))
            .collect(),
    );
    let mut book = ledger(0, 0, &[], &[]);
    let none = BTreeSet::new();
    let harvest = harvest(
        &job,
        &pods,
        &mut book,
        Ending::No,
        &none,
        &BTreeSet::new(),
        Timestamp::now(),
    );
    assert!(harvest.truncated);
    assert_eq!(harvest.release.len(), MAX_UNCOUNTED);
    assert_eq!(book.uncounted_succeeded.len(), MAX_UNCOUNTED);
}
