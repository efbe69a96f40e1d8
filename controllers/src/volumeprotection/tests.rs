//! The protection decisions, from upstream's documented behaviour.

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;

fn pod(phase: &str, volumes: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes},
        "status": {"phase": phase},
    }))
    .expect("a pod")
}

#[test]
fn a_pod_uses_its_claims_and_its_ephemeral_claims_until_it_finishes() {
    let volumes = json!([
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "tmp", "emptyDir": {}},
    ]);
    let running = pod("Running", volumes.clone());
    assert_eq!(claims_of(&running), ["data-claim", "web-scratch"]);
    assert!(uses(&running, "ns", "data-claim"));
    assert!(uses(&running, "ns", "web-scratch"));
    assert!(
        !uses(&running, "other", "data-claim"),
        "claims are namespaced"
    );
    assert!(!uses(&running, "ns", "tmp"));
    assert!(
        uses(&pod("Pending", volumes.clone()), "ns", "data-claim"),
        "a pod not yet running still holds its claim"
    );
    for finished in ["Succeeded", "Failed"] {
        assert!(
            !uses(&pod(finished, volumes.clone()), "ns", "data-claim"),
            "{finished}"
        );
    }
}

#[test]
fn the_finalizer_goes_on_and_comes_off_only_when_deleted_and_unused() {
    let none: Vec<String> = Vec::new();
    let on = vec![PVC_FINALIZER.to_owned(), "other/keep".to_owned()];
    assert_eq!(step(&none, PVC_FINALIZER, false, false), Step::Protect);
    assert_eq!(step(&none, PVC_FINALIZER, false, true), Step::Protect);
    assert_eq!(step(&on, PVC_FINALIZER, false, false), Step::Keep);
    assert_eq!(step(&on, PVC_FINALIZER, true, true), Step::Keep, "in use");
    assert_eq!(step(&on, PVC_FINALIZER, true, false), Step::Release);
    assert_eq!(
        step(&none, PVC_FINALIZER, true, false),
        Step::Keep,
        "a deleted object is not protected again"
    );
}

#[test]
fn a_volume_counts_as_in_use_while_bound() {
    let volume = |phase: &str| -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv"}, "status": {"phase": phase}}))
            .expect("a volume")
    };
    assert!(bound(&volume("Bound")));
    for phase in ["Available", "Released", "Failed", "Pending"] {
        assert!(!bound(&volume(phase)), "{phase}");
    }
}
