//! Whether a Job ends, and how: failure policies, limits, failed indexes, success policies.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::batch::v1::{JobCondition, SuccessPolicy, SuccessPolicyRule};

use super::*;
use crate::job::census::take;

fn ending(job: &Job, pods: Vec<Pod>) -> Option<(bool, String, String)> {
    let census = take(job, &arcs(pods), &HashSet::new(), Timestamp::now());
    census.ending.map(|o| (o.success, o.reason, o.message))
}

fn reason(job: &Job, pods: Vec<Pod>) -> Option<String> {
    ending(job, pods).map(|(_, reason, _)| reason)
}

#[test]
fn a_fail_job_rule_fails_the_job_with_upstreams_message() {
    let spec = JobSpec {
        pod_failure_policy: Some(policy(vec![exit_rule(
            "FailJob",
            Some("main"),
            "In",
            &[42],
        )])),
        ..JobSpec::default()
    };
    let job = job(spec, JobStatus::default());
    assert_eq!(
        ending(&job, vec![with_exit(pod("p", "Failed"), "main", 42), pod("r", "Running")]),
        Some((
            false,
            "PodFailurePolicy".into(),
            "Container main for pod default/p failed with exit code 42 matching FailJob rule at index 0".into()
        ))
    );
    assert_eq!(
        ending(&job, vec![with_exit(pod("p", "Failed"), "main", 1)]),
        None
    );
}

#[test]
fn failures_count_towards_backoff_limit_unless_ignored() {
    let ignore = policy(vec![condition_rule("Ignore", "DisruptionTarget", "True")]);
    let spec = |limit| JobSpec {
        backoff_limit: Some(limit),
        pod_failure_policy: Some(ignore.clone()),
        ..JobSpec::default()
    };
    let disrupted = |name| with_condition(pod(name, "Failed"), "DisruptionTarget", "True");
    let counted = JobStatus {
        failed: Some(1),
        ..JobStatus::default()
    };
    // A case table: one tuple per case reads best.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Job, Vec<Pod>, Option<&str>, usize)> = vec![
        (
            "one failure within a limit of 1",
            job(spec(1), JobStatus::default()),
            vec![pod("a", "Failed")],
            None,
            1,
        ),
        (
            "a second failure passes it",
            job(spec(1), counted.clone()),
            vec![pod("b", "Failed")],
            Some("BackoffLimitExceeded"),
            2,
        ),
        (
            "ignored failures never do",
            job(spec(0), JobStatus::default()),
            vec![disrupted("a"), disrupted("b")],
            None,
            0,
        ),
        (
            "an uncounted failure counts for the decision",
            job(
                spec(1),
                JobStatus {
                    uncounted_terminated_pods: Some(UncountedTerminatedPods {
                        failed: Some(vec!["x".into()]),
                        succeeded: None,
                    }),
                    ..counted.clone()
                },
            ),
            vec![],
            Some("BackoffLimitExceeded"),
            2,
        ),
        (
            "a failure already counted is not counted again",
            job(spec(1), counted),
            vec![without_finalizer(pod("a", "Failed"))],
            None,
            1,
        ),
    ];
    for (name, job, pods, want, failed) in cases {
        let census = take(&job, &arcs(pods.clone()), &HashSet::new(), Timestamp::now());
        assert_eq!(census.failed, failed, "{name}");
        assert_eq!(reason(&job, pods).as_deref(), want, "{name}");
    }
}

use k8s_openapi::api::batch::v1::UncountedTerminatedPods;

fn per_index(completions: i32, limit: i32, max: Option<i32>) -> JobSpec {
    JobSpec {
        backoff_limit: Some(0),
        backoff_limit_per_index: Some(limit),
        max_failed_indexes: max,
        ..indexed(completions)
    }
}

#[test]
fn indexes_fail_past_their_own_limit() {
    // A case table: one tuple per case reads best.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, JobSpec, JobStatus, Vec<Pod>, Vec<i32>, Option<&str>)> =
        vec![
        (
            "a first failure within the limit leaves the index running (backoffLimit 0 is ignored)",
            per_index(3, 1, None),
            JobStatus::default(),
            vec![with_index(pod("a", "Failed"), 0, 0)],
            vec![],
            None,
        ),
        (
            "the second failure fails the index",
            per_index(3, 1, None),
            JobStatus::default(),
            vec![with_index(pod("b", "Failed"), 0, 1)],
            vec![0],
            None,
        ),
        (
            "more failed indexes than allowed fail the Job",
            per_index(3, 0, Some(1)),
            JobStatus::default(),
            vec![with_index(pod("a", "Failed"), 0, 0), with_index(pod("b", "Failed"), 1, 0)],
            vec![0, 1],
            Some("MaxFailedIndexesExceeded"),
        ),
        (
            "all indexes finished with some failed fail the Job",
            per_index(3, 0, None),
            JobStatus {
                completed_indexes: Some("0,2".into()),
                ..JobStatus::default()
            },
            vec![with_index(pod("b", "Failed"), 1, 0)],
            vec![1],
            Some("FailedIndexes"),
        ),
        (
            "failed indexes in status are kept",
            per_index(3, 0, None),
            JobStatus {
                failed_indexes: Some("2".into()),
                ..JobStatus::default()
            },
            vec![],
            vec![2],
            None,
        ),
        (
            "a FailIndex rule fails the index at once",
            JobSpec {
                pod_failure_policy: Some(policy(vec![exit_rule("FailIndex", None, "In", &[3])])),
                ..per_index(3, 5, None)
            },
            JobStatus::default(),
            vec![with_exit(with_index(pod("a", "Failed"), 1, 0), "main", 3)],
            vec![1],
            None,
        ),
    ];
    for (name, spec, status, pods, failed, want) in cases {
        let job = job(spec, status);
        let census = take(&job, &arcs(pods.clone()), &HashSet::new(), Timestamp::now());
        let failed: BTreeSet<i32> = failed.into_iter().collect();
        assert_eq!(census.failed_indexes, Some(failed), "{name}");
        assert_eq!(reason(&job, pods).as_deref(), want, "{name}");
    }
}

