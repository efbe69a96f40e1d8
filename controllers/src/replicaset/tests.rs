//! Unit tests of the ReplicaSet controller's pure parts: status counts and deletion order.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::order_for_deletion;
use super::reconcile::{is_available, status_of};

fn labels(pairs: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn pod(name: &str, node: Option<&str>, phase: &str, ready_since: Option<Timestamp>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: labels(&[("app", "web")]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(str::to_string),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: ready_since.map(|since| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(since)),
                    ..PodCondition::default()
                }]
            }),
            ..PodStatus::default()
        }),
    })
}

fn set(generation: i64) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web".into()),
            generation: Some(generation),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(3),
            selector: LabelSelector {
                match_labels: labels(&[("app", "web")]),
                ..LabelSelector::default()
            },
            template: Some(PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: labels(&[("app", "web"), ("tier", "front")]),
                    ..ObjectMeta::default()
                }),
                spec: None,
            }),
            min_ready_seconds: None,
        }),
        status: None,
    }
}

#[test]
fn pods_count_as_available_only_after_min_ready_seconds() {
    let now = Timestamp::now();
    let recently = now - SignedDuration::from_secs(5);
    let ready = pod("a", Some("n1"), "Running", Some(recently));
    assert!(is_available(&ready, Duration::ZERO, now));
    assert!(!is_available(&ready, Duration::from_secs(10), now));
    assert!(is_available(&ready, Duration::from_secs(5), now));
    let pending = pod("b", None, "Pending", None);
    assert!(!is_available(&pending, Duration::ZERO, now));
}

#[test]
fn status_counts_ready_available_and_fully_labeled_pods_and_a_create_failure() {
    let now = Timestamp::now();
    let old = now - SignedDuration::from_secs(60);
    let active = vec![
        pod("a", Some("n1"), "Running", Some(old)),
        pod("b", Some("n1"), "Running", Some(now)),
        pod("c", None, "Pending", None),
    ];
    let status = status_of(
        &set(4),
        &active,
        Duration::from_secs(30),
        now,
        Some("quota".into()),
    );
    assert_eq!(status.replicas, 3);
    assert_eq!(status.ready_replicas, Some(2));
    assert_eq!(status.available_replicas, Some(1));
    assert_eq!(
        status.fully_labeled_replicas, None,
        "no pod has the tier label"
    );
    assert_eq!(status.observed_generation, Some(4));
    let conditions = status.conditions.unwrap();
    assert_eq!(conditions[0].type_, "ReplicaFailure");
    assert_eq!(conditions[0].reason.as_deref(), Some("FailedCreate"));
    let healthy = status_of(&set(4), &[], Duration::ZERO, now, None);
    assert_eq!(healthy.conditions, None);
    assert_eq!(healthy.ready_replicas, None);
}

#[test]
fn scale_down_deletes_unscheduled_then_pending_then_not_ready_then_newest_ready() {
    let now = Timestamp::now();
    let mut pods = vec![
        pod(
            "ready-long",
            Some("n1"),
            "Running",
            Some(now - SignedDuration::from_secs(600)),
        ),
        pod(
            "ready-recent",
            Some("n2"),
            "Running",
            Some(now - SignedDuration::from_secs(10)),
        ),
        pod("pending-on-node", Some("n2"), "Pending", None),
        pod("unscheduled", None, "Pending", None),
        pod("running-not-ready", Some("n3"), "Running", None),
    ];
    order_for_deletion(&mut pods);
    let order: Vec<_> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        order,
        vec![
            "unscheduled",
            "pending-on-node",
            "running-not-ready",
            "ready-recent",
            "ready-long"
        ]
    );
}
