//! Resource usage of the node and its pods — the kubelet's Summary API (`/stats/summary`),
//! the Prometheus `/metrics/resource` that metrics-server scrapes, and the observations the
//! eviction manager acts on.
//!
//! The node's numbers come from the kernel ([`machine`]); containers' CPU, memory and
//! writable layers from the runtime (CRI `ListContainerStats`); the image filesystem from CRI
//! `ImageFsInfo`; logs and disk-backed volumes are measured on disk. CPU rates (nano-cores)
//! are taken from the runtime when it gives them, else computed from the previous sample.

pub mod machine;
pub mod resource_metrics;
pub mod summary;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use crate::pods::spec::{log_directory, pod_uid, NodeSettings};
use crate::runtime::{api, labels, Runtime};
use summary::{
    ContainerStats, CpuStats, FsStats, MemoryStats, NodeStats, PodReference, PodStats, RlimitStats,
    RuntimeStats, Summary, VolumeStats,
};

/// Builds summaries for one node.
pub struct Collector {
    runtime: Arc<dyn Runtime>,
    node_name: String,
    /// The kubelet's data dir: its filesystem is nodefs, pods' volumes are under `pods/`.
    root: PathBuf,
    settings: NodeSettings,
    pods: crate::pods::Handle,
    /// The last CPU sample (time in ns, busy ns) of the node (key "") and of each container.
    cpu_samples: Mutex<HashMap<String, CpuSample>>,
}

fn rfc3339(nanos: i64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(nanos))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

fn now_nanos() -> i64 {
    i64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(i64::MAX)
}

fn value(v: &Option<api::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn fs_stats(time: &str, fs: &machine::Filesystem) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: Some(fs.available),
        capacity_bytes: Some(fs.capacity),
        used_bytes: Some(fs.used),
        inodes_free: Some(fs.inodes_free),
        inodes: Some(fs.inodes),
        inodes_used: Some(fs.inodes.saturating_sub(fs.inodes_free)),
    }
}

/// `used` bytes and `inodes` on a filesystem whose totals are `fs`.
fn usage_on(time: &str, fs: Option<&machine::Filesystem>, used: u64, inodes: u64) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: fs.map(|f| f.available),
        capacity_bytes: fs.map(|f| f.capacity),
        used_bytes: Some(used),
        inodes_free: fs.map(|f| f.inodes_free),
        inodes: fs.map(|f| f.inodes),
        inodes_used: Some(inodes),
    }
}

fn add(total: &mut Option<u64>, more: Option<u64>) {
    if let Some(more) = more {
        *total = Some(total.unwrap_or(0) + more);
    }
}

/// Whether a volume of `pod` named `name` takes node disk: an emptyDir not backed by memory,
/// or a volume the kubelet writes (configMap, secret, downwardAPI, projected).
fn on_node_disk(pod: Option<&Pod>, name: &str) -> bool {
    let Some(volume) = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == name))
    else {
        return false;
    };
    match &volume.empty_dir {
        Some(empty) => empty.medium.as_deref() != Some("Memory"),
        None => {
            volume.config_map.is_some()
                || volume.secret.is_some()
                || volume.downward_api.is_some()
                || volume.projected.is_some()
        }
    }
}

/// The shortest window a CPU rate is computed over (upstream's cAdvisor housekeeping is at
/// least a second too).
const MIN_RATE_WINDOW_NANOS: i64 = 1_000_000_000;

/// One CPU sample and the rate computed when it was taken.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    time: i64,
    busy: u64,
    rate: Option<u64>,
}

impl Collector {
    pub fn new(
        runtime: Arc<dyn Runtime>,
        node_name: &str,
        root: PathBuf,
        settings: NodeSettings,
        pods: crate::pods::Handle,
    ) -> Self {
        Self {
            runtime,
            node_name: node_name.to_owned(),
            root,
            settings,
            pods,
            cpu_samples: Mutex::new(HashMap::new()),
        }
    }

