//! The Pod Security Standards' checks (the latest version), each a function of the pod spec
//! (and metadata) that returns its violation in upstream's words —
//! `<check> (<who> must …)` — or nothing. `baseline` runs the baseline checks; `restricted`
//! runs them too (with its stricter capability and seccomp checks in place of baseline's),
//! then its own, in upstream's order.

use serde_json::Value;

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Level {
    #[default]
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// A label's level; anything unknown is judged as `restricted`, as upstream does.
    pub fn parse(text: &str) -> Self {
        match text {
            "privileged" => Self::Privileged,
            "baseline" => Self::Baseline,
            _ => Self::Restricted,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// Every container of the spec (init, regular, ephemeral) with its name.
fn containers(spec: &Value) -> Vec<(&str, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| spec[*field].as_array().into_iter().flatten())
        .map(|c| (c["name"].as_str().unwrap_or(""), c))
        .collect()
}

/// `container "a"` or `containers "a", "b"`.
fn who(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    if names.len() == 1 {
        format!("container {}", quoted[0])
    } else {
        format!("containers {}", quoted.join(", "))
    }
}

/// The containers for which `bad` holds.
fn offending(spec: &Value, bad: impl Fn(&Value) -> bool) -> Vec<&str> {
    containers(spec)
        .into_iter()
        .filter(|(_, c)| bad(c))
        .map(|(name, _)| name)
        .collect()
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

fn capabilities_baseline(spec: &Value) -> Option<String> {
    let mut parts = Vec::new();
    for (name, container) in containers(spec) {
        let bad: Vec<String> = added_capabilities(container)
            .into_iter()
            .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
            .map(|cap| format!("\"{cap}\""))
            .collect();
        if !bad.is_empty() {
            parts.push(format!(
                "container \"{name}\" must not include {} in securityContext.capabilities.add",
                bad.join(", ")
            ));
        }
    }
    (!parts.is_empty()).then(|| format!("non-default capabilities ({})", parts.join("; ")))
}

fn host_path_volumes(spec: &Value) -> Option<String> {
    let names: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(|v| format!("\"{}\"", v["name"].as_str().unwrap_or("")))
        .collect();
    match names.len() {
        0 => None,
        1 => Some(format!("hostPath volumes (volume {})", names[0])),
        _ => Some(format!("hostPath volumes (volumes {})", names.join(", "))),
    }
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
    let ports: Vec<String> = ports.iter().map(i64::to_string).collect();
    let (verb, noun) = if names.len() == 1 {
        ("uses", "hostPort")
    } else {
        ("use", "hostPorts")
    };
    let noun = if ports.len() > 1 { "hostPorts" } else { noun };
    Some(format!(
        "hostPort ({} {verb} {noun} {})",
        who(&names),
        ports.join(", ")
    ))
}

fn proc_mount(spec: &Value) -> Option<String> {
    let names = offending(spec, |c| {
        c["securityContext"]["procMount"]
            .as_str()
            .is_some_and(|mount| mount != "Default")
    });
    (!names.is_empty()).then(|| {
        format!(
            "procMount ({} must not set securityContext.procMount to \"Unmasked\")",
            who(&names)
        )
    })
}

fn seccomp_type(context: &Value) -> Option<&str> {
    context["seccompProfile"]["type"].as_str()
}

fn seccomp_baseline(spec: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if seccomp_type(&spec["securityContext"]) == Some("Unconfined") {
        parts.push(
            "pod must not set securityContext.seccompProfile.type to \"Unconfined\"".to_string(),
        );
    }
    let names = offending(spec, |c| {
        seccomp_type(&c["securityContext"]) == Some("Unconfined")
    });
    if !names.is_empty() {
        parts.push(format!(
            "{} must not set securityContext.seccompProfile.type to \"Unconfined\"",
            who(&names)
        ));
    }
    (!parts.is_empty()).then(|| format!("seccompProfile ({})", parts.join("; ")))
}

fn se_linux(spec: &Value) -> Option<String> {
    let allowed_type = |context: &Value| {
        context["seLinuxOptions"]["type"].as_str().is_none_or(|t| {
            matches!(
                t,
                "" | "container_t" | "container_init_t" | "container_kvm_t" | "container_engine_t"
            )
        })
    };
    let clean = |context: &Value| {
        allowed_type(context)
            && context["seLinuxOptions"]["user"]
                .as_str()
                .is_none_or(str::is_empty)
            && context["seLinuxOptions"]["role"]
                .as_str()
                .is_none_or(str::is_empty)
    };
    let names = offending(spec, |c| !clean(&c["securityContext"]));
    let pod_bad = !clean(&spec["securityContext"]);
    (pod_bad || !names.is_empty()).then(|| {
        "seLinuxOptions (pod and containers must not set securityContext.seLinuxOptions.type, user or role outside the allowed values)".to_string()
    })
}

/// The sysctls baseline allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

fn sysctls(spec: &Value) -> Option<String> {
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|name| !SAFE_SYSCTLS.contains(name))
        .collect();
    (!bad.is_empty()).then(|| format!("forbidden sysctls ({})", bad.join(", ")))
}

fn app_armor(spec: &Value, metadata: &Value) -> Option<String> {
    let bad_type = |context: &Value| {
        context["appArmorProfile"]["type"]
            .as_str()
            .is_some_and(|t| t == "Unconfined")
    };
    let annotated = metadata["annotations"]
        .as_object()
        .is_some_and(|annotations| {
            annotations.iter().any(|(key, value)| {
                key.starts_with("container.apparmor.security.beta.kubernetes.io/")
                    && value.as_str().is_some_and(|v| v == "unconfined")
            })
        });
    let names = offending(spec, |c| bad_type(&c["securityContext"]));
    (annotated || bad_type(&spec["securityContext"]) || !names.is_empty()).then(|| {
        "forbidden AppArmor profile (pod and containers must not set the AppArmor profile to \"Unconfined\")".to_string()
    })
}

fn allow_privilege_escalation(spec: &Value) -> Option<String> {
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

fn capabilities_restricted(spec: &Value) -> Option<String> {
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
    for (name, container) in containers(spec) {
        let bad: Vec<String> = added_capabilities(container)
            .into_iter()
            .filter(|cap| *cap != "NET_BIND_SERVICE")
            .map(|cap| format!("\"{cap}\""))
            .collect();
        if !bad.is_empty() {
            parts.push(format!(
                "container \"{name}\" must not include {} in securityContext.capabilities.add",
                bad.join(", ")
            ));
        }
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
    let mut offenders = Vec::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let Some(map) = volume.as_object() else {
            continue;
        };
        for (source, value) in map {
            if source == "name" || value.is_null() || RESTRICTED_VOLUMES.contains(&source.as_str())
            {
                continue;
            }
            offenders.push((
                volume["name"].as_str().unwrap_or("").to_string(),
                source.clone(),
            ));
        }
    }
    match offenders.as_slice() {
        [] => None,
        [(name, source)] => Some(format!(
            "restricted volume types (volume \"{name}\" uses restricted volume type \"{source}\")"
        )),
        many => {
            let names: Vec<String> = many.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            let mut types: Vec<String> = many.iter().map(|(_, t)| format!("\"{t}\"")).collect();
            types.dedup();
            Some(format!(
                "restricted volume types (volumes {} use restricted volume types {})",
                names.join(", "),
                types.join(", ")
            ))
        }
    }
}

fn run_as_non_root(spec: &Value) -> Option<String> {
    let pod = spec["securityContext"]["runAsNonRoot"].as_bool();
    if pod == Some(false) {
        return Some(
            "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)".into(),
        );
    }
    let explicit_false = offending(spec, |c| c["securityContext"]["runAsNonRoot"] == false);
    if !explicit_false.is_empty() {
        return Some(format!(
            "runAsNonRoot != true ({} must not set securityContext.runAsNonRoot=false)",
            who(&explicit_false)
        ));
    }
    if pod == Some(true) {
        return None;
    }
    let unset = offending(spec, |c| c["securityContext"]["runAsNonRoot"] != true);
    (!unset.is_empty()).then(|| {
        format!(
            "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
            who(&unset)
        )
    })
}

fn run_as_user(spec: &Value) -> Option<String> {
    if spec["securityContext"]["runAsUser"] == 0 {
        return Some("runAsUser=0 (pod must not set runAsUser=0)".into());
    }
    let names = offending(spec, |c| c["securityContext"]["runAsUser"] == 0);
    (!names.is_empty()).then(|| format!("runAsUser=0 ({} must not set runAsUser=0)", who(&names)))
}

fn seccomp_restricted(spec: &Value) -> Option<String> {
    let allowed = |t: Option<&str>| matches!(t, Some("RuntimeDefault" | "Localhost"));
    let pod_type = seccomp_type(&spec["securityContext"]);
    let mut parts = Vec::new();
    if pod_type.is_some() && !allowed(pod_type) {
        parts.push(format!(
            "pod must not set securityContext.seccompProfile.type to \"{}\"",
            pod_type.unwrap_or("")
        ));
    }
    let bad = offending(spec, |c| {
        let own = seccomp_type(&c["securityContext"]);
        own.is_some() && !allowed(own)
    });
    if !bad.is_empty() {
        parts.push(format!(
            "{} must not set securityContext.seccompProfile.type to a value other than \"RuntimeDefault\" or \"Localhost\"",
            who(&bad)
        ));
    }
    if !allowed(pod_type) {
        let unset = offending(spec, |c| seccomp_type(&c["securityContext"]).is_none());
        if !unset.is_empty() {
            parts.push(format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                who(&unset)
            ));
        }
    }
    (!parts.is_empty()).then(|| format!("seccompProfile ({})", parts.join("; ")))
}

/// What `spec` (with the pod's `metadata`) violates of `level`, in upstream's order.
pub fn violations(level: Level, spec: &Value, metadata: &Value) -> Vec<String> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let restricted = level == Level::Restricted;
    let mut found = vec![
        app_armor(spec, metadata),
        if restricted {
            None
        } else {
            capabilities_baseline(spec)
        },
        host_namespaces(spec),
        host_path_volumes(spec),
        host_ports(spec),
        privileged(spec),
        proc_mount(spec),
        if restricted {
            None
        } else {
            seccomp_baseline(spec)
        },
        se_linux(spec),
        sysctls(spec),
    ];
    if restricted {
        found.extend([
            allow_privilege_escalation(spec),
            capabilities_restricted(spec),
            restricted_volumes(spec),
            run_as_non_root(spec),
            run_as_user(spec),
            seccomp_restricted(spec),
        ]);
    }
    found.into_iter().flatten().collect()
}
