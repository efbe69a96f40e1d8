//! From a Pod to what the runtime is asked for: the sandbox config (names, hostname, DNS,
//! host ports, namespaces, the pod's cgroup parent) and each container's config (image,
//! command and args with `$(VAR)` expansion, env, mounts, log path, resources).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use rudder_facts::pods::QosClass;
use rudder_facts::quantity::{milli_value, value};

use crate::runtime::{api, labels};

/// Where and how a node runs pods: the values every pod's configs share.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The directory under which each pod's log directory lives (upstream `/var/log/pods`).
    pub log_root: std::path::PathBuf,
    /// The cgroupfs parent under which pod cgroups go (`/rudder-kubepods`); empty leaves the
    /// choice to the runtime.
    pub cgroup_root: String,
    /// The cluster DNS servers (`--cluster-dns`); empty uses the node's own resolvers.
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// The node's own resolvers (from its /etc/resolv.conf).
    pub host_dns: Vec<String>,
}

pub fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// `<namespace>_<name>_<uid>`, the directory of a pod's logs (upstream's layout).
pub fn log_directory(settings: &NodeSettings, pod: &Pod) -> std::path::PathBuf {
    settings.log_root.join(format!(
        "{}_{}_{}",
        pod_namespace(pod),
        pod_name(pod),
        pod_uid(pod)
    ))
}

/// The pod's cgroup parent: `<root>/pod<uid>` for Guaranteed pods, `<root>/<qos>/pod<uid>`
/// otherwise (upstream's cgroupfs layout).
pub fn cgroup_parent(settings: &NodeSettings, pod: &Pod) -> String {
    if settings.cgroup_root.is_empty() {
        return String::new();
    }
    let uid = pod_uid(pod).replace('-', "_");
    match rudder_facts::pods::qos_class(pod) {
        QosClass::Guaranteed => format!("{}/pod{uid}", settings.cgroup_root),
        QosClass::Burstable => format!("{}/burstable/pod{uid}", settings.cgroup_root),
        QosClass::BestEffort => format!("{}/besteffort/pod{uid}", settings.cgroup_root),
    }
}

fn namespaces(pod: &Pod) -> api::NamespaceOption {
    let spec = pod.spec.as_ref();
    let flag = |get: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(get).unwrap_or(false)
    };
    let node_or = |on_node: bool, otherwise: api::NamespaceMode| {
        if on_node {
            api::NamespaceMode::Node as i32
        } else {
            otherwise as i32
        }
    };
    api::NamespaceOption {
        network: node_or(flag(|s| s.host_network), api::NamespaceMode::Pod),
        pid: if flag(|s| s.host_pid) {
            api::NamespaceMode::Node as i32
        } else if flag(|s| s.share_process_namespace) {
            api::NamespaceMode::Pod as i32
        } else {
            api::NamespaceMode::Container as i32
        },
        ipc: node_or(flag(|s| s.host_ipc), api::NamespaceMode::Pod),
        ..Default::default()
    }
}

fn dns_config(settings: &NodeSettings, pod: &Pod) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let cluster_first = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network(pod),
        _ => false,
    };
    let mut config = if policy == "None" {
        api::DnsConfig::default()
    } else if cluster_first && !settings.cluster_dns.is_empty() {
        let domain = &settings.cluster_domain;
        api::DnsConfig {
            servers: settings.cluster_dns.clone(),
            searches: vec![
                format!("{}.svc.{domain}", pod_namespace(pod)),
                format!("svc.{domain}"),
                domain.clone(),
            ],
            options: vec!["ndots:5".into()],
        }
    } else {
        api::DnsConfig {
            servers: settings.host_dns.clone(),
            ..Default::default()
        }
    };
    if let Some(custom) = spec.and_then(|s| s.dns_config.as_ref()) {
        config
            .servers
            .extend(custom.nameservers.iter().flatten().cloned());
        config
            .searches
            .extend(custom.searches.iter().flatten().cloned());
        for option in custom.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            config
                .options
                .retain(|o| o.split(':').next() != Some(name.as_str()));
            config.options.push(match &option.value {
                Some(value) => format!("{name}:{value}"),
                None => name,
            });
        }
    }
    config
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(labels::POD_NAME.into(), pod_name(pod).into());
    out.insert(labels::POD_NAMESPACE.into(), pod_namespace(pod).into());
    out.insert(labels::POD_UID.into(), pod_uid(pod).into());
    out
}

