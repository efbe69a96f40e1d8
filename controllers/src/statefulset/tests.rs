//! Unit tests of the StatefulSet rolling update's arithmetic.

use k8s_openapi::api::apps::v1::RollingUpdateStatefulSetStrategy;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::rolling::{max_unavailable, next_to_replace, Member};

/// Members 0..n: `old` ordinals are of the old revision, `sick` ones unhealthy.
fn members<'a>(pods: &'a [Pod], old: &[i32], sick: &[i32]) -> Vec<Member<'a>> {
    (0..)
        .zip(pods)
        .map(|(ordinal, pod)| Member {
            ordinal,
            pod,
            healthy: !sick.contains(&ordinal),
            updated: !old.contains(&ordinal),
        })
        .collect()
}

#[test]
fn one_pod_at_a_time_by_default_from_the_highest_ordinal() {
    let pods = vec![Pod::default(); 4];
    let all_old = members(&pods, &[0, 1, 2, 3], &[]);
    assert_eq!(next_to_replace(&all_old, 0, 0, 1), vec![3]);
    // While one is unhealthy nothing more goes.
    let rolling = members(&pods, &[0, 1, 2], &[3]);
    assert_eq!(next_to_replace(&rolling, 0, 0, 1), Vec::<i32>::new());
    let next = members(&pods, &[0, 1, 2], &[]);
    assert_eq!(next_to_replace(&next, 0, 0, 1), vec![2]);
}

#[test]
fn max_unavailable_replaces_several_at_once_counting_the_unhealthy() {
    let pods = vec![Pod::default(); 5];
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1, 2, 3, 4], &[]), 0, 0, 2),
        vec![4, 3]
    );
    // One updated pod still starting uses one of the two.
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1, 2, 3], &[4]), 0, 0, 2),
        vec![3]
    );
    // An unhealthy old pod counts too, and is itself replaced first if highest.
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1, 2, 3, 4], &[4]), 0, 0, 3),
        vec![4, 3]
    );
}

#[test]
fn ordinals_without_a_pod_count_as_unavailable() {
    let pods = vec![Pod::default(); 2];
    // web-2 of three is missing: with maxUnavailable 2 one more may go.
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1], &[]), 1, 0, 2),
        vec![1]
    );
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1], &[]), 2, 0, 2),
        Vec::<i32>::new()
    );
}

#[test]
fn pods_below_the_partition_and_pods_being_deleted_stay() {
    let mut pods = vec![Pod::default(); 4];
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1, 2, 3], &[]), 0, 2, 4),
        vec![3, 2]
    );
    pods[3].metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert_eq!(
        next_to_replace(&members(&pods, &[0, 1, 2, 3], &[3]), 0, 0, 2),
        vec![2]
    );
}

#[test]
fn max_unavailable_resolves_against_replicas_rounding_down_to_at_least_one() {
    let with = |value: IntOrString| RollingUpdateStatefulSetStrategy {
        max_unavailable: Some(value),
        partition: None,
    };
    assert_eq!(max_unavailable(None, 10), 1);
    assert_eq!(max_unavailable(Some(&with(IntOrString::Int(3))), 10), 3);
    assert_eq!(
        max_unavailable(Some(&with(IntOrString::String("25%".into()))), 10),
        2
    );
    assert_eq!(
        max_unavailable(Some(&with(IntOrString::String("10%".into()))), 5),
        1
    );
}
