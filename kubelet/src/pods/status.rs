//! A pod's status from what the runtime shows and what the worker decided: container statuses
//! (state, lastState, restartCount, ready, started, imageID, containerID), the phase by
//! upstream's rules, and the conditions PodReadyToStartContainers, Initialized,
//! ContainersReady and Ready (conditions of other owners, like PodScheduled, are kept).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::probes::{Kind, ProbeState};
use crate::runtime::api;

/// Runtime records of one pod's containers by name, newest attempt first.
pub type Records = HashMap<String, Vec<api::ContainerStatus>>;

/// Why a container is not running although it should (set by the worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Everything the status is made of.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub records: &'a Records,
    pub waiting: &'a HashMap<String, Waiting>,
    pub probes: &'a HashMap<(String, Kind), ProbeState>,
    pub sandbox_ready: bool,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    pub runtime_name: &'a str,
    pub start_time: Option<Time>,
    /// Every init container has completed (sidecars: started).
    pub initialized: bool,
    /// The pod is done for good (terminated containers will not be restarted).
    pub terminal: bool,
}

pub fn time(nanos: i64) -> Option<Time> {
    if nanos <= 0 {
        return None;
    }
    let seconds = nanos / 1_000_000_000;
    jiff::Timestamp::from_second(seconds).ok().map(Time)
}

/// The terminated state of an exited container's record.
pub fn terminated(record: &api::ContainerStatus, runtime_name: &str) -> ContainerStateTerminated {
    let reason = if record.reason.is_empty() {
        if record.exit_code == 0 {
            "Completed"
        } else {
            "Error"
        }
        .to_owned()
    } else {
        record.reason.clone()
    };
    ContainerStateTerminated {
        exit_code: record.exit_code,
        reason: Some(reason),
        message: Some(record.message.clone()).filter(|m| !m.is_empty()),
        started_at: time(record.started_at),
        finished_at: time(record.finished_at),
        container_id: Some(format!("{runtime_name}://{}", record.id)),
        signal: None,
    }
}

fn is_running(record: &api::ContainerStatus) -> bool {
    record.state == api::ContainerState::ContainerRunning as i32
}

pub fn is_exited(record: &api::ContainerStatus) -> bool {
    record.state == api::ContainerState::ContainerExited as i32
}

