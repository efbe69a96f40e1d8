//! `rudder etcd` and `rudder server`: open the storage and serve it.
//!
//! `rudder etcd` serves only the etcd v3 gateway. `rudder server` is the all-in-one process:
//! the Kubernetes API over HTTPS on the embedded SQLite store (or the store `--storage` names),
//! with the etcd gateway beside it when `--etcd-listen` is given.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rudder_etcd_gateway::Gateway;
use rudder_storage::config::redact;
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
    /// Storage URL: sqlite://PATH, postgres://USER@HOST:PORT/DB or etcd://HOST:PORT[,…]
    /// (default: SQLite in the data dir).
    #[arg(long, env = "RUDDER_STORAGE")]
    storage: Option<String>,
    /// Directory for the embedded SQLite database, the cluster PKI and the admin kubeconfig.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
    /// Address the Kubernetes API (HTTPS) listens on.
    #[arg(long, default_value = "0.0.0.0:6443")]
    listen: SocketAddr,
    /// Extra names or IPs for the serving certificate (repeatable).
    #[arg(long = "tls-san")]
    tls_san: Vec<String>,
    /// Static token file: CSV lines `token,user,uid,"group1,group2"`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// The range Service ClusterIPs come from.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// The range Service NodePorts come from.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// Also serve the etcd v3 gateway over the same store on this address.
    #[arg(long)]
    etcd_listen: Option<SocketAddr>,
    /// How often gateway watches that ask for progress notifications get one.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    watch_progress_notify_interval: std::time::Duration,
    /// Non-mutating requests in flight at once (watches aside); more get 429. 0: no limit.
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Mutating requests in flight at once; more get 429. 0: no limit.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// How long a request other than a watch may take before it fails with 504 (e.g. 60s, 2m).
    #[arg(long, default_value = "60s", value_parser = parse_interval)]
    request_timeout: std::time::Duration,
    /// Client connections open at once; more wait to be accepted (lowered to fit the
    /// open-file limit).
    #[arg(long, default_value_t = 10_000)]
    max_connections: usize,
}

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The data dir of the `rudder server` whose admin kubeconfig to print.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
}

fn storage_url(storage: Option<String>, data_dir: &std::path::Path) -> String {
    storage.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("state.db").display()))
}

/// The etcd gateway serves the whole store, Secrets included, with neither TLS nor
/// authentication (the gateway has neither yet): it may listen on a loopback address only.
fn require_loopback(flag: &str, listen: SocketAddr) -> Result<()> {
    anyhow::ensure!(
        listen.ip().is_loopback(),
        "{flag} {listen}: the etcd gateway has no TLS or client-certificate authentication yet, so it serves only on a loopback address (127.0.0.1 or [::1]); anyone who reaches it reads and writes every object"
    );
    Ok(())
}

/// `rudder etcd`.
pub async fn etcd(args: EtcdArgs) -> Result<()> {
    require_loopback("--listen", args.listen)?;
    let embedded = args.storage.is_none();
    let url = storage_url(args.storage, &args.data_dir);
    // The embedded store holds every Secret: private, as `rudder server` keeps it.
    if embedded {
        rudder_apiserver::data_dir::prepare(&args.data_dir)
            .with_context(|| format!("creating {}", args.data_dir.display()))?;
    }
    rudder_apiserver::data_dir::protect_sqlite_files(&url)
        .context("making the SQLite database private")?;
    serve_gateway(&url, args.listen, args.watch_progress_notify_interval).await
}

/// `rudder server`: the Kubernetes API over the store (and, if asked, the etcd gateway).
pub async fn server(args: ServerArgs) -> Result<()> {
    let url = storage_url(args.storage, &args.data_dir);
    let config = rudder_apiserver::Config {
        storage_url: url.clone(),
        data_dir: args.data_dir,
        listen: args.listen,
        tls_sans: args.tls_san,
        token_auth_file: args.token_auth_file,
        service_cluster_ip_range: args.service_cluster_ip_range,
        service_node_port_range: args.service_node_port_range,
        limits: rudder_apiserver::Limits {
            max_requests_inflight: args.max_requests_inflight,
            max_mutating_requests_inflight: args.max_mutating_requests_inflight,
            request_timeout: args.request_timeout,
            max_connections: args.max_connections,
            ..rudder_apiserver::Limits::default()
        },
    };
    if let Some(listen) = args.etcd_listen {
        require_loopback("--etcd-listen", listen)?;
    }
    let running = rudder_apiserver::server::start(config).await?;
    tracing::info!(
        storage = %redact(&url),
        "Kubernetes API at https://{}; admin kubeconfig: {} (try `KUBECONFIG={} kubectl get ns`)",
        running.addr,
        running.kubeconfig.display(),
        running.kubeconfig.display()
    );
    let shutdown = running.shutdown_token();
    let mut gateway = None;
    if let Some(listen) = args.etcd_listen {
        let progress = args.watch_progress_notify_interval;
        let stop = shutdown.clone();
        gateway = Some(tokio::spawn(async move {
            serve_gateway_until(&url, listen, progress, stop).await
        }));
    }
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
        stop.cancel();
    });
    running.wait().await?;
    if let Some(gateway) = gateway {
        gateway.await.context("the etcd gateway task")??;
    }
    Ok(())
}

/// `rudder kubeconfig`: prints the admin kubeconfig a server wrote.
pub fn kubeconfig(args: KubeconfigArgs) -> Result<()> {
    let path = args.data_dir.join("kubeconfig.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (has `rudder server --data-dir {}` run?)",
            path.display(),
            args.data_dir.display()
        )
    })?;
    print!("{text}");
    Ok(())
}

async fn serve_gateway(
    url: &str,
    listen: SocketAddr,
    progress_notify_interval: std::time::Duration,
) -> Result<()> {
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
        stop.cancel();
    });
    serve_gateway_until(url, listen, progress_notify_interval, shutdown).await
}

async fn serve_gateway_until(
    url: &str,
    listen: SocketAddr,
    progress_notify_interval: std::time::Duration,
    shutdown: CancellationToken,
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
    let served = Gateway::new(store.clone(), format!("http://{local}"))
        .with_progress_notify_interval(progress_notify_interval)
        .serve(listener, shutdown)
        .await;
    store.close().await;
    served.context("the etcd gateway failed")
}
