//! `rudder scheduler`: the scheduler alone, against any cluster's API through a kubeconfig
//! (`rudder server` runs the same scheduler in-process).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rudder_scheduler::{Config, Runner, SchedulerConfiguration};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct SchedulerArgs {
    /// The kubeconfig of the cluster to schedule for (its current context).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): profiles,
    /// plugins, weights, plugin arguments.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Hold the Lease kube-system/kube-scheduler, so that of several schedulers one works.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Where `/metrics` and `/healthz` are served, over plain HTTP (upstream's former
    /// insecure port); empty serves none.
    #[arg(long, default_value = "127.0.0.1:10251", value_parser = crate::network::optional_address)]
    // Spelt out so that clap takes the parser's `Option` as the value (empty: none).
    metrics_bind_address: std::option::Option<std::net::SocketAddr>,
}

/// Reads a `--config` file, or the defaults without one.
pub fn configuration(path: Option<&Path>) -> Result<SchedulerConfiguration> {
    let Some(path) = path else {
        return Ok(SchedulerConfiguration::default());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    SchedulerConfiguration::parse(&text).with_context(|| format!("{}", path.display()))
}

/// A scheduler client of the cluster `kubeconfig` names.
pub async fn runner(
    kubeconfig: &Path,
    configuration: SchedulerConfiguration,
    leader_election: bool,
) -> Result<Runner> {
    let client = crate::serve::client_for(kubeconfig).await?;
    Runner::new(Config {
        client,
        identity: crate::controller_manager::identity(),
        configuration,
        leader_election,
    })
    .context("the scheduler configuration")
}

/// `rudder scheduler`.
pub async fn run(args: SchedulerArgs, shutdown: CancellationToken) -> Result<()> {
    let configuration = configuration(args.config.as_deref())?;
    let runner = runner(&args.kubeconfig, configuration, args.leader_elect).await?;
    crate::network::serve_metrics(
        args.metrics_bind_address,
        "scheduler",
        |registry| runner.metrics().register(registry),
        shutdown.clone(),
    )
    .await?;
    runner.run(shutdown).await;
    Ok(())
}
