//! Which pod goes first, and why — upstream's order and messages.
//!
//! Under pressure on a resource, pods whose usage exceeds their requests go before those
//! within them, then lower priority before higher, then the larger excess over requests
//! first. Critical pods (static pods, and priority at or above system-cluster-critical) are
//! never evicted. Apart from node pressure, a pod that outgrows its own local-storage
//! limits — an emptyDir's `sizeLimit`, a container's `ephemeral-storage` limit, or the sum
//! of its containers' limits — is evicted at once.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::thresholds::{Observation, Signal, Threshold};
use crate::stats::summary::PodStats;

/// Priorities from here up are critical (upstream's `SystemCriticalPriority`).
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Whether the kubelet must not evict `pod`.
pub fn is_critical(pod: &Pod) -> bool {
    let static_pod = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.source"))
        .is_some_and(|source| source != "api");
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    static_pod || priority >= CRITICAL_PRIORITY
}

fn quantity(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    resource: &str,
) -> Option<u64> {
    let q = map?.get(resource)?;
    u64::try_from(rudder_facts::quantity::value(&q.0)).ok()
}

fn request(container: &Container, resource: &str) -> u64 {
    quantity(
        container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()),
        resource,
    )
    .unwrap_or(0)
}

fn limit(container: &Container, resource: &str) -> Option<u64> {
    let resources = container.resources.as_ref()?;
    quantity(resources.limits.as_ref(), resource)
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

/// What `pod` requests of the resource under pressure (its regular containers' sum).
fn requested(pod: &Pod, signal: Signal) -> u64 {
    match signal.resource() {
        resource @ ("memory" | "ephemeral-storage") => {
            containers(pod).iter().map(|c| request(c, resource)).sum()
        }
        _ => 0,
    }
}

/// What `stats` show the pod using of the resource under pressure.
fn used(stats: Option<&PodStats>, signal: Signal) -> u64 {
    let Some(stats) = stats else { return 0 };
    match signal {
        Signal::MemoryAvailable => stats.memory_working_set(),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => stats.ephemeral_storage_used(),
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => stats
            .ephemeral_storage
            .as_ref()
            .and_then(|f| f.inodes_used)
            .unwrap_or(0),
        Signal::PidAvailable => stats
            .process_stats
            .as_ref()
            .and_then(|p| p.process_count)
            .unwrap_or(0),
    }
}

/// The pods that may be evicted for `signal`, first to go first.
pub fn rank(signal: Signal, pods: &[Arc<Pod>], stats: &HashMap<String, PodStats>) -> Vec<Arc<Pod>> {
    let mut candidates: Vec<(Arc<Pod>, bool, i32, Reverse<i128>)> = pods
        .iter()
        .filter(|p| !is_critical(p) && !rudder_facts::pods::is_terminal(p))
        .map(|pod| {
            let uid = pod.metadata.uid.as_deref().unwrap_or("");
            let usage = used(stats.get(uid), signal);
            let request = requested(pod, signal);
            let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            let excess = i128::from(usage) - i128::from(request);
            (pod.clone(), usage <= request, priority, Reverse(excess))
        })
        .collect();
    candidates.sort_by_key(|(_, within, priority, excess)| (*within, *priority, *excess));
    candidates.into_iter().map(|(pod, ..)| pod).collect()
}

/// A quantity for messages: whole Ki/Mi/Gi when exact, else bytes.
pub fn bytes(value: u64) -> String {
    for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if value >= size && value.is_multiple_of(size) {
            return format!("{}{unit}", value / size);
        }
    }
    if value >= 1 << 10 {
        return format!("{}Ki", value.div_ceil(1 << 10));
    }
    value.to_string()
}

fn amount(signal: Signal, value: u64) -> String {
    match signal.resource() {
        "memory" | "ephemeral-storage" => bytes(value),
        _ => value.to_string(),
    }
}

