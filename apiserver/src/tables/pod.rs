//! The Pod table: readiness, upstream's aggregate status rules (init containers, waiting and
//! terminated reasons, Terminating, NodeLost), restarts with "(5m ago)", and the wide columns.

use std::collections::HashSet;

use jiff::Timestamp;
use serde_json::Value;

use crate::json::{array_at, int_at, is_deleting, name, opt_bool_at, str_at, value_at};

use super::format::{age, col, name_col, since, time_at};
use super::format::{age_col, wide};
use super::{Column, Printer};

/// The table of Pods.
pub struct PodTable;

impl Printer for PodTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Ready",
                "string",
                "How many of the pod's containers are ready to serve traffic.",
            ),
            col(
                "Status",
                "string",
                "A summary of the pod's state, derived from its phase and its containers.",
            ),
            col(
                "Restarts",
                "string",
                "How many times the pod's containers have restarted, and when the latest \
                 restart happened.",
            ),
            age_col(),
            wide(
                "IP",
                "string",
                "The IP address allocated to the pod, routable at least within the cluster; \
                 empty until one is allocated.",
            ),
            wide(
                "Node",
                "string",
                "The node the pod is bound to; set by the scheduler when the pod is scheduled.",
            ),
            wide(
                "Nominated Node",
                "string",
                "Set only when this pod preempted pods on a node: the node it is expected to \
                 run on, which is not guaranteed.",
            ),
            wide(
                "Readiness Gates",
                "string",
                "Extra pod conditions that must all be True before the pod counts as ready.",
            ),
        ]
    }

    fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        pod_cells(obj, now)
    }
}

/// Whether a container state (`state` or `lastState`) holds the given variant.
fn state_of<'a>(cs: &'a Value, which: &str, variant: &str) -> Option<&'a Value> {
    value_at(cs, &[which, variant]).filter(|v| v.is_object())
}