    /// Usage in nano-cores since the previous sample of `key`, which this one replaces —
    /// unless that sample is less than [`MIN_RATE_WINDOW_NANOS`] old: then the rate last
    /// computed stands, so that scrapes close together (the eviction manager's, a metrics
    /// reader's) do not shrink the window to nothing.
    fn rate(&self, key: &str, time: i64, busy: u64) -> Option<u64> {
        let mut samples = self
            .cpu_samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let fresh = CpuSample {
            time,
            busy,
            rate: None,
        };
        let Some(base) = samples.get_mut(key) else {
            samples.insert(key.to_owned(), fresh);
            return None;
        };
        let elapsed = time.checked_sub(base.time).unwrap_or(-1);
        if (0..MIN_RATE_WINDOW_NANOS).contains(&elapsed) {
            return base.rate;
        }
        let rate = match (u64::try_from(elapsed), busy.checked_sub(base.busy)) {
            (Ok(elapsed), Some(used)) if elapsed > 0 => {
                u64::try_from(u128::from(used) * 1_000_000_000 / u128::from(elapsed)).ok()
            }
            _ => None,
        };
        *base = CpuSample { rate, ..fresh };
        rate
    }

    /// Forgets the samples of containers that are gone.
    fn prune(&self, live: &[String]) {
        let mut samples = self
            .cpu_samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        samples.retain(|key, _| key.is_empty() || live.contains(key));
    }

