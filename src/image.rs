//! `rudder image import FILE…` and `rudder image ls`: the node's images in containerd's
//! `k8s.io` namespace, where the CRI finds them. Listing goes through the CRI (what the agent
//! sees); importing an OCI-layout or docker-archive tar is handed to containerd's own `ctr`
//! (the CRI has no import), which unpacks it for the CRI at once.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use comfy_table::{presets, Table};
use rudder_kubelet::runtime::cri::CriRuntime;
use rudder_kubelet::runtime::Runtime;

#[derive(clap::Subcommand)]
pub enum ImageCommand {
    /// Import image tars (OCI layout or docker-archive; names must be fully qualified, as
    /// `localhost/app:1`).
    Import {
        files: Vec<PathBuf>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// List the images the node's pods can use.
    Ls {
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
}

#[derive(clap::Args)]
pub struct RuntimeArgs {
    /// containerd's CRI socket; by default the system's, else that of the containerd
    /// `rudder server --data-dir DIR` runs of its own.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
}

impl RuntimeArgs {
    fn endpoint(&self) -> String {
        if let Some(given) = &self.container_runtime_endpoint {
            return given.clone();
        }
        let system = crate::agent::DEFAULT_RUNTIME_ENDPOINT;
        if std::path::Path::new(socket(system)).exists() {
            return system.to_owned();
        }
        format!(
            "unix://{}",
            self.data_dir.join("containerd/containerd.sock").display()
        )
    }
}

fn socket(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

pub async fn run(command: ImageCommand) -> Result<()> {
    match command {
        ImageCommand::Import { files, runtime } => {
            let container_runtime_endpoint = runtime.endpoint();
            if files.is_empty() {
                bail!("name at least one image tar to import");
            }
            for file in files {
                let status = tokio::process::Command::new("ctr")
                    .args([
                        "--address",
                        socket(&container_runtime_endpoint),
                        "-n",
                        "k8s.io",
                    ])
                    .args(["images", "import"])
                    .arg(&file)
                    .status()
                    .await
                    .context("running containerd's ctr (package containerd)")?;
                if !status.success() {
                    bail!("importing {} failed ({status})", file.display());
                }
            }
            Ok(())
        }
        ImageCommand::Ls { runtime } => {
            let runtime = CriRuntime::new(&runtime.endpoint())?;
            let mut images = runtime.list_images().await?;
            images.sort_by(|a, b| a.repo_tags.cmp(&b.repo_tags));
            let mut table = Table::new();
            table
                .load_preset(presets::NOTHING)
                .set_header(["IMAGE", "IMAGE ID", "SIZE"]);
            for image in images {
                let id = image.id.trim_start_matches("sha256:");
                let size = format!("{:.1}MB", image.size as f64 / 1e6);
                let names = if image.repo_tags.is_empty() {
                    vec!["<none>".to_string()]
                } else {
                    image.repo_tags.clone()
                };
                for name in names {
                    table.add_row([name, id.chars().take(13).collect(), size.clone()]);
                }
            }
            println!("{table}");
            Ok(())
        }
    }
}
