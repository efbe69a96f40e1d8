//! The baseline level's checks (restricted runs them too), each in upstream's words.

use serde_json::Value;

use super::{containers, join_quoted, offending, plural, setters, sorted_set, who};

pub(super) fn host_namespaces(spec: &Value) -> Option<String> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|field| spec[**field] == true)
        .map(|field| format!("{field}=true"))
        .collect();
    (!set.is_empty()).then(|| format!("host namespaces ({})", set.join(", ")))
}

pub(super) fn privileged(spec: &Value) -> Option<String> {
    let names = offending(spec, |c| c["securityContext"]["privileged"] == true);
    (!names.is_empty()).then(|| {
        format!(
            "privileged ({} must not set securityContext.privileged=true)",
            who(&names)
        )
    })
}

/// The capabilities baseline allows a container to add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

pub(super) fn added_capabilities(container: &Value) -> Vec<&str> {
    container["securityContext"]["capabilities"]["add"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The containers adding a capability `allowed` refuses, and those capabilities.
pub(super) fn adding_forbidden(
    spec: &Value,
    allowed: impl Fn(&str) -> bool,
) -> (Vec<&str>, Vec<String>) {
    let mut names = Vec::new();
    let mut capabilities = Vec::new();
    for (name, container) in containers(spec) {
        let bad: Vec<String> = added_capabilities(container)
            .into_iter()
            .filter(|cap| !allowed(cap))
            .map(str::to_string)
            .collect();
        if !bad.is_empty() {
            names.push(name);
            capabilities.extend(bad);
        }
    }
    (names, sorted_set(capabilities))
}

pub(super) fn capabilities_baseline(spec: &Value) -> Option<String> {
    let (names, capabilities) = adding_forbidden(spec, |cap| BASELINE_CAPABILITIES.contains(&cap));
    (!names.is_empty()).then(|| {
        format!(
            "non-default capabilities ({} must not include {} in securityContext.capabilities.add)",
            who(&names),
            join_quoted(&capabilities)
        )
    })
}

pub(super) fn host_path_volumes(spec: &Value) -> Option<String> {
    let names: Vec<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(|v| v["name"].as_str().unwrap_or(""))
        .collect();
    (!names.is_empty()).then(|| {
        format!(
            "hostPath volumes ({} {})",
            plural("volume", "volumes", names.len()),
            join_quoted(&names)
        )
    })
}

pub(super) fn host_ports(spec: &Value) -> Option<String> {
    let mut names = Vec::new();
    let mut ports = Vec::new();
    for (name, container) in containers(spec) {
        let used: Vec<i64> = container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|port| *port != 0)
            .collect();
        if !used.is_empty() {
            names.push(name);
            ports.extend(used);
        }
    }
    if names.is_empty() {
        return None;
    }
    // Upstream lists the ports as a sorted set of strings.
    let ports = sorted_set(ports.iter().map(i64::to_string).collect());
    Some(format!(
        "hostPort ({} {} {} {})",
        who(&names),
        plural("uses", "use", names.len()),
        plural("hostPort", "hostPorts", ports.len()),
        ports.join(", ")
    ))
}

pub(super) fn proc_mount(spec: &Value) -> Option<String> {
    let mut mounts = Vec::new();
    let names = offending(spec, |c| {
        c["securityContext"]["procMount"]
            .as_str()
            .is_some_and(|mount| mount != "Default")
    });
    for (_, container) in containers(spec) {
        if let Some(mount) = container["securityContext"]["procMount"].as_str() {
            if mount != "Default" {
                mounts.push(mount.to_string());
            }
        }
    }
    (!names.is_empty()).then(|| {
        format!(
            "procMount ({} must not set securityContext.procMount to {})",
            who(&names),
            join_quoted(&sorted_set(mounts))
        )
    })
}

pub(super) fn seccomp_type(context: &Value) -> Option<&str> {
    context["seccompProfile"]["type"].as_str()
}

pub(super) fn valid_seccomp(kind: &str) -> bool {
    matches!(kind, "RuntimeDefault" | "Localhost")
}

/// Before 1.19: the seccomp annotations (the pod's and each container's).
pub(super) fn seccomp_annotations(spec: &Value, metadata: &Value) -> Option<String> {
    let annotations = &metadata["annotations"];
    let valid = |value: &str| {
        matches!(value, "runtime/default" | "docker/default") || value.starts_with("localhost/")
    };
    let mut keys = vec!["seccomp.security.alpha.kubernetes.io/pod".to_string()];
    keys.extend(
        containers(spec)
            .into_iter()
            .map(|(name, _)| format!("container.seccomp.security.alpha.kubernetes.io/{name}")),
    );
    let forbidden = sorted_set(
        keys.into_iter()
            .filter_map(|key| {
                let value = annotations[key.as_str()].as_str()?;
                (!valid(value)).then(|| format!("{key}=\"{value}\""))
            })
            .collect(),
    );
    (!forbidden.is_empty()).then(|| {
        format!(
            "seccompProfile (forbidden {} {})",
            plural("annotation", "annotations", forbidden.len()),
            forbidden.join(", ")
        )
    })
}

/// From 1.19: the fields, which may only name RuntimeDefault or Localhost.
pub(super) fn seccomp_baseline(spec: &Value) -> Option<String> {
    let mut values = Vec::new();
    let pod_type = seccomp_type(&spec["securityContext"]);
    let pod_bad = pod_type.is_some_and(|t| !valid_seccomp(t));
    values.extend(pod_type.filter(|_| pod_bad).map(str::to_string));
    let names = offending(spec, |c| {
        seccomp_type(&c["securityContext"]).is_some_and(|t| !valid_seccomp(t))
    });
    for (_, container) in containers(spec) {
        if let Some(kind) = seccomp_type(&container["securityContext"]) {
            if !valid_seccomp(kind) {
                values.push(kind.to_string());
            }
        }
    }
    (pod_bad || !names.is_empty()).then(|| {
        format!(
            "seccompProfile ({} must not set securityContext.seccompProfile.type to {})",
            setters(pod_bad, &names),
            join_quoted(&sorted_set(values))
        )
    })
}

pub(super) fn se_linux(spec: &Value, minor: u32) -> Option<String> {
    let allowed_type = |t: &str| {
        matches!(
            t,
            "" | "container_t" | "container_init_t" | "container_kvm_t"
        ) || (minor >= 31 && t == "container_engine_t")
    };
    let mut bad_types = Vec::new();
    let mut set_user = false;
    let mut set_role = false;
    let mut judge = |context: &Value| {
        let options = &context["seLinuxOptions"];
        if !options.is_object() {
            return true;
        }
        let mut valid = true;
        let kind = options["type"].as_str().unwrap_or("");
        if !allowed_type(kind) {
            valid = false;
            bad_types.push(kind.to_string());
        }
        if options["user"].as_str().is_some_and(|u| !u.is_empty()) {
            valid = false;
            set_user = true;
        }
        if options["role"].as_str().is_some_and(|r| !r.is_empty()) {
            valid = false;
            set_role = true;
        }
        valid
    };
    let pod_bad = !judge(&spec["securityContext"]);
    let mut names = Vec::new();
    for (name, container) in containers(spec) {
        if !judge(&container["securityContext"]) {
            names.push(name);
        }
    }
    if !pod_bad && names.is_empty() {
        return None;
    }
    let bad_types = sorted_set(bad_types);
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            plural("type", "types", bad_types.len()),
            join_quoted(&bad_types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    Some(format!(
        "seLinuxOptions ({} set forbidden securityContext.seLinuxOptions: {})",
        setters(pod_bad, &names),
        data.join("; ")
    ))
}

/// The sysctls baseline allows at a version: each release's list adds to the last.
pub(super) fn safe_sysctl(name: &str, minor: u32) -> bool {
    const SINCE_1_0: &[&str] = &[
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    const SINCE_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
    const SINCE_1_29: &[&str] = &[
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ];
    const SINCE_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
    SINCE_1_0.contains(&name)
        || (minor >= 27 && SINCE_1_27.contains(&name))
        || (minor >= 29 && SINCE_1_29.contains(&name))
        || (minor >= 32 && SINCE_1_32.contains(&name))
}

pub(super) fn sysctls(spec: &Value, minor: u32) -> Option<String> {
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|name| !safe_sysctl(name, minor))
        .collect();
    (!bad.is_empty()).then(|| format!("forbidden sysctls ({})", bad.join(", ")))
}

pub(super) fn app_armor(spec: &Value, metadata: &Value) -> Option<String> {
    let allowed = |kind: &str| matches!(kind, "RuntimeDefault" | "Localhost");
    let mut values = Vec::new();
    let mut bad = |context: &Value| match context["appArmorProfile"]["type"].as_str() {
        Some(kind) if !allowed(kind) => {
            values.push(kind.to_string());
            true
        }
        _ => false,
    };
    let pod_bad = bad(&spec["securityContext"]);
    let mut names = Vec::new();
    for (name, container) in containers(spec) {
        if bad(&container["securityContext"]) {
            names.push(name);
        }
    }
    let mut values = sorted_set(values);
    let mut annotations: Vec<String> = metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.starts_with("container.apparmor.security.beta.kubernetes.io/"))
        .filter_map(|(key, value)| {
            let value = value.as_str()?;
            let fine =
                value.is_empty() || value == "runtime/default" || value.starts_with("localhost/");
            (!fine).then(|| format!("{key}=\"{value}\""))
        })
        .collect();
    annotations.sort();
    let mut who = setters(pod_bad, &names);
    if !annotations.is_empty() {
        let noun = plural("annotation", "annotations", annotations.len());
        who = if who.is_empty() {
            noun.to_string()
        } else {
            format!("{who} and {noun}")
        };
        values.extend(annotations);
    }
    if who.is_empty() {
        return None;
    }
    Some(format!(
        "{} ({who} must not set AppArmor profile type to {})",
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len()
        ),
        join_quoted(&values)
    ))
}

pub(super) fn windows_host_process(spec: &Value) -> Option<String> {
    let host_process = |context: &Value| context["windowsOptions"]["hostProcess"] == true;
    let pod = host_process(&spec["securityContext"]);
    let names = offending(spec, |c| host_process(&c["securityContext"]));
    (pod || !names.is_empty()).then(|| {
        format!(
            "hostProcess ({} must not set securityContext.windowsOptions.hostProcess=true)",
            setters(pod, &names)
        )
    })
}
