//! Starting an apiserver on a store its caller opened: load or create the cluster PKI, bind,
//! bootstrap the cluster's namespaces and `kubernetes` Service, write the admin kubeconfig, and
//! serve HTTPS until the caller's shutdown token is cancelled. The caller owns the store (and
//! closes it after [`Running::wait`]); every task the server spawns is tracked and ends with it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rudder_admission::{
    Chain, DefaultTolerationSeconds, NamespaceLifecycle, Priority, ServiceAccount,
};
use rudder_storage::instrumented::Instrumented;
use rudder_storage::Storage;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::authn::request_header::{RequestHeader, RequestHeaderConfig};
use crate::authn::service_account::{ServiceAccountTokens, TokenSigner as ServiceAccountSigner};
use crate::authn::{Authenticator, AuthnError, TokenFile};
use crate::authz::{self, Authorizer};
use crate::error::ApiError;
use crate::http::{router, AppState, Metrics};
use crate::limits::Limits;
use crate::pki::cluster::{self, ClusterError};
use crate::pki::front_proxy::FrontProxy;
use crate::pki::{self, Pki, PkiError};
use crate::registry::{self, Allocators, Cidr, Registry};
use crate::values::encryption::kms::{KmsContext, KmsMetrics, StatusIntervals};
use crate::values::encryption::shared::{spawn_follow, Shared};
use crate::values::encryption::{spawn_reload, Current, Encryption, Reload, ReloadMetrics};
use crate::values::{MediaType, Values};

/// How to run an apiserver (the store is handed to [`start`] apart).
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the cluster PKI and the admin kubeconfig live.
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub tls_sans: Vec<String>,
    pub token_auth_file: Option<PathBuf>,
    /// The range Service ClusterIPs come from.
    pub service_cluster_ip_range: Cidr,
    /// The range Service NodePorts come from.
    pub service_node_port_range: RangeInclusive<u16>,
    /// Request and connection limits (upstream's defaults).
    pub limits: Limits,
    /// The authorizers after `system:masters`, in order (`--authorization-mode`).
    pub authorization_modes: Vec<authz::Mode>,
    /// Requests without credentials run as `system:anonymous`, judged by authorization
    /// (`--anonymous-auth`); when false they are 401.
    pub anonymous_auth: bool,
    /// The `iss` of the ServiceAccount tokens this server issues, and the audience it accepts
    /// (`--service-account-issuer`).
    pub service_account_issuer: String,
    /// The cluster token that seals the cluster's CA and keys in the store (`--token`); `None`:
    /// the data dir's `token` file, created on first start.
    pub cluster_token: Option<String>,
    /// Auditing (`--audit-log-path`, `--audit-policy-file`); `None`: off.
    pub audit: Option<crate::audit::AuditConfig>,
    /// How built-in objects are serialized in the store (`--storage-media-type`).
    pub storage_media_type: MediaType,
    /// Encryption at rest (`--encryption-provider-config`); `None`: values stored as they are.
    pub encryption_provider_config: Option<PathBuf>,
    /// How often the encryption configuration file is read again
    /// (`--encryption-provider-config-automatic-reload`); `None`: read once at start.
    pub encryption_reload_interval: Option<Duration>,
    /// How often a server without a configuration file checks the one its cluster shares.
    pub encryption_follow_interval: Duration,
    /// Caps how often KMS v2 plugins are asked `Status` and how long the `kms-providers`
    /// health check reuses an answer (hidden `--kms-status-interval`, for tests); `None`:
    /// upstream's intervals (1 min, 10 s after a failure; 20 s and 3 s).
    pub kms_status_interval: Option<Duration>,
    /// Serve lists (and the initial state of watches) from memory (`--watch-cache`).
    pub watch_cache: bool,
    /// How often the objects of each resource in the store are counted for
    /// `apiserver_storage_objects` (`--etcd-count-metric-poll-period`); zero: never.
    pub count_metric_poll_period: Duration,
    /// The front proxy's identity (aggregated APIs) and who may act as one.
    pub front_proxy: FrontProxyFiles,
    /// The admission plugins' configurations (`--admission-control-config-file`).
    pub admission: crate::admission_config::AdmissionPluginConfig,
}

/// The controller-manager's user (its certificate's CN), bound to the role of that name.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

