use std::time::Duration;

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Toleration, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::runtime::fake::FakeRuntime;
use crate::stats::tests::{run_on, settings};

/// A pod of priority 0 with one container `c` requesting `memory_request`.
fn pod(uid: &str, memory_request: Option<&str>) -> Pod {
    Pod::clone(&super::rank::tests::pod(uid, 0, memory_request))
}

struct Node {
    _root: tempfile::TempDir,
    runtime: Arc<FakeRuntime>,
    pods: crate::pods::Handle,
    manager: Manager,
    pressure: watch::Receiver<Pressure>,
}

fn node(hard: &str) -> Node {
    let root = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime::new("10.0.0", Duration::from_secs(3600)));
    let pods = crate::pods::Handle::default();
    let collector = Arc::new(Collector::new(
        runtime.clone(),
        "n1",
        root.path().to_path_buf(),
        settings(root.path()),
        pods.clone(),
    ));
    let (sender, pressure) = watch::channel(Pressure::default());
    let settings = Settings {
        hard: thresholds::parse(hard).unwrap(),
        ..Settings::default()
    };
    let manager = Manager::new(settings, collector, runtime.clone(), pods.clone(), sender);
    Node {
        _root: root,
        runtime,
        pods,
        manager,
        pressure,
    }
}

#[tokio::test]
async fn under_memory_pressure_the_pod_most_over_its_request_is_evicted_one_per_round() {
    // Any machine has less memory available than all of it: the threshold is always met.
    let mut node = node("memory.available<100%");
    for (uid, request, usage) in [
        ("modest", Some("1Gi"), 100u64 << 20),
        ("hog", None, 500 << 20),
        ("small", None, 10 << 20),
    ] {
        let p = pod(uid, request);
        run_on(&node.runtime, &p).await;
        node.runtime.set_usage(uid, "c", usage, 0);
        let _ = node.pods.track(p);
    }
    node.manager.round().await;
    assert!(node.pressure.borrow().memory);
    assert_eq!(node.pressure.borrow().names(), vec!["MemoryPressure"]);
    let message = node.pods.eviction_of("hog").expect("the hog is evicted");
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && message.ends_with(
                "Container c was using 500Mi, request is 0, has larger consumption of memory. "
            ),
        "{message}"
    );
    assert_eq!(
        node.pods.eviction("hog").unwrap().grace_seconds,
        0,
        "a hard threshold gives no grace"
    );
    assert_eq!(node.pods.eviction_of("small"), None);
    // While the hog goes, nobody else does.
    node.manager.round().await;
    assert_eq!(node.pods.eviction_of("small"), None);
    assert_eq!(node.pods.eviction_of("modest"), None);
}

#[tokio::test]
async fn a_pod_over_its_empty_dir_size_limit_is_evicted_without_node_pressure() {
    let mut node = node("");
    let mut p = pod("writer", None);
    p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(Quantity("64Ki".into())),
        }),
        ..Default::default()
    }]);
    run_on(&node.runtime, &p).await;
    let _ = node.pods.track(p);
    let scratch = node._root.path().join("pods/writer/volumes/scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("small"), vec![1u8; 16 << 10]).unwrap();
    node.manager.round().await;
    assert_eq!(node.pods.eviction_of("writer"), None);

    std::fs::write(scratch.join("big"), vec![1u8; 256 << 10]).unwrap();
    node.manager.round().await;
    assert_eq!(
        node.pods.eviction_of("writer").as_deref(),
        Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"64Ki\". ")
    );
    assert_eq!(*node.pressure.borrow(), Pressure::default());
}

#[tokio::test]
async fn pressure_stays_for_the_transition_period_after_the_signal_clears() {
    let mut node = node("memory.available<100%");
    node.manager.round().await;
    assert!(node.pressure.borrow().memory);
    // The signal clears (no thresholds met any more) but the condition holds...
    node.manager.settings.hard = Vec::new();
    node.manager.round().await;
    assert!(node.pressure.borrow().memory);
    // ...until the transition period has passed.
    node.manager.settings.transition_period = Duration::ZERO;
    node.manager.round().await;
    assert!(!node.pressure.borrow().memory);
}

