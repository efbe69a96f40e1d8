//! The Pod Security Standards' checks, each a function of the pod spec (and metadata) and the
//! policy version that returns its violation in upstream's words — `<reason> (<detail>)` —
//! or nothing. `baseline` runs the baseline checks; `restricted` runs them too (with its
//! stricter capability and seccomp checks in place of baseline's once the version has them),
//! then its own, in upstream's order (by check ID within each level).
//!
//! Versions matter where the standards changed: a namespace pinned to `v1.22` is judged by the
//! rules of 1.22 (no `runAsUser` check before 1.23, no `capabilities` drop before 1.22,
//! seccomp by annotation before 1.19, the safe sysctls of each release, `container_engine_t`
//! from 1.31, Windows pods exempt from the Linux-only restricted checks from 1.25). Versions
//! newer than [`LATEST_MINOR`] are judged as the latest.

use serde_json::Value;

use super::policy::{Level, LevelVersion};

/// The newest standards version these checks know (Kubernetes 1.33).
pub const LATEST_MINOR: u32 = 33;

/// Every container of the spec (init, regular, ephemeral) with its name.
fn containers(spec: &Value) -> Vec<(&str, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| spec[*field].as_array().into_iter().flatten())
        .map(|c| (c["name"].as_str().unwrap_or(""), c))
        .collect()
}

/// `"a", "b"`.
fn join_quoted<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|item| format!("\"{}\"", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 {
        singular
    } else {
        plural
    }
}

/// `container "a"` or `containers "a", "b"`.
fn who(names: &[&str]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quoted(names)
    )
}

/// `pod`, `containers "a", "b"` or `pod and container "a"`: who set something.
fn setters(pod: bool, names: &[&str]) -> String {
    let mut parts = Vec::new();
    if pod {
        parts.push("pod".to_string());
    }
    if !names.is_empty() {
        parts.push(who(names));
    }
    parts.join(" and ")
}

/// The containers for which `bad` holds.
fn offending(spec: &Value, bad: impl Fn(&Value) -> bool) -> Vec<&str> {
    containers(spec)
        .into_iter()
        .filter(|(_, c)| bad(c))
        .map(|(name, _)| name)
        .collect()
}

/// Sorted, without repeats.
fn sorted_set(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items.dedup();
    items
}

fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"] == "windows"
}

fn host_namespaces(spec: &Value) -> Option<String> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|field| spec[**field] == true)
        .map(|field| format!("{field}=true"))
        .collect();
    (!set.is_empty()).then(|| format!("host namespaces ({})", set.join(", ")))
}