/// The scheduler's user (its certificate's CN), bound to `system:kube-scheduler` and
/// `system:volume-scheduler`.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";

/// Upstream's default Service ClusterIP range.
pub const DEFAULT_SERVICE_CLUSTER_IP_RANGE: Cidr = Cidr {
    base: Ipv4Addr::new(10, 96, 0, 0),
    bits: 12,
};

/// Upstream's default NodePort range.
pub const DEFAULT_SERVICE_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

impl Config {
    /// Defaults for a data dir (listen on 6443 everywhere, upstream's Service ranges).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            listen: SocketAddr::from(([0, 0, 0, 0], 6443)),
            tls_sans: Vec::new(),
            token_auth_file: None,
            service_cluster_ip_range: DEFAULT_SERVICE_CLUSTER_IP_RANGE,
            service_node_port_range: DEFAULT_SERVICE_NODE_PORT_RANGE,
            limits: Limits::default(),
            authorization_modes: vec![authz::Mode::Node, authz::Mode::Rbac],
            anonymous_auth: true,
            service_account_issuer: crate::authn::service_account::DEFAULT_ISSUER.into(),
            cluster_token: None,
            audit: None,
            storage_media_type: MediaType::default(),
            encryption_provider_config: None,
            encryption_reload_interval: None,
            encryption_follow_interval: Duration::from_secs(60),
            kms_status_interval: None,
            watch_cache: true,
            count_metric_poll_period: registry::DEFAULT_COUNT_PERIOD,
            front_proxy: FrontProxyFiles::default(),
            admission: Default::default(),
        }
    }
}

