use serde_json::json;

use super::super::store::tests::{registry_with, write};
use super::super::store::Input;
use super::*;

fn pods() -> &'static ResourceInfo {
    catalog::find("", "v1", "pods").expect("pods")
}

fn budgets() -> &'static ResourceInfo {
    catalog::find("policy", "v1", "poddisruptionbudgets").expect("pdbs")
}

async fn registry() -> (Registry, tempfile::TempDir) {
    registry_with(rudder_admission::Chain::new()).await
}

fn input(object: Value) -> Input {
    Input {
        object,
        duplicate_fields: Vec::new(),
    }
}

/// Sets the status of an object through `/status`.
async fn set_status(registry: &Registry, info: &ResourceInfo, name: &str, status: Value) {
    registry
        .update_with(
            info,
            Some("d"),
            name,
            Some(Subresource::Status),
            &write(),
            |current| {
                let mut next = current.clone();
                next["status"] = status.clone();
                Ok(next)
            },
        )
        .await
        .expect("the status is written");
}

/// A pod labelled `app=web` in the phase given (Ready when Running and `ready`).
async fn pod(registry: &Registry, name: &str, phase: &str, ready: bool) {
    let pod = json!({"metadata": {"name": name, "namespace": "d", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    registry
        .create(pods(), Some("d"), input(pod), &write())
        .await
        .expect("the pod is created");
    let ready = if ready { "True" } else { "False" };
    let status = json!({"phase": phase, "conditions": [{"type": "Ready", "status": ready}]});
    set_status(registry, pods(), name, status).await;
}

/// A budget over `app=web` whose status (as the disruption controller wrote it) allows
/// `allowed` disruptions of 3 healthy pods.
async fn budget(registry: &Registry, name: &str, allowed: i64) {
    let budget = json!({"metadata": {"name": name, "namespace": "d"},
        "spec": {"minAvailable": 3 - allowed, "selector": {"matchLabels": {"app": "web"}}}});
    registry
        .create(budgets(), Some("d"), input(budget), &write())
        .await
        .expect("the budget is created");
    let status = json!({"observedGeneration": 1, "disruptionsAllowed": allowed,
        "currentHealthy": 3, "desiredHealthy": 3 - allowed, "expectedPods": 3});
    set_status(registry, budgets(), name, status).await;
}

async fn evict(registry: &Registry, name: &str, asked: Eviction) -> Result<()> {
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": name, "namespace": "d"}});
    registry
        .evict_pod(pods(), Some("d"), name, &eviction, asked, &write())
        .await
        .map(drop)
}

async fn exists(registry: &Registry, name: &str) -> bool {
    registry.get(pods(), Some("d"), name).await.is_ok()
}

async fn status_of(registry: &Registry, name: &str) -> Value {
    registry
        .get(budgets(), Some("d"), name)
        .await
        .expect("the budget")["status"]
        .clone()
}

#[tokio::test]
async fn an_allowing_budget_is_spent_before_the_pod_goes() {
    let (registry, _dir) = registry().await;
    pod(&registry, "web-1", "Running", true).await;
    budget(&registry, "web", 1).await;
    evict(&registry, "web-1", Eviction::default())
        .await
        .expect("evicted");
    assert!(!exists(&registry, "web-1").await);
    let status = status_of(&registry, "web").await;
    assert_eq!(status["disruptionsAllowed"], 0);
    assert!(status["disruptedPods"]["web-1"].is_string(), "{status}");
    assert_eq!(status["conditions"][0]["type"], "DisruptionAllowed");
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
}

#[tokio::test]
async fn a_spent_budget_refuses_with_429_and_its_cause() {
    let (registry, _dir) = registry().await;
    pod(&registry, "web-1", "Running", true).await;
    budget(&registry, "web", 0).await;
    let refused = evict(&registry, "web-1", Eviction::default())
        .await
        .expect_err("the budget forbids");
    assert_eq!(refused.code, 429);
    assert_eq!(
        refused.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let details = refused.details.expect("details");
    assert_eq!(details.causes[0].reason, "DisruptionBudget");
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web needs 3 healthy pods and has 3 currently"
    );
    assert_eq!(details.retry_after_seconds, None);
    assert!(exists(&registry, "web-1").await);
}

#[tokio::test]
async fn two_budgets_are_a_server_error_and_terminal_pods_need_none() {
    let (registry, _dir) = registry().await;
    pod(&registry, "web-1", "Running", true).await;
    pod(&registry, "done", "Succeeded", false).await;
    pod(&registry, "waiting", "Pending", false).await;
    budget(&registry, "a", 0).await;
    budget(&registry, "b", 1).await;
    let refused = evict(&registry, "web-1", Eviction::default())
        .await
        .expect_err("two budgets");
    assert_eq!(refused.code, 500);
    assert!(refused
        .message
        .contains("more than one PodDisruptionBudget"));
    for name in ["done", "waiting"] {
        evict(&registry, name, Eviction::default())
            .await
            .expect("no budget consulted");
        assert!(!exists(&registry, name).await, "{name}");
    }
}

#[tokio::test]
async fn a_dry_run_spends_and_deletes_nothing() {
    let (registry, _dir) = registry().await;
    pod(&registry, "web-1", "Running", true).await;
    budget(&registry, "web", 1).await;
    let asked = Eviction {
        dry_run: true,
        ..Eviction::default()
    };
    evict(&registry, "web-1", asked).await.expect("allowed");
    assert!(exists(&registry, "web-1").await);
    assert_eq!(status_of(&registry, "web").await["disruptionsAllowed"], 1);
}

#[tokio::test]
async fn unready_pods_of_a_healthy_budget_go_without_spending_it() {
    let (registry, _dir) = registry().await;
    pod(&registry, "sick", "Running", false).await;
    budget(&registry, "web", 1).await;
    evict(&registry, "sick", Eviction::default())
        .await
        .expect("evicted");
    assert!(!exists(&registry, "sick").await);
    assert_eq!(status_of(&registry, "web").await["disruptionsAllowed"], 1);
}

#[tokio::test]
async fn preconditions_and_names_are_checked() {
    let (registry, _dir) = registry().await;
    pod(&registry, "web-1", "Running", true).await;
    let asked = Eviction {
        options: DeleteOptions {
            preconditions: super::super::store::Preconditions {
                uid: Some("someone-else".into()),
                resource_version: None,
            },
            ..DeleteOptions::default()
        },
        dry_run: false,
    };
    let refused = evict(&registry, "web-1", asked)
        .await
        .expect_err("another uid");
    assert_eq!(refused.code, 409, "{refused:?}");
    let eviction = json!({"metadata": {"name": "other"}});
    let refused = registry
        .evict_pod(
            pods(),
            Some("d"),
            "web-1",
            &eviction,
            Eviction::default(),
            &write(),
        )
        .await
        .expect_err("names differ");
    assert_eq!(refused.code, 400);
    assert!(exists(&registry, "web-1").await);
}

#[test]
fn a_budget_not_yet_observed_asks_to_come_back() {
    let budget = json!({"metadata": {"name": "web", "generation": 2},
        "status": {"observedGeneration": 1, "disruptionsAllowed": 1}});
    let refused = spend(&budget, "p", false).expect_err("not observed");
    assert_eq!(refused.code, 429);
    let details = refused.details.expect("details");
    assert_eq!(details.retry_after_seconds, Some(10));
    assert_eq!(
        details.causes[0].message,
        "The disruption budget web is still being processed by the server."
    );
    let negative = json!({"metadata": {"name": "web"}, "status": {"disruptionsAllowed": -1}});
    assert_eq!(
        spend(&negative, "p", false).expect_err("negative").code,
        403
    );
}
