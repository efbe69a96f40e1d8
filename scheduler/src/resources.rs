//! Resource amounts as the scheduler counts them: CPU in millicores, everything else in whole
//! units (bytes, pods, devices), and what a pod asks for — its containers' requests summed,
//! or the largest init container's if that is more (restartable "sidecar" init containers
//! counted as running alongside), plus the pod's overhead.
//!
//! Scoring uses the *non-zero* requests: a container that names no CPU or memory request
//! counts as 100m CPU and 200 MiB, so that empty pods still spread out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub use rudder_facts::quantity::{milli_value, value};

/// Default CPU (millicores) of a container without a CPU request, for scoring.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Default memory (bytes) of a container without a memory request, for scoring.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of every resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// How many pods (only meaningful as a node's allocatable).
    pub pods: i64,
    /// Extended and hugepage resources, by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Reads a resource list (`requests`, `allocatable`, …).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Self {
        let mut resources = Self::default();
        for (name, quantity) in list {
            resources.set(name, quantity);
        }
        resources
    }

    fn set(&mut self, name: &str, quantity: &Quantity) {
        match name {
            "cpu" => self.milli_cpu = milli_value(&quantity.0),
            "memory" => self.memory = value(&quantity.0),
            "ephemeral-storage" => self.ephemeral_storage = value(&quantity.0),
            "pods" => self.pods = value(&quantity.0),
            other if is_scalar(other) => {
                self.scalar.insert(other.to_string(), value(&quantity.0));
            }
            _ => {}
        }
    }

    /// The amount of `name` (`cpu` in millicores).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.milli_cpu,
            "memory" => self.memory,
            "ephemeral-storage" => self.ephemeral_storage,
            "pods" => self.pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.pods += other.pods;
        for (name, amount) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() += amount;
        }
    }

    pub fn subtract(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.pods -= other.pods;
        for (name, amount) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() -= amount;
        }
    }

    /// Each resource the larger of the two.
    fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (name, amount) in &other.scalar {
            let mine = self.scalar.entry(name.clone()).or_default();
            *mine = (*mine).max(*amount);
        }
    }

    /// Whether nothing at all is asked for.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.values().all(|v| *v == 0)
    }
}

/// Extended resources (`example.com/gpu`), hugepages and attachable volumes: counted by name.
fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("attachable-volumes-") || name.contains('/')
}

/// A pod's requests; with `non_zero`, containers' missing CPU/memory requests count as the
/// scoring defaults.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for container in &spec.containers {
        total.add(&container_requests(container, non_zero));
    }
    let mut sidecars = Resources::default();
    let mut init_max = Resources::default();
    for container in spec.init_containers.as_deref().unwrap_or_default() {
        let requests = container_requests(container, non_zero);
        let running_with = if container.restart_policy.as_deref() == Some("Always") {
            total.add(&requests);
            sidecars.add(&requests);
            sidecars.clone()
        } else {
            let mut with_sidecars = requests;
            with_sidecars.add(&sidecars);
            with_sidecars
        };
        init_max.max_with(&running_with);
    }
    total.max_with(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resources::from_list(overhead));
    }
    total
}

fn container_requests(container: &Container, non_zero: bool) -> Resources {
    let resources = container.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    // A limit without a request is the request (the apiserver defaults it so; older objects
    // may not have been).
    let limits = resources.and_then(|r| r.limits.as_ref());
    let mut merged = limits.cloned().unwrap_or_default();
    if let Some(requests) = requests {
        merged.extend(requests.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut amount = Resources::from_list(&merged);
    if non_zero {
        if !merged.contains_key("cpu") {
            amount.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !merged.contains_key("memory") {
            amount.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    amount
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(requests: &[(&str, &str)]) -> Container {
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn requests_are_the_larger_of_containers_and_init_containers_plus_overhead() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container(&[("cpu", "100m")]), container(&[("cpu", "200m")])],
                init_containers: Some(vec![container(&[("cpu", "500m"), ("memory", "1Gi")])]),
                overhead: Some([("cpu".to_string(), Quantity("10m".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let requests = pod_requests(&pod, false);
        assert_eq!(requests.milli_cpu, 510);
        assert_eq!(requests.memory, 1024 * 1024 * 1024);
    }

    #[test]
    fn sidecars_run_alongside_the_containers_and_later_init_containers() {
        let mut sidecar = container(&[("cpu", "300m")]);
        sidecar.restart_policy = Some("Always".into());
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container(&[("cpu", "100m")])],
                init_containers: Some(vec![sidecar, container(&[("cpu", "500m")])]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Containers with the sidecar: 400m; the second init container with it: 800m.
        assert_eq!(pod_requests(&pod, false).milli_cpu, 800);
    }

    #[test]
    fn non_zero_requests_fill_in_the_scoring_defaults() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container(&[]), container(&[("cpu", "1")])],
                ..Default::default()
            }),
            ..Default::default()
        };
        let requests = pod_requests(&pod, true);
        assert_eq!(requests.milli_cpu, 1100);
        assert_eq!(requests.memory, 2 * DEFAULT_MEMORY_REQUEST);
        assert!(pod_requests(&pod, false).memory == 0);
    }
}
