use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, PodSpec, Volume};

use super::*;
use crate::runtime::fake::FakeRuntime;

/// A pod `web` (uid `u-web`) with one container `c` and an emptyDir `scratch`.
fn web() -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u-web".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Runs `pod`'s container `c` on `runtime` with the labels the kubelet puts on it.
pub(crate) async fn run_on(runtime: &FakeRuntime, pod: &Pod) {
    let labels: std::collections::HashMap<String, String> = [
        (
            labels::POD_NAME,
            pod.metadata.name.clone().unwrap_or_default(),
        ),
        (
            labels::POD_NAMESPACE,
            pod.metadata.namespace.clone().unwrap_or_default(),
        ),
        (
            labels::POD_UID,
            pod.metadata.uid.clone().unwrap_or_default(),
        ),
        (labels::CONTAINER_NAME, "c".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let sandbox_config = api::PodSandboxConfig {
        labels: labels.clone(),
        ..Default::default()
    };
    let sandbox = runtime.run_pod_sandbox(&sandbox_config, "").await.unwrap();
    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "localhost/busybox:1.36".into(),
            ..Default::default()
        }),
        labels,
        ..Default::default()
    };
    let id = runtime
        .create_container(&sandbox, &config, &sandbox_config)
        .await
        .unwrap();
    runtime.start_container(&id).await.unwrap();
}

pub(crate) fn settings(root: &std::path::Path) -> NodeSettings {
    NodeSettings {
        log_root: root.join("logs"),
        cgroup_root: String::new(),
        cluster_dns: Vec::new(),
        cluster_domain: "cluster.local".into(),
        host_dns: Vec::new(),
    }
}

#[tokio::test]
async fn the_summary_has_the_node_and_each_pods_containers_volumes_and_storage() {
    let root = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime::new("10.0.0", Duration::from_secs(3600)));
    let pod = web();
    run_on(&runtime, &pod).await;
    runtime.set_usage("u-web", "c", 64 << 20, 1 << 20);
    let scratch = root.path().join("pods/u-web/volumes/scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("data"), vec![7u8; 100 << 10]).unwrap();
    let logs = root.path().join("logs/default_web_u-web/c");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("0.log"), vec![b'x'; 8 << 10]).unwrap();
    let pods = crate::pods::Handle::default();
    let _worker = pods.track(pod);
    let collector = Collector::new(
        runtime.clone(),
        "n1",
        root.path().to_path_buf(),
        settings(root.path()),
        pods,
    );

    let summary = collector.summary().await;
    assert_eq!(summary.node.node_name, "n1");
    let memory = summary.node.memory.as_ref().unwrap();
    assert!(memory.working_set_bytes.unwrap() > 0);
    let fs = summary.node.fs.as_ref().unwrap();
    assert!(fs.capacity_bytes.unwrap() >= fs.available_bytes.unwrap());
    assert!(summary.node.rlimit.as_ref().unwrap().maxpid.unwrap() > 0);

    assert_eq!(summary.pods.len(), 1);
    let stats = &summary.pods[0];
    assert_eq!(
        (
            stats.pod_ref.namespace.as_str(),
            stats.pod_ref.name.as_str()
        ),
        ("default", "web")
    );
    assert_eq!(stats.containers.len(), 1);
    let container = &stats.containers[0];
    assert_eq!(container.name, "c");
    assert_eq!(
        container.memory.as_ref().unwrap().working_set_bytes,
        Some(64 << 20)
    );
    assert_eq!(container.rootfs.as_ref().unwrap().used_bytes, Some(1 << 20));
    assert!(container.logs.as_ref().unwrap().used_bytes.unwrap() >= 8 << 10);
    assert_eq!(stats.memory_working_set(), 64 << 20);
    let volume = stats.volume.iter().find(|v| v.name == "scratch").unwrap();
    assert!(volume.fs.used_bytes.unwrap() >= 100 << 10);
    // Writable layer + logs + the emptyDir.
    assert!(
        stats.ephemeral_storage_used() >= (1 << 20) + (108 << 10),
        "{:?}",
        stats.ephemeral_storage
    );

    // The JSON has upstream's field names.
    let json = serde_json::to_value(&summary).unwrap();
    assert!(json["node"]["memory"]["workingSetBytes"].is_u64(), "{json}");
    assert_eq!(json["pods"][0]["podRef"]["name"], "web");
    assert!(json["pods"][0]["ephemeral-storage"]["usedBytes"].is_u64());
    assert!(json["pods"][0]["volume"][0]["usedBytes"].is_u64());
}

#[test]
fn cpu_rates_come_from_samples_at_least_a_second_apart() {
    let root = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime::new("10.0.0", Duration::from_secs(3600)));
    let collector = Collector::new(
        runtime,
        "n1",
        root.path().to_path_buf(),
        settings(root.path()),
        crate::pods::Handle::default(),
    );
    assert_eq!(collector.rate("c1", 1_000_000_000, 5_000_000_000), None);
    // Half a core over two seconds.
    assert_eq!(
        collector.rate("c1", 3_000_000_000, 6_000_000_000),
        Some(500_000_000)
    );
    // A sample less than a second later keeps the last rate and the window's start.
    assert_eq!(
        collector.rate("c1", 3_100_000_000, 9_000_000_000),
        Some(500_000_000)
    );
    assert_eq!(
        collector.rate("c1", 5_000_000_000, 8_000_000_000),
        Some(1_000_000_000),
        "one core over the two seconds since the last window began"
    );
    // A counter that went back (a restarted container) gives no rate.
    assert_eq!(collector.rate("c1", 4_000_000_000, 1), None);
}