fn privileged(spec: &Value) -> Option<String> {
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

fn added_capabilities(container: &Value) -> Vec<&str> {
    container["securityContext"]["capabilities"]["add"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The containers adding a capability `allowed` refuses, and those capabilities.
fn adding_forbidden(spec: &Value, allowed: impl Fn(&str) -> bool) -> (Vec<&str>, Vec<String>) {
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

fn capabilities_baseline(spec: &Value) -> Option<String> {
    let (names, capabilities) = adding_forbidden(spec, |cap| BASELINE_CAPABILITIES.contains(&cap));
    (!names.is_empty()).then(|| {
        format!(
            "non-default capabilities ({} must not include {} in securityContext.capabilities.add)",
            who(&names),
            join_quoted(&capabilities)
        )
    })
}

fn host_path_volumes(spec: &Value) -> Option<String> {
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

fn host_ports(spec: &Value) -> Option<String> {
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

fn proc_mount(spec: &Value) -> Option<String> {
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

fn seccomp_type(context: &Value) -> Option<&str> {
    context["seccompProfile"]["type"].as_str()
}

fn valid_seccomp(kind: &str) -> bool {
    matches!(kind, "RuntimeDefault" | "Localhost")
}

/// Before 1.19: the seccomp annotations (the pod's and each container's).
fn seccomp_annotations(spec: &Value, metadata: &Value) -> Option<String> {
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
fn seccomp_baseline(spec: &Value) -> Option<String> {
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

fn se_linux(spec: &Value, minor: u32) -> Option<String> {
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
fn safe_sysctl(name: &str, minor: u32) -> bool {
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

fn sysctls(spec: &Value, minor: u32) -> Option<String> {
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|name| !safe_sysctl(name, minor))
        .collect();
    (!bad.is_empty()).then(|| format!("forbidden sysctls ({})", bad.join(", ")))
}

fn app_armor(spec: &Value, metadata: &Value) -> Option<String> {
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

fn windows_host_process(spec: &Value) -> Option<String> {
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

fn allow_privilege_escalation(spec: &Value, minor: u32) -> Option<String> {
    if minor >= 25 && is_windows(spec) {
        return None;
    }
    let names = offending(spec, |c| {
        c["securityContext"]["allowPrivilegeEscalation"] != false
    });
    (!names.is_empty()).then(|| {
        format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            who(&names)
        )
    })
}

fn capabilities_restricted(spec: &Value, minor: u32) -> Option<String> {
    if minor >= 25 && is_windows(spec) {
        return None;
    }
    let mut parts = Vec::new();
    let drops_all = |c: &Value| {
        c["securityContext"]["capabilities"]["drop"]
            .as_array()
            .is_some_and(|drop| drop.iter().any(|d| d == "ALL"))
    };
    let names = offending(spec, |c| !drops_all(c));
    if !names.is_empty() {
        parts.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            who(&names)
        ));
    }
    let (names, capabilities) = adding_forbidden(spec, |cap| cap == "NET_BIND_SERVICE");
    if !names.is_empty() {
        parts.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            who(&names),
            join_quoted(&capabilities)
        ));
    }
    (!parts.is_empty()).then(|| format!("unrestricted capabilities ({})", parts.join("; ")))
}

/// The volume sources restricted allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn restricted_volumes(spec: &Value) -> Option<String> {
    let mut names = Vec::new();
    let mut types = Vec::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let Some(map) = volume.as_object() else {
            continue;
        };
        let bad: Vec<String> = map
            .iter()
            .filter(|(source, value)| {
                *source != "name"
                    && !value.is_null()
                    && !RESTRICTED_VOLUMES.contains(&source.as_str())
            })
            .map(|(source, _)| source.clone())
            .collect();
        if !bad.is_empty() {
            names.push(volume["name"].as_str().unwrap_or(""));
            types.extend(bad);
        }
    }
    if names.is_empty() {
        return None;
    }
    let types = sorted_set(types);
    Some(format!(
        "restricted volume types ({} {} {} {} {})",
        plural("volume", "volumes", names.len()),
        join_quoted(&names),
        plural("uses", "use", names.len()),
        plural(
            "restricted volume type",
            "restricted volume types",
            types.len()
        ),
        join_quoted(&types)
    ))
}

fn run_as_non_root(spec: &Value) -> Option<String> {
    let pod = spec["securityContext"]["runAsNonRoot"].as_bool();
    let explicit_false = offending(spec, |c| c["securityContext"]["runAsNonRoot"] == false);
    if pod == Some(false) || !explicit_false.is_empty() {
        return Some(format!(
            "runAsNonRoot != true ({} must not set securityContext.runAsNonRoot=false)",
            setters(pod == Some(false), &explicit_false)
        ));
    }
    if pod == Some(true) {
        return None;
    }
    let unset = offending(spec, |c| !c["securityContext"]["runAsNonRoot"].is_boolean());
    (!unset.is_empty()).then(|| {
        format!(
            "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
            who(&unset)
        )
    })
}

fn run_as_user(spec: &Value) -> Option<String> {
    let pod = spec["securityContext"]["runAsUser"] == 0;
    let names = offending(spec, |c| c["securityContext"]["runAsUser"] == 0);
    (pod || !names.is_empty()).then(|| {
        format!(
            "runAsUser=0 ({} must not set runAsUser=0)",
            setters(pod, &names)
        )
    })
}

fn seccomp_restricted(spec: &Value, minor: u32) -> Option<String> {
    if minor >= 25 && is_windows(spec) {
        return None;
    }
    let pod_type = seccomp_type(&spec["securityContext"]);
    let pod_bad = pod_type.is_some_and(|t| !valid_seccomp(t));
    let pod_set = pod_type.is_some_and(valid_seccomp);
    let mut values: Vec<String> = pod_type
        .filter(|_| pod_bad)
        .map(str::to_string)
        .into_iter()
        .collect();
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for (name, container) in containers(spec) {
        match seccomp_type(&container["securityContext"]) {
            Some(kind) if !valid_seccomp(kind) => {
                explicit.push(name);
                values.push(kind.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name),
            None => {}
        }
    }
    if pod_bad || !explicit.is_empty() {
        return Some(format!(
            "seccompProfile ({} must not set securityContext.seccompProfile.type to {})",
            setters(pod_bad, &explicit),
            join_quoted(&sorted_set(values))
        ));
    }
    (!implicit.is_empty()).then(|| {
        format!(
            "seccompProfile (pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            who(&implicit)
        )
    })
}

/// What `spec` (with the pod's `metadata`) violates of `policy`, in upstream's order.
pub fn violations(policy: LevelVersion, spec: &Value, metadata: &Value) -> Vec<String> {
    if policy.level == Level::Privileged {
        return Vec::new();
    }
    let minor = policy.version.minor();
    let restricted = policy.level == Level::Restricted;
    // Restricted's capability and seccomp checks replace baseline's from their first version.
    let restricted_capabilities = restricted && minor >= 22;
    let restricted_seccomp = restricted && minor >= 19;
    let mut found = vec![
        app_armor(spec, metadata),
        (!restricted_capabilities)
            .then(|| capabilities_baseline(spec))
            .flatten(),
        host_namespaces(spec),
        host_path_volumes(spec),
        host_ports(spec),
        privileged(spec),
        proc_mount(spec),
        match (restricted_seccomp, minor >= 19) {
            (true, _) => None,
            (false, true) => seccomp_baseline(spec),
            (false, false) => seccomp_annotations(spec, metadata),
        },
        se_linux(spec, minor),
        sysctls(spec, minor),
        windows_host_process(spec),
    ];
    if restricted {
        found.extend([
            (minor >= 8)
                .then(|| allow_privilege_escalation(spec, minor))
                .flatten(),
            restricted_capabilities
                .then(|| capabilities_restricted(spec, minor))
                .flatten(),
            restricted_volumes(spec),
            run_as_non_root(spec),
            (minor >= 23).then(|| run_as_user(spec)).flatten(),
            restricted_seccomp
                .then(|| seccomp_restricted(spec, minor))
                .flatten(),
        ]);
    }
    found.into_iter().flatten().collect()
}