    /// The image filesystem: where the runtime says its images are, measured with statvfs;
    /// without a mountpoint, the data dir's filesystem.
    async fn image_fs(&self) -> (Option<machine::Filesystem>, Option<u64>) {
        let info = self.runtime.image_fs_info().await.unwrap_or_default();
        let first = info.first();
        let used = first.and_then(|f| value(&f.used_bytes));
        let mountpoint = first
            .and_then(|f| f.fs_id.as_ref())
            .map(|id| PathBuf::from(&id.mountpoint))
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| self.root.clone());
        (machine::filesystem(&mountpoint), used)
    }

    /// The node's and its pods' usage now.
    pub async fn summary(&self) -> Summary {
        let now = now_nanos();
        let time = rfc3339(now);
        let nodefs = machine::filesystem(&self.root);
        let (imagefs, images_used) = self.image_fs().await;
        let node_cpu = machine::cpu_nanoseconds();
        let memory = machine::memory();
        let processes = machine::processes();
        let node = NodeStats {
            node_name: self.node_name.clone(),
            start_time: rfc3339(boot_time_nanos().unwrap_or(0)),
            cpu: node_cpu.map(|busy| CpuStats {
                time: time.clone(),
                usage_nano_cores: self.rate("", now, busy),
                usage_core_nano_seconds: Some(busy),
            }),
            memory: memory.map(|m| MemoryStats {
                time: time.clone(),
                available_bytes: Some(m.available),
                usage_bytes: Some(m.usage),
                working_set_bytes: Some(m.working_set),
                ..Default::default()
            }),
            fs: nodefs.as_ref().map(|fs| fs_stats(&time, fs)),
            runtime: Some(RuntimeStats {
                image_fs: imagefs.as_ref().map(|fs| {
                    let mut stats = fs_stats(&time, fs);
                    stats.used_bytes = images_used.or(stats.used_bytes);
                    stats
                }),
                container_fs: None,
            }),
            rlimit: processes.map(|p| RlimitStats {
                time: time.clone(),
                maxpid: Some(p.max),
                curproc: Some(p.current),
            }),
        };
        Summary {
            node,
            pods: self.pod_stats(now, &time, nodefs.as_ref()).await,
        }
    }

    async fn pod_stats(
        &self,
        now: i64,
        time: &str,
        nodefs: Option<&machine::Filesystem>,
    ) -> Vec<PodStats> {
        let stats = self
            .runtime
            .list_container_stats()
            .await
            .unwrap_or_default();
        let created: HashMap<String, i64> = self
            .runtime
            .list_containers(None)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.id, c.created_at))
            .collect();
        let known: HashMap<String, Arc<Pod>> = self
            .pods
            .pods()
            .into_iter()
            .map(|pod| (pod_uid(&pod).to_owned(), pod))
            .collect();
        let mut pods: HashMap<String, PodStats> = HashMap::new();
        let mut live = Vec::new();
        for stat in stats {
            let Some(attributes) = stat.attributes else {
                continue;
            };
            let label = |key: &str| attributes.labels.get(key).cloned().unwrap_or_default();
            let uid = label(labels::POD_UID);
            if uid.is_empty() {
                continue;
            }
            let name = attributes
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_else(|| label(labels::CONTAINER_NAME));
            live.push(attributes.id.clone());
            let cpu = stat.cpu.map(|cpu| {
                let busy = value(&cpu.usage_core_nano_seconds);
                let at = if cpu.timestamp > 0 {
                    cpu.timestamp
                } else {
                    now
                };
                let rate = value(&cpu.usage_nano_cores)
                    .filter(|r| *r > 0)
                    .or_else(|| busy.and_then(|b| self.rate(&attributes.id, at, b)));
                CpuStats {
                    time: time.to_owned(),
                    usage_nano_cores: rate,
                    usage_core_nano_seconds: busy,
                }
            });
            let memory = stat.memory.map(|m| MemoryStats {
                time: time.to_owned(),
                working_set_bytes: value(&m.working_set_bytes),
                usage_bytes: value(&m.usage_bytes),
                rss_bytes: value(&m.rss_bytes),
                available_bytes: value(&m.available_bytes),
                page_faults: value(&m.page_faults),
                major_page_faults: value(&m.major_page_faults),
            });
            let rootfs = stat.writable_layer.map(|w| {
                usage_on(
                    time,
                    nodefs,
                    value(&w.used_bytes).unwrap_or(0),
                    value(&w.inodes_used).unwrap_or(0),
                )
            });
            let pod = known.get(&uid);
            let logs = pod.map(|pod| {
                let dir = log_directory(&self.settings, pod).join(&name);
                let (bytes, inodes) = machine::directory_usage(&dir);
                usage_on(time, nodefs, bytes, inodes)
            });
            let entry = pods.entry(uid.clone()).or_insert_with(|| PodStats {
                pod_ref: PodReference {
                    name: label(labels::POD_NAME),
                    namespace: label(labels::POD_NAMESPACE),
                    uid: uid.clone(),
                },
                start_time: pod
                    .and_then(|p| p.status.as_ref())
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                ..Default::default()
            });
            entry.containers.push(ContainerStats {
                name,
                start_time: rfc3339(created.get(&attributes.id).copied().unwrap_or(now)),
                cpu,
                memory,
                rootfs,
                logs,
            });
        }
        self.prune(&live);
        let mut out: Vec<PodStats> = pods
            .into_values()
            .map(|mut stats| {
                let pod = known.get(&stats.pod_ref.uid).map(|p| p.as_ref());
                self.totals(&mut stats, pod, time, nodefs);
                stats
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        out
    }

    /// A pod's CPU and memory (its containers' sums), its volumes, and its ephemeral storage:
    /// writable layers, logs and disk-backed volumes.
    fn totals(
        &self,
        stats: &mut PodStats,
        pod: Option<&Pod>,
        time: &str,
        nodefs: Option<&machine::Filesystem>,
    ) {
        let mut cpu = CpuStats {
            time: time.to_owned(),
            ..Default::default()
        };
        let mut memory = MemoryStats {
            time: time.to_owned(),
            ..Default::default()
        };
        let (mut disk, mut inodes) = (0u64, 0u64);
        for container in &stats.containers {
            if let Some(c) = &container.cpu {
                add(&mut cpu.usage_nano_cores, c.usage_nano_cores);
                add(&mut cpu.usage_core_nano_seconds, c.usage_core_nano_seconds);
            }
            if let Some(m) = &container.memory {
                add(&mut memory.working_set_bytes, m.working_set_bytes);
                add(&mut memory.usage_bytes, m.usage_bytes);
                add(&mut memory.rss_bytes, m.rss_bytes);
            }
            for fs in [&container.rootfs, &container.logs].into_iter().flatten() {
                disk += fs.used_bytes.unwrap_or(0);
                inodes += fs.inodes_used.unwrap_or(0);
            }
        }
        let volumes = self
            .root
            .join("pods")
            .join(&stats.pod_ref.uid)
            .join("volumes");
        if let Ok(entries) = std::fs::read_dir(&volumes) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let (bytes, count) = machine::directory_usage(&entry.path());
                if on_node_disk(pod, &name) {
                    disk += bytes;
                    inodes += count;
                }
                stats.volume.push(VolumeStats {
                    fs: usage_on(time, nodefs, bytes, count),
                    name,
                });
            }
        }
        stats.volume.sort_by(|a, b| a.name.cmp(&b.name));
        stats.cpu = Some(cpu);
        stats.memory = Some(memory);
        stats.ephemeral_storage = Some(usage_on(time, nodefs, disk, inodes));
        stats.process_stats = pod
            .and_then(|pod| {
                crate::cgroups::process_count(&crate::pods::spec::cgroup_parent(
                    &self.settings,
                    pod,
                ))
            })
            .map(|count| summary::ProcessStats {
                process_count: Some(count),
            });
    }
}

/// When the machine booted (`btime` of `/proc/stat`).
fn boot_time_nanos() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let seconds: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    seconds.checked_mul(1_000_000_000)
}

#[cfg(test)]
pub(crate) mod tests;
