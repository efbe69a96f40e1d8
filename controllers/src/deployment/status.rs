//! A Deployment's status from its ReplicaSets, and its two conditions as upstream words them:
//! `Available` (enough pods available, given `maxUnavailable`) and `Progressing` (the rollout
//! moves, completed, is paused, or has not moved for `progressDeadlineSeconds`).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

/// Why the controller reports progress now (set by the step that made it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// This sync created the new ReplicaSet.
    Created(String),
    /// This sync found the new ReplicaSet for a template it had not seen.
    Found(String),
    /// Nothing particular: judge from the counts.
    Counts,
}

fn count(sets: &[Arc<ReplicaSet>], of: impl Fn(&ReplicaSet) -> i32) -> i32 {
    sets.iter().map(|set| of(set)).sum()
}

fn status_replicas(set: &ReplicaSet) -> i32 {
    set.status.as_ref().map_or(0, |status| status.replicas)
}

fn available(set: &ReplicaSet) -> i32 {
    set.status
        .as_ref()
        .and_then(|status| status.available_replicas)
        .unwrap_or(0)
}

fn ready(set: &ReplicaSet) -> i32 {
    set.status
        .as_ref()
        .and_then(|status| status.ready_replicas)
        .unwrap_or(0)
}

fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|condition| condition.type_ == type_)
}

/// Sets a condition, keeping its transition time when its status does not change.
fn set_condition(
    conditions: &mut Vec<DeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let existing = conditions.iter().position(|c| c.type_ == type_);
    let transition = existing
        .map(|index| &conditions[index])
        .filter(|current| current.status == status)
        .and_then(|current| current.last_transition_time.clone())
        .unwrap_or(Time(now));
    // Same status and reason: keep the update time too, so an unchanged rollout stays unchanged.
    let unchanged = existing
        .map(|index| &conditions[index])
        .is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason));
    let update = if unchanged {
        existing
            .and_then(|index| conditions[index].last_update_time.clone())
            .unwrap_or(Time(now))
    } else {
        Time(now)
    };
    let condition = DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(transition),
        last_update_time: Some(update),
    };
    match existing {
        Some(index) => conditions[index] = condition,
        None => conditions.push(condition),
    }
}

/// Whether every replica is updated and available and nothing old is left.
pub fn complete(deployment: &Deployment, status: &DeploymentStatus) -> bool {
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1);
    status.updated_replicas.unwrap_or(0) == replicas
        && status.replicas.unwrap_or(0) == replicas
        && status.available_replicas.unwrap_or(0) == replicas
        && status.observed_generation >= deployment.metadata.generation
}

/// The status this sync leaves. `unavailable` is the rollout's `maxUnavailable` (0 for
/// Recreate); `new` the new ReplicaSet, if there is one.
pub fn calculate(
    deployment: &Deployment,
    all: &[Arc<ReplicaSet>],
    new: Option<&ReplicaSet>,
    max_unavailable: i32,
    progress: Progress,
    now: Timestamp,
) -> DeploymentStatus {
    let spec = deployment.spec.as_ref();
    let replicas = spec.and_then(|spec| spec.replicas).unwrap_or(1);
    let previous = deployment.status.clone().unwrap_or_default();
    let total = count(all, status_replicas);
    let available_pods = count(all, available);
    let mut status = DeploymentStatus {
        observed_generation: deployment.metadata.generation,
        replicas: Some(total),
        updated_replicas: Some(new.map_or(0, status_replicas)),
        ready_replicas: Some(count(all, ready)),
        available_replicas: Some(available_pods),
        unavailable_replicas: Some((replicas - available_pods).max(0)),
        collision_count: previous.collision_count,
        conditions: previous.conditions.clone(),
        terminating_replicas: None,
    };
    let mut conditions = status.conditions.take().unwrap_or_default();
    if available_pods >= replicas - max_unavailable {
        set_condition(
            &mut conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
        );
    } else {
        set_condition(
            &mut conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        );
    }
    let paused = spec.and_then(|spec| spec.paused).unwrap_or(false);
    let new_name = new.map(|set| set.name_any()).unwrap_or_default();
    let deadline = spec.and_then(|spec| spec.progress_deadline_seconds);
    if paused {
        set_condition(
            &mut conditions,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            now,
        );
    } else if deadline.is_some() {
        let was_paused = condition(&previous, "Progressing")
            .is_some_and(|c| c.reason.as_deref() == Some("DeploymentPaused"));
        if complete(deployment, &status) {
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                format!("ReplicaSet \"{new_name}\" has successfully progressed."),
                now,
            );
        } else if let Progress::Created(name) = &progress {
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set \"{name}\""),
                now,
            );
        } else if let Progress::Found(name) = &progress {
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "FoundNewReplicaSet",
                format!("Found new replica set \"{name}\""),
                now,
            );
        } else if was_paused {
            set_condition(
                &mut conditions,
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed".into(),
                now,
            );
        } else if moved(&previous, &status) {
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{new_name}\" is progressing."),
                now,
            );
            // Progress restarts the deadline (upstream replaces the condition each time the
            // rollout moves), so a slow but steady rollout never times out.
            if let Some(progressing) = conditions.iter_mut().find(|c| c.type_ == "Progressing") {
                progressing.last_update_time = Some(Time(now));
            }
        } else if timed_out(&conditions, deadline, now) {
            set_condition(
                &mut conditions,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                now,
            );
        }
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    status
}

/// Whether the rollout moved since the last status (upstream's `DeploymentProgressing`).
fn moved(previous: &DeploymentStatus, now: &DeploymentStatus) -> bool {
    let old_replicas = previous.replicas.unwrap_or(0) - previous.updated_replicas.unwrap_or(0);
    let new_old_replicas = now.replicas.unwrap_or(0) - now.updated_replicas.unwrap_or(0);
    now.updated_replicas > previous.updated_replicas
        || new_old_replicas < old_replicas
        || now.ready_replicas > previous.ready_replicas
        || now.available_replicas > previous.available_replicas
}

/// Whether `Progressing` was last updated longer than the deadline ago.
pub fn timed_out(
    conditions: &[DeploymentCondition],
    deadline: Option<i32>,
    now: Timestamp,
) -> bool {
    let Some(deadline) = deadline else {
        return false;
    };
    let Some(progressing) = conditions.iter().find(|c| c.type_ == "Progressing") else {
        return false;
    };
    if progressing.reason.as_deref() == Some("NewReplicaSetAvailable") {
        return false;
    }
    let Some(updated) = progressing.last_update_time.as_ref() else {
        return false;
    };
    updated
        .0
        .checked_add(SignedDuration::from_secs(i64::from(deadline)))
        .is_ok_and(|limit| limit < now)
}

/// How long until a rollout that is not complete would pass its deadline, if it has one.
pub fn until_deadline(deployment: &Deployment, now: Timestamp) -> Option<std::time::Duration> {
    let deadline = deployment.spec.as_ref()?.progress_deadline_seconds?;
    let status = deployment.status.as_ref()?;
    if complete(deployment, status) {
        return None;
    }
    let progressing = condition(status, "Progressing")?;
    if progressing.reason.as_deref() == Some("ProgressDeadlineExceeded") {
        return None;
    }
    let updated = progressing.last_update_time.as_ref()?.0;
    let limit = updated
        .checked_add(SignedDuration::from_secs(i64::from(deadline)))
        .ok()?;
    let left = limit.duration_since(now);
    Some(
        std::time::Duration::try_from(left).unwrap_or_default() + std::time::Duration::from_secs(1),
    )
}
