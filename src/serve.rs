//! `rudder etcd` and `rudder server`: open the storage and serve it.
//!
//! `rudder etcd` serves only the etcd v3 gateway. `rudder server` is the all-in-one process; the
//! Kubernetes API is not built yet, so today it serves the etcd gateway over the embedded SQLite
//! store (or the store `--storage` names) and says so in its log.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rudder_etcd_gateway::Gateway;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct EtcdArgs {
    /// Storage URL (default: SQLite in the data dir).
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: Option<String>,
    /// Directory for the embedded SQLite database.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
    /// Address the etcd v3 gRPC API listens on.
    #[arg(long, default_value = "127.0.0.1:2379")]
    listen: SocketAddr,
    /// How often watches that ask for progress notifications get one (like etcd's flag).
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    watch_progress_notify_interval: std::time::Duration,
}

fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    rudder_storage::config::parse_duration(text).map_err(|error| error.to_string())
}

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Storage URL (default: SQLite in the data dir).
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: Option<String>,
    /// Directory for the embedded SQLite database (and, later, certificates and kubeconfig).
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
    /// Address the etcd v3 gateway listens on.
    #[arg(long, default_value = "127.0.0.1:2379")]
    etcd_listen: SocketAddr,
    /// How often gateway watches that ask for progress notifications get one.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    watch_progress_notify_interval: std::time::Duration,
}

fn storage_url(storage: Option<String>, data_dir: &std::path::Path) -> String {
    storage.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("state.db").display()))
}

/// `rudder etcd`.
pub async fn etcd(args: EtcdArgs) -> Result<()> {
    serve_gateway(
        &storage_url(args.storage, &args.data_dir),
        args.listen,
        args.watch_progress_notify_interval,
    )
    .await
}

/// `rudder server`.
pub async fn server(args: ServerArgs) -> Result<()> {
    tracing::warn!(
        "the Kubernetes API is not built yet: this server offers the etcd v3 gateway only"
    );
    serve_gateway(
        &storage_url(args.storage, &args.data_dir),
        args.etcd_listen,
        args.watch_progress_notify_interval,
    )
    .await
}

async fn serve_gateway(
    url: &str,
    listen: SocketAddr,
    progress_notify_interval: std::time::Duration,
) -> Result<()> {
    let store = rudder_storage::open(url).await?;
    let status = store.status().await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| {
            format!("cannot listen on {listen} (is another etcd or Rudder using it?)")
        })?;
    let local = listener.local_addr()?;
    tracing::info!(
        storage = %redact(url),
        driver = %status.driver,
        revision = status.revision,
        "serving the etcd v3 API on {local}: try `ETCDCTL_API=3 etcdctl --endpoints {local} endpoint status`"
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
        stop.cancel();
    });
    let served = Gateway::new(store.clone(), format!("http://{local}"))
        .with_progress_notify_interval(progress_notify_interval)
        .serve(listener, shutdown)
        .await;
    store.close().await;
    served.context("the etcd gateway failed")
}

/// The URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            super::redact("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(super::redact("sqlite://x.db"), "sqlite://x.db");
    }
}
