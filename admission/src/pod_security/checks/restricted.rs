//! The restricted level's own checks, each in upstream's words.

use serde_json::Value;

use super::baseline::{adding_forbidden, seccomp_type, valid_seccomp};
use super::{containers, is_windows, join_quoted, offending, plural, setters, sorted_set, who};

pub(super) fn allow_privilege_escalation(spec: &Value, minor: u32) -> Option<String> {
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

pub(super) fn capabilities_restricted(spec: &Value, minor: u32) -> Option<String> {
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

pub(super) fn restricted_volumes(spec: &Value) -> Option<String> {
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

pub(super) fn run_as_non_root(spec: &Value) -> Option<String> {
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

pub(super) fn run_as_user(spec: &Value) -> Option<String> {
    let pod = spec["securityContext"]["runAsUser"] == 0;
    let names = offending(spec, |c| c["securityContext"]["runAsUser"] == 0);
    (pod || !names.is_empty()).then(|| {
        format!(
            "runAsUser=0 ({} must not set runAsUser=0)",
            setters(pod, &names)
        )
    })
}

pub(super) fn seccomp_restricted(spec: &Value, minor: u32) -> Option<String> {
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