/// The later of `cur` and the container's last termination time, if any.
fn later_restart(cur: Option<Timestamp>, cs: &Value) -> Option<Timestamp> {
    let finished =
        state_of(cs, "lastState", "terminated").and_then(|t| time_at(t, &["finishedAt"]));
    match (cur, finished) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// "ExitCode:N" / "Signal:N" or the terminated reason, with a prefix ("" or "Init:").
fn terminated_reason(term: &Value, prefix: &str) -> String {
    let reason = str_at(term, &["reason"]);
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    match int_at(term, &["signal"]) {
        0 => format!("{prefix}ExitCode:{}", int_at(term, &["exitCode"])),
        sig => format!("{prefix}Signal:{sig}"),
    }
}

fn condition_true(obj: &Value, ctype: &str) -> bool {
    // Upstream looks at the first condition of the type.
    array_at(obj, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == ctype)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

fn pod_cells(obj: &Value, now: Timestamp) -> Vec<Value> {
    let init_specs = array_at(obj, &["spec", "initContainers"]);
    let sidecars: HashSet<&str> = init_specs
        .iter()
        .filter(|c| str_at(c, &["restartPolicy"]) == "Always")
        .map(|c| str_at(c, &["name"]))
        .collect();
    let total = array_at(obj, &["spec", "containers"]).len() + sidecars.len();

    let phase = str_at(obj, &["status", "phase"]);
    let status_reason = str_at(obj, &["status", "reason"]);
    let mut reason = if status_reason.is_empty() {
        phase
    } else {
        status_reason
    }
    .to_string();
    let gated = array_at(obj, &["status", "conditions"]).iter().any(|c| {
        str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated"
    });
    if gated {
        reason = "SchedulingGated".to_string();
    }

    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut sidecar_restarts = 0i64;
    let mut last_sidecar_restart: Option<Timestamp> = None;
    let mut initializing = false;

    for (idx, cs) in array_at(obj, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        restarts += int_at(cs, &["restartCount"]);
        last_restart = later_restart(last_restart, cs);
        let is_sidecar = sidecars.contains(str_at(cs, &["name"]));
        if is_sidecar {
            sidecar_restarts += int_at(cs, &["restartCount"]);
            last_sidecar_restart = later_restart(last_sidecar_restart, cs);
        }
        let terminated = state_of(cs, "state", "terminated");
        let waiting_reason = state_of(cs, "state", "waiting").map(|w| str_at(w, &["reason"]));
        if terminated.is_some_and(|t| int_at(t, &["exitCode"]) == 0) {
            continue;
        }
        if is_sidecar && opt_bool_at(cs, &["started"]) == Some(true) {
            if opt_bool_at(cs, &["ready"]) == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = match (terminated, waiting_reason) {
            (Some(t), _) => terminated_reason(t, "Init:"),
            (None, Some(w)) if !w.is_empty() && w != "PodInitializing" => format!("Init:{w}"),
            _ => format!("Init:{idx}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || condition_true(obj, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for cs in array_at(obj, &["status", "containerStatuses"]).iter().rev() {
            restarts += int_at(cs, &["restartCount"]);
            last_restart = later_restart(last_restart, cs);
            let waiting = state_of(cs, "state", "waiting").map(|w| str_at(w, &["reason"]));
            let terminated = state_of(cs, "state", "terminated");
            if let Some(w) = waiting.filter(|w| !w.is_empty()) {
                reason = w.to_string();
            } else if let Some(t) = terminated {
                reason = terminated_reason(t, "");
            } else if opt_bool_at(cs, &["ready"]) == Some(true)
                && state_of(cs, "state", "running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        // A pod whose last container completed but which still runs others is not done.
        if reason == "Completed" && has_running {
            reason = if condition_true(obj, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .to_string();
        }
    }

    if is_deleting(obj) && status_reason == "NodeLost" {
        reason = "Unknown".to_string();
    } else if is_deleting(obj) && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let ip = array_at(obj, &["status", "podIPs"])
        .first()
        .map(|p| str_at(p, &["ip"]))
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| str_at(obj, &["status", "podIP"]));
    let or_none = |x: &str| {
        if x.is_empty() {
            "<none>".to_string()
        } else {
            x.to_string()
        }
    };

    let gates = array_at(obj, &["spec", "readinessGates"]);
    let gates_cell = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passed = gates
            .iter()
            .filter(|g| condition_true(obj, str_at(g, &["conditionType"])))
            .count();
        format!("{passed}/{}", gates.len())
    };

    vec![
        Value::from(name(obj)),
        Value::from(format!("{ready}/{total}")),
        Value::from(reason),
        Value::from(restarts_cell),
        age(obj, now),
        Value::from(or_none(ip)),
        Value::from(or_none(str_at(obj, &["spec", "nodeName"]))),
        Value::from(or_none(str_at(obj, &["status", "nominatedNodeName"]))),
        Value::from(gates_cell),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn row(obj: Value) -> Vec<Value> {
        PodTable.cells(&obj, now())
    }

    fn status_of(obj: Value) -> String {
        row(obj)[2].as_str().unwrap().to_string()
    }

    fn running_container(name: &str) -> Value {
        json!({"name": name, "ready": true, "restartCount": 0,
               "state": {"running": {"startedAt": "2024-05-01T11:00:00Z"}}})
    }

    #[test]
    fn a_running_ready_pod_prints_all_columns() {
        let obj = json!({
            "metadata": {"name": "web", "creationTimestamp": "2024-05-01T11:55:00Z"},
            "spec": {"nodeName": "node1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "podIPs": [{"ip": "10.0.0.5"}],
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [running_container("c")]}
        });
        assert_eq!(
            row(obj),
            [
                json!("web"),
                json!("1/1"),
                json!("Running"),
                json!("0"),
                json!("5m"),
                json!("10.0.0.5"),
                json!("node1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn a_pending_pod_without_statuses_shows_pending_and_none_cells() {
        let obj = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
                         "status": {"phase": "Pending"}});
        let r = row(obj);
        assert_eq!(r[1], json!("0/1"));
        assert_eq!(r[2], json!("Pending"));
        assert_eq!(r[4], json!("<unknown>"));
        assert_eq!(r[5], json!("<none>"));
        assert_eq!(r[6], json!("<none>"));
    }

    #[test]
    fn a_waiting_container_shows_its_reason() {
        let obj = json!({"spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(status_of(obj), "ContainerCreating");
    }

    #[test]
    fn crash_looping_pods_show_restarts_with_how_long_ago() {
        let obj = json!({"spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "c", "ready": false, "restartCount": 5,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                              "finishedAt": "2024-05-01T11:55:00Z"}}}]}});
        let r = row(obj);
        assert_eq!(r[2], json!("CrashLoopBackOff"));
        assert_eq!(r[3], json!("5 (5m ago)"));
    }

    #[test]
    fn restarts_without_a_termination_time_have_no_suffix() {
        let obj = json!({"spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "c", "ready": true, "restartCount": 2,
                 "state": {"running": {}}}]}});
        assert_eq!(row(obj)[3], json!("2"));
    }

    #[test]
    fn an_init_container_still_running_shows_init_progress() {
        let obj = json!({"spec": {"initContainers": [{"name": "a"}, {"name": "b"}],
                                  "containers": [{"name": "c"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "a", "state": {"terminated": {"exitCode": 0}}},
                    {"name": "b", "state": {"running": {}}}],
                "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "PodInitializing"}}}]}});
        assert_eq!(status_of(obj), "Init:1/2");
    }

    #[test]
    fn init_container_failures_and_waits_are_prefixed_with_init() {
        let failed = json!({"spec": {"initContainers": [{"name": "a"}]},
            "status": {"initContainerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 3}}}]}});
        assert_eq!(status_of(failed), "Init:ExitCode:3");
        let signalled = json!({"spec": {"initContainers": [{"name": "a"}]},
            "status": {"initContainerStatuses": [
                {"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}});
        assert_eq!(status_of(signalled), "Init:Signal:9");
        let looping = json!({"spec": {"initContainers": [{"name": "a"}]},
            "status": {"initContainerStatuses": [
                {"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(status_of(looping), "Init:CrashLoopBackOff");
    }

    #[test]
    fn a_started_sidecar_counts_towards_readiness_and_total() {
        let obj = json!({"spec": {"initContainers": [{"name": "side", "restartPolicy": "Always"}],
                                  "containers": [{"name": "c"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "side", "started": true, "ready": true,
                    "restartCount": 1, "state": {"running": {}}}],
                "containerStatuses": [running_container("c")]}});
        let r = row(obj);
        assert_eq!(r[1], json!("2/2"));
        assert_eq!(r[2], json!("Running"));
        assert_eq!(r[3], json!("1"));
    }

    #[test]
    fn a_completed_pod_says_completed() {
        let obj = json!({"spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
        assert_eq!(status_of(obj), "Completed");
    }

    #[test]
    fn completed_with_another_container_running_reads_not_ready_or_running() {
        let base = |conds: Value| {
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running", "conditions": conds, "containerStatuses": [
                    running_container("a"),
                    {"name": "b", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}})
        };
        assert_eq!(status_of(base(json!([]))), "NotReady");
        assert_eq!(
            status_of(base(json!([{"type": "Ready", "status": "True"}]))),
            "Running"
        );
    }

    #[test]
    fn a_terminated_container_without_reason_shows_its_exit_code() {
        let obj = json!({"spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "c", "state": {"terminated": {"exitCode": 2}}}]}});
        assert_eq!(status_of(obj), "ExitCode:2");
    }

    #[test]
    fn a_deleting_pod_is_terminating_unless_finished() {
        let obj = json!({"metadata": {"deletionTimestamp": "2024-05-01T11:59:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [running_container("c")]}});
        assert_eq!(status_of(obj), "Terminating");
        let done = json!({"metadata": {"deletionTimestamp": "2024-05-01T11:59:00Z"},
            "status": {"phase": "Succeeded"}});
        assert_eq!(status_of(done), "Succeeded");
    }

    #[test]
    fn a_node_lost_pod_shows_the_reason_and_unknown_once_deleting() {
        let lost = json!({"status": {"phase": "Running", "reason": "NodeLost"}});
        assert_eq!(status_of(lost), "NodeLost");
        let deleting = json!({"metadata": {"deletionTimestamp": "2024-05-01T11:59:00Z"},
            "status": {"phase": "Running", "reason": "NodeLost"}});
        assert_eq!(status_of(deleting), "Unknown");
    }

    #[test]
    fn scheduling_gated_pods_say_so() {
        let obj = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert_eq!(status_of(obj), "SchedulingGated");
    }

    #[test]
    fn readiness_gates_count_true_conditions() {
        let obj = json!({"spec": {"readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]},
            "status": {"nominatedNodeName": "n2",
                "conditions": [{"type": "a", "status": "True"}, {"type": "b", "status": "False"}]}});
        let r = row(obj);
        assert_eq!(r[7], json!("n2"));
        assert_eq!(r[8], json!("1/2"));
    }
}
