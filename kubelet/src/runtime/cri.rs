//! [`CriRuntime`]: the [`Runtime`] trait over CRI v1 gRPC on containerd's unix socket.
//!
//! The channel connects lazily, so an agent may start before containerd does; every call
//! then fails with the runtime's own error until the socket answers.

use std::path::PathBuf;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{api, ExecOutput, Result, Runtime, RuntimeError, Version};

/// containerd through CRI.
#[derive(Clone)]
pub struct CriRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

impl CriRuntime {
    /// A runtime at `endpoint`: `unix:///path/to/containerd.sock` or a bare path.
    pub fn new(endpoint: &str) -> Result<Self> {
        let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        // The URI is required by tonic and ignored by the connector.
        let channel = Endpoint::try_from("http://[::1]:50051")
            .map_err(|e| RuntimeError::Connect {
                endpoint: endpoint.to_owned(),
                message: e.to_string(),
            })?
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    fn rt(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }
}

fn image_spec(image: &str) -> Option<api::ImageSpec> {
    Some(api::ImageSpec {
        image: image.to_owned(),
        ..Default::default()
    })
}

#[async_trait]
impl Runtime for CriRuntime {
    async fn version(&self) -> Result<Version> {
        let reply = self
            .rt()
            .version(api::VersionRequest {
                version: "v1".into(),
            })
            .await?
            .into_inner();
        Ok(Version {
            name: reply.runtime_name,
            version: reply.runtime_version,
        })
    }

    async fn ready(&self) -> Result<bool> {
        let reply = self
            .rt()
            .status(api::StatusRequest { verbose: false })
            .await?
            .into_inner();
        let conditions = reply.status.map(|s| s.conditions).unwrap_or_default();
        let ready = |kind: &str| conditions.iter().any(|c| c.r#type == kind && c.status);
        Ok(ready("RuntimeReady") && ready("NetworkReady"))
    }

    async fn update_pod_cidr(&self, pod_cidrs: &str) -> Result<()> {
        self.rt()
            .update_runtime_config(api::UpdateRuntimeConfigRequest {
                runtime_config: Some(api::RuntimeConfig {
                    network_config: Some(api::NetworkConfig {
                        pod_cidr: pod_cidrs.to_owned(),
                    }),
                }),
            })
            .await?;
        Ok(())
    }

    async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let reply = self
            .images
            .clone()
            .image_status(api::ImageStatusRequest {
                image: image_spec(image),
                verbose: false,
            })
            .await?
            .into_inner();
        Ok(reply.image)
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        let reply = self
            .images
            .clone()
            .pull_image(api::PullImageRequest {
                image: image_spec(image),
                ..Default::default()
            })
            .await?
            .into_inner();
        Ok(reply.image_ref)
    }

    async fn list_images(&self) -> Result<Vec<api::Image>> {
        let reply = self
            .images
            .clone()
            .list_images(api::ListImagesRequest { filter: None })
            .await?
            .into_inner();
        Ok(reply.images)
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.images
            .clone()
            .remove_image(api::RemoveImageRequest {
                image: image_spec(image),
            })
            .await?;
        Ok(())
    }

    async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>> {
        let reply = self
            .rt()
            .list_container_stats(api::ListContainerStatsRequest { filter: None })
            .await?
            .into_inner();
        Ok(reply.stats)
    }

    async fn image_fs_info(&self) -> Result<Vec<api::FilesystemUsage>> {
        let reply = self
            .images
            .clone()
            .image_fs_info(api::ImageFsInfoRequest {})
            .await?
            .into_inner();
        Ok(reply.image_filesystems)
    }

    async fn run_pod_sandbox(
        &self,
        config: &api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let reply = self
            .rt()
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: runtime_handler.to_string(),
            })
            .await?
            .into_inner();
        Ok(reply.pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.rt()
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: id.to_owned(),
            })
            .await?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.rt()
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_owned(),
            })
            .await?;
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus> {
        let reply = self
            .rt()
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_owned(),
                verbose: false,
            })
            .await?
            .into_inner();
        reply
            .status
            .ok_or_else(|| RuntimeError::NotFound(format!("sandbox {id}")))
    }

    async fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>> {
        let reply = self
            .rt()
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await?
            .into_inner();
        Ok(reply.items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: &api::ContainerConfig,
        sandbox_config: &api::PodSandboxConfig,
    ) -> Result<String> {
        let reply = self
            .rt()
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_owned(),
                config: Some(config.clone()),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await?
            .into_inner();
        Ok(reply.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.rt()
            .start_container(api::StartContainerRequest {
                container_id: id.to_owned(),
            })
            .await?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        self.rt()
            .stop_container(api::StopContainerRequest {
                container_id: id.to_owned(),
                timeout: timeout_seconds,
            })
            .await?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.rt()
            .remove_container(api::RemoveContainerRequest {
                container_id: id.to_owned(),
            })
            .await?;
        Ok(())
    }

    async fn list_containers(&self, sandbox_id: Option<&str>) -> Result<Vec<api::Container>> {
        let filter = sandbox_id.map(|id| api::ContainerFilter {
            pod_sandbox_id: id.to_owned(),
            ..Default::default()
        });
        let reply = self
            .rt()
            .list_containers(api::ListContainersRequest { filter })
            .await?
            .into_inner();
        Ok(reply.containers)
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus> {
        let reply = self
            .rt()
            .container_status(api::ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: false,
            })
            .await?
            .into_inner();
        reply
            .status
            .ok_or_else(|| RuntimeError::NotFound(format!("container {id}")))
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout_seconds: i64,
    ) -> Result<ExecOutput> {
        let reply = self
            .rt()
            .exec_sync(api::ExecSyncRequest {
                container_id: id.to_owned(),
                cmd: cmd.to_vec(),
                timeout: timeout_seconds,
            })
            .await?
            .into_inner();
        Ok(ExecOutput {
            exit_code: reply.exit_code,
            stdout: reply.stdout,
            stderr: reply.stderr,
        })
    }

    async fn exec(&self, request: api::ExecRequest) -> Result<String> {
        Ok(self.rt().exec(request).await?.into_inner().url)
    }

    async fn attach(&self, request: api::AttachRequest) -> Result<String> {
        Ok(self.rt().attach(request).await?.into_inner().url)
    }

    async fn port_forward(&self, request: api::PortForwardRequest) -> Result<String> {
        Ok(self.rt().port_forward(request).await?.into_inner().url)
    }
}
