//! `rudder server`: the all-in-one process — the Kubernetes API over HTTPS on the embedded
//! SQLite store (or the store `--storage` names), the controller-manager in-process, and the
//! etcd gateway beside them when `--etcd-listen` is given (`gateway.rs`).

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rudder_apiserver::registry::Cidr;
use rudder_storage::config::redact;
use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;

pub(crate) fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    rudder_storage::config::parse_duration(text).map_err(|error| error.to_string())
}

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Storage URL: sqlite://PATH, postgres://USER@HOST:PORT/DB, mysql://USER@HOST:PORT/DB,
    /// spanner://projects/P/instances/I/databases/D or etcd://HOST:PORT[,…]
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
    #[arg(long, default_value = "10.96.0.0/12", value_parser = Cidr::parse)]
    service_cluster_ip_range: Cidr,
    /// The range Service NodePorts come from.
    #[arg(long, default_value = "30000-32767", value_parser = rudder_apiserver::server::parse_port_range)]
    service_node_port_range: RangeInclusive<u16>,
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
    /// Run no scheduler in this process (another process runs it, or none does).
    #[arg(long)]
    disable_scheduler: bool,
    /// The in-process scheduler's KubeSchedulerConfiguration (profiles, plugins, weights).
    #[arg(long)]
    scheduler_config: Option<PathBuf>,
    /// Terminated pods kept before the pod garbage collector deletes the oldest (0: no limit).
    #[arg(long, default_value_t = 12_500)]
    terminated_pod_gc_threshold: usize,
    #[command(flatten)]
    nodes: crate::controller_manager::NodeControllerArgs,
    /// Authorizers after `system:masters`, in order: `Node` (kubelets reach only their pods'
    /// objects), `RBAC`, or `AlwaysAllow` (everyone authenticated may do anything).
    #[arg(long, default_value = "Node,RBAC")]
    authorization_mode: String,
    /// Requests without credentials run as `system:anonymous` and are judged by
    /// authorization (out of the box only health and version are theirs); false: 401.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// The issuer (`iss`) of the ServiceAccount tokens this server signs, and the audience it
    /// accepts; servers of one cluster share it.
    #[arg(long, default_value = rudder_apiserver::authn::service_account::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// The cluster token: it seals the cluster's CA and ServiceAccount key in the store, so a
    /// server started with the same token on the same store joins the same cluster (default:
    /// the data dir's `token` file, made on first start).
    #[arg(long, env = "RUDDER_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Write audit events (audit.k8s.io/v1, one JSON line each) here; `-` for stdout.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// The audit policy (audit.k8s.io/v1 Policy); without it every request is logged at
    /// Metadata (no bodies).
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Rotate the audit log at this many megabytes (0: never).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Days to keep rotated audit logs (0: for ever).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// How built-in objects are serialized in the store: `application/vnd.kubernetes.protobuf`
    /// (kube-apiserver's default: upstream's tools read the data) or `application/json`.
    /// Values in either form are read whatever this says.
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf")]
    storage_media_type: rudder_apiserver::values::MediaType,
    /// Encryption at rest: an EncryptionConfiguration (apiserver.config.k8s.io/v1) naming the
    /// resources to encrypt and the providers (aesgcm, aescbc, secretbox, identity) in order;
    /// the first writes, all read. A malformed file stops the server.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Read the encryption configuration again when the file changes (checked every
    /// --encryption-provider-config-reload-interval); an invalid change is logged and ignored.
    #[arg(long)]
    encryption_provider_config_automatic_reload: bool,
    /// How often an automatically reloaded encryption configuration is checked (and, on a
    /// server without one, the configuration its cluster shares through the store).
    #[arg(long, default_value = "1m", value_parser = parse_interval, hide = true)]
    encryption_provider_config_reload_interval: std::time::Duration,
    /// Caps how often KMS v2 plugins are asked `Status` and how long the kms-providers health
    /// check reuses an answer (upstream: 1m, 10s after a failure; 20s and 3s).
    #[arg(long, value_parser = parse_interval, hide = true)]
    kms_status_interval: Option<std::time::Duration>,
    /// How often the objects of each resource in the store are counted
    /// (apiserver_storage_objects); 0 turns the counting off.
    #[arg(long, default_value = "1m", value_parser = parse_interval)]
    etcd_count_metric_poll_period: std::time::Duration,
    /// The CA (PEM) of authenticating proxies' client certificates, published to extension
    /// apiservers (default: the cluster's own front-proxy CA). Goes with the two
    /// `--proxy-client-*` files.
    #[arg(long)]
    requestheader_client_ca_file: Option<PathBuf>,
    /// Common names a proxy's certificate may have (comma-separated; empty: any). Default:
    /// `front-proxy-client` with the cluster's own CA, any with a given one.
    #[arg(long, value_delimiter = ',')]
    requestheader_allowed_names: Option<Vec<String>>,
    /// The client certificate (PEM) this server presents to extension apiservers.
    #[arg(long)]
    proxy_client_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long)]
    proxy_client_key_file: Option<PathBuf>,
    /// The admission plugins' configuration: an AdmissionConfiguration
    /// (apiserver.config.k8s.io/v1) whose PodSecurity entry (inline or by `path`) sets the
    /// PodSecurityConfiguration's defaults and exemptions. A malformed file stops the server.
    #[arg(long)]
    admission_control_config_file: Option<PathBuf>,
    /// OpenTelemetry tracing: a TracingConfiguration (apiserver.config.k8s.io/v1beta1 or v1)
    /// with the collector's OTLP/gRPC `endpoint` and `samplingRatePerMillion`; requests whose
    /// client sends a sampled W3C `traceparent` are traced whatever the rate.
    #[arg(long)]
    pub(crate) tracing_config_file: Option<PathBuf>,
    /// Serve lists and the initial state of watches from memory, each resource's objects kept
    /// current by one storage watch; false: every read goes to the store.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_cache: bool,
    /// Do not run a node agent in this process (by default one runs when the container
    /// runtime's socket exists).
    #[arg(long)]
    disable_agent: bool,
    /// containerd's CRI socket, for this server's own node agent.
    /// By default the system's when it runs, else a containerd of Rudder's own under
    /// `<data-dir>/containerd` (when containerd is installed).
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// The pod address range of Rudder's own containerd (its CNI bridge network); by default
    /// this node's `spec.podCIDRs`, which node IPAM assigns out of --cluster-cidr.
    #[arg(long)]
    pod_cidr: Option<String>,
    /// This server's node name (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// This server's node address (default: the first non-loopback local address).
    #[arg(long)]
    node_ip: Option<std::net::IpAddr>,
    /// The kubelet API's port of this server's node agent (0: any free port).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// The cluster DNS server(s) pods resolve through.
    #[arg(long, value_delimiter = ',')]
    cluster_dns: Vec<String>,
    /// Also run this many hollow nodes (fake runtime) in-process, named `<node-name>-N`
    /// (`hollow-N` without --node-name), for scale tests.
    #[arg(long, default_value_t = 0)]
    hollow_nodes: usize,
    #[command(flatten)]
    network: crate::network::NetworkArgs,
    #[command(flatten)]
    eviction: crate::agent::EvictionArgs,
    #[command(flatten)]
    snapshots: crate::snapshots::SnapshotArgs,
}

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The data dir of the `rudder server` whose admin kubeconfig to print.
    #[arg(long, default_value = "rudder-data")]
    data_dir: PathBuf,
}

