//! Unit tests of the Job controller's pure parts: rule matching, per-index counting, success
//! policies and the uncounted-pods ledger, over hand-built pods and Jobs.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

mod census;
mod failure_policy;
mod indexes;
mod tracking;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, JobStatus, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::indexes::{FAILURE_COUNT, INDEX};
use super::tracking::FINALIZER;

/// A pod named `name` (uid the same) in `phase`, carrying the tracking finalizer.
fn pod(name: &str, phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(name.into()),
            finalizers: Some(vec![FINALIZER.into()]),
            creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        }),
    }
}

fn with_exit(mut pod: Pod, container: &str, code: i32) -> Pod {
    let status = pod.status.get_or_insert_with(Default::default);
    status
        .container_statuses
        .get_or_insert_with(Vec::new)
        .push(ContainerStatus {
            name: container.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        });
    pod
}

fn with_condition(mut pod: Pod, type_: &str, status: &str) -> Pod {
    let pod_status = pod.status.get_or_insert_with(Default::default);
    pod_status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..PodCondition::default()
        });
    pod
}

fn with_index(mut pod: Pod, index: i32, failures: i32) -> Pod {
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(INDEX.into(), index.to_string());
    annotations.insert(FAILURE_COUNT.into(), failures.to_string());
    pod
}

fn without_finalizer(mut pod: Pod) -> Pod {
    pod.metadata.finalizers = None;
    pod
}

fn deleted(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    pod
}

fn exit_rule(
    action: &str,
    container: Option<&str>,
    operator: &str,
    values: &[i32],
) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
            container_name: container.map(Into::into),
            operator: operator.into(),
            values: values.to_vec(),
        }),
        on_pod_conditions: None,
    }
}

fn condition_rule(action: &str, type_: &str, status: &str) -> PodFailurePolicyRule {
    PodFailurePolicyRule {
        action: action.into(),
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
            type_: type_.into(),
            status: status.into(),
        }]),
    }
}

fn policy(rules: Vec<PodFailurePolicyRule>) -> PodFailurePolicy {
    PodFailurePolicy { rules }
}

/// A Job `j` with `spec` and `status`.
fn job(spec: JobSpec, status: JobStatus) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("j".into()),
            namespace: Some("default".into()),
            uid: Some("job-uid".into()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: Some(status),
    }
}

fn indexed(completions: i32) -> JobSpec {
    JobSpec {
        completions: Some(completions),
        parallelism: Some(completions),
        completion_mode: Some("Indexed".into()),
        ..JobSpec::default()
    }
}

fn arcs(pods: Vec<Pod>) -> Vec<Arc<Pod>> {
    pods.into_iter().map(Arc::new).collect()
}