/// Why an apiserver did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("creating the data dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cluster PKI: {0}")]
    Pki(#[source] PkiError),
    #[error("--token-auth-file: {0}")]
    TokenFile(#[source] AuthnError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("bootstrapping the cluster: {0}")]
    Bootstrap(#[source] ApiError),
    #[error("{0}")]
    Cluster(#[source] ClusterError),
    #[error("auditing: {0}")]
    Audit(String),
    #[error("--encryption-provider-config: {0}")]
    Encryption(String),
    #[error("the service-account key: {0}")]
    ServiceAccountKey(String),
    #[error("reading what the authorizers follow (RBAC objects, pods): {0}")]
    Policy(#[source] rudder_storage::Error),
    #[error("writing the admin kubeconfig: {0}")]
    Kubeconfig(#[source] PkiError),
    #[error("the front proxy (--requestheader-client-ca-file, --proxy-client-*): {0}")]
    FrontProxy(String),
}

/// Where the front proxy's identity comes from (upstream's `--requestheader-client-ca-file`,
/// `--requestheader-allowed-names`, `--proxy-client-cert-file`, `--proxy-client-key-file`).
/// Unset, the cluster's own front-proxy CA (shared through the store) and a client
/// certificate from it, with `front-proxy-client` the allowed name.
#[derive(Clone, Debug, Default)]
pub struct FrontProxyFiles {
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Common names allowed to act as a proxy; `None`: `front-proxy-client` with the
    /// cluster's own CA, any with a given one (upstream's default).
    pub requestheader_allowed_names: Option<Vec<String>>,
    pub proxy_client_cert_file: Option<PathBuf>,
    pub proxy_client_key_file: Option<PathBuf>,
}

/// The front proxy's identity and the request-header settings it implies.
async fn front_proxy(
    config: &Config,
    storage: &dyn Storage,
    token: &str,
    pki_dir: &std::path::Path,
) -> Result<(FrontProxy, RequestHeaderConfig), StartError> {
    let files = &config.front_proxy;
    let given = (
        &files.requestheader_client_ca_file,
        &files.proxy_client_cert_file,
        &files.proxy_client_key_file,
    );
    let (identity, default_names) = match given {
        (None, None, None) => (
            crate::pki::front_proxy::share_and_load(storage, token, pki_dir)
                .await
                .map_err(StartError::Cluster)?,
            vec![crate::pki::front_proxy::CLIENT_NAME.to_string()],
        ),
        (Some(ca), Some(cert), Some(key)) => (
            FrontProxy::from_files(ca, cert, key).map_err(StartError::Pki)?,
            Vec::new(),
        ),
        _ => {
            return Err(StartError::FrontProxy(
                "--requestheader-client-ca-file, --proxy-client-cert-file and --proxy-client-key-file go together".into(),
            ))
        }
    };
    let names = files
        .requestheader_allowed_names
        .clone()
        .unwrap_or(default_names);
    let request_header = RequestHeaderConfig::x_remote(identity.ca_cert_pem.clone(), names);
    Ok((identity, request_header))
}

/// Why a running apiserver stopped other than by its shutdown token.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("serving HTTPS: {0}")]
    Io(#[from] std::io::Error),
    #[error("the apiserver task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A running apiserver.
pub struct Running {
    /// The address it listens on (the real port when `listen` asked for port 0).
    pub addr: SocketAddr,
    /// The admin kubeconfig it wrote.
    pub kubeconfig: PathBuf,
    /// The controller-manager's kubeconfig (`system:kube-controller-manager`, held to its
    /// role), for the controllers it runs or a `rudder controller-manager` elsewhere.
    pub controller_manager_kubeconfig: PathBuf,
    /// The scheduler's kubeconfig (`system:kube-scheduler`, held to its roles), for the
    /// scheduler it runs or one elsewhere.
    pub scheduler_kubeconfig: PathBuf,
    pub pki: Pki,
    /// What `/metrics` serves; in-process components add their own metrics to it.
    pub metrics: Arc<Metrics>,
    /// This server's own token: a child of the caller's, so [`Running::stop`] stops this
    /// server alone.
    shutdown: CancellationToken,
    serving: JoinHandle<std::io::Result<()>>,
    /// Watches and any other task spawned for requests: ended on shutdown, awaited by `wait`.
    tasks: TaskTracker,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish, and ends the server's tasks. The store
    /// stays open: its owner closes it.
    pub async fn stop(self) -> Result<(), ServeError> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server stops (after the shutdown token handed to [`start`] is
    /// cancelled) and every task it spawned has ended.
    pub async fn wait(self) -> Result<(), ServeError> {
        let served = self.serving.await;
        // However serving ended, nothing the server spawned outlives it.
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        served??;
        Ok(())
    }
}

/// Parses a NodePort range such as `30000-32767`.
pub fn parse_port_range(text: &str) -> Result<RangeInclusive<u16>, String> {
    let (low, high) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?}: expected LOW-HIGH"))?;
    let port = |part: &str| {
        part.trim()
            .parse::<u16>()
            .map_err(|_| format!("{text:?}: {part:?} is not a port"))
    };
    let (low, high) = (port(low)?, port(high)?);
    if low > high {
        return Err(format!("{text:?}: LOW exceeds HIGH"));
    }
    Ok(low..=high)
}

/// The address other components reach this server at.
fn advertise_ip(listen: &SocketAddr) -> IpAddr {
    if !listen.ip().is_unspecified() {
        return listen.ip();
    }
    pki::host::local_addresses()
        .into_iter()
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// File descriptors kept for the store, the data dir and the process itself.
const RESERVED_FILES: u64 = 256;

/// Raises the soft open-file limit to the hard limit (a default soft limit of 1024 would let
/// a thousand idle sockets starve the server); returns the soft limit in force.
pub fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(error) => {
            tracing::warn!(%error, "could not raise the open-file limit");
            None
        }
    }
}

/// The connection cap: the configured one, lowered to what the open-file limit allows.
fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(open_files) = open_files else {
        return configured;
    };
    let allowed = usize::try_from(open_files.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX);
    if allowed < configured {
        tracing::info!(
            configured,
            allowed,
            "the open-file limit lowers the connection cap"
        );
    }
    configured.min(allowed).max(1)
}

/// The cluster's CA and ServiceAccount key: from the store when another server put them there
/// (same token), else this server's own, published for the next; then this server's PKI, and
/// the token.
async fn cluster_pki(
    config: &Config,
    storage: &dyn Storage,
    first_service_ip: Ipv4Addr,
) -> Result<(Pki, cluster::Joined, String), StartError> {
    let token = cluster::token(config.cluster_token.as_deref(), &config.data_dir)
        .map_err(StartError::Pki)?;
    let service_ips = [IpAddr::V4(first_service_ip)];
    let load_pki = || Pki::load_or_create(&config.data_dir, &config.tls_sans, &service_ips);
    let joined = cluster::share(storage, &token, &config.data_dir.join("pki"), || {
        load_pki().map(|_| ())
    })
    .await
    .map_err(StartError::Cluster)?;
    let pki = load_pki().map_err(StartError::Pki)?;
    Ok((pki, joined, token))
}

/// Where the kubeconfigs a server writes are.
struct Kubeconfigs {
    admin: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
}

/// Writes the admin's, the controller-manager's and the scheduler's kubeconfigs for
/// `server_url`.
fn write_kubeconfigs(
    data_dir: &std::path::Path,
    pki: &Pki,
    server_url: &str,
) -> Result<Kubeconfigs, StartError> {
    let admin = data_dir.join("kubeconfig.yaml");
    pki::write_private_file(&admin, &pki::admin_kubeconfig(pki, server_url))
        .map_err(StartError::Kubeconfig)?;
    let controller_manager = data_dir.join("controller-manager.kubeconfig");
    write_component_kubeconfig(
        &controller_manager,
        pki,
        server_url,
        CONTROLLER_MANAGER_USER,
    )?;
    let scheduler = data_dir.join("scheduler.kubeconfig");
    write_component_kubeconfig(&scheduler, pki, server_url, SCHEDULER_USER)?;
    Ok(Kubeconfigs {
        admin,
        controller_manager,
        scheduler,
    })
}

/// Writes to `path` a kubeconfig with a fresh client certificate for `user` (no groups).
fn write_component_kubeconfig(
    path: &std::path::Path,
    pki: &Pki,
    server_url: &str,
    user: &str,
) -> Result<(), StartError> {
    let (cert, key) = pki
        .issue_client_cert(user, &[])
        .map_err(StartError::Kubeconfig)?;
    let component = pki::kubeconfig::client_kubeconfig(
        pki::kubeconfig::CLUSTER_NAME,
        server_url,
        &pki.ca_cert_pem,
        user,
        &cert,
        &key,
    );
    pki::write_private_file(path, &component).map_err(StartError::Kubeconfig)
}

/// `system:masters`, then the modes asked for; RBAC's policy (returned too, for the escalation
/// checks) is read before the server answers.
async fn authorizer(
    modes: &[authz::Mode],
    storage: &Arc<dyn Storage>,
    values: &Arc<Values>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(Arc<dyn Authorizer>, Option<Arc<authz::rbac::PolicyCache>>), StartError> {
    let mut chain: Vec<Arc<dyn Authorizer>> = vec![Arc::new(authz::Superusers)];
    let mut rbac = None;
    for mode in modes {
        match mode {
            authz::Mode::AlwaysAllow => chain.push(Arc::new(authz::AlwaysAllow)),
            authz::Mode::Node => {
                let node = authz::node::NodeAuthorizer::start(
                    storage.clone(),
                    values.clone(),
                    tasks,
                    shutdown.clone(),
                )
                .await
                .map_err(StartError::Policy)?;
                chain.push(Arc::new(node));
            }
            authz::Mode::Rbac => {
                let policy = authz::rbac::cache::start(
                    storage.clone(),
                    values.clone(),
                    tasks,
                    shutdown.clone(),
                )
                .await
                .map_err(StartError::Policy)?;
                chain.push(Arc::new(authz::rbac::Rbac::new(policy.clone())));
                rbac = Some(policy);
            }
        }
    }
    Ok((Arc::new(authz::Chain::new(chain)), rbac))
}

/// The codec and encryption of stored values, and what the health checks need of them.
struct StoredValues {
    values: Arc<Values>,
    /// The configuration the `kms-providers` health check asks, when there is that check
    /// (as upstream: when the configuration has KMS v2 providers or may be reloaded).
    kms_health: Option<Arc<Current>>,
}

/// The codec and encryption of stored values: the configuration file loaded (a malformed one
/// stops the start with the field and line at fault) and published for the cluster's other
/// servers, or else the one another server published, followed; reloaded when asked; its
/// metrics registered.
async fn stored_values(
    config: &Config,
    metrics: &Metrics,
    addr: &SocketAddr,
    shared: Shared,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<StoredValues, StartError> {
    let mut kms_health = None;
    let kms_context = KmsContext {
        metrics: Arc::new(KmsMetrics::new(&addr.to_string())),
        intervals: config
            .kms_status_interval
            .map_or_else(StatusIntervals::default, StatusIntervals::at_most),
    };
    metrics.register_more(|registry| kms_context.metrics.register(registry));
    let follow_interval = config.encryption_follow_interval;
    let (current, encrypting) = match &config.encryption_provider_config {
        None => {
            // The configuration another server of the cluster published, if any; one
            // published later (a server started with a file) is taken too.
            let published = shared.fetch().await.map_err(StartError::Encryption)?;
            let current = match &published {
                None => Arc::new(Current::none()),
                Some(text) => {
                    let encryption = Encryption::parse_with(text, &kms_context).map_err(|why| {
                        StartError::Encryption(format!("the cluster's encryption configuration (published by another server): {why}"))
                    })?;
                    tracing::info!("took the cluster's encryption configuration from the store");
                    Arc::new(Current::new(encryption))
                }
            };
            if current.get().kms_providers().next().is_some() {
                kms_health = Some(current.clone());
            }
            let encrypting = published.is_some();
            spawn_follow(
                current.clone(),
                shared,
                published.unwrap_or_default(),
                follow_interval,
                kms_context,
                tasks,
                shutdown.clone(),
            );
            (current, encrypting)
        }
        Some(path) => {
            let (encryption, text) =
                Encryption::load(path, &kms_context).map_err(StartError::Encryption)?;
            shared
                .publish(&text)
                .await
                .map_err(StartError::Encryption)?;
            let uses_kms = encryption.kms_providers().next().is_some();
            let current = Arc::new(Current::new(encryption));
            if let Some(interval) = config.encryption_reload_interval {
                let reload = Arc::new(ReloadMetrics::new(&addr.to_string()));
                metrics.register_more(|registry| reload.register(registry));
                spawn_reload(
                    current.clone(),
                    Reload {
                        path: path.clone(),
                        loaded: text,
                        interval,
                        kms_context,
                    },
                    reload,
                    Some(shared),
                    tasks,
                    shutdown.clone(),
                );
            }
            if uses_kms || config.encryption_reload_interval.is_some() {
                kms_health = Some(current.clone());
            }
            (current, true)
        }
    };
    let values = Values::new(config.storage_media_type, current);
    if encrypting {
        metrics.register_more(|registry| values.metrics().register(registry));
    }
    Ok(StoredValues {
        values: Arc::new(values),
        kms_health,
    })
}

/// Starts an apiserver on `storage`, serving until `shutdown` is cancelled.
pub async fn start(
    config: Config,
    storage: Arc<dyn Storage>,
    shutdown: CancellationToken,
) -> Result<Running, StartError> {
    crate::data_dir::prepare(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    // Every storage call the server makes is timed and traced from here on.
    let metrics = Arc::new(Metrics::new());
    let storage = Instrumented::wrap(storage, metrics.storage.clone());
    let auditor = match &config.audit {
        Some(audit) => Some(Arc::new(
            crate::audit::Auditor::open(audit).map_err(StartError::Audit)?,
        )),
        None => None,
    };
    let mut limits = config.limits.clone();
    limits.max_connections = connection_cap(limits.max_connections, raise_open_file_limit());
    let allocators = Allocators::new(
        storage.clone(),
        config.service_cluster_ip_range,
        config.service_node_port_range.clone(),
    );
    let first_service_ip = allocators.first_service_ip();
    let (pki, joined, token) = cluster_pki(&config, storage.as_ref(), first_service_ip).await?;
    let (front_proxy, request_header) =
        front_proxy(&config, storage.as_ref(), &token, &pki.dir).await?;
    let tls = pki
        .server_config_with_client_cas(&[&request_header.client_ca_pem])
        .map_err(StartError::Pki)?;
    let tokens = match &config.token_auth_file {
        Some(path) => Some(TokenFile::load(path).map_err(StartError::TokenFile)?),
        None => None,
    };
    let bind = |source| StartError::Bind {
        addr: config.listen,
        source,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;

    let shutdown = shutdown.child_token();
    let tasks = TaskTracker::new();
    let shared = Shared {
        storage: storage.clone(),
        token,
    };
    let StoredValues { values, kms_health } =
        stored_values(&config, &metrics, &addr, shared, &tasks, &shutdown).await?;
    let (authorizer, policy) = authorizer(
        &config.authorization_modes,
        &storage,
        &values,
        &tasks,
        &shutdown,
    )
    .await?;
    let watch_metrics = Arc::new(registry::WatchMetrics::default());
    metrics.register_more(|registry| watch_metrics.register(registry));
    let mut unadmitted = Registry::new(storage, Arc::new(Chain::new()), allocators)
        .with_values(values)
        .with_tasks(tasks.clone(), shutdown.clone())
        .with_watch_metrics(watch_metrics);
    if config.watch_cache {
        unadmitted = unadmitted.with_watch_cache();
    }
    let namespaces = registry::StoredNamespaces::new(unadmitted.clone());
    let unadmitted_reader = unadmitted.clone();
    let signer =
        ServiceAccountSigner::from_pem(&pki.sa_key_pem).map_err(StartError::ServiceAccountKey)?;
    let service_accounts = Arc::new(ServiceAccountTokens::new(
        Arc::new(signer),
        config.service_account_issuer.clone(),
        unadmitted.clone(),
    ));
    // Upstream's default order: NamespaceLifecycle first, then the pod plugins.
    let mut admission = Chain::new()
        .with_mutating(rudder_admission::LimitRanger::new(namespaces.clone()))
        .with_mutating(ServiceAccount)
        .with_mutating(Priority::new(namespaces.clone()))
        .with_mutating(DefaultTolerationSeconds)
        .with_mutating(rudder_admission::RuntimeClass::new(namespaces.clone()))
        .with_mutating(rudder_admission::DefaultClass::storage(namespaces.clone()))
        .with_mutating(rudder_admission::DefaultClass::ingress(namespaces.clone()))
        .with_mutating(rudder_admission::StorageObjectInUseProtection)
        .with_validating(NamespaceLifecycle::new(namespaces.clone()))
        .with_validating(rudder_admission::LimitRanger::new(namespaces.clone()))
        .with_validating(rudder_admission::PodSecurity::with_config(
            namespaces.clone(),
            config.admission.pod_security.clone(),
        ))
        .with_validating(rudder_admission::RuntimeClass::new(namespaces));
    if config.authorization_modes.contains(&authz::Mode::Node) {
        admission = admission.with_validating(authz::node::restriction::NodeRestriction::new(
            unadmitted.clone(),
        ));
    }
    admission = admission
        .with_validating(authz::certificates::CertificateApproval::new(
            authorizer.clone(),
        ))
        .with_validating(authz::certificates::CertificateSigning::new(
            authorizer.clone(),
        ))
        .with_validating(authz::certificates::CertificateSubjectRestriction);
    if let Some(policy) = policy {
        admission = admission.with_validating(authz::rbac::escalation::RbacEscalation::new(
            authorizer.clone(),
            policy,
        ));
    }
    // Upstream's order ends with the configurable plugins: the mutating webhooks last among
    // the mutating plugins, then the policies and the validating webhooks.
    admission = admission
        .with_mutating(crate::webhooks::Webhooks::mutating(
            unadmitted.clone(),
            authorizer.clone(),
        ))
        .with_validating(crate::webhooks::Policies::new(
            unadmitted.clone(),
            authorizer.clone(),
        ))
        .with_validating(crate::webhooks::Webhooks::validating(
            unadmitted.clone(),
            authorizer.clone(),
        ))
        .with_validating(crate::quota::ResourceQuota::new(unadmitted.clone()));
    let registry = unadmitted.with_admission(Arc::new(admission));

    let advertise = advertise_ip(&addr);
    registry::bootstrap(&registry, addr.port(), &advertise.to_string())
        .await
        .map_err(StartError::Bootstrap)?;
    let (crds_synced, synced) = tokio::sync::oneshot::channel();
    tasks.spawn(crate::crd::controller::run(
        registry.clone(),
        registry.custom().clone(),
        shutdown.clone(),
        crds_synced,
    ));
    if tokio::time::timeout(std::time::Duration::from_secs(30), synced)
        .await
        .is_err()
    {
        tracing::warn!("the CustomResourceDefinitions in the store were not served within 30 s; serving without them until they are");
    }
    registry::spawn_object_counter(&registry, config.count_metric_poll_period);
    crate::aggregator::authentication_config::publish(&registry, &pki.ca_cert_pem, &request_header)
        .await
        .map_err(StartError::Bootstrap)?;
    let aggregator = Arc::new(crate::aggregator::Aggregator::new(
        crate::aggregator::client::Client::new(&front_proxy, tasks.clone(), shutdown.clone())
            .map_err(StartError::Pki)?,
    ));
    tasks.spawn(crate::webhooks::status::run(
        registry.clone(),
        shutdown.clone(),
    ));
    let (apiservices_synced, synced) = tokio::sync::oneshot::channel();
    tasks.spawn(crate::aggregator::controller::run(
        registry.clone(),
        aggregator.clone(),
        shutdown.clone(),
        apiservices_synced,
    ));
    if tokio::time::timeout(std::time::Duration::from_secs(10), synced)
        .await
        .is_err()
    {
        tracing::warn!("the APIServices were not checked within 10 s; serving before they are");
    }
    let advertised_url = format!("https://{}", SocketAddr::new(advertise, addr.port()));
    registry::publish_cluster_info(&registry, &advertised_url, &pki.ca_cert_pem)
        .await
        .map_err(StartError::Bootstrap)?;
    let state = AppState::new(
        registry.clone(),
        Authenticator::new(tokens)
            .with_source(service_accounts.clone())
            .with_source(Arc::new(
                crate::authn::bootstrap_token::BootstrapTokens::new(unadmitted_reader),
            ))
            .with_anonymous(config.anonymous_auth)
            .with_request_header(
                RequestHeader::new(request_header.clone()).map_err(StartError::FrontProxy)?,
                &pki.ca_cert_pem,
            )
            .map_err(StartError::FrontProxy)?,
        authorizer,
        SocketAddr::new(advertise, addr.port()).to_string(),
        &limits,
        metrics.clone(),
        service_accounts,
    )
    .with_auditor(auditor)
    .with_aggregator(aggregator)
    .with_kms_health(kms_health)
    .with_kubelet_client(
        crate::http::kubelet_proxy::KubeletClient::new(&pki, tasks.clone(), shutdown.clone())
            .map_err(StartError::Pki)?,
    );
    state.mark_bootstrapped();

    let host = if addr.ip().is_unspecified() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        addr.ip()
    };
    let server_url = format!("https://{}", SocketAddr::new(host, addr.port()));
    let Kubeconfigs {
        admin: kubeconfig,
        controller_manager: controller_manager_kubeconfig,
        scheduler: scheduler_kubeconfig,
    } = write_kubeconfigs(&config.data_dir, &pki, &server_url)?;

    let app = router(state);
    let serving = tokio::spawn(crate::tls::serve(
        listener,
        tls,
        app,
        shutdown.clone(),
        limits,
    ));
    tracing::info!(%addr, url = %server_url, kubeconfig = %kubeconfig.display(), cluster = ?joined, "apiserver listening");
    Ok(Running {
        addr,
        kubeconfig,
        controller_manager_kubeconfig,
        scheduler_kubeconfig,
        pki,
        metrics,
        shutdown,
        serving,
        tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
        let raised = raise_open_file_limit().expect("getrlimit works here");
        let (soft, hard) = rlimit::Resource::NOFILE.get().expect("getrlimit");
        assert_eq!(soft, hard);
        assert_eq!(raised, soft);
    }

    #[test]
    fn a_node_port_range_is_two_ports_in_order() {
        assert_eq!(parse_port_range("30000-32767"), Ok(30000..=32767));
        assert_eq!(parse_port_range(" 80 - 80 "), Ok(80..=80));
        for bad in ["30000", "a-b", "2-1", "1-70000"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_service_range_is_upstreams() {
        assert_eq!(
            Cidr::parse("10.96.0.0/12"),
            Ok(DEFAULT_SERVICE_CLUSTER_IP_RANGE)
        );
    }

    #[test]
    fn the_connection_cap_leaves_room_for_the_store() {
        assert_eq!(connection_cap(10_000, Some(1024)), 768);
        assert_eq!(connection_cap(500, Some(1_000_000)), 500);
        assert_eq!(connection_cap(500, None), 500);
    }
}
