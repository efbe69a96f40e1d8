//! The agent's Node: registration (capacity and allocatable from the machine, addresses,
//! nodeInfo, the kubelet port), the conditions Ready / MemoryPressure / DiskPressure /
//! PIDPressure, written when they change and at least every 5 minutes, and the heartbeat Lease
//! in `kube-node-lease`, renewed every 10 seconds (upstream's timings). Once node IPAM gives
//! the Node its `spec.podCIDRs`, they are handed to the container runtime, whose pod network
//! is made from them ([`follow_pod_cidrs`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::eviction::Pressure;
use crate::runtime::Runtime;

/// Where the heartbeat Leases live.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How long a Lease holds (upstream's `nodeLeaseDurationSeconds`).
pub const LEASE_SECONDS: i32 = 40;
/// How often the Lease is renewed.
pub const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often an unchanged status is written again (`nodeStatusReportFrequency`).
pub const REPORT_EVERY: Duration = Duration::from_secs(300);
/// How often the conditions are looked at (`nodeStatusUpdateFrequency`).
pub const CHECK_EVERY: Duration = Duration::from_secs(10);
/// The kubelet version nodes report: the Kubernetes API level Rudder serves.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// What a Node is registered with.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub ip: IpAddr,
    pub hostname: String,
    pub kubelet_port: u16,
    pub labels: BTreeMap<String, String>,
    /// Set on the Node at registration (the local-path storage base).
    pub annotations: BTreeMap<String, String>,
    pub capacity: BTreeMap<String, Quantity>,
    pub system: NodeSystemInfo,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The machine's capacity: CPUs, memory, the data dir's filesystem, and `max_pods`.
pub fn machine_capacity(data_dir: &std::path::Path, max_pods: u32) -> BTreeMap<String, Quantity> {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let disks = sysinfo::Disks::new_with_refreshed_list();
    let storage = disks
        .list()
        .iter()
        .filter(|d| data_dir.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())
        .map(|d| d.total_space())
        .unwrap_or(0);
    [
        ("cpu".to_string(), Quantity(cpus.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Ki", system.total_memory() / 1024)),
        ),
        (
            "ephemeral-storage".to_string(),
            Quantity(format!("{}Ki", storage / 1024)),
        ),
        ("pods".to_string(), Quantity(max_pods.to_string())),
    ]
    .into_iter()
    .collect()
}

/// A hollow node's capacity (kubemark's defaults are of this size).
pub fn hollow_capacity(max_pods: u32) -> BTreeMap<String, Quantity> {
    [
        ("cpu".to_string(), Quantity("32".into())),
        ("memory".to_string(), Quantity("128Gi".into())),
        ("ephemeral-storage".to_string(), Quantity("1Ti".into())),
        ("pods".to_string(), Quantity(max_pods.to_string())),
    ]
    .into_iter()
    .collect()
}

/// The machine's nodeInfo.
pub fn system_info(runtime: &str) -> NodeSystemInfo {
    let os_image = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| "Linux".into());
    NodeSystemInfo {
        architecture: match std::env::consts::ARCH {
            "x86_64" => "amd64".into(),
            "aarch64" => "arm64".into(),
            other => other.into(),
        },
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
        container_runtime_version: runtime.to_owned(),
        kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
        kube_proxy_version: String::new(),
        kubelet_version: KUBELET_VERSION.into(),
        machine_id: read_trimmed("/etc/machine-id"),
        operating_system: "linux".into(),
        os_image,
        system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
        swap: None,
    }
}

fn condition(
    kind: &str,
    status_true: bool,
    reason: &str,
    message: &str,
    previous: Option<&NodeStatus>,
) -> NodeCondition {
    let status = if status_true { "True" } else { "False" };
    let now = Time(jiff::Timestamp::now());
    let old = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind));
    let since = match old {
        Some(old) if old.status == status => old.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    NodeCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(now),
        last_transition_time: since,
    }
}

