//! One pod's worker: a loop that makes the runtime match the pod and reports what it sees.
//!
//! Each round ([`Worker::sync`]) goes through the pod's life in order:
//! 1. **Deleted** (a deletion timestamp): run preStop hooks, stop the containers within the
//!    grace period, remove the sandbox and the pod's directory, then delete the pod object
//!    for good (grace 0, uid precondition). The worker ends.
//! 2. **Terminal** (Succeeded/Failed reported): nothing runs any more; wait for deletion.
//!    **Evicted** (the eviction manager asked, see [`super::Handle::evict`]): every container
//!    is killed at once and the pod reported Failed, reason `Evicted`; a new pod on a node
//!    under pressure is refused the same way ([`crate::eviction::admit`]).
//! 3. **Volumes**, then the **sandbox** (created once, re-created if it dies).
//! 4. **Init containers** one at a time, in order; a sidecar (`restartPolicy: Always`) only has
//!    to be running for the next to start.
//! 5. **Containers**: started once the pod is initialized; an exited one is restarted as the
//!    restart policy says, after the CrashLoopBackOff delay; a failed liveness or startup
//!    probe kills it.
//! 6. **Probes** that are due run; the **status** is written when it changed.
//!
//! The round's answer says when to come back: soon after a change, at the next probe, or
//! after the resync period. A new version of the pod wakes the worker at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerStateTerminated, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{EventType, Recorder};
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::env::{self, Sources};
use super::probes::{self, Kind, ProbeState};
use super::spec::{self, pod_name, pod_namespace, pod_uid, ContainerInputs, NodeSettings};
use super::status::{self, Records, Waiting};
use super::volumes::PodVolumes;
use crate::runtime::{api, Runtime};

/// What every worker of a node shares.
pub struct Context {
    pub runtime: Arc<dyn Runtime>,
    pub client: kube::Client,
    pub node_name: String,
    pub host_ip: String,
    /// The agent's data dir (pods' volumes go under `pods/`).
    pub root: std::path::PathBuf,
    pub settings: NodeSettings,
    /// The prefix of container IDs in statuses (`containerd`).
    pub runtime_name: String,
    /// Hollow nodes keep no files and record no events.
    pub hollow: bool,
    pub allocatable: BTreeMap<String, String>,
    /// How often a quiet pod is looked at again.
    pub resync: Duration,
    pub recorder: Option<Recorder>,
    /// The pods that have workers, and the evictions asked for.
    pub pods: super::Handle,
    /// The node's pressure conditions, for admission.
    pub pressure: watch::Receiver<crate::eviction::Pressure>,
}

/// The latest word on a pod from the API.
#[derive(Clone)]
pub enum Update {
    Pod(Arc<Pod>),
    /// The pod object is gone (deleted without grace, or no longer bound here).
    Gone,
}

struct Sandbox {
    id: String,
    attempt: u32,
    config: api::PodSandboxConfig,
    ip: String,
}

/// How soon to come back after a round.
const SOON: Duration = Duration::from_millis(200);