/// Why `pod` is evicted for `threshold`, in upstream's words.
pub fn pressure_message(
    threshold: &Threshold,
    seen: Observation,
    pod: &Pod,
    stats: Option<&PodStats>,
) -> String {
    let signal = threshold.signal;
    let mut message = format!(
        "The node was low on resource: {}. Threshold quantity: {}, available: {}. ",
        signal.resource(),
        amount(signal, threshold.limit(seen.capacity)),
        amount(signal, seen.available)
    );
    if signal == Signal::MemoryAvailable {
        for container in containers(pod) {
            let usage = stats
                .and_then(|s| s.containers.iter().find(|c| c.name == container.name))
                .and_then(|c| c.memory.as_ref())
                .and_then(|m| m.working_set_bytes);
            if let Some(usage) = usage {
                let request = request(container, "memory");
                if usage > request {
                    message.push_str(&format!(
                        "Container {} was using {}, request is {}, has larger consumption of memory. ",
                        container.name,
                        bytes(usage),
                        bytes(request)
                    ));
                }
            }
        }
    }
    message
}

/// Why `pod` has outgrown its own local-storage limits, if it has.
pub fn local_storage_violation(pod: &Pod, stats: &PodStats) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    for volume in spec.volumes.iter().flatten() {
        let Some(empty) = &volume.empty_dir else {
            continue;
        };
        if empty.medium.as_deref() == Some("Memory") {
            // tmpfs enforces its size itself.
            continue;
        }
        let Some(size_limit) = &empty.size_limit else {
            continue;
        };
        let limit = u64::try_from(rudder_facts::quantity::value(&size_limit.0)).unwrap_or(0);
        let used = stats
            .volume
            .iter()
            .find(|v| v.name == volume.name)
            .and_then(|v| v.fs.used_bytes)
            .unwrap_or(0);
        if used > limit {
            return Some(format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                volume.name, size_limit.0
            ));
        }
    }
    let mut total_limit = Some(0u64);
    for container in &spec.containers {
        let container_limit = limit(container, "ephemeral-storage");
        total_limit = total_limit.zip(container_limit).map(|(a, b)| a + b);
        let Some(container_limit) = container_limit else {
            continue;
        };
        let used: u64 = stats
            .containers
            .iter()
            .filter(|c| c.name == container.name)
            .flat_map(|c| [&c.rootfs, &c.logs])
            .flatten()
            .filter_map(|fs| fs.used_bytes)
            .sum();
        if used > container_limit {
            return Some(format!(
                "Container {} exceeded its local ephemeral storage limit \"{}\". ",
                container.name,
                bytes(container_limit)
            ));
        }
    }
    match total_limit {
        Some(total) if !spec.containers.is_empty() && stats.ephemeral_storage_used() > total => {
            Some(format!(
                "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                bytes(total)
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stats::summary::{ContainerStats, FsStats, MemoryStats, PodReference, VolumeStats};
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, ResourceRequirements, Volume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    /// A pod with one container `c` requesting `memory_request`.
    pub(crate) fn pod(uid: &str, priority: i32, memory_request: Option<&str>) -> Arc<Pod> {
        let resources = memory_request.map(|m| ResourceRequirements {
            requests: Some([("memory".to_string(), Quantity(m.into()))].into()),
            ..Default::default()
        });
        Arc::new(Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(uid.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority: Some(priority),
                containers: vec![Container {
                    name: "c".into(),
                    resources,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        })
    }

    fn using(uid: &str, memory: u64) -> (String, PodStats) {
        let memory = MemoryStats {
            working_set_bytes: Some(memory),
            ..Default::default()
        };
        (
            uid.to_owned(),
            PodStats {
                pod_ref: PodReference {
                    uid: uid.into(),
                    ..Default::default()
                },
                containers: vec![ContainerStats {
                    name: "c".into(),
                    memory: Some(memory.clone()),
                    ..Default::default()
                }],
                memory: Some(memory),
                ..Default::default()
            },
        )
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.uid.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn pods_over_their_requests_go_first_then_low_priority_then_the_largest_excess() {
        let pods = vec![
            pod("within", 0, Some("1Gi")),
            pod("over-small", 0, Some("10Mi")),
            pod("over-large", 0, None),
            pod("over-important", 1000, None),
            pod("critical", CRITICAL_PRIORITY, None),
        ];
        let stats: HashMap<String, PodStats> = [
            using("within", 100 << 20),
            using("over-small", 20 << 20),
            using("over-large", 500 << 20),
            using("over-important", 900 << 20),
            using("critical", 2 << 30),
        ]
        .into();
        assert_eq!(
            names(&rank(Signal::MemoryAvailable, &pods, &stats)),
            vec!["over-large", "over-small", "over-important", "within"]
        );
    }

    #[test]
    fn under_pid_pressure_lower_priority_goes_first_then_the_most_processes() {
        let pods = vec![
            pod("few", 0, None),
            pod("many", 0, None),
            pod("important", 1000, None),
        ];
        let processes = |uid: &str, count: u64| {
            let stats = PodStats {
                process_stats: Some(crate::stats::summary::ProcessStats {
                    process_count: Some(count),
                }),
                ..Default::default()
            };
            (uid.to_string(), stats)
        };
        let stats: HashMap<String, PodStats> = [
            processes("few", 5),
            processes("many", 50),
            processes("important", 500),
        ]
        .into();
        assert_eq!(
            names(&rank(Signal::PidAvailable, &pods, &stats)),
            vec!["many", "few", "important"]
        );
    }

    #[test]
    fn messages_say_what_ran_low_and_who_used_it() {
        let threshold = &super::super::thresholds::parse("memory.available<100Mi").unwrap()[0];
        let seen = Observation {
            available: 50 << 20,
            capacity: 1 << 30,
        };
        let p = pod("p", 0, Some("64Mi"));
        let (_, stats) = using("p", 200 << 20);
        assert_eq!(
            pressure_message(threshold, seen, &p, Some(&stats)),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Container c was using 200Mi, request is 64Mi, has larger consumption of memory. "
        );
    }

    #[test]
    fn outgrowing_an_empty_dir_or_a_storage_limit_is_a_violation() {
        let mut p = (*pod("p", 0, None)).clone();
        let spec = p.spec.as_mut().unwrap();
        spec.volumes = Some(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: None,
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        }]);
        spec.containers[0].resources = Some(ResourceRequirements {
            limits: Some([("ephemeral-storage".to_string(), Quantity("4Mi".into()))].into()),
            ..Default::default()
        });
        let fs = |used: u64| FsStats {
            used_bytes: Some(used),
            ..Default::default()
        };
        let mut stats = PodStats {
            containers: vec![ContainerStats {
                name: "c".into(),
                rootfs: Some(fs(1 << 20)),
                logs: Some(fs(1 << 10)),
                ..Default::default()
            }],
            volume: vec![VolumeStats {
                fs: fs(512 << 10),
                name: "scratch".into(),
            }],
            ephemeral_storage: Some(fs((1 << 20) + (513 << 10))),
            ..Default::default()
        };
        assert_eq!(local_storage_violation(&p, &stats), None);

        stats.volume[0].fs = fs(2 << 20);
        assert_eq!(
            local_storage_violation(&p, &stats).as_deref(),
            Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ")
        );

        stats.volume[0].fs = fs(0);
        stats.containers[0].rootfs = Some(fs(5 << 20));
        assert_eq!(
            local_storage_violation(&p, &stats).as_deref(),
            Some("Container c exceeded its local ephemeral storage limit \"4Mi\". ")
        );

        stats.containers[0].rootfs = Some(fs(1 << 20));
        stats.ephemeral_storage = Some(fs(6 << 20));
        assert_eq!(
            local_storage_violation(&p, &stats).as_deref(),
            Some("Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ")
        );
    }
}