fn status(
    identity: &Identity,
    ready: Result<(), String>,
    pressure: &Pressure,
    previous: Option<&NodeStatus>,
) -> NodeStatus {
    let (ready_ok, ready_reason, ready_message) = match &ready {
        Ok(()) => (
            true,
            "KubeletReady",
            "kubelet is posting ready status".to_owned(),
        ),
        Err(why) => (false, "KubeletNotReady", why.clone()),
    };
    NodeStatus {
        capacity: Some(identity.capacity.clone()),
        allocatable: Some(identity.capacity.clone()),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: identity.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: identity.hostname.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(identity.kubelet_port),
            }),
        }),
        node_info: Some(identity.system.clone()),
        conditions: Some(vec![
            if pressure.memory {
                condition(
                    "MemoryPressure",
                    true,
                    "KubeletHasInsufficientMemory",
                    "kubelet has insufficient memory available",
                    previous,
                )
            } else {
                condition(
                    "MemoryPressure",
                    false,
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                    previous,
                )
            },
            if pressure.disk {
                condition(
                    "DiskPressure",
                    true,
                    "KubeletHasDiskPressure",
                    "kubelet has disk pressure",
                    previous,
                )
            } else {
                condition(
                    "DiskPressure",
                    false,
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                    previous,
                )
            },
            if pressure.pid {
                condition(
                    "PIDPressure",
                    true,
                    "KubeletHasInsufficientPID",
                    "kubelet has insufficient PID available",
                    previous,
                )
            } else {
                condition(
                    "PIDPressure",
                    false,
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                    previous,
                )
            },
            condition("Ready", ready_ok, ready_reason, &ready_message, previous),
        ]),
        ..Default::default()
    }
}

/// The parts of a status that matter for "did it change" (not the heartbeat times).
fn essence(status: &NodeStatus) -> Vec<(String, String, Option<String>)> {
    status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone(), c.message.clone()))
        .collect()
}

async fn readiness(runtime: &dyn Runtime) -> Result<(), String> {
    match runtime.ready().await {
        Ok(true) => Ok(()),
        Ok(false) => Err("container runtime network not ready: NetworkReady=false".into()),
        Err(error) => Err(format!("container runtime is down: {error}")),
    }
}