fn storage_url(storage: Option<String>, data_dir: &Path) -> String {
    storage.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("state.db").display()))
}

/// Opens the store `--storage` names, or the embedded SQLite database in the data dir (created
/// private, as it holds every Secret). Returns its URL too, for logs.
pub(crate) async fn open_store(
    storage: Option<String>,
    data_dir: &Path,
) -> Result<(String, Arc<dyn Storage>)> {
    if storage.is_none() {
        rudder_apiserver::data_dir::prepare(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
    }
    let url = storage_url(storage, data_dir);
    rudder_apiserver::data_dir::protect_sqlite_files(&url)
        .context("making the SQLite database private")?;
    let store = rudder_storage::open(&url)
        .await
        .with_context(|| format!("opening storage {}", redact(&url)))?;
    Ok((url, store))
}

/// `rudder server`: the Kubernetes API over the store (and, if asked, the etcd gateway and the
/// controllers) until `shutdown`.
pub async fn server(args: ServerArgs, shutdown: CancellationToken) -> Result<()> {
    let node_ipam = args.nodes.ipam(&args.network.cluster_cidr)?;
    let etcd_tls = crate::gateway::load_tls(
        args.etcd_cert_file.as_deref(),
        args.etcd_key_file.as_deref(),
        args.etcd_trusted_ca_file.as_deref(),
    )?;
    if let Some(listen) = args.etcd_listen {
        crate::gateway::check_exposure("--etcd-listen", listen, etcd_tls.as_ref())?;
    }
    let selection = if args.disable_controller_manager {
        None
    } else {
        Some(rudder_controllers::Selection::parse(&args.controllers)?)
    };
    let scheduler_configuration = if args.disable_scheduler {
        None
    } else {
        Some(crate::scheduler::configuration(
            args.scheduler_config.as_deref(),
        )?)
    };
    let audit = match (args.audit_log_path, args.audit_policy_file) {
        (Some(log_path), policy_file) => Some(rudder_apiserver::audit::AuditConfig {
            policy_file,
            log_path,
            rotation: rudder_apiserver::audit::Rotation {
                max_size_mb: args.audit_log_maxsize,
                max_backups: args.audit_log_maxbackup,
                max_age_days: args.audit_log_maxage,
            },
        }),
        (None, Some(_)) => anyhow::bail!("--audit-policy-file needs --audit-log-path"),
        (None, None) => None,
    };
    if args.encryption_provider_config_automatic_reload && args.encryption_provider_config.is_none()
    {
        anyhow::bail!(
            "--encryption-provider-config-automatic-reload needs --encryption-provider-config"
        );
    }
    let admission = match &args.admission_control_config_file {
        Some(path) => rudder_apiserver::admission_config::AdmissionPluginConfig::load(path)
            .map_err(|error| anyhow::anyhow!("--admission-control-config-file: {error}"))?,
        None => Default::default(),
    };
    let authorization_modes = rudder_apiserver::authz::Mode::parse_list(&args.authorization_mode)
        .map_err(|error| anyhow::anyhow!("--authorization-mode: {error}"))?;
    let agent_args = LocalAgent {
        data_dir: args.data_dir.clone(),
        container_runtime_endpoint: args.container_runtime_endpoint.clone(),
        pod_cidr: args.pod_cidr.clone(),
        node_name: args.node_name.clone(),
        node_ip: args.node_ip,
        kubelet_port: args.kubelet_port,
        cluster_dns: args.cluster_dns.clone(),
        network: args.network.clone(),
        default_dns: args.service_cluster_ip_range.nth(10).to_string(),
        eviction: args.eviction.settings()?,
    };
    let (url, store) = open_store(args.storage, &args.data_dir).await?;
    let snapshots =
        match args
            .snapshots
            .spawn(&args.data_dir, store.clone(), shutdown.child_token())
        {
            Ok(snapshots) => snapshots,
            Err(error) => {
                store.close().await;
                return Err(error);
            }
        };
    let config = rudder_apiserver::Config {
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
        authorization_modes,
        anonymous_auth: args.anonymous_auth,
        service_account_issuer: args.service_account_issuer,
        cluster_token: args.token,
        audit,
        storage_media_type: args.storage_media_type,
        encryption_provider_config: args.encryption_provider_config,
        encryption_reload_interval: args
            .encryption_provider_config_automatic_reload
            .then_some(args.encryption_provider_config_reload_interval),
        encryption_follow_interval: args.encryption_provider_config_reload_interval,
        kms_status_interval: args.kms_status_interval,
        watch_cache: args.watch_cache,
        count_metric_poll_period: args.etcd_count_metric_poll_period,
        front_proxy: rudder_apiserver::server::FrontProxyFiles {
            requestheader_client_ca_file: args.requestheader_client_ca_file,
            requestheader_allowed_names: args.requestheader_allowed_names,
            proxy_client_cert_file: args.proxy_client_cert_file,
            proxy_client_key_file: args.proxy_client_key_file,
        },
        admission,
    };
    let running =
        match rudder_apiserver::server::start(config, store.clone(), shutdown.clone()).await {
            Ok(running) => running,
            Err(error) => {
                store.close().await;
                return Err(error.into());
            }
        };
    tracing::info!(
        storage = %redact(&url),
        "Kubernetes API at https://{}; admin kubeconfig: {} (try `KUBECONFIG={} kubectl get ns`)",
        running.addr,
        running.kubeconfig.display(),
        running.kubeconfig.display()
    );
    let mut controllers = None;
    if let Some(selection) = selection {
        let nodes = (args.nodes.lifecycle(), node_ipam.clone());
        match controller_manager(&running, selection, args.terminated_pod_gc_threshold, nodes).await
        {
            Ok(manager) => {
                let metrics = manager.metrics();
                running
                    .metrics
                    .register_more(|registry| metrics.register(registry));
                controllers = Some(tokio::spawn(manager.run(shutdown.child_token())));
            }
            Err(error) => {
                shutdown.cancel();
                let _ = running.wait().await;
                store.close().await;
                return Err(error);
            }
        }
    }
    let mut scheduler = None;
    if let Some(configuration) = scheduler_configuration {
        // As `system:kube-scheduler`, with leader election so one of several servers schedules.
        match crate::scheduler::runner(&running.scheduler_kubeconfig, configuration, true).await {
            Ok(runner) => {
                let metrics = runner.metrics();
                running
                    .metrics
                    .register_more(|registry| metrics.register(registry));
                scheduler = Some(tokio::spawn(runner.run(shutdown.child_token())));
            }
            Err(error) => {
                shutdown.cancel();
                let _ = running.wait().await;
                store.close().await;
                return Err(error);
            }
        }
    }
    let gateway = args.etcd_listen.map(|listen| {
        let gateway = crate::gateway::Serve {
            store: store.clone(),
            url: url.clone(),
            listen,
            progress_notify_interval: args.watch_progress_notify_interval,
            tls: etcd_tls,
        };
        tokio::spawn(gateway.until(shutdown.child_token()))
    });
    let agent = if args.disable_agent {
        None
    } else {
        local_agent(
            &running,
            &agent_args,
            &agent_args.data_dir,
            shutdown.child_token(),
        )
        .await?
    };
    let hollow = if args.hollow_nodes > 0 {
        let client = client_for(&running.kubeconfig).await?;
        // Named <node-name>-0 …, or hollow-0 … without --node-name.
        let prefix = args.node_name.clone().unwrap_or_else(|| "hollow".into());
        Some(tokio::spawn(crate::agent::run_hollow(
            client,
            prefix,
            args.hollow_nodes,
            110,
            shutdown.child_token(),
        )))
    } else {
        None
    };
    let served = running.wait().await;
    // Whatever ended the API, the rest of the process ends with it.
    shutdown.cancel();
    let mut outcome = served.context("the Kubernetes API");
    if let Some(controllers) = controllers {
        if let Err(error) = controllers.await {
            outcome = outcome.and(Err(error).context("the controller-manager task"));
        }
    }
    if let Some(scheduler) = scheduler {
        if let Err(error) = scheduler.await {
            outcome = outcome.and(Err(error).context("the scheduler task"));
        }
    }
    for (task, what) in [(agent, "the node agent"), (hollow, "the hollow nodes")] {
        if let Some(task) = task {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => outcome = outcome.and(Err(error).context(what)),
                Err(error) => outcome = outcome.and(Err(error).context(what)),
            }
        }
    }
    if let Some(gateway) = gateway {
        let ended = gateway.await.context("the etcd gateway task");
        outcome = outcome.and(ended.and_then(|served| served));
    }
    if let Some(snapshots) = snapshots {
        let _ = snapshots.await;
    }
    store.close().await;
    outcome
}

