//! Unit tests of the rollout arithmetic, the template hash and the conditions.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::rolling::*;

fn set(name: &str, replicas: i32, available: i32) -> SetView {
    SetView {
        name: name.into(),
        replicas,
        available,
    }
}

#[test]
fn surge_rounds_up_and_unavailability_rounds_down_with_upstreams_defaults() {
    assert_eq!(surge_and_unavailable(None, None, 10), (3, 2));
    assert_eq!(surge_and_unavailable(None, None, 1), (1, 0));
    let zero = IntOrString::Int(0);
    assert_eq!(surge_and_unavailable(Some(&zero), Some(&zero), 3), (0, 1));
    let half = IntOrString::String("50%".into());
    assert_eq!(surge_and_unavailable(Some(&half), Some(&half), 5), (3, 2));
    assert_eq!(
        resolve(Some(&IntOrString::String("bad".into())), 25, 10, true),
        0
    );
}

#[test]
fn the_new_set_grows_only_as_far_as_the_surge_allows() {
    let old = set("old", 10, 10);
    let new = set("new", 0, 0);
    assert_eq!(
        new_set_replicas(10, 3, &[old.clone(), new.clone()], &new),
        3
    );
    let grown = set("new", 3, 0);
    assert_eq!(new_set_replicas(10, 3, &[old, grown.clone()], &grown), 3);
    let shrunk = set("old", 7, 7);
    assert_eq!(new_set_replicas(10, 3, &[shrunk, grown.clone()], &grown), 6);
}

#[test]
fn old_sets_shrink_within_the_unavailability_budget_unhealthy_first() {
    // 10 wanted, 2 may be unavailable; the new set's 3 pods are not available yet.
    let old = set("old", 10, 10);
    let new = set("new", 3, 0);
    let all = vec![old.clone(), new.clone()];
    assert_eq!(
        scale_down_old(10, 2, &all, &[old], Some(&new)),
        vec![("old".to_string(), 8)]
    );
    // Nothing may go while too few are available.
    let old = set("old", 8, 8);
    let all = vec![old.clone(), new.clone()];
    assert!(scale_down_old(10, 2, &all, &[old], Some(&new)).is_empty());
    // Unhealthy old pods go first, whatever the budget says about available ones.
    let sick = set("sick", 4, 0);
    let healthy = set("healthy", 8, 8);
    let new = set("new", 3, 3);
    let all = vec![sick.clone(), healthy.clone(), new.clone()];
    let plan = scale_down_old(10, 2, &all, &[sick, healthy], Some(&new));
    assert_eq!(plan[0], ("sick".to_string(), 0));
    // 11 available, 8 must stay: 3 more go.
    assert_eq!(plan[1], ("healthy".to_string(), 5));
}

#[test]
fn a_resize_mid_rollout_is_spread_in_proportion() {
    let sets = [set("a", 6, 6), set("b", 4, 0)];
    assert_eq!(proportional(20, &sets), vec![12, 8]);
    assert_eq!(proportional(5, &sets), vec![3, 2]);
    assert_eq!(proportional(11, &sets), vec![7, 4]);
}

#[test]
fn template_hashes_ignore_the_hash_label_and_change_with_collisions() {
    use super::replicasets::{same_template, template_hash, TEMPLATE_HASH};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some([("app".to_string(), "web".to_string())].into()),
            ..ObjectMeta::default()
        }),
        spec: None,
    };
    let hash = template_hash(&template, None);
    assert!(hash
        .chars()
        .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    let mut labelled = template.clone();
    if let Some(labels) = labelled.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.insert(TEMPLATE_HASH.into(), hash.clone());
    }
    assert!(same_template(&template, &labelled));
    assert_eq!(template_hash(&labelled, None), hash);
    assert_ne!(template_hash(&template, Some(1)), hash);
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.insert("version".into(), "2".into());
    }
    assert_ne!(template_hash(&template, None), hash);
}

mod progress {
    use std::sync::Arc;

    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::super::status::{calculate, timed_out, Progress};

    fn replica_set(ready: i32) -> Arc<ReplicaSet> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "web-new"},
                "status": {"replicas": 3, "readyReplicas": ready, "availableReplicas": ready}}))
            .expect("a replica set"),
        )
    }

    fn deployment(ready: i32, progressing_updated: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "d", "generation": 2},
            "spec": {"replicas": 3, "progressDeadlineSeconds": 600,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
            "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [{"type": "Progressing", "status": "True",
                    "reason": "ReplicaSetUpdated", "message": "ReplicaSet \"web-new\" is progressing.",
                    "lastUpdateTime": progressing_updated, "lastTransitionTime": progressing_updated}]}
        }))
        .expect("a deployment")
    }

    /// Upstream refreshes `Progressing`'s lastUpdateTime whenever the rollout moves, so a
    /// slow but steady rollout never passes its deadline; only standing still for
    /// `progressDeadlineSeconds` does.
    #[test]
    fn progress_restarts_the_deadline_and_standing_still_runs_it_out() {
        let now: Timestamp = "2026-12-03T12:20:00Z".parse().expect("a time");
        let twenty_minutes_ago = "2026-12-03T12:00:00Z";
        // One more pod became ready since the last status: the rollout moved just now.
        let moved = deployment(1, twenty_minutes_ago);
        let new = replica_set(2);
        let status = calculate(
            &moved,
            std::slice::from_ref(&new),
            Some(&new),
            0,
            Progress::Counts,
            now,
        );
        let conditions = status.conditions.expect("conditions");
        let progressing = conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .expect("Progressing");
        assert_eq!(progressing.reason.as_deref(), Some("ReplicaSetUpdated"));
        assert_eq!(
            progressing.last_update_time.as_ref().map(|t| t.0),
            Some(now),
            "progress refreshes the update time"
        );
        assert!(!timed_out(&conditions, Some(600), now));
        // Nothing moved for twenty minutes: past the ten-minute deadline.
        let still = deployment(2, twenty_minutes_ago);
        let status = calculate(
            &still,
            std::slice::from_ref(&new),
            Some(&new),
            0,
            Progress::Counts,
            now,
        );
        let progressing = status
            .conditions
            .expect("conditions")
            .into_iter()
            .find(|c| c.type_ == "Progressing")
            .expect("Progressing");
        assert_eq!(
            progressing.reason.as_deref(),
            Some("ProgressDeadlineExceeded")
        );
    }
}