/// A container's status.
pub fn container_status(
    inputs: &Inputs<'_>,
    container: &Container,
    default_waiting: &str,
) -> ContainerStatus {
    let records = inputs
        .records
        .get(&container.name)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let latest = records.first();
    let previous = records.get(1);
    let verdict = |kind: Kind| {
        latest.and_then(|record| {
            inputs
                .probes
                .get(&(container.name.clone(), kind))
                .filter(|state| state.container_id == record.id)
                .map(|state| state.verdict)
        })
    };
    let running = latest.is_some_and(is_running);
    let started = running
        && (container.startup_probe.is_none() || verdict(Kind::Startup) == Some(Some(true)));
    let ready = started
        && (container.readiness_probe.is_none() || verdict(Kind::Readiness) == Some(Some(true)));
    let waiting = inputs.waiting.get(&container.name);
    let (state, last) = match (latest, waiting) {
        (Some(record), None) if running => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time(record.started_at),
                }),
                ..Default::default()
            },
            previous.filter(|p| is_exited(p)),
        ),
        (Some(record), None) if is_exited(record) => (
            ContainerState {
                terminated: Some(terminated(record, inputs.runtime_name)),
                ..Default::default()
            },
            previous.filter(|p| is_exited(p)),
        ),
        (latest, waiting) => {
            let (reason, message) = match waiting {
                Some(w) => (
                    w.reason.clone(),
                    Some(w.message.clone()).filter(|m| !m.is_empty()),
                ),
                None => (default_waiting.to_owned(), None),
            };
            (
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason),
                        message,
                    }),
                    ..Default::default()
                },
                latest
                    .filter(|l| is_exited(l))
                    .or(previous.filter(|p| is_exited(p))),
            )
        }
    };
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: latest.map(|r| r.image_ref.clone()).unwrap_or_default(),
        container_id: latest
            .filter(|r| !is_exited(r) || waiting.is_none())
            .map(|r| format!("{}://{}", inputs.runtime_name, r.id)),
        ready,
        started: Some(started),
        restart_count: latest
            .and_then(|r| r.metadata.as_ref())
            .map(|m| i32::try_from(m.attempt).unwrap_or(i32::MAX))
            .unwrap_or(0),
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: last.map(|r| terminated(r, inputs.runtime_name)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream's phase rules over the regular containers' statuses.
pub fn phase(
    pod: &Pod,
    statuses: &[ContainerStatus],
    initialized: bool,
    init_failed: bool,
) -> &'static str {
    if init_failed {
        return "Failed";
    }
    if !initialized {
        return "Pending";
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for status in statuses {
        let state = status.state.as_ref();
        if state.and_then(|s| s.running.as_ref()).is_some() {
            running += 1;
        } else if let Some(done) = state.and_then(|s| s.terminated.as_ref()) {
            stopped += 1;
            if done.exit_code == 0 {
                succeeded += 1;
            }
        } else if status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        return match policy {
            "Always" => "Running",
            "OnFailure" if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ if stopped == succeeded => "Succeeded",
            _ => "Failed",
        };
    }
    "Pending"
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    previous: &[PodCondition],
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let old = previous.iter().find(|c| c.type_ == kind);
    let since = match old {
        Some(old) if old.status == status => old.last_transition_time.clone(),
        _ => Some(Time(jiff::Timestamp::now())),
    };
    PodCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: if ok { None } else { reason.map(str::to_owned) },
        last_transition_time: since,
        ..Default::default()
    }
}