#[tokio::test]
async fn a_soft_threshold_sets_the_condition_at_once_and_evicts_after_its_grace_period() {
    let mut node = node("");
    node.manager.settings.soft =
        thresholds::parse_soft("memory.available<100%", "memory.available=1h").unwrap();
    node.manager.settings.max_pod_grace_seconds = 20;
    let mut hog = pod("hog", None);
    hog.spec.as_mut().unwrap().termination_grace_period_seconds = Some(60);
    run_on(&node.runtime, &hog).await;
    node.runtime.set_usage("hog", "c", 500 << 20, 0);
    let _ = node.pods.track(hog.clone());

    node.manager.round().await;
    assert!(node.pressure.borrow().memory, "the condition comes at once");
    assert_eq!(
        node.pods.eviction_of("hog"),
        None,
        "not before the grace period"
    );
    node.manager.round().await;
    assert_eq!(node.pods.eviction_of("hog"), None);

    // The signal has now been over the threshold for longer than its grace period.
    node.manager.settings.soft[0].grace_period = Some(Duration::ZERO);
    node.manager.round().await;
    let eviction = node
        .pods
        .eviction("hog")
        .expect("evicted after the grace period");
    assert!(eviction
        .message
        .starts_with("The node was low on resource: memory."));
    assert_eq!(
        eviction.grace_seconds, 20,
        "the pod's 60 s, capped by the maximum"
    );

    let soft = &node.manager.settings.soft[0];
    node.manager.settings.max_pod_grace_seconds = 100;
    assert_eq!(node.manager.grace_for(&soft.clone(), &hog), 60);
    hog.spec.as_mut().unwrap().termination_grace_period_seconds = None;
    assert_eq!(
        node.manager.grace_for(&soft.clone(), &hog),
        30,
        "upstream's default"
    );
}

#[tokio::test]
async fn a_soft_threshold_that_clears_before_its_grace_period_evicts_nobody() {
    let mut node = node("");
    node.manager.settings.soft =
        thresholds::parse_soft("memory.available<100%", "memory.available=1h").unwrap();
    let hog = pod("hog", None);
    run_on(&node.runtime, &hog).await;
    let _ = node.pods.track(hog);
    node.manager.round().await;
    // The signal clears: the clock of the grace period starts again next time.
    let soft = std::mem::take(&mut node.manager.settings.soft);
    node.manager.round().await;
    assert!(node.manager.met_since.is_empty());
    node.manager.settings.soft = soft;
    node.manager.round().await;
    assert_eq!(node.pods.eviction_of("hog"), None);
}

#[test]
fn new_pods_are_refused_under_pressure_as_upstream_admits_them() {
    let best_effort = pod("be", None);
    let burstable = pod("bu", Some("64Mi"));
    let mut tolerant = best_effort.clone();
    tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some("node.kubernetes.io/memory-pressure".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    let mut critical = best_effort.clone();
    critical.spec.as_mut().unwrap().priority = Some(2_000_001_000);

    let none = Pressure::default();
    let memory = Pressure {
        memory: true,
        ..Default::default()
    };
    let disk = Pressure {
        disk: true,
        ..Default::default()
    };
    assert_eq!(admit(&best_effort, &none), None);
    assert_eq!(
        admit(&best_effort, &memory).as_deref(),
        Some("The node had condition: [MemoryPressure]. ")
    );
    assert_eq!(admit(&burstable, &memory), None);
    assert_eq!(admit(&tolerant, &memory), None);
    assert_eq!(
        admit(&burstable, &disk).as_deref(),
        Some("The node had condition: [DiskPressure]. ")
    );
    assert_eq!(admit(&critical, &disk), None);
}
