//! `rudder etcd`: a store served as the etcd v3 gRPC API (also what `rudder server
//! --etcd-listen` runs beside the Kubernetes API). The gateway serves the whole store,
//! Secrets included, so it listens beyond loopback only with TLS and client-certificate
//! authentication (etcd's `--cert-file`, `--key-file`, `--trusted-ca-file`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rudder_etcd_gateway::{Gateway, Tls};
use rudder_storage::config::redact;
use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;

use crate::serve::{open_store, parse_interval};

#[derive(clap::Args)]
pub struct EtcdArgs {
    /// Storage URL (default: SQLite in the data dir).
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: Option<String>,
    /// Directory for the embedded SQLite database.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
    /// Address the etcd v3 gRPC API listens on (beyond loopback only with the TLS files).
    #[arg(long, default_value = "127.0.0.1:2379")]
    listen: SocketAddr,
    /// The gateway's certificate (PEM), as etcd's flag.
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// The gateway's private key (PEM), as etcd's flag.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// CA (PEM) whose client certificates are required, as etcd's `--trusted-ca-file` with
    /// `--client-cert-auth`.
    #[arg(long)]
    trusted_ca_file: Option<PathBuf>,
    /// How often watches that ask for progress notifications get one (like etcd's flag).
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    watch_progress_notify_interval: std::time::Duration,
}

/// The TLS files given, read; `None` when there are none. A certificate needs its key.
pub fn load_tls(cert: Option<&Path>, key: Option<&Path>, ca: Option<&Path>) -> Result<Option<Tls>> {
    let read =
        |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    match (cert, key) {
        (None, None) => {
            anyhow::ensure!(
                ca.is_none(),
                "a trusted CA for client certificates needs the gateway's own certificate and key too"
            );
            Ok(None)
        }
        (Some(cert), Some(key)) => Ok(Some(Tls {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            client_ca_pem: ca.map(read).transpose()?,
        })),
        _ => anyhow::bail!("the etcd gateway's certificate and key go together: give both"),
    }
}

/// The gateway serves the whole store, Secrets included: beyond loopback it needs TLS that
/// authenticates clients by certificate.
pub fn check_exposure(flag: &str, listen: SocketAddr, tls: Option<&Tls>) -> Result<()> {
    let authenticated = tls.is_some_and(|tls| tls.client_ca_pem.is_some());
    anyhow::ensure!(
        listen.ip().is_loopback() || authenticated,
        "{flag} {listen}: beyond a loopback address the etcd gateway needs TLS with client-certificate authentication (a certificate, its key and a trusted CA for clients); without them anyone who reaches it reads and writes every object"
    );
    Ok(())
}

/// `rudder etcd`: the gateway until `shutdown`.
pub async fn etcd(args: EtcdArgs, shutdown: CancellationToken) -> Result<()> {
    let tls = load_tls(
        args.cert_file.as_deref(),
        args.key_file.as_deref(),
        args.trusted_ca_file.as_deref(),
    )?;
    check_exposure("--listen", args.listen, tls.as_ref())?;
    let (url, store) = open_store(args.storage, &args.data_dir).await?;
    let served = Serve {
        store: store.clone(),
        url,
        listen: args.listen,
        progress_notify_interval: args.watch_progress_notify_interval,
        tls,
    }
    .until(shutdown)
    .await;
    store.close().await;
    served
}

/// The gateway over a store its caller opened (and closes).
pub struct Serve {
    pub store: Arc<dyn Storage>,
    /// The store's URL, for the log line.
    pub url: String,
    pub listen: SocketAddr,
    pub progress_notify_interval: std::time::Duration,
    pub tls: Option<Tls>,
}

impl Serve {
    /// Serves until `shutdown`.
    pub async fn until(self, shutdown: CancellationToken) -> Result<()> {
        let status = self.store.status().await?;
        let listen = self.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| {
                format!("cannot listen on {listen} (is another etcd or Rudder using it?)")
            })?;
        let local = listener.local_addr()?;
        tracing::info!(
            storage = %redact(&self.url),
            driver = %status.driver,
            revision = status.revision,
            "serving the etcd v3 API on {local}: try `ETCDCTL_API=3 etcdctl --endpoints {local} endpoint status`"
        );
        let mut gateway = Gateway::new(self.store, format!("http://{local}"))
            .with_progress_notify_interval(self.progress_notify_interval);
        if let Some(tls) = self.tls {
            gateway = gateway.with_tls(tls).advertising_scheme();
        }
        gateway
            .serve(listener, shutdown)
            .await
            .context("the etcd gateway failed")
    }
}
