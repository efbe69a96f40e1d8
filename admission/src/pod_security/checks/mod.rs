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

mod baseline;
mod restricted;

use serde_json::Value;

use super::policy::{Level, LevelVersion};
use baseline::{
    app_armor, capabilities_baseline, host_namespaces, host_path_volumes, host_ports, privileged,
    proc_mount, se_linux, seccomp_annotations, seccomp_baseline, sysctls, windows_host_process,
};
use restricted::{
    allow_privilege_escalation, capabilities_restricted, restricted_volumes, run_as_non_root,
    run_as_user, seccomp_restricted,
};

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
