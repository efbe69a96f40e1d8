//! `podFailurePolicy` rules against failed pods.

use super::*;
use crate::job::failure_policy::{judge, Verdict};

fn fail_job(message: &str) -> Verdict {
    Verdict::FailJob {
        message: message.into(),
    }
}

#[test]
fn exit_code_rules_match_as_upstream() {
    let failed = |code| with_exit(pod("p", "Failed"), "main", code);
    let cases: Vec<(&str, PodFailurePolicyRule, Pod, Verdict)> = vec![
        (
            "In matches a listed code",
            exit_rule("FailJob", None, "In", &[42]),
            failed(42),
            fail_job("Container main for pod default/p failed with exit code 42 matching FailJob rule at index 0"),
        ),
        ("In does not match another code", exit_rule("FailJob", None, "In", &[42]), failed(1), Verdict::Count),
        ("NotIn matches a code not listed", exit_rule("Ignore", None, "NotIn", &[1, 2]), failed(3), Verdict::Ignore),
        ("NotIn does not match a listed code", exit_rule("Ignore", None, "NotIn", &[1, 2]), failed(2), Verdict::Count),
        ("exit code 0 never matches NotIn", exit_rule("Ignore", None, "NotIn", &[1]), failed(0), Verdict::Count),
        ("exit code 0 never matches In either", exit_rule("Ignore", None, "In", &[0]), failed(0), Verdict::Count),
        ("a named container must be the one", exit_rule("Ignore", Some("side"), "In", &[5]), failed(5), Verdict::Count),
        ("the named container matches", exit_rule("Ignore", Some("main"), "In", &[5]), failed(5), Verdict::Ignore),
        ("Count is the default handling", exit_rule("Count", None, "In", &[5]), failed(5), Verdict::Count),
        ("FailIndex fails the index", exit_rule("FailIndex", None, "In", &[5]), failed(5), Verdict::FailIndex),
        ("a running container has no exit code", exit_rule("FailJob", None, "NotIn", &[]), pod("p", "Failed"), Verdict::Count),
        ("an unknown operator never matches", exit_rule("FailJob", None, "Between", &[5]), failed(5), Verdict::Count),
    ];
    for (name, rule, pod, want) in cases {
        assert_eq!(judge(Some(&policy(vec![rule])), &pod), want, "{name}");
    }
}

#[test]
fn condition_rules_match_type_and_status() {
    let disrupted = with_condition(pod("p", "Failed"), "DisruptionTarget", "True");
    let cases: Vec<(&str, PodFailurePolicyRule, Verdict)> = vec![
        (
            "a matching condition",
            condition_rule("Ignore", "DisruptionTarget", "True"),
            Verdict::Ignore,
        ),
        (
            "the status must match",
            condition_rule("Ignore", "DisruptionTarget", "False"),
            Verdict::Count,
        ),
        (
            "the type must match",
            condition_rule("Ignore", "Ready", "True"),
            Verdict::Count,
        ),
        (
            "FailJob names the condition",
            condition_rule("FailJob", "DisruptionTarget", "True"),
            fail_job(
                "Pod default/p has condition DisruptionTarget matching FailJob rule at index 0",
            ),
        ),
    ];
    for (name, rule, want) in cases {
        assert_eq!(judge(Some(&policy(vec![rule])), &disrupted), want, "{name}");
    }
}

#[test]
fn the_first_matching_rule_wins_and_unknown_actions_are_skipped() {
    let pod = with_condition(
        with_exit(pod("p", "Failed"), "main", 3),
        "DisruptionTarget",
        "True",
    );
    let rules = vec![
        exit_rule("Explode", None, "In", &[3]),
        exit_rule("FailJob", None, "In", &[4]),
        condition_rule("Ignore", "DisruptionTarget", "True"),
        exit_rule("FailJob", None, "In", &[3]),
    ];
    assert_eq!(judge(Some(&policy(rules)), &pod), Verdict::Ignore);
    let later = vec![
        exit_rule("Count", None, "In", &[9]),
        exit_rule("FailJob", None, "In", &[3]),
    ];
    assert_eq!(
        judge(Some(&policy(later)), &pod),
        fail_job("Container main for pod default/p failed with exit code 3 matching FailJob rule at index 1")
    );
    assert_eq!(
        judge(None, &pod),
        Verdict::Count,
        "no policy: every failure counts"
    );
}

#[test]
fn init_containers_are_looked_at_after_app_containers() {
    let mut pod = pod("p", "Failed");
    pod.status.as_mut().unwrap().init_container_statuses =
        with_exit(super::pod("x", "Failed"), "init", 7)
            .status
            .unwrap()
            .container_statuses;
    let rule = exit_rule("FailJob", None, "In", &[7]);
    assert_eq!(
        judge(Some(&policy(vec![rule])), &pod),
        fail_job("Container init for pod default/p failed with exit code 7 matching FailJob rule at index 0")
    );
}
