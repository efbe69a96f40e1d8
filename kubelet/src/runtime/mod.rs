//! The container runtime boundary: one trait, [`Runtime`], in CRI v1's own types, with two
//! implementations — [`cri::CriRuntime`] (containerd over its unix socket) and
//! [`fake::FakeRuntime`] (in memory, for hollow nodes and unit tests).
//!
//! The kubelet never calls `PullImage` for an image the runtime already has (containerd 1.6
//! contacts the registry even then), so the trait separates [`Runtime::image_status`] from
//! [`Runtime::pull_image`].

pub mod cri;
pub mod fake;

use async_trait::async_trait;
pub use k8s_cri::v1 as api;

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("connecting to the container runtime at {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    #[error("{0}")]
    Rpc(#[from] tonic::Status),
    #[error("{0} not found")]
    NotFound(String),
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// What one ExecSync returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The name and version the runtime reports (`containerd`, `1.6.20~ds1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub name: String,
    pub version: String,
}

/// A container runtime in CRI's terms. Every method maps to one CRI RPC.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    async fn version(&self) -> Result<Version>;
    /// Whether both the runtime and its network are ready (CRI `Status`).
    async fn ready(&self) -> Result<bool>;
    /// Hands the Node's pod ranges (`spec.podCIDRs`, comma-separated) to the runtime (CRI
    /// `UpdateRuntimeConfig`); containerd writes its CNI configuration from its template
    /// with them when it has a template and no network yet.
    async fn update_pod_cidr(&self, pod_cidrs: &str) -> Result<()>;

    /// The image `image` names, if the runtime has it (never contacts a registry).
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>>;
    /// Pulls `image`; returns the image reference (`sha256:…`).
    async fn pull_image(&self, image: &str) -> Result<String>;
    async fn list_images(&self) -> Result<Vec<api::Image>>;
    async fn remove_image(&self, image: &str) -> Result<()>;

    /// Creates and starts a sandbox; returns its id.
    /// Runs a sandbox with the runtime handler `runtime_handler` (a RuntimeClass's; `""` for
    /// the runtime's default).
    async fn run_pod_sandbox(
        &self,
        config: &api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String>;
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus>;
    async fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>>;

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &api::ContainerConfig,
        sandbox_config: &api::PodSandboxConfig,
    ) -> Result<String>;
    async fn start_container(&self, id: &str) -> Result<()>;
    /// Stops a container: SIGTERM, then SIGKILL after `timeout_seconds`.
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()>;
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// The containers of one sandbox, or of all when `sandbox_id` is `None`.
    async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<api::Container>>;
    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus>;

    async fn exec_sync(&self, id: &str, cmd: &[String], timeout_seconds: i64)
        -> Result<ExecOutput>;
    /// A one-shot URL of the runtime's streaming server for an exec session.
    async fn exec(&self, request: api::ExecRequest) -> Result<String>;
    async fn attach(&self, request: api::AttachRequest) -> Result<String>;
    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String>;

    /// CPU, memory and writable-layer usage of every container (CRI `ListContainerStats`).
    async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>>;
    /// What the runtime's images take on their filesystem(s) (CRI `ImageFsInfo`).
    async fn image_fs_info(&self) -> Result<Vec<api::FilesystemUsage>>;
}

/// The labels the kubelet puts on sandboxes and containers (upstream's names), so that what
/// runs can be traced back to its pod after a restart.
pub mod labels {
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// On containers: the pod's restart policy, which the fake runtime reads to let
    /// run-to-completion pods finish.
    pub const RESTART_POLICY: &str = "io.rudder.pod.restart-policy";
}