#[test]
fn a_success_policy_ends_an_indexed_job_early() {
    let spec = JobSpec {
        success_policy: Some(SuccessPolicy {
            rules: vec![SuccessPolicyRule {
                succeeded_indexes: Some("0".into()),
                succeeded_count: None,
            }],
        }),
        ..indexed(5)
    };
    let job = job(spec, JobStatus::default());
    assert_eq!(
        ending(
            &job,
            vec![
                with_index(pod("a", "Succeeded"), 0, 0),
                with_index(pod("b", "Running"), 1, 0)
            ]
        ),
        Some((
            true,
            "SuccessPolicy".into(),
            "Matched rules at index 0".into()
        ))
    );
    assert_eq!(
        ending(&job, vec![with_index(pod("b", "Succeeded"), 1, 0)]),
        None
    );
}

#[test]
fn an_ending_already_recorded_carries_on() {
    let condition = |type_: &str, reason: &str| JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some("m".into()),
        ..JobCondition::default()
    };
    let status = |c| JobStatus {
        conditions: Some(vec![c]),
        ..JobStatus::default()
    };
    let failing = job(
        JobSpec::default(),
        status(condition("FailureTarget", "PodFailurePolicy")),
    );
    assert_eq!(
        ending(&failing, vec![]),
        Some((false, "PodFailurePolicy".into(), "m".into()))
    );
    let succeeding = job(
        indexed(3),
        status(condition("SuccessCriteriaMet", "SuccessPolicy")),
    );
    assert_eq!(
        ending(&succeeding, vec![]),
        Some((true, "SuccessPolicy".into(), "m".into()))
    );
}

#[test]
fn indexed_successes_count_indexes_once() {
    let job = job(
        indexed(3),
        JobStatus {
            completed_indexes: Some("0".into()),
            succeeded: Some(1),
            ..JobStatus::default()
        },
    );
    let pods = vec![
        with_index(pod("a", "Succeeded"), 1, 0),
        with_index(pod("b", "Succeeded"), 1, 0),
        with_index(pod("c", "Running"), 2, 0),
    ];
    let census = take(&job, &arcs(pods), &HashSet::new(), Timestamp::now());
    assert_eq!(census.succeeded, 2);
    assert_eq!(census.active.len(), 1);
}

/// A running pod whose one container restarted `restarts` times.
fn restarted(name: &str, restarts: i32) -> Pod {
    let mut pod = pod(name, "Running");
    pod.status
        .get_or_insert_with(Default::default)
        .container_statuses = Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
        name: "main".into(),
        restart_count: restarts,
        ..Default::default()
    }]);
    pod
}

#[test]
fn on_failure_restarts_of_running_pods_count_towards_backoff_limit() {
    // restartPolicy OnFailure: failed containers restart in place and no pod fails, so the
    // kubelet's restart counts over the Job's running pods are what reach the limit (with a
    // limit of 0, one restart does); with Never they are not counted.
    let spec = |limit, restart_policy: &str| {
        let mut spec = JobSpec {
            backoff_limit: Some(limit),
            ..JobSpec::default()
        };
        spec.template.spec = Some(PodSpec {
            restart_policy: Some(restart_policy.into()),
            ..PodSpec::default()
        });
        spec
    };
    let on_failure = |limit| job(spec(limit, "OnFailure"), JobStatus::default());
    let exceeded = Some((
        false,
        "BackoffLimitExceeded".to_string(),
        "Job has reached the specified backoff limit".to_string(),
    ));
    assert_eq!(
        ending(&on_failure(3), vec![restarted("a", 1), restarted("b", 2)]),
        exceeded
    );
    assert_eq!(
        reason(&on_failure(3), vec![restarted("a", 1), restarted("b", 1)]),
        None
    );
    assert_eq!(reason(&on_failure(0), vec![restarted("a", 0)]), None);
    assert_eq!(
        reason(&on_failure(0), vec![restarted("a", 1)]).as_deref(),
        Some("BackoffLimitExceeded")
    );
    // Restarts of pods that already finished are not counted again.
    let mut done = restarted("a", 5);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert_eq!(reason(&on_failure(3), vec![done]), None);
    let never = job(spec(3, "Never"), JobStatus::default());
    assert_eq!(reason(&never, vec![restarted("a", 9)]), None);
}
