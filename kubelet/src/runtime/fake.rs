//! [`FakeRuntime`]: an in-memory [`Runtime`] for hollow nodes (kubemark's idea) and tests.
//!
//! Sandboxes get an IP from a private counter, containers go Created → Running → Exited
//! without processes. A container whose pod does not restart it (`restartPolicy` Never or
//! OnFailure, read from the label the kubelet sets) exits 0 once it has run for
//! `completion_after`, so Job pods on hollow nodes finish; everything else runs until stopped,
//! or until a test calls [`FakeRuntime::exit`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{api, labels, ExecOutput, Result, Runtime, RuntimeError, Version};

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

struct Sandbox {
    config: api::PodSandboxConfig,
    ready: bool,
    created_at: i64,
    ip: String,
}

struct Container {
    sandbox_id: String,
    config: api::ContainerConfig,
    image_ref: String,
    state: api::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    /// What [`FakeRuntime::set_usage`] says the container uses: memory and writable layer.
    memory_bytes: u64,
    rootfs_bytes: u64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, Sandbox>,
    containers: BTreeMap<String, Container>,
    /// Container ids by sandbox id, so that one pod's calls cost nothing like the whole node's.
    by_sandbox: BTreeMap<String, Vec<String>>,
    images: BTreeMap<String, String>,
    /// Image sizes by id ([`FakeRuntime::add_image_of_size`]).
    image_sizes: BTreeMap<String, u64>,
}

/// The in-memory runtime. Clones share one state.
#[derive(Clone)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
    /// Every image counts as present (hollow nodes); otherwise only those added.
    all_images: bool,
    completion_after: Duration,
    /// The first three octets of sandbox IPs, e.g. `10.200.3`.
    ip_prefix: String,
}

impl FakeRuntime {
    /// A runtime on which every image is present, run-to-completion containers finish after
    /// `completion_after`, and sandboxes get IPs `<ip_prefix>.N`.
    pub fn new(ip_prefix: &str, completion_after: Duration) -> Self {
        Self {
            state: Arc::default(),
            all_images: true,
            completion_after,
            ip_prefix: ip_prefix.to_owned(),
        }
    }

    /// Only images added with [`FakeRuntime::add_image`] are present.
    pub fn with_local_images_only(mut self) -> Self {
        self.all_images = false;
        self
    }

    pub fn add_image(&self, name: &str) {
        let id = format!("sha256:{:064x}", name.len());
        self.lock().images.insert(name.to_owned(), id);
    }

    /// Adds an image of `size` bytes under its own id.
    pub fn add_image_of_size(&self, name: &str, size: u64) {
        let mut state = self.lock();
        let id = format!("sha256:{:064x}", state.images.len() + 1000);
        state.images.insert(name.to_owned(), id.clone());
        state.image_sizes.insert(id, size);
    }

    /// Makes the containers `name` of the pod `pod_uid` report `memory_bytes` of working set
    /// and `rootfs_bytes` in their writable layer.
    pub fn set_usage(&self, pod_uid: &str, name: &str, memory_bytes: u64, rootfs_bytes: u64) {
        let mut state = self.lock();
        let sandboxes: Vec<String> = state
            .sandboxes
            .iter()
            .filter(|(_, s)| label(&s.config.labels, labels::POD_UID) == pod_uid)
            .map(|(id, _)| id.clone())
            .collect();
        for container in state.containers.values_mut() {
            let named = container
                .config
                .metadata
                .as_ref()
                .is_some_and(|m| m.name == name);
            if named && sandboxes.contains(&container.sandbox_id) {
                container.memory_bytes = memory_bytes;
                container.rootfs_bytes = rootfs_bytes;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the running container `name` of the pod `pod_uid` exit with `code`.
    pub fn exit(&self, pod_uid: &str, name: &str, code: i32) -> bool {
        let mut state = self.lock();
        let sandboxes: Vec<String> = state
            .sandboxes
            .iter()
            .filter(|(_, s)| label(&s.config.labels, labels::POD_UID) == pod_uid)
            .map(|(id, _)| id.clone())
            .collect();
        let ids: Vec<String> = sandboxes
            .iter()
            .flat_map(|s| state.by_sandbox.get(s).cloned().unwrap_or_default())
            .collect();
        let Some(container) = ids.iter().find_map(|id| {
            let c = state.containers.get(id)?;
            let matches = c.state == api::ContainerState::ContainerRunning
                && c.config.metadata.as_ref().is_some_and(|m| m.name == name);
            matches.then_some(id.clone())
        }) else {
            return false;
        };
        let Some(container) = state.containers.get_mut(&container) else {
            return false;
        };
        finish(
            container,
            code,
            if code == 0 { "Completed" } else { "Error" },
        );
        true
    }

    /// How many sandboxes and containers exist (for tests and benches).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.sandboxes.len(), state.containers.len())
    }

    /// Lets a run-to-completion container that has run long enough finish.
    fn advance(&self, container: &mut Container) {
        let after = i64::try_from(self.completion_after.as_nanos()).unwrap_or(i64::MAX);
        let runs_to_completion =
            label(&container.config.labels, labels::RESTART_POLICY) != "Always";
        if container.state == api::ContainerState::ContainerRunning
            && runs_to_completion
            && now_nanos().saturating_sub(container.started_at) >= after
        {
            finish(container, 0, "Completed");
        }
    }

    fn id(state: &mut State, kind: &str) -> String {
        state.next_id += 1;
        format!("{kind}{:016x}", state.next_id)
    }
}

fn label<'a>(labels: &'a std::collections::HashMap<String, String>, key: &str) -> &'a str {
    labels.get(key).map(String::as_str).unwrap_or("")
}