pub struct Worker {
    ctx: Arc<Context>,
    sandbox: Option<Sandbox>,
    /// Sandboxes found for this pod when the agent started.
    found: Vec<api::PodSandbox>,
    backoff: Backoff,
    pull_failed: HashMap<String, i64>,
    waiting: HashMap<String, Waiting>,
    probes: HashMap<(String, Kind), ProbeState>,
    volumes: Option<PodVolumes>,
    volumes_synced: Option<Instant>,
    last_status: Option<PodStatus>,
    start_time: Option<Time>,
    terminal: bool,
    changed: bool,
    /// The latest version of the pod (for the hooks and paths when it is gone).
    pod: Option<Arc<Pod>>,
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn is_running(record: &api::ContainerStatus) -> bool {
    record.state == api::ContainerState::ContainerRunning as i32
}

fn is_exited(record: &api::ContainerStatus) -> bool {
    record.state == api::ContainerState::ContainerExited as i32
}

fn attempt_of(record: &api::ContainerStatus) -> u32 {
    record.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether a container that exited with `code` is started again under `policy`.
fn restarts(policy: &str, code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => code != 0,
        _ => false,
    }
}

fn pod_ref(pod: &Pod) -> String {
    format!("{}_{}({})", pod_name(pod), pod_namespace(pod), pod_uid(pod))
}

/// Runs the worker of one pod until the pod is gone or `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    found: Vec<api::PodSandbox>,
    mut updates: watch::Receiver<Update>,
    shutdown: CancellationToken,
) {
    let mut worker = Worker {
        ctx,
        sandbox: None,
        found,
        backoff: Backoff::default(),
        pull_failed: HashMap::new(),
        waiting: HashMap::new(),
        probes: HashMap::new(),
        volumes: None,
        volumes_synced: None,
        last_status: None,
        start_time: None,
        terminal: false,
        changed: false,
        pod: None,
    };
    loop {
        let update = updates.borrow_and_update().clone();
        // The agent stops at once, mid-round too, as upstream's kubelet does: a round may be
        // waiting out a container's grace period, and whatever it left undone the next agent
        // finds and finishes (the pod's containers keep running meanwhile).
        let next = match update {
            Update::Pod(pod) => {
                worker.pod = Some(pod.clone());
                let span = tracing::debug_span!("sync_pod", pod = %pod_ref(&pod));
                tokio::select! {
                    next = tracing::Instrument::instrument(worker.sync(&pod), span) => next,
                    () = shutdown.cancelled() => return,
                }
            }
            Update::Gone => {
                tokio::select! {
                    () = worker.kill_everything(2) => {}
                    () = shutdown.cancelled() => {}
                }
                return;
            }
        };
        let Some(after) = next else {
            return;
        };
        tokio::select! {
            changed = updates.changed() => {
                if changed.is_err() {
                    // The manager dropped this pod without a last word: the agent stops.
                    return;
                }
            }
            () = tokio::time::sleep(after) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

impl Worker {
    async fn event(&self, pod: &Pod, type_: EventType, reason: &str, note: String) {
        if let Some(recorder) = &self.ctx.recorder {
            rudder_runtime::events::publish(recorder, pod, type_, reason, reason, note).await;
        }
    }

    /// One round; `None` when the worker is done.
    async fn sync(&mut self, pod: &Pod) -> Option<Duration> {
        self.changed = false;
        if pod.metadata.deletion_timestamp.is_some() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or(pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds))
                .unwrap_or(30);
            self.kill_everything(grace).await;
            let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), pod_namespace(pod));
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(pod_uid(pod).to_owned()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            return match pods.delete(pod_name(pod), &params).await {
                Ok(_) => None,
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => None,
                Err(error) => {
                    tracing::warn!(pod = %pod_ref(pod), %error, "deleting a terminated pod");
                    Some(Duration::from_secs(1))
                }
            };
        }
        if self.terminal {
            return Some(self.ctx.resync * 6);
        }
        if let Some(eviction) = self.ctx.pods.eviction(pod_uid(pod)) {
            self.event(pod, EventType::Warning, "Evicted", eviction.message.clone())
                .await;
            let records = self.stop_for_eviction(pod, eviction.grace_seconds).await;
            self.terminal = true;
            self.fail(pod, &eviction.message, true, &records).await;
            return Some(self.ctx.resync * 6);
        }
        let new_here = self.start_time.is_none()
            && self.found.is_empty()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .is_none();
        if new_here {
            let refusal = crate::eviction::admit(pod, &self.ctx.pressure.borrow());
            if let Some(message) = refusal {
                self.event(pod, EventType::Warning, "Evicted", message.clone())
                    .await;
                self.terminal = true;
                self.fail(pod, &message, false, &Records::new()).await;
                return Some(self.ctx.resync * 6);
            }
        }
        if self.start_time.is_none() {
            self.start_time = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.clone())
                .or_else(|| Some(Time(jiff::Timestamp::now())));
        }
        let mut sources = Sources::new(self.ctx.client.clone(), pod_namespace(pod));
        if !self.ctx.hollow {
            let due = self
                .volumes_synced
                .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
            if due {
                let volumes = self
                    .volumes
                    .get_or_insert_with(|| PodVolumes::new(&self.ctx.root, pod));
                let synced = volumes
                    .sync(
                        pod,
                        &mut sources,
                        &self.ctx.client,
                        &self.ctx.host_ip,
                        &self.ctx.allocatable,
                    )
                    .await;
                if let Err(error) = synced {
                    let first = self.volumes_synced.is_none();
                    if first {
                        self.event(
                            pod,
                            EventType::Warning,
                            "FailedMount",
                            format!("MountVolume.SetUp failed: {error}"),
                        )
                        .await;
                        self.publish(pod, &Records::new(), false, false, false)
                            .await;
                        return Some(Duration::from_secs(2));
                    }
                    tracing::warn!(pod = %pod_ref(pod), %error, "refreshing volumes");
                } else {
                    self.volumes_synced = Some(Instant::now());
                }
            }
        }
        if let Err(error) = self.ensure_sandbox(pod).await {
            self.event(
                pod,
                EventType::Warning,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {error}"),
            )
            .await;
            self.publish(pod, &Records::new(), false, false, false)
                .await;
            return Some(Duration::from_secs(2));
        }
        let records = match self.observe().await {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!(pod = %pod_ref(pod), %error, "listing a pod's containers");
                return Some(Duration::from_secs(1));
            }
        };
        let (initialized, init_failed) = self.sync_init_containers(pod, &records).await;
        let spec = pod.spec.clone().unwrap_or_default();
        if initialized {
            for container in &spec.containers {
                self.sync_container(pod, container, &records, restart_policy(pod))
                    .await;
            }
        }
        let records = if self.changed {
            self.observe().await.unwrap_or(records)
        } else {
            records
        };
        let probe_due = self.run_probes(pod, &records).await;
        let finished = init_failed
            || (initialized
                && spec.containers.iter().all(|c| {
                    records
                        .get(&c.name)
                        .and_then(|r| r.first())
                        .is_some_and(|r| {
                            is_exited(r) && !restarts(restart_policy(pod), r.exit_code)
                        })
                }));
        if finished {
            self.terminal = true;
        }
        self.publish(pod, &records, true, initialized, init_failed)
            .await;
        if finished {
            // Sidecars and the sandbox stop; the containers stay for their logs.
            self.stop_sidecars_and_sandbox(pod, &records).await;
            return Some(self.ctx.resync * 6);
        }
        let mut next = if self.changed { SOON } else { self.ctx.resync };
        if let Some(at) = probe_due {
            next = next.min(
                at.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(50)),
            );
        }
        Some(next)
    }

    async fn ensure_sandbox(&mut self, pod: &Pod) -> Result<(), crate::runtime::RuntimeError> {
        if let Some(sandbox) = &self.sandbox {
            let status = self.ctx.runtime.pod_sandbox_status(&sandbox.id).await;
            match status {
                Ok(status) if status.state == api::PodSandboxState::SandboxReady as i32 => {
                    return Ok(())
                }
                _ => {
                    tracing::info!(pod = %pod_ref(pod), "the pod's sandbox is gone; creating a new one");
                }
            }
        }
        let mut attempt = 0;
        if self.sandbox.is_none() {
            let mut found = std::mem::take(&mut self.found);
            found.sort_by_key(|s| std::cmp::Reverse(s.metadata.as_ref().map(|m| m.attempt)));
            for sandbox in &found {
                let sandbox_attempt = sandbox.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
                attempt = attempt.max(sandbox_attempt + 1);
                if sandbox.state == api::PodSandboxState::SandboxReady as i32
                    && self.sandbox.is_none()
                {
                    let status = self.ctx.runtime.pod_sandbox_status(&sandbox.id).await?;
                    self.sandbox = Some(Sandbox {
                        id: sandbox.id.clone(),
                        attempt: sandbox_attempt,
                        config: spec::sandbox_config(&self.ctx.settings, pod, sandbox_attempt),
                        ip: status.network.map(|n| n.ip).unwrap_or_default(),
                    });
                } else {
                    let _ = self.ctx.runtime.stop_pod_sandbox(&sandbox.id).await;
                    let _ = self.ctx.runtime.remove_pod_sandbox(&sandbox.id).await;
                }
            }
            if self.sandbox.is_some() {
                return Ok(());
            }
        } else if let Some(old) = self.sandbox.take() {
            attempt = old.attempt + 1;
            let _ = self.ctx.runtime.stop_pod_sandbox(&old.id).await;
            let _ = self.ctx.runtime.remove_pod_sandbox(&old.id).await;
        }
        let config = spec::sandbox_config(&self.ctx.settings, pod, attempt);
        let handler = runtime_handler(&self.ctx.client, pod).await?;
        let id = self.ctx.runtime.run_pod_sandbox(&config, &handler).await?;
        let status = self.ctx.runtime.pod_sandbox_status(&id).await?;
        let mut ip = status.network.map(|n| n.ip).unwrap_or_default();
        if ip.is_empty() && spec::host_network(pod) {
            ip = self.ctx.host_ip.clone();
        }
        if let Some(volumes) = &self.volumes {
            if !spec::host_network(pod) {
                if let Err(error) = volumes.write_hosts(pod, &ip) {
                    tracing::warn!(pod = %pod_ref(pod), %error, "writing the pod's /etc/hosts");
                }
            }
        }
        self.sandbox = Some(Sandbox {
            id,
            attempt,
            config,
            ip,
        });
        self.changed = true;
        Ok(())
    }

    /// The containers of the current sandbox by name, newest attempt first.
    async fn observe(&self) -> crate::runtime::Result<Records> {
        let mut records = Records::new();
        let Some(sandbox) = &self.sandbox else {
            return Ok(records);
        };
        for container in self.ctx.runtime.list_containers(Some(&sandbox.id)).await? {
            let status = self.ctx.runtime.container_status(&container.id).await?;
            let name = status
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default();
            records.entry(name).or_default().push(status);
        }
        for list in records.values_mut() {
            list.sort_by_key(|r| std::cmp::Reverse(attempt_of(r)));
        }
        Ok(records)
    }

    /// Runs the init containers in order; returns (initialized, failed for good).
    async fn sync_init_containers(&mut self, pod: &Pod, records: &Records) -> (bool, bool) {
        let inits = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        for container in &inits {
            let latest = records.get(&container.name).and_then(|r| r.first());
            let sidecar = container.restart_policy.as_deref() == Some("Always");
            match latest {
                Some(record) if is_running(record) => {
                    if sidecar {
                        continue;
                    }
                    return (false, false);
                }
                Some(record) if is_exited(record) && record.exit_code == 0 && !sidecar => continue,
                Some(record) if is_exited(record) => {
                    let policy = if sidecar {
                        "Always"
                    } else {
                        restart_policy(pod)
                    };
                    if !sidecar && policy == "Never" {
                        return (false, true);
                    }
                    self.restart(pod, container, Some(record)).await;
                    return (false, false);
                }
                Some(record) => {
                    // Created but not started (an agent restart in between): start it.
                    if let Err(error) = self.ctx.runtime.start_container(&record.id).await {
                        tracing::warn!(pod = %pod_ref(pod), %error, "starting a created container");
                    }
                    self.changed = true;
                    return (false, false);
                }
                None => {
                    self.start(pod, container, 0).await;
                    return (false, false);
                }
            }
        }
        (true, false)
    }

    async fn sync_container(
        &mut self,
        pod: &Pod,
        container: &Container,
        records: &Records,
        policy: &str,
    ) {
        let latest = records.get(&container.name).and_then(|r| r.first());
        match latest {
            None => self.start(pod, container, 0).await,
            Some(record) if is_running(record) => {
                let failed = |kind| {
                    self.probes
                        .get(&(container.name.clone(), kind))
                        .filter(|s| s.container_id == record.id)
                        .is_some_and(|s| s.verdict == Some(false))
                };
                let failed_kind = [Kind::Startup, Kind::Liveness]
                    .into_iter()
                    .find(|k| failed(*k));
                if let Some(kind) = failed_kind {
                    let note = format!(
                        "Container {} failed {} probe, will be restarted",
                        container.name,
                        kind.name().to_lowercase()
                    );
                    self.event(pod, EventType::Normal, "Killing", note).await;
                    let grace = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                        .unwrap_or(30);
                    self.stop_one(container, &record.id, grace).await;
                    self.probes.retain(|(name, _), _| name != &container.name);
                    self.changed = true;
                }
            }
            Some(record) if is_exited(record) => {
                if restarts(policy, record.exit_code) {
                    self.restart(pod, container, Some(record)).await;
                } else {
                    self.waiting.remove(&container.name);
                }
            }
            Some(record) => {
                if let Err(error) = self.ctx.runtime.start_container(&record.id).await {
                    tracing::warn!(pod = %pod_ref(pod), %error, "starting a created container");
                }
                self.changed = true;
            }
        }
    }

    /// Restarts an exited container unless it is in back-off (then: CrashLoopBackOff).
    async fn restart(
        &mut self,
        pod: &Pod,
        container: &Container,
        latest: Option<&api::ContainerStatus>,
    ) {
        let Some(record) = latest else {
            return;
        };
        match self.backoff.check(
            &container.name,
            record.started_at,
            record.finished_at,
            now_nanos(),
        ) {
            Ok(()) => {
                self.start(pod, container, attempt_of(record) + 1).await;
                // Keep the container that just exited (for `logs --previous`), drop older ones.
                if let Some(sandbox) = &self.sandbox {
                    if let Ok(list) = self.ctx.runtime.list_containers(Some(&sandbox.id)).await {
                        for old in list {
                            let same = old.metadata.as_ref().is_some_and(|m| {
                                m.name == container.name && m.attempt < attempt_of(record)
                            });
                            if same {
                                let _ = self.ctx.runtime.remove_container(&old.id).await;
                            }
                        }
                    }
                }
            }
            Err(delay) => {
                let message = format!(
                    "back-off {}s restarting failed container={} pod={}",
                    delay.as_secs(),
                    container.name,
                    pod_ref(pod)
                );
                let previous = self.waiting.insert(
                    container.name.clone(),
                    Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message,
                    },
                );
                if previous.as_ref().map(|w| w.reason.as_str()) != Some("CrashLoopBackOff") {
                    let note = format!(
                        "Back-off restarting failed container {} in pod {}",
                        container.name,
                        pod_ref(pod)
                    );
                    self.event(pod, EventType::Warning, "BackOff", note).await;
                }
            }
        }
    }

    fn wait(&mut self, container: &Container, reason: &str, message: String) {
        self.waiting.insert(
            container.name.clone(),
            Waiting {
                reason: reason.to_owned(),
                message,
            },
        );
    }

    /// The image to run, pulling it as the pull policy says; `None` (with a waiting reason)
    /// when it is not available.
    async fn image(&mut self, pod: &Pod, container: &Container) -> Option<String> {
        let image = container.image.clone().unwrap_or_default();
        let tagged = image
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':') || last.contains('@'));
        let latest = !tagged || image.ends_with(":latest");
        let policy = container.image_pull_policy.clone().unwrap_or_else(|| {
            if latest {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let present = match self.ctx.runtime.image_status(&image).await {
            Ok(found) => found,
            Err(error) => {
                self.wait(container, "ErrImagePull", error.to_string());
                return None;
            }
        };
        match (&present, policy.as_str()) {
            (Some(found), "IfNotPresent" | "Never") => return Some(found.id.clone()),
            (None, "Never") => {
                let message =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.wait(container, "ErrImageNeverPull", message.clone());
                self.event(pod, EventType::Warning, "ErrImageNeverPull", message)
                    .await;
                return None;
            }
            _ => {}
        }
        let key = format!("image:{image}");
        if let Some(failed) = self.pull_failed.get(&key).copied() {
            if self.backoff.check(&key, 0, failed, now_nanos()).is_err() {
                self.wait(
                    container,
                    "ImagePullBackOff",
                    format!("Back-off pulling image \"{image}\""),
                );
                return None;
            }
        }
        self.event(
            pod,
            EventType::Normal,
            "Pulling",
            format!("Pulling image \"{image}\""),
        )
        .await;
        match self.ctx.runtime.pull_image(&image).await {
            Ok(reference) => {
                self.pull_failed.remove(&key);
                self.backoff.forget(&key);
                self.event(
                    pod,
                    EventType::Normal,
                    "Pulled",
                    format!("Successfully pulled image \"{image}\""),
                )
                .await;
                Some(reference)
            }
            Err(error) => {
                self.pull_failed.insert(key, now_nanos());
                let message = format!("Failed to pull image \"{image}\": {error}");
                self.wait(container, "ErrImagePull", message.clone());
                self.event(pod, EventType::Warning, "Failed", message).await;
                None
            }
        }
    }

    /// Creates and starts the `attempt`-th instance of `container`.
    async fn start(&mut self, pod: &Pod, container: &Container, attempt: u32) {
        let Some(sandbox) = &self.sandbox else {
            return;
        };
        let (sandbox_id, sandbox_config) = (sandbox.id.clone(), sandbox.config.clone());
        let Some(image) = self.image(pod, container).await else {
            self.changed = true;
            return;
        };
        let mut sources = Sources::new(self.ctx.client.clone(), pod_namespace(pod));
        let host_ip = self.ctx.host_ip.clone();
        let mut pod_with_ip = pod.clone();
        if let Some(sandbox) = &self.sandbox {
            let status = pod_with_ip.status.get_or_insert_with(Default::default);
            status.pod_ip = Some(sandbox.ip.clone());
        }
        let env = match env::resolve(
            &pod_with_ip,
            container,
            &mut sources,
            &host_ip,
            &self.ctx.allocatable,
        )
        .await
        {
            Ok(env) => env,
            Err(error) => {
                self.wait(container, "CreateContainerConfigError", error.0.clone());
                self.event(
                    pod,
                    EventType::Warning,
                    "Failed",
                    format!("Error: {}", error.0),
                )
                .await;
                return;
            }
        };
        let mounts = match &self.volumes {
            Some(volumes) => match volumes.mounts(pod, container) {
                Ok(mounts) => mounts,
                Err(error) => {
                    self.wait(container, "CreateContainerConfigError", error.0.clone());
                    return;
                }
            },
            None => Vec::new(),
        };
        let config = spec::container_config(
            pod,
            container,
            ContainerInputs {
                image,
                env,
                mounts,
                attempt,
                restart_policy: if container.restart_policy.as_deref() == Some("Always") {
                    "Always".into()
                } else {
                    restart_policy(pod).to_owned()
                },
            },
        );
        let id = match self
            .ctx
            .runtime
            .create_container(&sandbox_id, &config, &sandbox_config)
            .await
        {
            Ok(id) => id,
            Err(error) => {
                self.wait(container, "CreateContainerError", error.to_string());
                self.event(pod, EventType::Warning, "Failed", format!("Error: {error}"))
                    .await;
                return;
            }
        };
        self.event(
            pod,
            EventType::Normal,
            "Created",
            format!("Created container {}", container.name),
        )
        .await;
        if let Err(error) = self.ctx.runtime.start_container(&id).await {
            self.wait(container, "RunContainerError", error.to_string());
            self.event(pod, EventType::Warning, "Failed", format!("Error: {error}"))
                .await;
            return;
        }
        self.event(
            pod,
            EventType::Normal,
            "Started",
            format!("Started container {}", container.name),
        )
        .await;
        self.waiting.remove(&container.name);
        self.changed = true;
        if let Some(post_start) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        {
            if let Some(exec) = &post_start.exec {
                let command = exec.command.clone().unwrap_or_default();
                match self.ctx.runtime.exec_sync(&id, &command, 30).await {
                    Ok(output) if output.exit_code == 0 => {}
                    outcome => {
                        let message = match outcome {
                            Ok(output) => {
                                format!("command {command:?} exited with {}", output.exit_code)
                            }
                            Err(error) => error.to_string(),
                        };
                        self.event(pod, EventType::Warning, "FailedPostStartHook", message)
                            .await;
                        self.stop_one(container, &id, 2).await;
                    }
                }
            }
        }
        let started = Instant::now();
        for (kind, probe) in [
            (Kind::Startup, &container.startup_probe),
            (Kind::Liveness, &container.liveness_probe),
            (Kind::Readiness, &container.readiness_probe),
        ] {
            if let Some(probe) = probe {
                self.probes.insert(
                    (container.name.clone(), kind),
                    ProbeState::new(&id, probe, started),
                );
            }
        }
    }

    /// Runs the probes that are due; returns when the next one is.
    async fn run_probes(&mut self, pod: &Pod, records: &Records) -> Option<Instant> {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        let pod_ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let mut next: Option<Instant> = None;
        for container in containers {
            let Some(record) = records
                .get(&container.name)
                .and_then(|r| r.first())
                .filter(|r| is_running(r))
            else {
                continue;
            };
            let started = self
                .probes
                .get(&(container.name.clone(), Kind::Startup))
                .is_none_or(|s| s.verdict == Some(true));
            for (kind, probe) in [
                (Kind::Startup, &container.startup_probe),
                (Kind::Liveness, &container.liveness_probe),
                (Kind::Readiness, &container.readiness_probe),
            ] {
                let Some(probe) = probe else { continue };
                if kind != Kind::Startup && !started {
                    continue;
                }
                let key = (container.name.clone(), kind);
                // A container this worker did not start (adopted after an agent restart) is
                // probed from now on, as a fresh one would be.
                let known = self
                    .probes
                    .get(&key)
                    .is_some_and(|state| state.container_id == record.id);
                if !known {
                    self.probes.insert(
                        key.clone(),
                        ProbeState::new(&record.id, probe, Instant::now()),
                    );
                }
                let Some(state) = self.probes.get(&key) else {
                    continue;
                };
                if kind == Kind::Startup && state.verdict == Some(true) {
                    continue;
                }
                let now = Instant::now();
                if state.due(now) {
                    let (ok, output) = probes::run(
                        probe,
                        self.ctx.runtime.as_ref(),
                        container,
                        &record.id,
                        &pod_ip,
                    )
                    .await;
                    let Some(state) = self.probes.get_mut(&key) else {
                        continue;
                    };
                    if state.record(probe, ok, output.clone(), Instant::now()) {
                        self.changed = true;
                    }
                    if !ok {
                        let note = format!("{} probe failed: {}", kind.name(), output.trim());
                        self.event(pod, EventType::Warning, "Unhealthy", note).await;
                    }
                }
                if let Some(state) = self.probes.get(&key) {
                    next = Some(next.map_or(state.next_at(), |n| n.min(state.next_at())));
                }
            }
        }
        next
    }

    async fn publish(
        &mut self,
        pod: &Pod,
        records: &Records,
        sandbox_ready: bool,
        initialized: bool,
        init_failed: bool,
    ) {
        let pod_ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        let inputs = status::Inputs {
            pod,
            records,
            waiting: &self.waiting,
            probes: &self.probes,
            sandbox_ready: sandbox_ready && self.sandbox.is_some(),
            pod_ip: &pod_ip,
            host_ip: &self.ctx.host_ip,
            runtime_name: &self.ctx.runtime_name,
            start_time: self.start_time.clone(),
            initialized,
            terminal: self.terminal,
        };
        let status = status::build(&inputs, init_failed);
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let same_as_stored = pod
            .status
            .as_ref()
            .is_some_and(|stored| without_times(stored) == without_times(&status));
        if same_as_stored && self.last_status.is_none() {
            self.last_status = Some(status);
            return;
        }
        self.patch_status(pod, status, "updating a pod's status")
            .await;
    }

    /// Merge-patches the pod's status; `doing` names the step in the warning if it fails.
    async fn patch_status(&mut self, pod: &Pod, status: PodStatus, doing: &str) {
        let pods: Api<Pod> = Api::namespaced(self.ctx.client.clone(), pod_namespace(pod));
        let patch = Pod {
            status: Some(status.clone()),
            ..Default::default()
        };
        match pods
            .patch_status(
                pod_name(pod),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => self.last_status = Some(status),
            Err(error) => tracing::warn!(pod = %pod_ref(pod), %error, "{doing}"),
        }
    }

    /// Reports the pod Failed with reason `Evicted` and `message`: containers as they
    /// exited (`records`) or else as killed, not ready, and for an eviction (`disruption`)
    /// the `DisruptionTarget` condition upstream's kubelet sets.
    async fn fail(&mut self, pod: &Pod, message: &str, disruption: bool, records: &Records) {
        let now = Time(jiff::Timestamp::now());
        let mut status = self
            .last_status
            .clone()
            .or_else(|| pod.status.clone())
            .unwrap_or_default();
        status.phase = Some("Failed".into());
        status.reason = Some("Evicted".into());
        status.message = Some(message.to_owned());
        for statuses in [
            status.container_statuses.as_mut(),
            status.init_container_statuses.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            for c in statuses.iter_mut() {
                c.ready = false;
                c.started = Some(false);
                let state = c.state.get_or_insert_with(Default::default);
                let exited = records
                    .get(&c.name)
                    .and_then(|r| r.first())
                    .filter(|r| status::is_exited(r));
                if let Some(record) = exited {
                    state.running = None;
                    state.waiting = None;
                    state.terminated = Some(status::terminated(record, &self.ctx.runtime_name));
                } else if state.terminated.is_none() {
                    let started_at = state.running.take().and_then(|r| r.started_at);
                    state.waiting = None;
                    state.terminated = Some(ContainerStateTerminated {
                        exit_code: 137,
                        reason: Some("Error".into()),
                        started_at,
                        finished_at: Some(now.clone()),
                        ..Default::default()
                    });
                }
            }
        }
        let mut conditions: Vec<PodCondition> = status
            .conditions
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != "DisruptionTarget")
            .map(|mut c| {
                if matches!(c.type_.as_str(), "Ready" | "ContainersReady") && c.status != "False" {
                    c.status = "False".into();
                    c.reason = Some("PodFailed".into());
                    c.last_transition_time = Some(now.clone());
                }
                c
            })
            .collect();
        if disruption {
            conditions.push(PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("TerminationByKubelet".into()),
                message: Some(message.to_owned()),
                last_transition_time: Some(now.clone()),
                ..Default::default()
            });
        }
        status.conditions = Some(conditions);
        self.patch_status(pod, status, "reporting an evicted pod")
            .await;
    }

    async fn stop_one(&self, container: &Container, id: &str, grace: i64) {
        if let Some(pre_stop) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
        {
            if let Some(exec) = &pre_stop.exec {
                let command = exec.command.clone().unwrap_or_default();
                let _ = self.ctx.runtime.exec_sync(id, &command, grace.max(1)).await;
            } else if let Some(sleep) = &pre_stop.sleep {
                let seconds = u64::try_from(sleep.seconds.min(grace).max(0)).unwrap_or(0);
                tokio::time::sleep(Duration::from_secs(seconds)).await;
            }
        }
        if let Err(error) = self.ctx.runtime.stop_container(id, grace).await {
            tracing::warn!(container = %container.name, %error, "stopping a container");
        }
    }

    async fn stop_sidecars_and_sandbox(&mut self, pod: &Pod, records: &Records) {
        let inits = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.clone())
            .unwrap_or_default();
        for container in inits
            .iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        {
            if let Some(record) = records
                .get(&container.name)
                .and_then(|r| r.first())
                .filter(|r| is_running(r))
            {
                self.stop_one(container, &record.id, 2).await;
            }
        }
        if let Some(sandbox) = &self.sandbox {
            if let Err(error) = self.ctx.runtime.stop_pod_sandbox(&sandbox.id).await {
                tracing::warn!(pod = %pod_ref(pod), %error, "stopping a finished pod's sandbox");
            }
        }
    }

    /// Stops every running container within `grace` seconds (preStop hooks first) and the
    /// sandbox for an eviction, and frees the pod's volumes. The containers stay, as
    /// upstream's do, so their exit codes are reported and their logs read until the pod is
    /// deleted. Returns the containers as they ended.
    async fn stop_for_eviction(&mut self, pod: &Pod, grace: i64) -> Records {
        if self.sandbox.is_none() {
            self.kill_everything(grace).await;
            return Records::new();
        }
        let records = self.observe().await.unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let stops = records.iter().filter_map(|(name, list)| {
            let running = list.first().filter(|r| is_running(r))?;
            let container = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|c| &c.name == name)
                .cloned()
                .unwrap_or_else(|| Container {
                    name: name.clone(),
                    ..Default::default()
                });
            let id = running.id.clone();
            let this = &*self;
            Some(async move { this.stop_one(&container, &id, grace).await })
        });
        futures::future::join_all(stops).await;
        if let Some(sandbox) = &self.sandbox {
            if let Err(error) = self.ctx.runtime.stop_pod_sandbox(&sandbox.id).await {
                tracing::warn!(pod = %pod_ref(pod), %error, "stopping an evicted pod's sandbox");
            }
        }
        if let Some(volumes) = &mut self.volumes {
            volumes.tear_down();
        }
        self.observe().await.unwrap_or(records)
    }

    /// Stops every container (preStop hooks first, regular containers before sidecars)
    /// within `grace` seconds and removes the sandbox and the pod's files.
    async fn kill_everything(&mut self, grace: i64) {
        let mut sandboxes: Vec<String> = self.found.drain(..).map(|s| s.id).collect();
        if let Some(sandbox) = self.sandbox.take() {
            sandboxes.push(sandbox.id);
        }
        let this = &*self;
        for id in &sandboxes {
            let containers = this
                .ctx
                .runtime
                .list_containers(Some(id))
                .await
                .unwrap_or_default();
            let stops = containers
                .iter()
                .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
                .map(|c| {
                    let name = c
                        .metadata
                        .as_ref()
                        .map(|m| m.name.clone())
                        .unwrap_or_default();
                    let container = this
                        .pod
                        .as_ref()
                        .and_then(|p| p.spec.as_ref())
                        .and_then(|s| {
                            s.containers
                                .iter()
                                .chain(s.init_containers.iter().flatten())
                                .find(|c| c.name == name)
                                .cloned()
                        })
                        .unwrap_or(Container {
                            name,
                            ..Default::default()
                        });
                    async move {
                        this.stop_one(&container, &c.id, grace).await;
                    }
                });
            futures::future::join_all(stops).await;
            if let Err(error) = this.ctx.runtime.stop_pod_sandbox(id).await {
                tracing::warn!(sandbox = %id, %error, "stopping a sandbox");
            }
            if let Err(error) = this.ctx.runtime.remove_pod_sandbox(id).await {
                tracing::warn!(sandbox = %id, %error, "removing a sandbox");
            }
        }
        if let Some(volumes) = &mut self.volumes {
            volumes.tear_down();
        }
        if let Some(pod) = &self.pod {
            crate::cgroups::remove(&spec::cgroup_parent(&self.ctx.settings, pod));
        }
    }
}

/// A status without its condition timestamps, to compare with the stored one.
fn without_times(status: &PodStatus) -> PodStatus {
    let mut status = status.clone();
    for condition in status.conditions.iter_mut().flatten() {
        condition.last_transition_time = None;
        condition.last_probe_time = None;
    }
    status
}

/// The CRI runtime handler of the pod's RuntimeClass (`""` without one), as upstream's
/// kubelet looks it up when it creates the sandbox.
async fn runtime_handler(
    client: &kube::Client,
    pod: &Pod,
) -> Result<String, crate::runtime::RuntimeError> {
    let Some(name) = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.runtime_class_name.as_deref())
        .filter(|name| !name.is_empty())
    else {
        return Ok(String::new());
    };
    let classes: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(client.clone());
    match classes.get_opt(name).await {
        Ok(Some(class)) => Ok(class.handler),
        Ok(None) => Err(crate::runtime::RuntimeError::NotFound(format!(
            "RuntimeClass \"{name}\""
        ))),
        Err(error) => Err(crate::runtime::RuntimeError::Rpc(
            tonic::Status::unavailable(format!("reading RuntimeClass \"{name}\": {error}")),
        )),
    }
}