/// The sandbox for `pod`, its `attempt`-th.
pub fn sandbox_config(settings: &NodeSettings, pod: &Pod, attempt: u32) -> api::PodSandboxConfig {
    let spec = pod.spec.as_ref();
    let hostname = if host_network(pod) {
        String::new()
    } else {
        let name = spec
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| pod_name(pod).to_owned());
        name.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches(['-', '.'])
            .to_owned()
    };
    let mut port_mappings = Vec::new();
    for container in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        for port in container.ports.iter().flatten() {
            let Some(host_port) = port.host_port.filter(|p| *p > 0) else {
                continue;
            };
            let protocol = match port.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp,
                Some("SCTP") => api::Protocol::Sctp,
                _ => api::Protocol::Tcp,
            };
            port_mappings.push(api::PortMapping {
                protocol: protocol as i32,
                container_port: port.container_port,
                host_port,
                host_ip: port.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let sysctls = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .map(|sysctls| {
            sysctls
                .iter()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod_name(pod).into(),
            uid: pod_uid(pod).into(),
            namespace: pod_namespace(pod).into(),
            attempt,
        }),
        hostname,
        log_directory: log_directory(settings, pod).display().to_string(),
        dns_config: Some(dns_config(settings, pod)),
        port_mappings,
        labels: pod_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(settings, pod),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(pod)),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Expands `$(NAME)` from `env` as upstream does: `$$` escapes, unknown names stay verbatim.
pub fn expand(text: &str, env: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match env.get(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Container resources in CRI terms: CPU shares from the request (min 2), a CFS quota from
/// the limit over a 100 ms period, the memory limit, and upstream's OOM score adjustment.
fn resources(pod: &Pod, container: &Container) -> api::LinuxContainerResources {
    let requirements = container.resources.as_ref();
    let request = |name: &str| {
        requirements
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(name))
    };
    let limit = |name: &str| {
        requirements
            .and_then(|r| r.limits.as_ref())
            .and_then(|r| r.get(name))
    };
    let milli_request = request("cpu").or(limit("cpu")).map(|q| milli_value(&q.0));
    let cpu_shares = milli_request.map(|m| (m * 1024 / 1000).max(2)).unwrap_or(2);
    let period = 100_000;
    let cpu_quota = limit("cpu")
        .map(|q| (milli_value(&q.0) * period / 1000).max(1000))
        .unwrap_or(0);
    let memory = limit("memory").map(|q| value(&q.0)).unwrap_or(0);
    let oom_score_adj = match rudder_facts::pods::qos_class(pod) {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            // 1000 - 1000 * request / capacity, clamped to [2, 999]; without the node's
            // capacity at hand the middle of the range stands in.
            500
        }
    };
    api::LinuxContainerResources {
        cpu_period: if cpu_quota > 0 { period } else { 0 },
        cpu_quota,
        cpu_shares,
        memory_limit_in_bytes: memory,
        oom_score_adj,
        ..Default::default()
    }
}

fn security(pod: &Pod, container: &Container) -> api::LinuxContainerSecurityContext {
    let pod_context = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let context = container.security_context.as_ref();
    let run_as_user = context
        .and_then(|c| c.run_as_user)
        .or(pod_context.and_then(|c| c.run_as_user));
    let run_as_group = context
        .and_then(|c| c.run_as_group)
        .or(pod_context.and_then(|c| c.run_as_group));
    let seccomp = context
        .and_then(|c| c.seccomp_profile.as_ref())
        .or(pod_context.and_then(|c| c.seccomp_profile.as_ref()))
        .map(|profile| match profile.type_.as_str() {
            "RuntimeDefault" => api::SecurityProfile {
                profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
                localhost_ref: String::new(),
            },
            "Localhost" => api::SecurityProfile {
                profile_type: api::security_profile::ProfileType::Localhost as i32,
                localhost_ref: profile.localhost_profile.clone().unwrap_or_default(),
            },
            _ => api::SecurityProfile::default(),
        });
    let capabilities = context
        .and_then(|c| c.capabilities.as_ref())
        .map(|caps| api::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        });
    api::LinuxContainerSecurityContext {
        namespace_options: Some(namespaces(pod)),
        privileged: context.and_then(|c| c.privileged).unwrap_or(false),
        run_as_user: run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: context
            .and_then(|c| c.read_only_root_filesystem)
            .unwrap_or(false),
        supplemental_groups: pod_context
            .and_then(|c| c.supplemental_groups.clone())
            .unwrap_or_default(),
        seccomp,
        capabilities,
        no_new_privs: context
            .and_then(|c| c.allow_privilege_escalation)
            .is_some_and(|allow| !allow),
        ..Default::default()
    }
}

/// What a container config is built from besides the pod: the resolved image, env and mounts.
pub struct ContainerInputs {
    pub image: String,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<api::Mount>,
    pub attempt: u32,
    pub restart_policy: String,
}

pub fn container_config(
    pod: &Pod,
    container: &Container,
    inputs: ContainerInputs,
) -> api::ContainerConfig {
    let env_map: HashMap<String, String> = inputs.env.iter().cloned().collect();
    let expand_all = |list: &Option<Vec<String>>| -> Vec<String> {
        list.iter().flatten().map(|s| expand(s, &env_map)).collect()
    };
    let mut container_labels = HashMap::new();
    container_labels.insert(labels::POD_NAME.to_owned(), pod_name(pod).to_owned());
    container_labels.insert(
        labels::POD_NAMESPACE.to_owned(),
        pod_namespace(pod).to_owned(),
    );
    container_labels.insert(labels::POD_UID.to_owned(), pod_uid(pod).to_owned());
    container_labels.insert(labels::CONTAINER_NAME.to_owned(), container.name.clone());
    container_labels.insert(labels::RESTART_POLICY.to_owned(), inputs.restart_policy);
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: container.name.clone(),
            attempt: inputs.attempt,
        }),
        image: Some(api::ImageSpec {
            image: inputs.image,
            ..Default::default()
        }),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: inputs
            .env
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        mounts: inputs.mounts,
        labels: container_labels,
        log_path: format!("{}/{}.log", container.name, inputs.attempt),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(resources(pod, container)),
            security_context: Some(security(pod, container)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_upstream() {
        let env: HashMap<String, String> =
            [("A".to_string(), "1".to_string())].into_iter().collect();
        assert_eq!(expand("x$(A)y", &env), "x1y");
        assert_eq!(expand("$(B)", &env), "$(B)");
        assert_eq!(expand("$$(A)", &env), "$(A)");
        assert_eq!(expand("$(A", &env), "$(A");
        assert_eq!(expand("cost $5", &env), "cost $5");
    }
}
