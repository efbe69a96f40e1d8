//! An in-process apiserver on a fresh store, with the scheduler against it when asked, for the
//! benches that drive a whole control plane (`scheduler`, `kubelet`, `controllers`): started
//! over whatever an interrupted run left behind, and wiped when closed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use rudder_apiserver::server::{self, Config, Running};
use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;

use super::api::{admin_config, cleanup};

pub(super) struct Cluster {
    pub running: Running,
    pub store: Arc<dyn Storage>,
    url: String,
    dir: PathBuf,
    admin: kube::Config,
    /// Ends the scheduler and whatever else the bench ties to the cluster.
    pub stop: CancellationToken,
}

/// An apiserver on the store at `url`, its files under `dir`.
pub(super) async fn start(url: String, dir: PathBuf) -> Result<Cluster> {
    if dir.exists() {
        let _ = cleanup(&url, &dir).await;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let store = rudder_storage::open(&url)
        .await
        .context("opening the store")?;
    let mut config = Config::new(dir.join("apiserver"));
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let stop = CancellationToken::new();
    let running = server::start(config, store.clone(), stop.clone())
        .await
        .context("starting the apiserver")?;
    let admin = admin_config(&running).await?;
    Ok(Cluster {
        running,
        store,
        url,
        dir,
        admin,
        stop,
    })
}

impl Cluster {
    /// The scheduler against this apiserver (as `system:kube-scheduler`, no leader
    /// election), until the cluster stops.
    pub async fn start_scheduler(&self) -> Result<()> {
        let runner = crate::scheduler::runner(
            &self.running.scheduler_kubeconfig,
            rudder_scheduler::SchedulerConfiguration::default(),
            false,
        )
        .await?;
        tokio::spawn(runner.run(self.stop.child_token()));
        Ok(())
    }

    /// A client as the admin, with a connection pool of its own.
    pub fn client(&self) -> Result<Client> {
        Client::try_from(self.admin.clone()).context("a kube client")
    }

    /// Stops what runs against the cluster, then the apiserver; closes and wipes the store.
    pub async fn close(self) -> Result<()> {
        self.stop.cancel();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopped = self.running.stop().await.context("stopping the apiserver");
        self.store.close().await;
        stopped.and(cleanup(&self.url, &self.dir).await)
    }
}