const OWN_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// The pod's whole status.
pub fn build(inputs: &Inputs<'_>, init_failed: bool) -> PodStatus {
    let pod = inputs.pod;
    let spec = pod.spec.as_ref();
    let init_statuses: Vec<ContainerStatus> = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .map(|c| container_status(inputs, c, "PodInitializing"))
        .collect();
    let default_waiting = if inputs.initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses: Vec<ContainerStatus> = spec
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| container_status(inputs, c, default_waiting))
        .collect();
    let phase = if inputs.terminal {
        match phase(pod, &statuses, inputs.initialized, init_failed) {
            "Succeeded" => "Succeeded",
            _ => "Failed",
        }
    } else {
        phase(pod, &statuses, inputs.initialized, init_failed)
    };
    let previous = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let all_ready = !statuses.is_empty() && statuses.iter().all(|s| s.ready);
    let sidecars_ready = init_statuses
        .iter()
        .zip(
            spec.and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten(),
        )
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .all(|(s, _)| s.ready);
    let containers_ready = all_ready && sidecars_ready && phase == "Running";
    let gates_ready = spec
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .all(|gate| {
            previous
                .iter()
                .any(|c| c.type_ == gate.condition_type && c.status == "True")
        });
    let mut conditions: Vec<PodCondition> = previous
        .iter()
        .filter(|c| !OWN_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    conditions.push(condition(
        "PodReadyToStartContainers",
        inputs.sandbox_ready,
        None,
        &previous,
    ));
    conditions.push(condition(
        "Initialized",
        inputs.initialized || phase == "Succeeded",
        Some("ContainersNotInitialized"),
        &previous,
    ));
    conditions.push(condition(
        "ContainersReady",
        containers_ready,
        Some("ContainersNotReady"),
        &previous,
    ));
    conditions.push(condition(
        "Ready",
        containers_ready && gates_ready,
        Some(if containers_ready {
            "ReadinessGatesNotReady"
        } else {
            "ContainersNotReady"
        }),
        &previous,
    ));
    let unready: Vec<&str> = statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    for c in conditions.iter_mut() {
        let readiness = c.type_ == "Ready" || c.type_ == "ContainersReady";
        if readiness && c.status == "False" && c.reason.as_deref() == Some("ContainersNotReady") {
            c.message = Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            ));
        }
    }
    let pod_ip = if inputs.pod_ip.is_empty() {
        None
    } else {
        Some(inputs.pod_ip.to_owned())
    };
    PodStatus {
        phase: Some(phase.to_owned()),
        conditions: Some(conditions),
        host_ip: Some(inputs.host_ip.to_owned()).filter(|ip| !ip.is_empty()),
        host_ips: Some(vec![HostIP {
            ip: inputs.host_ip.to_owned(),
        }])
        .filter(|_| !inputs.host_ip.is_empty()),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: inputs.start_time.clone(),
        qos_class: Some(rudder_facts::pods::qos_class(pod).as_str().to_owned()),
        container_statuses: Some(statuses),
        init_container_statuses: Some(init_statuses).filter(|s| !s.is_empty()),
        nominated_node_name: pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("img".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn record(state: api::ContainerState, exit_code: i32, attempt: u32) -> api::ContainerStatus {
        api::ContainerStatus {
            id: format!("id{attempt}"),
            metadata: Some(api::ContainerMetadata {
                name: "c".into(),
                attempt,
            }),
            state: state as i32,
            exit_code,
            started_at: 1_000_000_000,
            finished_at: 2_000_000_000,
            ..Default::default()
        }
    }

    fn status_of(pod: &Pod, records: Records, waiting: HashMap<String, Waiting>) -> PodStatus {
        let probes = HashMap::new();
        let inputs = Inputs {
            pod,
            records: &records,
            waiting: &waiting,
            probes: &probes,
            sandbox_ready: true,
            pod_ip: "10.0.0.2",
            host_ip: "192.168.0.1",
            runtime_name: "containerd",
            start_time: None,
            initialized: true,
            terminal: false,
        };
        build(&inputs, false)
    }

    #[test]
    fn a_running_container_is_ready_without_probes() {
        let pod = pod("Always");
        let records: Records = [(
            "c".to_string(),
            vec![record(api::ContainerState::ContainerRunning, 0, 0)],
        )]
        .into();
        let status = status_of(&pod, records, HashMap::new());
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.expect("statuses")[0];
        assert!(c.ready);
        assert_eq!(c.container_id.as_deref(), Some("containerd://id0"));
        let ready = status
            .conditions
            .expect("conditions")
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready");
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn crash_loop_is_waiting_with_the_last_termination_and_the_pod_stays_running() {
        let pod = pod("Always");
        let records: Records = [(
            "c".to_string(),
            vec![record(api::ContainerState::ContainerExited, 1, 2)],
        )]
        .into();
        let waiting = [(
            "c".to_string(),
            Waiting {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 20s".into(),
            },
        )]
        .into();
        let status = status_of(&pod, records, waiting);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.expect("statuses")[0];
        assert_eq!(c.restart_count, 2);
        let state = c.state.as_ref().expect("state");
        assert_eq!(
            state.waiting.as_ref().and_then(|w| w.reason.as_deref()),
            Some("CrashLoopBackOff")
        );
        let last = c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("last");
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert!(!c.ready);
    }

    #[test]
    fn phases_of_finished_containers_follow_the_restart_policy() {
        for (policy, code, want) in [
            ("Never", 0, "Succeeded"),
            ("Never", 1, "Failed"),
            ("OnFailure", 0, "Succeeded"),
            ("Always", 0, "Running"),
        ] {
            let pod = pod(policy);
            let records: Records = [(
                "c".to_string(),
                vec![record(api::ContainerState::ContainerExited, code, 0)],
            )]
            .into();
            let status = status_of(&pod, records, HashMap::new());
            assert_eq!(status.phase.as_deref(), Some(want), "{policy} exit {code}");
        }
        let pod = pod("Always");
        let status = status_of(&pod, Records::new(), HashMap::new());
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let c = &status.container_statuses.expect("statuses")[0];
        assert_eq!(
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref()),
            Some("ContainerCreating")
        );
    }
}