/// Creates the Node (or takes over an existing one of the same name) with its first status.
pub async fn register(
    client: &kube::Client,
    identity: &Identity,
    runtime: &dyn Runtime,
) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = identity.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), identity.name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert(
        "kubernetes.io/arch".into(),
        identity.system.architecture.clone(),
    );
    labels.insert("beta.kubernetes.io/os".into(), "linux".into());
    labels.insert(
        "beta.kubernetes.io/arch".into(),
        identity.system.architecture.clone(),
    );
    let node = Node {
        metadata: ObjectMeta {
            name: Some(identity.name.clone()),
            labels: Some(labels.clone()),
            annotations: Some(identity.annotations.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let patch = Node {
                metadata: ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(identity.annotations.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            nodes
                .patch(
                    &identity.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        Err(error) => return Err(error),
    }
    let existing = nodes.get_status(&identity.name).await?;
    let first = status(
        identity,
        readiness(runtime).await,
        &Pressure::default(),
        existing.status.as_ref(),
    );
    let patch = Node {
        status: Some(first),
        ..Default::default()
    };
    nodes
        .patch_status(
            &identity.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Renews the Lease every 10 s and writes the status on change or every 5 min, until
/// `shutdown`. Errors are logged and retried on the next tick.
pub async fn heartbeat(
    client: kube::Client,
    identity: Arc<Identity>,
    runtime: Arc<dyn Runtime>,
    mut pressure: watch::Receiver<Pressure>,
    shutdown: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut last: Option<(NodeStatus, tokio::time::Instant)> = None;
    let mut lease: Option<Lease> = None;
    let mut pressure_open = true;
    let mut lease_tick = tokio::time::interval(RENEW_EVERY);
    let mut status_tick = tokio::time::interval(CHECK_EVERY);
    lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = lease_tick.tick() => {
                if let Err(error) = renew(&leases, &identity.name, &mut lease).await {
                    tracing::warn!(node = %identity.name, %error, "renewing the node's lease");
                }
            }
            changed = pressure.changed(), if pressure_open => {
                if changed.is_ok() {
                    // A pressure condition came or went: report it at once.
                    status_tick.reset_immediately();
                } else {
                    // No eviction manager (hollow nodes have none): the last word stands.
                    pressure_open = false;
                }
            }
            _ = status_tick.tick() => {
                let ready = readiness(runtime.as_ref()).await;
                let now_pressure = pressure.borrow().clone();
                let next = status(&identity, ready, &now_pressure, last.as_ref().map(|(s, _)| s));
                let mut due = match &last {
                    None => true,
                    Some((old, at)) => essence(old) != essence(&next) || at.elapsed() >= REPORT_EVERY,
                };
                // As upstream's kubelet, compared with what the server holds too: the node
                // lifecycle controller sets the conditions Unknown when heartbeats stop, and a
                // kubelet that comes back must say otherwise at once.
                if !due {
                    due = nodes.get(&identity.name).await.is_ok_and(|node| {
                        node.status.as_ref().map(essence) != Some(essence(&next))
                    });
                }
                if due {
                    let patch = Node { status: Some(next.clone()), ..Default::default() };
                    match nodes.patch_status(&identity.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Ok(_) => last = Some((next, tokio::time::Instant::now())),
                        Err(error) => tracing::warn!(node = %identity.name, %error, "updating the node's status"),
                    }
                }
            }
            () = shutdown.cancelled() => return,
        }
    }
}

/// The Node's pod ranges as CRI takes them: `spec.podCIDRs` (or the older `spec.podCIDR`)
/// comma-separated; `None` until node IPAM has given some.
pub fn pod_cidrs_of(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    let cidrs = match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(all), _) if !all.is_empty() => all.join(","),
        (_, Some(one)) if !one.is_empty() => one.clone(),
        _ => return None,
    };
    Some(cidrs)
}

/// Waits for the Node's `spec.podCIDRs` and hands them to the runtime, as upstream's kubelet
/// does with CRI `UpdateRuntimeConfig` (the ranges cannot change once given, so this ends
/// there). The Node is looked at every second for half a minute, then every 10 s, so a node
/// whose IPAM is slow or missing costs little.
pub async fn follow_pod_cidrs(
    client: kube::Client,
    name: String,
    runtime: Arc<dyn Runtime>,
    shutdown: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(client);
    for attempt in 0u32.. {
        let wait = if attempt < 30 {
            Duration::from_secs(1)
        } else {
            CHECK_EVERY
        };
        match nodes.get(&name).await.map(|node| pod_cidrs_of(&node)) {
            Ok(Some(cidrs)) => match runtime.update_pod_cidr(&cidrs).await {
                Ok(()) => {
                    tracing::info!(node = %name, %cidrs, "pod ranges handed to the container runtime");
                    return;
                }
                Err(error) => {
                    tracing::warn!(node = %name, %error, "handing the pod ranges to the runtime")
                }
            },
            Ok(None) if attempt == 30 => {
                tracing::warn!(node = %name, "the node has no spec.podCIDR yet: is node IPAM running?")
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(node = %name, %error, "reading the node's pod ranges"),
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Renews the Lease with one write: the last version written is kept, so a renewal is a
/// replace of it; a conflict or a missing Lease costs a read (or a create) once.
async fn renew(leases: &Api<Lease>, name: &str, held: &mut Option<Lease>) -> kube::Result<()> {
    let now = MicroTime(jiff::Timestamp::now());
    let spec = LeaseSpec {
        holder_identity: Some(name.to_owned()),
        lease_duration_seconds: Some(LEASE_SECONDS),
        renew_time: Some(now),
        ..Default::default()
    };
    let current = match held.take() {
        Some(lease) => Some(lease),
        None => leases.get_opt(name).await?,
    };
    let written = match current {
        Some(mut lease) => {
            lease.spec = Some(spec);
            leases.replace(name, &PostParams::default(), &lease).await?
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(LEASE_NAMESPACE.into()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            leases.create(&PostParams::default(), &lease).await?
        }
    };
    *held = Some(written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn node(pod_cidr: Option<&str>, pod_cidrs: Option<&[&str]>) -> Node {
        Node {
            spec: Some(NodeSpec {
                pod_cidr: pod_cidr.map(str::to_owned),
                pod_cidrs: pod_cidrs.map(|all| all.iter().map(|c| c.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_ranges_are_handed_over_as_cri_takes_them() {
        assert_eq!(pod_cidrs_of(&Node::default()), None);
        assert_eq!(pod_cidrs_of(&node(None, Some(&[]))), None);
        assert_eq!(
            pod_cidrs_of(&node(Some("10.42.1.0/24"), None)).as_deref(),
            Some("10.42.1.0/24")
        );
        assert_eq!(
            pod_cidrs_of(&node(
                Some("10.42.1.0/24"),
                Some(&["10.42.1.0/24", "fd42:0:0:1::/64"])
            ))
            .as_deref(),
            Some("10.42.1.0/24,fd42:0:0:1::/64")
        );
    }
}
