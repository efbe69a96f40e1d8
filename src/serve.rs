//! `rudder server`: the all-in-one process — the Kubernetes API over HTTPS on the embedded
//! SQLite store (or the store `--storage` names), the controller-manager in-process, and the
//! etcd gateway beside them when `--etcd-listen` is given (`gateway.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rudder_storage::config::redact;

pub(crate) fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
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
    /// Also serve the etcd v3 gateway over the same store on this address (beyond loopback
    /// only with the three TLS files below).
    #[arg(long)]
    etcd_listen: Option<SocketAddr>,
    /// The etcd gateway's certificate (PEM), as etcd's `--cert-file`.
    #[arg(long)]
    etcd_cert_file: Option<PathBuf>,
    /// The etcd gateway's private key (PEM), as etcd's `--key-file`.
    #[arg(long)]
    etcd_key_file: Option<PathBuf>,
    /// CA (PEM) whose client certificates the etcd gateway requires, as etcd's
    /// `--trusted-ca-file` with `--client-cert-auth` (the cluster's `pki/ca.crt` works).
    #[arg(long)]
    etcd_trusted_ca_file: Option<PathBuf>,
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
    /// Controllers to run in-process: `*` for all, `name` to add one, `-name` to leave one
    /// out (as kube-controller-manager's flag); `rudder controller-manager` runs them apart.
    #[arg(long, default_value = "*")]
    controllers: String,
    /// Run no controllers in this process (another process runs them, or none does).
    #[arg(long)]
    disable_controller_manager: bool,
}

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The data dir of the `rudder server` whose admin kubeconfig to print.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
}

pub(crate) fn storage_url(storage: Option<String>, data_dir: &std::path::Path) -> String {
    storage.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("state.db").display()))
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
    let etcd_tls = crate::gateway::load_tls(
        args.etcd_cert_file.as_deref(),
        args.etcd_key_file.as_deref(),
        args.etcd_trusted_ca_file.as_deref(),
    )?;
    if let Some(listen) = args.etcd_listen {
        crate::gateway::check_exposure("--etcd-listen", listen, etcd_tls.as_ref())?;
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
    let controllers = if args.disable_controller_manager {
        None
    } else {
        let selection = rudder_controllers::Selection::parse(&args.controllers)?;
        let manager = controller_manager(&running, selection).await?;
        let stop = shutdown.child_token();
        Some(tokio::spawn(manager.run(stop)))
    };
    let mut gateway = None;
    if let Some(listen) = args.etcd_listen {
        let progress = args.watch_progress_notify_interval;
        let stop = shutdown.clone();
        gateway = Some(tokio::spawn(async move {
            crate::gateway::serve_until(&url, listen, progress, etcd_tls, stop).await
        }));
    }
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
        stop.cancel();
    });
    running.wait().await?;
    if let Some(controllers) = controllers {
        controllers.await.context("the controller-manager task")?;
    }
    if let Some(gateway) = gateway {
        gateway.await.context("the etcd gateway task")??;
    }
    Ok(())
}

/// The controller-manager for this server: a client of its own API (through the admin
/// kubeconfig until components have identities of their own), the cluster CA to publish, and
/// leader election so that of several servers on one store one runs the controllers.
async fn controller_manager(
    running: &rudder_apiserver::server::Running,
    controllers: rudder_controllers::Selection,
) -> Result<rudder_controllers::Manager> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&running.kubeconfig)
        .context("reading the admin kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .context("a client for the controllers")?;
    let client = kube::Client::try_from(config).context("a client for the controllers")?;
    Ok(rudder_controllers::Manager::new(
        rudder_controllers::Config {
            client,
            identity: crate::controller_manager::identity(),
            controllers,
            concurrency: rudder_controllers::Concurrency::default(),
            leader_election: true,
            root_ca: Some(running.pki.ca_cert_pem.clone()),
        },
    ))
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