fn finish(container: &mut Container, code: i32, reason: &str) {
    container.state = api::ContainerState::ContainerExited;
    container.finished_at = now_nanos();
    container.exit_code = code;
    container.reason = reason.to_owned();
}

fn not_found(what: &str) -> RuntimeError {
    RuntimeError::NotFound(what.to_owned())
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<Version> {
        Ok(Version {
            name: "fake".into(),
            version: "0.1.0".into(),
        })
    }

    async fn ready(&self) -> Result<bool> {
        Ok(true)
    }

    /// Sandboxes take their addresses from the runtime's own counter: the ranges change
    /// nothing.
    async fn update_pod_cidr(&self, _pod_cidrs: &str) -> Result<()> {
        Ok(())
    }

    async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let state = self.lock();
        let id = match state.images.get(image) {
            Some(id) => id.clone(),
            None if self.all_images => format!("sha256:{:064x}", image.len()),
            None => return Ok(None),
        };
        Ok(Some(api::Image {
            id,
            repo_tags: vec![image.to_owned()],
            ..Default::default()
        }))
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        Err(RuntimeError::Rpc(tonic::Status::unavailable(format!(
            "failed to pull image {image:?}: no registry is reachable from the fake runtime"
        ))))
    }

    async fn list_images(&self) -> Result<Vec<api::Image>> {
        let state = self.lock();
        Ok(state
            .images
            .iter()
            .map(|(name, id)| api::Image {
                id: id.clone(),
                repo_tags: vec![name.clone()],
                size: state.image_sizes.get(id).copied().unwrap_or(0),
                ..Default::default()
            })
            .collect())
    }

    /// Removes the image named `image` or with that id.
    async fn remove_image(&self, image: &str) -> Result<()> {
        let mut state = self.lock();
        state
            .images
            .retain(|name, id| name.as_str() != image && id.as_str() != image);
        Ok(())
    }

    async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>> {
        let state = self.lock();
        let now = now_nanos();
        let value = |value: u64| Some(api::UInt64Value { value });
        Ok(state
            .containers
            .iter()
            .filter(|(_, c)| c.state == api::ContainerState::ContainerRunning)
            .map(|(id, c)| api::ContainerStats {
                attributes: Some(api::ContainerAttributes {
                    id: id.clone(),
                    metadata: c.config.metadata.clone(),
                    labels: c.config.labels.clone(),
                    annotations: c.config.annotations.clone(),
                }),
                cpu: Some(api::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: value(0),
                    usage_nano_cores: value(0),
                }),
                memory: Some(api::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: value(c.memory_bytes),
                    usage_bytes: value(c.memory_bytes),
                    ..Default::default()
                }),
                writable_layer: Some(api::FilesystemUsage {
                    timestamp: now,
                    fs_id: None,
                    used_bytes: value(c.rootfs_bytes),
                    inodes_used: value(0),
                }),
                swap: None,
            })
            .collect())
    }

    async fn image_fs_info(&self) -> Result<Vec<api::FilesystemUsage>> {
        let state = self.lock();
        let used = state
            .images
            .values()
            .filter_map(|id| state.image_sizes.get(id))
            .sum();
        Ok(vec![api::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: None,
            used_bytes: Some(api::UInt64Value { value: used }),
            inodes_used: None,
        }])
    }

    async fn run_pod_sandbox(
        &self,
        config: &api::PodSandboxConfig,
        _runtime_handler: &str,
    ) -> Result<String> {
        let mut state = self.lock();
        let id = Self::id(&mut state, "sandbox");
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == api::NamespaceMode::Node as i32);
        let ip = if host_network {
            String::new()
        } else {
            format!("{}.{}", self.ip_prefix, state.next_id % 250 + 2)
        };
        state.sandboxes.insert(
            id.clone(),
            Sandbox {
                config: config.clone(),
                ready: true,
                created_at: now_nanos(),
                ip,
            },
        );
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        if let Some(sandbox) = state.sandboxes.get_mut(id) {
            sandbox.ready = false;
        }
        let ids = state.by_sandbox.get(id).cloned().unwrap_or_default();
        for id in &ids {
            if let Some(container) = state.containers.get_mut(id) {
                if container.state != api::ContainerState::ContainerExited {
                    finish(container, 137, "Error");
                }
            }
        }
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        state.sandboxes.remove(id);
        for container in state.by_sandbox.remove(id).unwrap_or_default() {
            state.containers.remove(&container);
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus> {
        let state = self.lock();
        let sandbox = state
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found(&format!("sandbox {id}")))?;
        Ok(api::PodSandboxStatus {
            id: id.to_owned(),
            metadata: sandbox.config.metadata.clone(),
            state: if sandbox.ready {
                api::PodSandboxState::SandboxReady as i32
            } else {
                api::PodSandboxState::SandboxNotready as i32
            },
            created_at: sandbox.created_at,
            network: Some(api::PodSandboxNetworkStatus {
                ip: sandbox.ip.clone(),
                ..Default::default()
            }),
            labels: sandbox.config.labels.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>> {
        let state = self.lock();
        Ok(state
            .sandboxes
            .iter()
            .map(|(id, sandbox)| api::PodSandbox {
                id: id.clone(),
                metadata: sandbox.config.metadata.clone(),
                state: if sandbox.ready {
                    api::PodSandboxState::SandboxReady as i32
                } else {
                    api::PodSandboxState::SandboxNotready as i32
                },
                created_at: sandbox.created_at,
                labels: sandbox.config.labels.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &api::ContainerConfig,
        _sandbox_config: &api::PodSandboxConfig,
    ) -> Result<String> {
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image_ref = match self.image_status(&image).await? {
            Some(found) => found.id,
            None => return Err(not_found(&format!("image {image:?}"))),
        };
        let mut state = self.lock();
        if !state.sandboxes.contains_key(sandbox_id) {
            return Err(not_found(&format!("sandbox {sandbox_id}")));
        }
        let id = Self::id(&mut state, "container");
        state
            .by_sandbox
            .entry(sandbox_id.to_owned())
            .or_default()
            .push(id.clone());
        state.containers.insert(
            id.clone(),
            Container {
                sandbox_id: sandbox_id.to_owned(),
                config: config.clone(),
                image_ref,
                state: api::ContainerState::ContainerCreated,
                created_at: now_nanos(),
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                memory_bytes: 0,
                rootfs_bytes: 0,
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        let container = state
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found(&format!("container {id}")))?;
        container.state = api::ContainerState::ContainerRunning;
        container.started_at = now_nanos();
        Ok(())
    }

    async fn stop_container(&self, id: &str, _timeout_seconds: i64) -> Result<()> {
        let mut state = self.lock();
        if let Some(container) = state.containers.get_mut(id) {
            if container.state != api::ContainerState::ContainerExited {
                finish(container, 137, "Error");
            }
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        if let Some(container) = state.containers.remove(id) {
            if let Some(ids) = state.by_sandbox.get_mut(&container.sandbox_id) {
                ids.retain(|c| c != id);
            }
        }
        Ok(())
    }

    async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<api::Container>> {
        let mut state = self.lock();
        let ids: Vec<String> = match sandbox_id {
            Some(sandbox) => state.by_sandbox.get(sandbox).cloned().unwrap_or_default(),
            None => state.containers.keys().cloned().collect(),
        };
        for id in &ids {
            if let Some(container) = state.containers.get_mut(id) {
                self.advance(container);
            }
        }
        Ok(ids
            .iter()
            .filter_map(|id| state.containers.get(id).map(|c| (id, c)))
            .map(|(id, c)| api::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_ref.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus> {
        let mut state = self.lock();
        let c = state
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found(&format!("container {id}")))?;
        self.advance(c);
        let c = &*c;
        Ok(api::ContainerStatus {
            id: id.to_owned(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: c.config.log_path.clone(),
            ..Default::default()
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        _cmd: &[String],
        _timeout_seconds: i64,
    ) -> Result<ExecOutput> {
        let state = self.lock();
        match state.containers.get(id) {
            Some(c) if c.state == api::ContainerState::ContainerRunning => {
                Ok(ExecOutput::default())
            }
            Some(_) => Err(RuntimeError::Rpc(tonic::Status::failed_precondition(
                "container is not running",
            ))),
            None => Err(not_found(&format!("container {id}"))),
        }
    }

    async fn exec(&self, _request: api::ExecRequest) -> Result<String> {
        Err(unsupported("exec"))
    }

    async fn attach(&self, _request: api::AttachRequest) -> Result<String> {
        Err(unsupported("attach"))
    }

    async fn port_forward(&self, _request: api::PortForwardRequest) -> Result<String> {
        Err(unsupported("port-forward"))
    }
}

fn unsupported(what: &str) -> RuntimeError {
    RuntimeError::Rpc(tonic::Status::unimplemented(format!(
        "{what} is not available on a hollow node"
    )))
}