/// What `rudder server` passes to its own node agent.
struct LocalAgent {
    data_dir: PathBuf,
    container_runtime_endpoint: Option<String>,
    pod_cidr: Option<String>,
    node_name: Option<String>,
    node_ip: Option<std::net::IpAddr>,
    kubelet_port: u16,
    cluster_dns: Vec<String>,
    network: crate::network::NetworkArgs,
    /// The DNS Service's address in this server's service range.
    default_dns: String,
    eviction: rudder_kubelet::eviction::Settings,
}

/// This server's own node agent, when there is a container runtime (given, the system's, or
/// one of its own): a kubelet client certificate (`system:node:<name>`) and a serving
/// certificate from the cluster CA.
async fn local_agent(
    running: &rudder_apiserver::server::Running,
    args: &LocalAgent,
    data_dir: &Path,
    shutdown: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<Result<()>>>> {
    if let Some(given) = &args.container_runtime_endpoint {
        let socket = given.strip_prefix("unix://").unwrap_or(given);
        if !Path::new(socket).exists() {
            tracing::warn!(
                socket,
                "the container runtime socket does not exist (yet); the agent waits for it"
            );
        }
    }
    let Some((endpoint, managed)) = crate::agent::container_runtime(
        args.container_runtime_endpoint.as_deref(),
        &data_dir.join("containerd"),
        args.pod_cidr.as_deref(),
    )
    .await?
    else {
        tracing::info!("no container runtime: this server runs no node agent");
        return Ok(None);
    };
    let name = args
        .node_name
        .clone()
        .unwrap_or_else(crate::agent::default_node_name);
    let ip = args.node_ip.unwrap_or_else(crate::agent::default_node_ip);
    let user = format!("system:node:{name}");
    let (cert, key) = running.pki.issue_client_cert(&user, &["system:nodes"])?;
    let server_url = format!("https://127.0.0.1:{}", running.addr.port());
    let kubeconfig = rudder_apiserver::pki::kubeconfig::client_kubeconfig(
        rudder_apiserver::pki::kubeconfig::CLUSTER_NAME,
        &server_url,
        &running.pki.ca_cert_pem,
        &user,
        &cert,
        &key,
    );
    let path = data_dir.join("agent").join("kubelet.kubeconfig");
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    rudder_apiserver::pki::write_private_file(&path, &kubeconfig)?;
    let client = client_for(&path).await?;
    let (serving_cert, serving_key) = running.pki.issue_serving_cert(
        &user,
        &["system:nodes"],
        std::slice::from_ref(&name),
        &[ip, std::net::IpAddr::from([127, 0, 0, 1])],
    )?;
    let mut config = rudder_kubelet::Config::new(&name, ip, data_dir.join("agent"));
    config.eviction = args.eviction.clone();
    config.listen = Some(std::net::SocketAddr::new(
        std::net::IpAddr::from([0, 0, 0, 0]),
        args.kubelet_port,
    ));
    config.serving = Some(rudder_kubelet::Serving {
        cert_pem: serving_cert,
        key_pem: serving_key,
        client_ca_pem: running.pki.ca_cert_pem.clone(),
    });
    let (network, network_labels, cluster_dns) = crate::network::start(
        &args.network,
        client.clone(),
        &name,
        ip,
        &args.cluster_dns,
        &args.default_dns,
        shutdown.child_token(),
    )
    .await?;
    config.labels.extend(network_labels);
    config.cluster_dns = cluster_dns;
    config.cluster_domain = args.network.cluster_domain.clone();
    let runtime: Arc<dyn rudder_kubelet::runtime::Runtime> =
        Arc::new(rudder_kubelet::runtime::cri::CriRuntime::new(&endpoint)?);
    let recorder = rudder_runtime::events::recorder(client.clone(), "kubelet", &name);
    tracing::info!(node = %name, %ip, runtime = %endpoint, "starting this server's node agent");
    Ok(Some(tokio::spawn(async move {
        let ran = rudder_kubelet::run(config, client, runtime, Some(recorder), shutdown).await;
        drop(network);
        if let Some(managed) = managed {
            managed.stop().await;
        }
        ran
    })))
}

/// The controller-manager for this server: a client of its own API as
/// `system:kube-controller-manager` (held to that narrow role: informers, its Lease, the
/// controllers' ServiceAccounts and their tokens), each controller as its own ServiceAccount,
/// the cluster CA to publish, and leader election so that of several servers on one store one
/// runs the controllers.
async fn controller_manager(
    running: &rudder_apiserver::server::Running,
    controllers: rudder_controllers::Selection,
    terminated_pod_gc_threshold: usize,
    (node_lifecycle, node_ipam): (
        rudder_controllers::nodelifecycle::Settings,
        rudder_controllers::nodeipam::Settings,
    ),
) -> Result<rudder_controllers::Manager> {
    let connection = config_for(&running.controller_manager_kubeconfig)
        .await
        .context("a client for the controllers")?;
    let client = kube::Client::try_from(connection.clone()).context("creating the API client")?;
    Ok(rudder_controllers::Manager::new(
        rudder_controllers::Config {
            client,
            // Each controller as its own ServiceAccount, held to its own role.
            service_account_credentials: Some(connection),
            identity: crate::controller_manager::identity(),
            controllers,
            concurrency: rudder_controllers::Concurrency::default(),
            leader_election: true,
            root_ca: Some(running.pki.ca_cert_pem.clone()),
            pod_gc: rudder_controllers::podgc::Settings {
                terminated_threshold: terminated_pod_gc_threshold,
                ..rudder_controllers::podgc::Settings::default()
            },
            legacy_tokens: Some(crate::controller_manager::legacy_minter(
                &running.pki.sa_key_pem,
            )?),
            cluster_signing: cluster_signer(&running.pki),
            node_lifecycle,
            node_ipam,
        },
    ))
}

/// The CSR signer over the cluster CA in the server's pki dir (`ca.crt`, `ca.key`); none, with
/// a warning, when the key is not there.
fn cluster_signer(
    pki: &rudder_apiserver::pki::Pki,
) -> Option<std::sync::Arc<rudder_controllers::csrsigning::Signer>> {
    use rudder_apiserver::pki::CA_KEY_FILE;
    let key_path = pki.path(CA_KEY_FILE);
    let signer = std::fs::read_to_string(&key_path)
        .map_err(|error| error.to_string())
        .and_then(|key| {
            rudder_controllers::csrsigning::Signer::from_pem(&pki.ca_cert_pem, &key)
                .map_err(|error| error.to_string())
        });
    match signer {
        Ok(signer) => Some(std::sync::Arc::new(signer)),
        Err(error) => {
            tracing::warn!(path = %key_path.display(), %error, "no cluster signing key: CertificateSigningRequests are not signed");
            None
        }
    }
}

/// A client of the cluster (and as the user) a kubeconfig file names.
pub(crate) async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let config = config_for(kubeconfig).await?;
    kube::Client::try_from(config).context("creating the API client")
}

/// The connection settings a kubeconfig file names (its current context).
pub(crate) async fn config_for(kubeconfig: &Path) -> Result<kube::Config> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("building a client from {}", kubeconfig.display()))
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
